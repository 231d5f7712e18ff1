// Framework-free rotary_embedding kernels. x and y are contiguous
// [batch, seq, heads, head_dim]; cos and sin are contiguous
// [table_batch, seq, half] with table_batch 1 (one table shared by the batch:
// a 2-D [seq, half] or a 3-D [1, seq, half] input) or batch (one table per
// batch row); rotary_dim = 2 * half <= head_dim.
#pragma once

#include <cstddef>
#include <cstdint>

#include "opbridge/parallel.h"
#include "opbridge/spec.h"

namespace opbridge {

struct RotaryDims {
  int64_t batch;
  int64_t seq;
  int64_t heads;
  int64_t head_dim;
  int64_t half;             // rotary_dim / 2: the columns of cos and sin
  int64_t table_batch = 1;  // 1 (tables shared by the batch) or batch (per row)
};

struct RotaryAttrs {
  bool interleaved;  // pairs (2i, 2i + 1) instead of (i, i + half)
};

// Dims from x's and cos's shapes (checked by InferRotaryEmbedding).
RotaryDims RotaryDimsOf(const Shape& x, const Shape& cos);

// For each pair (a, b) of batch row n at position s and frequency i
// (t = n when table_batch == batch, else 0):
//   a' = a cos[t, s, i] - b sin[t, s, i],  b' = b cos[t, s, i] + a sin[t, s, i];
// dims past rotary_dim are copied.
template <typename T>
void RotaryEmbeddingForward(const T* x, const T* cos, const T* sin, T* y, const RotaryDims& dims,
                            const RotaryAttrs& attrs, const ParallelFor& parallel_for);

// grad_x is the inverse rotation of grad_y. When grad_cos and grad_sin are
// not null (both [table_batch, seq, half], like cos and sin) they receive
// the sum over heads (and over batch when table_batch is 1) of
// grad_a a + grad_b b and grad_b a - grad_a b; each table row is reduced by
// one task in a fixed order, so results do not depend on the parallelism.
template <typename T>
void RotaryEmbeddingBackward(const T* grad_y, const T* x, const T* cos, const T* sin, T* grad_x, T* grad_cos,
                             T* grad_sin, const RotaryDims& dims, const RotaryAttrs& attrs,
                             const ParallelFor& parallel_for);

// CUDA kernels (kernel.cu), same math: pointers are device pointers, the
// work is enqueued on `stream` without synchronizing; 16-bit types compute
// in float32. The backward computes grad_x and, when grad_cos or grad_sin is
// not null (each may be null alone), those gradients as a deterministic
// two-stage reduction: float32 (float64) partial sums over fixed chunks of
// (batch row, head) go to `scratch`, at least
// RotaryEmbeddingBackwardCudaScratchBytes<T>(dims) bytes of device memory
// (unused when both are null), then are added in chunk order.
template <typename T>
Status RotaryEmbeddingForwardCuda(const T* x, const T* cos, const T* sin, T* y, const RotaryDims& dims,
                                  const RotaryAttrs& attrs, CudaStream stream);
template <typename T>
size_t RotaryEmbeddingBackwardCudaScratchBytes(const RotaryDims& dims);
template <typename T>
Status RotaryEmbeddingBackwardCuda(const T* grad_y, const T* x, const T* cos, const T* sin, T* grad_x,
                                   T* grad_cos, T* grad_sin, const RotaryDims& dims, const RotaryAttrs& attrs,
                                   void* scratch, CudaStream stream);

}  // namespace opbridge
