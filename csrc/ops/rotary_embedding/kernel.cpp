#include "ops/rotary_embedding/kernel.h"

#include <algorithm>
#include <vector>

#include "opbridge/checks.h"
#include "ops/rotary_embedding/spec.h"

namespace opbridge {

namespace {

// Offsets of the two members of pair i within a head.
struct PairIndex {
  int64_t half;
  bool interleaved;
  int64_t first(int64_t i) const { return interleaved ? 2 * i : i; }
  int64_t second(int64_t i) const { return interleaved ? 2 * i + 1 : i + half; }
};

template <typename T, bool kInterleaved>
void RotateRows(const T* x, const T* cos, const T* sin, T* y, const RotaryDims& d, bool inverse,
                const ParallelFor& parallel_for) {
  const int64_t rows = d.batch * d.seq;
  const int64_t row_size = d.heads * d.head_dim;
  const PairIndex index{d.half, kInterleaved};
  const RotaryDims dims = d;
  parallel_for(rows, RowGrain(row_size), [=](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      // Row r = n * seq + s of x uses table row s, or r itself per batch row.
      const int64_t t = dims.table_batch == 1 ? r % dims.seq : r;
      const T* c = cos + t * dims.half;
      const T* sn = sin + t * dims.half;
      for (int64_t h = 0; h < dims.heads; ++h) {
        const T* xh = x + (r * dims.heads + h) * dims.head_dim;
        T* yh = y + (r * dims.heads + h) * dims.head_dim;
        for (int64_t i = 0; i < dims.half; ++i) {
          const T a = xh[index.first(i)];
          const T b = xh[index.second(i)];
          // The inverse rotation (by -angle) carries gradients back.
          const T si = inverse ? -sn[i] : sn[i];
          yh[index.first(i)] = a * c[i] - b * si;
          yh[index.second(i)] = b * c[i] + a * si;
        }
        for (int64_t j = 2 * dims.half; j < dims.head_dim; ++j) yh[j] = xh[j];
      }
    }
  });
}

template <typename T>
void Rotate(const T* x, const T* cos, const T* sin, T* y, const RotaryDims& d, const RotaryAttrs& attrs,
            bool inverse, const ParallelFor& parallel_for) {
  if (d.batch <= 0 || d.seq <= 0 || d.heads <= 0 || d.head_dim <= 0) return;
  if (attrs.interleaved) {
    RotateRows<T, true>(x, cos, sin, y, d, inverse, parallel_for);
  } else {
    RotateRows<T, false>(x, cos, sin, y, d, inverse, parallel_for);
  }
}

}  // namespace

template <typename T>
void RotaryEmbeddingForward(const T* x, const T* cos, const T* sin, T* y, const RotaryDims& dims,
                            const RotaryAttrs& attrs, const ParallelFor& parallel_for) {
  Rotate(x, cos, sin, y, dims, attrs, false, parallel_for);
}

template <typename T>
void RotaryEmbeddingBackward(const T* grad_y, const T* x, const T* cos, const T* sin, T* grad_x, T* grad_cos,
                             T* grad_sin, const RotaryDims& dims, const RotaryAttrs& attrs,
                             const ParallelFor& parallel_for) {
  Rotate(grad_y, cos, sin, grad_x, dims, attrs, true, parallel_for);
  if (grad_cos == nullptr || grad_sin == nullptr || dims.seq <= 0 || dims.half <= 0) return;
  const PairIndex index{dims.half, attrs.interleaved};
  const RotaryDims d = dims;
  // Table row t is [n, s] per batch row (summed over heads only) or s when
  // shared (summed over every batch row n as well).
  const bool shared = d.table_batch == 1;
  parallel_for(d.table_batch * d.seq, 1, [=](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t s = t % d.seq;
      const int64_t first_b = shared ? 0 : t / d.seq;
      const int64_t end_b = shared ? d.batch : first_b + 1;
      T* gc = grad_cos + t * d.half;
      T* gs = grad_sin + t * d.half;
      for (int64_t i = 0; i < d.half; ++i) {
        double sum_cos = 0.0;
        double sum_sin = 0.0;
        for (int64_t b = first_b; b < end_b; ++b) {
          for (int64_t h = 0; h < d.heads; ++h) {
            const int64_t offset = ((b * d.seq + s) * d.heads + h) * d.head_dim;
            const double xa = static_cast<double>(x[offset + index.first(i)]);
            const double xb = static_cast<double>(x[offset + index.second(i)]);
            const double ga = static_cast<double>(grad_y[offset + index.first(i)]);
            const double gb = static_cast<double>(grad_y[offset + index.second(i)]);
            sum_cos += ga * xa + gb * xb;
            sum_sin += gb * xa - ga * xb;
          }
        }
        gc[i] = static_cast<T>(sum_cos);
        gs[i] = static_cast<T>(sum_sin);
      }
    }
  });
}

