// rotary_embedding kernels, vectorized with Highway: compiled once per SIMD
// target (foreach_target re-includes this file) and dispatched at run time.
// Half-split pairs (i, i + half) rotate as two vectors of consecutive
// elements; interleaved pairs (2i, 2i + 1) as one vector against a per-row
// table of duplicated cos and sign-alternating sin, with neighbours swapped.
// The backward computes grad_x and, when asked for, the cos / sin gradients
// in the same pass over grad_y and x.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/rotary_embedding/kernel.cpp"
#include "ops/rotary_embedding/kernel.h"

#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "opbridge/checks.h"
#include "opbridge/dynamic_for.h"
#include "opbridge/half.h"
#include "opbridge/simd-inl.h"
#include "opbridge/simd.h"
#include "ops/rotary_embedding/spec.h"

#ifndef OPBRIDGE_ROTARY_GEOMETRY_
#define OPBRIDGE_ROTARY_GEOMETRY_
namespace opbridge {
namespace rotary {
// The shape of one call, as the per-target code needs it (one type for
// every target: the dispatch table holds functions of one signature).
struct Geometry {
  int64_t seq;
  int64_t heads;
  int64_t head_dim;
  int64_t half;
  int64_t table_batch;
  // Table row of x's row r = n * seq + s: s for a shared table, else r.
  int64_t TableRow(int64_t r) const { return table_batch == 1 ? r % seq : r; }
};
}  // namespace rotary
}  // namespace opbridge
#endif

