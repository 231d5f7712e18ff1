// Framework-free normalize_image kernels.
#pragma once

#include <cstdint>
#include <vector>

#include "opbridge/parallel.h"
#include "opbridge/spec.h"

namespace opbridge {

struct ImageDims {
  int64_t n;
  int64_t c;
  int64_t h;
  int64_t w;
};

// Per-channel y = x * scale[c] + shift[c] with scale = 1 / (255 std) and
// shift = -mean / std: (x / 255 - mean) / std as one multiply-add.
struct NormalizeImageAttrs {
  std::vector<double> mean;
  std::vector<double> std;
  bool channels_last_in;
};

// Dims of an image of shape `image` read in the given layout.
ImageDims ImageDimsOf(const Shape& image, bool channels_last);

// image is contiguous [n, h, w, c] (channels_last_in) or [n, c, h, w]; y is
// contiguous [n, c, h, w]. In is uint8, float, double, Float16 or BFloat16;
// Out is float for uint8 and In otherwise (16-bit types compute in float32).
// Vectorized for the CPU's best SIMD target (opbridge/simd.h).
template <typename In, typename Out>
void NormalizeImageForward(const In* image, Out* y, const ImageDims& dims, const NormalizeImageAttrs& attrs,
                           const ParallelFor& parallel_for);

// grad_image (the layout of the image) = grad_y (NCHW) / (255 std[c]).
template <typename T>
void NormalizeImageBackward(const T* grad_y, T* grad_image, const ImageDims& dims,
                            const NormalizeImageAttrs& attrs, const ParallelFor& parallel_for);

// CUDA kernels (kernel.cu), same math and type pairs (In uint8 -> Out
// float, else Out = In): pointers are device pointers, the work is enqueued
// on `stream` without synchronizing; no scratch memory. A channels-last
// image goes through shared-memory tiles, so that both the reads and the
// writes are coalesced; planar images are one vectorized pass.
template <typename In, typename Out>
Status NormalizeImageForwardCuda(const In* image, Out* y, const ImageDims& dims,
                                 const NormalizeImageAttrs& attrs, CudaStream stream);
template <typename T>
Status NormalizeImageBackwardCuda(const T* grad_y, T* grad_image, const ImageDims& dims,
                                  const NormalizeImageAttrs& attrs, CudaStream stream);

}  // namespace opbridge