#define OPBRIDGE_INSTANTIATE(T)                                                                \
  template void RotaryEmbeddingForward<T>(const T*, const T*, const T*, T*, const RotaryDims&, \
                                          const RotaryAttrs&, const ParallelFor&);             \
  template void RotaryEmbeddingBackward<T>(const T*, const T*, const T*, const T*, T*, T*, T*, \
                                           const RotaryDims&, const RotaryAttrs&, const ParallelFor&);
OPBRIDGE_INSTANTIATE(float)
OPBRIDGE_INSTANTIATE(double)
#undef OPBRIDGE_INSTANTIATE

RotaryDims RotaryDimsOf(const Shape& x, const Shape& cos) {
  // cos is [seq, half] or [table_batch, seq, half] with table_batch 1 or x's batch.
  const int64_t table_batch = cos.size() == 3 ? cos[0] : 1;
  return RotaryDims{x[0], x[1], x[2], x[3], cos.back(), table_batch};
}

Status LaunchRotaryEmbedding(const KernelArgs& args) {
  const RotaryDims dims = RotaryDimsOf(args.input_infos[0].shape, args.input_infos[1].shape);
  const RotaryAttrs attrs{args.attrs[0].number != 0.0};
  return DispatchFloating(kRotaryEmbeddingSpec, "x", args.input_infos[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    RotaryEmbeddingForward<T>(static_cast<const T*>(args.inputs[0]), static_cast<const T*>(args.inputs[1]),
                              static_cast<const T*>(args.inputs[2]), static_cast<T*>(args.outputs[0]), dims,
                              attrs, args.parallel_for);
  });
}

// Backward inputs: grad_y, x, cos, sin; outputs: grad_x, grad_cos, grad_sin
// (the kernel computes cos and sin gradients together, so when only one is
// wanted the other goes to scratch memory).
Status LaunchRotaryEmbeddingBackward(const KernelArgs& args) {
  const RotaryDims dims = RotaryDimsOf(args.input_infos[1].shape, args.input_infos[2].shape);
  const RotaryAttrs attrs{args.attrs[0].number != 0.0};
  return DispatchFloating(kRotaryEmbeddingSpec, "x", args.input_infos[1].dtype, [&](auto tag) {
    using T = decltype(tag);
    T* grad_cos = static_cast<T*>(args.outputs[1]);
    T* grad_sin = static_cast<T*>(args.outputs[2]);
    std::vector<T> scratch;
    if ((grad_cos == nullptr) != (grad_sin == nullptr)) {
      scratch.resize(static_cast<size_t>(NumElements(args.input_infos[2].shape)));
      (grad_cos == nullptr ? grad_cos : grad_sin) = scratch.data();
    }
    RotaryEmbeddingBackward<T>(static_cast<const T*>(args.inputs[0]), static_cast<const T*>(args.inputs[1]),
                               static_cast<const T*>(args.inputs[2]), static_cast<const T*>(args.inputs[3]),
                               static_cast<T*>(args.outputs[0]), grad_cos, grad_sin, dims, attrs,
                               args.parallel_for);
  });
}

}  // namespace opbridge