HWY_BEFORE_NAMESPACE();
namespace opbridge {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using rotary::Geometry;
using simd::AccumulateDouble;
using simd::AccumulateDoubleTail;
using simd::AlignedFor;
using simd::kMaxLanes;
using simd::ReadLanes;
using simd::ReadTail;
using simd::WriteLanes;
using simd::WriteLanesStream;
using simd::WriteTail;

// Interleaved pairs are swapped within a vector (Reverse2); HWY_SCALAR's
// one-lane vectors hold no pair, so there pairs go element by element.
#if HWY_TARGET == HWY_SCALAR
constexpr bool kPairsInVectors = false;
#else
constexpr bool kPairsInVectors = true;
#endif

template <typename C, typename T>
HWY_INLINE C Element(T v) {
  return static_cast<C>(ToFloat(v));
}

// One head of one row: y = rotation of x by the row's angles (by minus the
// angles when `inverse`). Half-split reads cos / sin straight from the
// table row; interleaved reads the per-row tables `cos_pairs` (c0 c0 c1 c1
// ...) and `sin_pairs` (-s0 s0 -s1 s1 ..., signs flipped when inverse).
template <typename T, bool kInterleaved, class D, class Write>
HWY_INLINE void RotateHead(D d, const T* x, const T* cos, const T* sin, const hn::TFromD<D>* cos_pairs,
                           const hn::TFromD<D>* sin_pairs, T* y, int64_t half, int64_t head_dim, bool inverse,
                           Write write) {
  using V = hn::VFromD<D>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  alignas(64) T buffer[kMaxLanes];
  if constexpr (kInterleaved && !kPairsInVectors) {
    using C = hn::TFromD<D>;
    for (int64_t j = 0; j < 2 * half; ++j) {
      y[j] = FromDouble<T>(
          static_cast<double>(Element<C>(x[j]) * cos_pairs[j] + Element<C>(x[j ^ 1]) * sin_pairs[j]));
    }
    (void)write;
    (void)lanes;
    (void)buffer;
  } else if constexpr (kInterleaved) {
    const int64_t rotary = 2 * half;
    auto rotate = [&](V v, int64_t j, int64_t count) {
      // The pair tables are zero-padded past rotary_dim by a whole vector.
      (void)count;
      const V cv = hn::LoadU(d, cos_pairs + j);
      const V sv = hn::LoadU(d, sin_pairs + j);
      return hn::MulAdd(hn::Reverse2(d, v), sv, hn::Mul(v, cv));
    };
    int64_t j = 0;
    for (; j + lanes <= rotary; j += lanes) write(rotate(ReadLanes(d, x + j), j, lanes), y + j);
    if (j < rotary) {
      const int64_t rest = rotary - j;
      WriteTail(d, rotate(ReadTail(d, x + j, rest, buffer), j, rest), y + j, rest, buffer);
    }
  } else {
    auto rotate = [&](V a, V b, V c, V s, int64_t j, auto store) {
      if (inverse) s = hn::Neg(s);
      store(hn::NegMulAdd(b, s, hn::Mul(a, c)), y + j);
      store(hn::MulAdd(a, s, hn::Mul(b, c)), y + half + j);
    };
    int64_t i = 0;
    for (; i + lanes <= half; i += lanes) {
      rotate(ReadLanes(d, x + i), ReadLanes(d, x + half + i), ReadLanes(d, cos + i), ReadLanes(d, sin + i), i,
             write);
    }
    if (i < half) {
      const int64_t rest = half - i;
      rotate(ReadTail(d, x + i, rest, buffer), ReadTail(d, x + half + i, rest, buffer),
             ReadTail(d, cos + i, rest, buffer), ReadTail(d, sin + i, rest, buffer), i,
             [&](V v, T* p) { WriteTail(d, v, p, rest, buffer); });
    }
  }
  // Dims past rotary_dim pass through unchanged.
  if (head_dim > 2 * half) {
    std::memcpy(static_cast<void*>(y + 2 * half), x + 2 * half,
                static_cast<size_t>(head_dim - 2 * half) * sizeof(T));
  }
}

// Interleaved layout: the row's cos duplicated per pair and sin with the
// pair's signs (-s, s), negated when inverse.
template <typename T, typename C>
void PairTables(const T* cos, const T* sin, int64_t half, bool inverse, C* cos_pairs, C* sin_pairs) {
  const C sign = inverse ? C(-1) : C(1);
  for (int64_t i = 0; i < half; ++i) {
    const C c = static_cast<C>(ToFloat(cos[i]));
    const C s = sign * static_cast<C>(ToFloat(sin[i]));
    cos_pairs[2 * i] = c;
    cos_pairs[2 * i + 1] = c;
    sin_pairs[2 * i] = -s;
    sin_pairs[2 * i + 1] = s;
  }
}

template <typename T, bool kInterleaved>
void RotateRowsImpl(const T* x, const T* cos, const T* sin, T* y, int64_t row_begin, int64_t row_end,
                    const Geometry& g, bool inverse, bool stream) {
  using C = ComputeType<T>;
  const hn::ScalableTag<C> d;
  // Interleaved: per-row pair tables, each zero-padded by a whole vector.
  const int64_t pair_stride = 2 * g.half + kMaxLanes;
  std::vector<C> pairs(kInterleaved ? static_cast<size_t>(2 * pair_stride) : 0, C(0));
  C* cos_pairs = pairs.data();
  C* sin_pairs = kInterleaved ? pairs.data() + pair_stride : nullptr;
  const int64_t row_size = g.heads * g.head_dim;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const T* c = cos + g.TableRow(r) * g.half;
    const T* s = sin + g.TableRow(r) * g.half;
    if constexpr (kInterleaved) PairTables(c, s, g.half, inverse, cos_pairs, sin_pairs);
    const T* xr = x + r * row_size;
    T* yr = y + r * row_size;
    // Heads start at multiples of head_dim: when that keeps every half-head
    // vector-aligned, stream.
    const bool aligned = stream && AlignedFor(d, yr) && (g.half % static_cast<int64_t>(hn::Lanes(d))) == 0 &&
                         (g.head_dim % static_cast<int64_t>(hn::Lanes(d))) == 0;
    for (int64_t h = 0; h < g.heads; ++h) {
      const T* xh = xr + h * g.head_dim;
      T* yh = yr + h * g.head_dim;
      if (aligned) {
        RotateHead<T, kInterleaved>(d, xh, c, s, cos_pairs, sin_pairs, yh, g.half, g.head_dim, inverse,
                                    [d](hn::VFromD<decltype(d)> v, T* p) { WriteLanesStream(d, v, p); });
      } else {
        RotateHead<T, kInterleaved>(d, xh, c, s, cos_pairs, sin_pairs, yh, g.half, g.head_dim, inverse,
                                    [d](hn::VFromD<decltype(d)> v, T* p) { WriteLanes(d, v, p); });
      }
    }
  }
  if (stream) hwy::FlushStream();
}

// Backward with table gradients, for table rows [t_begin, t_end): grad_x of
// every row that uses the table row, and that table row's gradients summed
// over those rows and their heads (float lanes within a row, double across
// rows, in a fixed order).
template <typename T, bool kInterleaved>
void BackwardTableRowsImpl(const T* grad_y, const T* x, const T* cos, const T* sin, T* grad_x, T* grad_cos,
                           T* grad_sin, int64_t t_begin, int64_t t_end, int64_t batch, const Geometry& g,
                           bool stream) {
  using C = ComputeType<T>;
  using V = hn::VFromD<hn::ScalableTag<C>>;
  const hn::ScalableTag<C> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  // Interleaved sums are kept per element (pairs combined at the end).
  const int64_t width = kInterleaved ? 2 * g.half : g.half;
  const size_t padded = static_cast<size_t>(width + kMaxLanes);
  // Interleaved: per-row pair tables, each zero-padded by a whole vector.
  const int64_t pair_stride = 2 * g.half + kMaxLanes;
  std::vector<C> pairs(kInterleaved ? static_cast<size_t>(2 * pair_stride) : 0, C(0));
  C* cos_pairs = pairs.data();
  C* sin_pairs = kInterleaved ? pairs.data() + pair_stride : nullptr;
  std::vector<C> row_cos(padded), row_sin(padded);
  std::vector<double> total_cos(padded), total_sin(padded);
  alignas(64) T buffer[kMaxLanes];
  const int64_t row_size = g.heads * g.head_dim;
  const bool shared = g.table_batch == 1;
  for (int64_t t = t_begin; t < t_end; ++t) {
    const T* c = cos + t * g.half;
    const T* s = sin + t * g.half;
    if constexpr (kInterleaved) PairTables(c, s, g.half, true, cos_pairs, sin_pairs);
    std::fill(total_cos.begin(), total_cos.end(), 0.0);
    std::fill(total_sin.begin(), total_sin.end(), 0.0);
    const int64_t n_begin = shared ? 0 : t / g.seq;
    const int64_t n_end = shared ? batch : n_begin + 1;
    for (int64_t n = n_begin; n < n_end; ++n) {
      const int64_t r = n * g.seq + t % g.seq;
      const T* gr = grad_y + r * row_size;
      const T* xr = x + r * row_size;
      T* dxr = grad_x + r * row_size;
      const bool aligned = stream && AlignedFor(d, dxr) && (g.half % lanes) == 0 && (g.head_dim % lanes) == 0;
      for (int64_t h = 0; h < g.heads; ++h) {
        const T* gh = gr + h * g.head_dim;
        const T* xh = xr + h * g.head_dim;
        if (aligned) {
          RotateHead<T, kInterleaved>(d, gh, c, s, cos_pairs, sin_pairs, dxr + h * g.head_dim, g.half,
                                      g.head_dim, true,
                                      [d](hn::VFromD<decltype(d)> v, T* p) { WriteLanesStream(d, v, p); });
        } else {
          RotateHead<T, kInterleaved>(d, gh, c, s, cos_pairs, sin_pairs, dxr + h * g.head_dim, g.half,
                                      g.head_dim, true,
                                      [d](hn::VFromD<decltype(d)> v, T* p) { WriteLanes(d, v, p); });
        }
        // cos gradient: ga xa + gb xb; sin gradient: gb xa - ga xb.
        const bool first = h == 0;
        auto add = [&](V cv, V sv, int64_t j) {
          hn::StoreU(first ? cv : hn::Add(hn::LoadU(d, row_cos.data() + j), cv), d, row_cos.data() + j);
          hn::StoreU(first ? sv : hn::Add(hn::LoadU(d, row_sin.data() + j), sv), d, row_sin.data() + j);
        };
        if constexpr (kInterleaved && !kPairsInVectors) {
          for (int64_t j = 0; j < width; ++j) {
            const C cv = Element<C>(gh[j]) * Element<C>(xh[j]);
            const C sv = Element<C>(gh[j ^ 1]) * Element<C>(xh[j]);
            row_cos[static_cast<size_t>(j)] = first ? cv : row_cos[static_cast<size_t>(j)] + cv;
            row_sin[static_cast<size_t>(j)] = first ? sv : row_sin[static_cast<size_t>(j)] + sv;
          }
          (void)add;
        } else if constexpr (kInterleaved) {
          // Per element: g x for cos and swap(g) x for sin; the pair's two
          // sin terms are gb xa and ga xb, subtracted when combined.
          int64_t j = 0;
          for (; j + lanes <= width; j += lanes) {
            const V gv = ReadLanes(d, gh + j), xv = ReadLanes(d, xh + j);
            add(hn::Mul(gv, xv), hn::Mul(hn::Reverse2(d, gv), xv), j);
          }
          if (j < width) {
            const int64_t rest = width - j;
            const V gv = ReadTail(d, gh + j, rest, buffer), xv = ReadTail(d, xh + j, rest, buffer);
            add(hn::Mul(gv, xv), hn::Mul(hn::Reverse2(d, gv), xv), j);
          }
        } else {
          auto terms = [&](V ga, V gb, V xa, V xb, int64_t i) {
            add(hn::MulAdd(gb, xb, hn::Mul(ga, xa)), hn::NegMulAdd(ga, xb, hn::Mul(gb, xa)), i);
          };
          int64_t i = 0;
          for (; i + lanes <= width; i += lanes) {
            terms(ReadLanes(d, gh + i), ReadLanes(d, gh + g.half + i), ReadLanes(d, xh + i),
                  ReadLanes(d, xh + g.half + i), i);
          }
          if (i < width) {
            const int64_t rest = width - i;
            terms(ReadTail(d, gh + i, rest, buffer), ReadTail(d, gh + g.half + i, rest, buffer),
                  ReadTail(d, xh + i, rest, buffer), ReadTail(d, xh + g.half + i, rest, buffer), i);
          }
        }
      }
      int64_t j = 0;
      for (; j + lanes <= width; j += lanes) {
        AccumulateDouble(d, hn::LoadU(d, row_cos.data() + j), total_cos.data() + j);
        AccumulateDouble(d, hn::LoadU(d, row_sin.data() + j), total_sin.data() + j);
      }
      if (j < width) {
        AccumulateDoubleTail(d, hn::LoadU(d, row_cos.data() + j), total_cos.data() + j, width - j);
        AccumulateDoubleTail(d, hn::LoadU(d, row_sin.data() + j), total_sin.data() + j, width - j);
      }
    }
    T* gc = grad_cos + t * g.half;
    T* gs = grad_sin + t * g.half;
    for (int64_t i = 0; i < g.half; ++i) {
      if constexpr (kInterleaved) {
        gc[i] = FromDouble<T>(total_cos[2 * i] + total_cos[2 * i + 1]);
        gs[i] = FromDouble<T>(total_sin[2 * i] - total_sin[2 * i + 1]);
      } else {
        gc[i] = FromDouble<T>(total_cos[i]);
        gs[i] = FromDouble<T>(total_sin[i]);
      }
    }
  }
  if (stream) hwy::FlushStream();
}

}  // namespace

#define OPBRIDGE_ROTARY_ENTRY_POINTS(T, Suffix)                                                              \
  void RotaryRows##Suffix(const T* x, const T* cos, const T* sin, T* y, int64_t row_begin, int64_t row_end,  \
                          const Geometry& g, bool interleaved, bool inverse, bool stream) {                  \
    if (interleaved) {                                                                                       \
      RotateRowsImpl<T, true>(x, cos, sin, y, row_begin, row_end, g, inverse, stream);                       \
    } else {                                                                                                 \
      RotateRowsImpl<T, false>(x, cos, sin, y, row_begin, row_end, g, inverse, stream);                      \
    }                                                                                                        \
  }                                                                                                          \
  void RotaryBackwardTableRows##Suffix(const T* grad_y, const T* x, const T* cos, const T* sin, T* grad_x,   \
                                       T* grad_cos, T* grad_sin, int64_t t_begin, int64_t t_end,             \
                                       int64_t batch, const Geometry& g, bool interleaved, bool stream) {    \
    if (interleaved) {                                                                                       \
      BackwardTableRowsImpl<T, true>(grad_y, x, cos, sin, grad_x, grad_cos, grad_sin, t_begin, t_end, batch, \
                                     g, stream);                                                             \
    } else {                                                                                                 \
      BackwardTableRowsImpl<T, false>(grad_y, x, cos, sin, grad_x, grad_cos, grad_sin, t_begin, t_end,       \
                                      batch, g, stream);                                                     \
    }                                                                                                        \
  }
OPBRIDGE_ROTARY_ENTRY_POINTS(float, F32)
OPBRIDGE_ROTARY_ENTRY_POINTS(double, F64)
OPBRIDGE_ROTARY_ENTRY_POINTS(Float16, F16)
OPBRIDGE_ROTARY_ENTRY_POINTS(BFloat16, BF16)
#undef OPBRIDGE_ROTARY_ENTRY_POINTS

}  // namespace HWY_NAMESPACE
}  // namespace opbridge
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opbridge {

HWY_EXPORT(RotaryRowsF32);
HWY_EXPORT(RotaryRowsF64);
HWY_EXPORT(RotaryRowsF16);
HWY_EXPORT(RotaryRowsBF16);
HWY_EXPORT(RotaryBackwardTableRowsF32);
HWY_EXPORT(RotaryBackwardTableRowsF64);
HWY_EXPORT(RotaryBackwardTableRowsF16);
HWY_EXPORT(RotaryBackwardTableRowsBF16);

namespace {

using rotary::Geometry;

template <typename T>
struct RowKernels;
#define OPBRIDGE_ROTARY_ROW_KERNELS(T, Suffix)                                                             \
  template <>                                                                                              \
  struct RowKernels<T> {                                                                                   \
    static void Rotate(const T* x, const T* cos, const T* sin, T* y, int64_t row_begin, int64_t row_end,   \
                       const Geometry& g, bool interleaved, bool inverse, bool stream) {                   \
      OPBRIDGE_DYNAMIC_DISPATCH(RotaryRows##Suffix)                                                        \
      (x, cos, sin, y, row_begin, row_end, g, interleaved, inverse, stream);                               \
    }                                                                                                      \
    static void BackwardTableRows(const T* grad_y, const T* x, const T* cos, const T* sin, T* grad_x,      \
                                  T* grad_cos, T* grad_sin, int64_t t_begin, int64_t t_end, int64_t batch, \
                                  const Geometry& g, bool interleaved, bool stream) {                      \
      OPBRIDGE_DYNAMIC_DISPATCH(RotaryBackwardTableRows##Suffix)                                           \
      (grad_y, x, cos, sin, grad_x, grad_cos, grad_sin, t_begin, t_end, batch, g, interleaved, stream);    \
    }                                                                                                      \
  };
OPBRIDGE_ROTARY_ROW_KERNELS(float, F32)
OPBRIDGE_ROTARY_ROW_KERNELS(double, F64)
OPBRIDGE_ROTARY_ROW_KERNELS(Float16, F16)
OPBRIDGE_ROTARY_ROW_KERNELS(BFloat16, BF16)
#undef OPBRIDGE_ROTARY_ROW_KERNELS

Geometry GeometryOf(const RotaryDims& d) {
  return Geometry{d.seq, d.heads, d.head_dim, d.half, d.table_batch};
}

// An output that does not fit in the last-level cache is written with
// non-temporal stores (float32 / float64 outputs only).
template <typename T>
bool OutputStreams(int64_t elements) {
  return elements * static_cast<int64_t>(sizeof(T)) > StreamingStoreBytes();
}

template <typename T>
void Rotate(const T* x, const T* cos, const T* sin, T* y, const RotaryDims& d, const RotaryAttrs& attrs,
            bool inverse, const ParallelFor& parallel_for) {
  if (d.batch <= 0 || d.seq <= 0 || d.heads <= 0 || d.head_dim <= 0) return;
  const int64_t rows = d.batch * d.seq;
  const int64_t row_size = d.heads * d.head_dim;
  const bool stream = OutputStreams<T>(rows * row_size);
  const Geometry g = GeometryOf(d);
  const bool interleaved = attrs.interleaved;
  // Ranges handed out one at a time (DynamicFor), each about 32k elements:
  // large enough to amortize the hand-out, small enough to balance threads.
  DynamicFor(parallel_for, rows, RowGrain(row_size), [=](int64_t begin, int64_t end) {
    RowKernels<T>::Rotate(x, cos, sin, y, begin, end, g, interleaved, inverse, stream);
  });
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
  if (grad_cos == nullptr || grad_sin == nullptr) {
    Rotate(grad_y, cos, sin, grad_x, dims, attrs, true, parallel_for);
    return;
  }
  const RotaryDims d = dims;
  const int64_t table_rows = d.table_batch * d.seq;
  if (table_rows <= 0 || d.half <= 0) return;
  if (d.batch <= 0 || d.heads <= 0) {
    std::fill(grad_cos, grad_cos + table_rows * d.half, FromFloat<T>(0.0f));
    std::fill(grad_sin, grad_sin + table_rows * d.half, FromFloat<T>(0.0f));
    return;
  }
  const bool stream = OutputStreams<T>(d.batch * d.seq * d.heads * d.head_dim);
  const Geometry g = GeometryOf(d);
  const bool interleaved = attrs.interleaved;
  // One task per table row at a time: the row's gradient is reduced by that
  // task alone, in a fixed order. A shared table row covers every batch row.
  const int64_t rows_per_table_row = d.table_batch == 1 ? d.batch : 1;
  DynamicFor(parallel_for, table_rows, RowGrain(rows_per_table_row * d.heads * d.head_dim),
             [=](int64_t begin, int64_t end) {
               RowKernels<T>::BackwardTableRows(grad_y, x, cos, sin, grad_x, grad_cos, grad_sin, begin, end,
                                                d.batch, g, interleaved, stream);
             });
}

#define OPBRIDGE_INSTANTIATE(T)                                                                \
  template void RotaryEmbeddingForward<T>(const T*, const T*, const T*, T*, const RotaryDims&, \
                                          const RotaryAttrs&, const ParallelFor&);             \
  template void RotaryEmbeddingBackward<T>(const T*, const T*, const T*, const T*, T*, T*, T*, \
                                           const RotaryDims&, const RotaryAttrs&, const ParallelFor&);
OPBRIDGE_FOR_EACH_FLOATING_TYPE(OPBRIDGE_INSTANTIATE)
#undef OPBRIDGE_INSTANTIATE

RotaryDims RotaryDimsOf(const Shape& x, const Shape& cos) {
  // cos is [seq, half] or [table_batch, seq, half] with table_batch 1 or x's batch.
  const int64_t table_batch = cos.size() == 3 ? cos[0].Size() : 1;
  return RotaryDims{x[0], x[1], x[2], x[3], cos.back(), table_batch};
}

Status LaunchRotaryEmbedding(const KernelArgs& args) {
  const RotaryDims dims = RotaryDimsOf(args.input_infos[0].shape, args.input_infos[1].shape);
  const RotaryAttrs attrs{args.attrs[0].number != 0.0};
  return DispatchFloatingOrHalf(kRotaryEmbeddingSpec, "x", args.input_infos[0].dtype, [&](auto tag) {
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
  return DispatchFloatingOrHalf(kRotaryEmbeddingSpec, "x", args.input_infos[1].dtype, [&](auto tag) {
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
#endif  // HWY_ONCE
