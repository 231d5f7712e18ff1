// CUDA kernels shared by the built-in normalization operators (rms_norm,
// add_rms_norm, layer_norm, add_layer_norm); included by their kernel.cu
// files only. csrc/ops/shared/ holds what several built-in operators share
// and is no operator (no spec.cpp) and no part of the SDK (not installed). Everything here has internal
// linkage (an unnamed namespace), so each kernel.cu gets its own copies and no two translation units share a
// kernel symbol. A norm's kernel.cu is one OPBRIDGE_REGISTER_CUDA_NORM_KERNELS
// (at the end), which registers LaunchForwardArgs / LaunchBackwardArgs for its
// (Norm, NormResidual): they unpack KernelArgs with opbridge/norm_launch.h and
// run Forward and Backward on the storage types.
//
// What the kernels compute: the CPU kernels' results, on device pointers of
// the current device (contiguous; outputs do not overlap inputs), enqueued on
// the call's stream without synchronizing; a failed launch comes back as an
// error Status. 16-bit types load into float32, compute and accumulate in
// float32 and round to nearest even on store; float32 computes in float32,
// double in double (row sums stay in that type, where the CPU kernels move
// them to double every 1024 elements). Each input row is read from memory
// once for rows up to 8192 elements (4096 for double; half that with
// unaligned pointers or cols not a multiple of 16 bytes), from the cache
// after the first tile beyond that. rows == 0 zero-fills the parameter
// gradients requested.
//
// Layout of the work: a row is handled by a group of G threads (one warp for
// short rows, up to kMaxGroup threads for long ones), and a block runs
// several rows side by side when G is small. Thread t of a group handles the
// row's vectors t, t + G, t + 2 * G, ... (Vec<D, N>: 16-byte accesses, or
// single elements when cols or a pointer does not allow them). The row's
// first tile, K vectors per thread, stays in registers between the passes
// over the row, so each input row is read from memory once; rows longer than
// kMaxGroup * K vectors (kLong kernels) re-read their later tiles, from the
// cache when it holds them.
//
// Row statistics are summed per group with warp shuffles and, for groups of
// several warps, one shared-memory exchange: a fixed order, so every thread
// of a row sees the same, reproducible value. Weight and bias gradients are
// deterministic: the backward runs one block per chunk of rows (opbridge's
// ColumnChunks / RowsPerChunk), each thread sums the columns it owns over its
// rows of the chunk in registers, the block's row slots are combined in slot
// order into a [chunks, cols] scratch matrix, and FinishPartials adds the
// chunks in order, in double (as the CPU kernels' partials: float32 sums of
// the 256 chunk partials drift past float32 tolerances). No atomics anywhere.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "opbridge/cuda_device.cuh"
#include "opbridge/norm_launch.h"

namespace opbridge::cuda::norms {
namespace {

// Threads per row at most.
constexpr int kMaxGroup = 512;
// Threads per block at least, so that short rows share a block.
constexpr int kForwardMinThreads = 128;
constexpr int kBackwardMinThreads = 256;

constexpr int BlockThreads(int group, int min_threads) { return group > min_threads ? group : min_threads; }

// Vectors per thread kept in registers. The forward keeps its input; the
// backward its input and output gradient, plus the weight and bias gradient
// sums of the same columns (in Acc<D>: twice the registers for 16-bit D).
template <typename D, int N>
constexpr int kForwardCache = N == 1 ? 8 : 4;
template <typename D, int N>
constexpr int kBackwardCache = N == 1 ? (sizeof(D) == 8 ? 4 : 8) : (sizeof(D) == 2 ? 2 : 4);

struct Geometry {
  int group;       // threads per row: 32, 64, ..., kMaxGroup
  int slots;       // rows per block
  bool long_rows;  // rows longer than one tile (then group == kMaxGroup, slots == 1)
};

// The fewest threads per row (a power of two from one warp up to kMaxGroup)
// whose first tile of `cache` vectors per thread holds a row of `vectors`,
// with at least `min_threads` threads per block. A row longer than one tile
// gets a block of its own: the backward relies on it (its later tiles'
// column sums accumulate in place in scratch, each column by one thread).
inline Geometry ChooseGeometry(int64_t vectors, int cache, int min_threads) {
  int group = 32;
  while (group < kMaxGroup && vectors > static_cast<int64_t>(group) * cache) group *= 2;
  const bool long_rows = vectors > static_cast<int64_t>(group) * cache;
  return {group, long_rows ? 1 : std::max(1, min_threads / group), long_rows};
}

// Calls body(std::integral_constant<int, G>{}, std::bool_constant<kLong>{})
// for the geometry's group and row length.
template <typename Body>
Status WithGeometry(const Geometry& geometry, Body&& body) {
  if (geometry.long_rows) return body(std::integral_constant<int, kMaxGroup>{}, std::true_type{});
  switch (geometry.group) {
    case 32:
      return body(std::integral_constant<int, 32>{}, std::false_type{});
    case 64:
      return body(std::integral_constant<int, 64>{}, std::false_type{});
    case 128:
      return body(std::integral_constant<int, 128>{}, std::false_type{});
    case 256:
      return body(std::integral_constant<int, 256>{}, std::false_type{});
    default:
      return body(std::integral_constant<int, kMaxGroup>{}, std::false_type{});
  }
}

// Vector `index` of a tensor of D seen as Vec<D, N>; null stays null.
template <typename D, int N>
__device__ __forceinline__ const Vec<D, N>* VecAt(const D* base, int64_t index) {
  return base == nullptr ? nullptr : reinterpret_cast<const Vec<D, N>*>(base) + index;
}
template <typename D, int N>
__device__ __forceinline__ Vec<D, N>* VecAt(D* base, int64_t index) {
  return base == nullptr ? nullptr : reinterpret_cast<Vec<D, N>*>(base) + index;
}
template <typename P>
__device__ __forceinline__ P* Advance(P* pointer, int64_t count) {
  return pointer == nullptr ? nullptr : pointer + count;
}

// The vectors of a row a thread handles in one tile: slot i is the row's
// vector first + i * G, when below `vectors` and the thread's row slot is not
// idle. A tile pointer points at slot 0, so slot i is p[i * G].
template <int G>
struct TileSlots {
  int64_t first;
  int64_t vectors;
  bool active;

  __device__ __forceinline__ int64_t At(int i) const { return first + static_cast<int64_t>(i) * G; }
  __device__ __forceinline__ bool Has(int i) const { return active && At(i) < vectors; }
};

// The row's tiles after the one `first` describes (the tile a thread keeps in
// registers), in order: fn(start, s), `start` the tile's first vector and `s`
// this thread's vectors of it. Only rows of kLong kernels have them.
template <int K, bool kLong, int G, typename Fn>
__device__ __forceinline__ void ForLaterTiles(const TileSlots<G>& first, Fn&& fn) {
  if constexpr (kLong) {
    constexpr int64_t kTile = static_cast<int64_t>(G) * K;
#pragma unroll 1
    for (int64_t start = kTile; start < first.vectors; start += kTile) {
      fn(start, TileSlots<G>{start + first.first, first.vectors, first.active});
    }
  }
}

// Sums each of values[0..K) over the thread's row group of G threads; every
// thread of the group gets the same sums, added in a fixed order. Called by
// every thread of the block the same number of times (it synchronizes the
// block when G > 32). `shared` holds K * 32 values.
template <int G, int K, typename A>
__device__ __forceinline__ void GroupSum(A (&values)[K], A* shared) {
#pragma unroll
  for (int k = 0; k < K; ++k) values[k] = WarpSum(values[k]);
  if constexpr (G > 32) {
    constexpr int kWarps = G / 32;
    const int lane = static_cast<int>(threadIdx.x) & 31;
    const int warp = static_cast<int>(threadIdx.x) >> 5;
    __syncthreads();  // the previous call's readers are done with `shared`
    if (lane == 0) {
#pragma unroll
      for (int k = 0; k < K; ++k) shared[k * 32 + warp] = values[k];
    }
    __syncthreads();
    const int first = warp - warp % kWarps;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      A sum = shared[k * 32 + first];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) sum += shared[k * 32 + first + w];
      values[k] = sum;
    }
  }
}

// Element k of v in the compute type: ToAcc, except that bfloat16 widens from
// the packed pair by a shift or mask instead of CUDA's conversion (inline
// assembly on one 16-bit half, whose results the compiler keeps live across
// a row's passes rather than recomputing them): the same values, far fewer
// registers.
template <typename D, int N>
__device__ __forceinline__ Acc<D> Widen(const Vec<D, N>& v, int k) {
  return ToAcc(v.values[k]);
}
template <int N>
__device__ __forceinline__ float Widen(const Vec<__nv_bfloat16, N>& v, int k) {
  if constexpr (N % 2 == 0) {
    unsigned pair;
    memcpy(&pair, &v.values[k & ~1], sizeof(pair));
    return __uint_as_float((k & 1) != 0 ? pair & 0xFFFF0000u : pair << 16);
  } else {
    return __uint_as_float(static_cast<unsigned>(__bfloat16_as_ushort(v.values[k])) << 16);
  }
}

__device__ __forceinline__ float InvSqrt(float value) { return 1.0f / sqrtf(value); }
__device__ __forceinline__ double InvSqrt(double value) { return 1.0 / sqrt(value); }

template <int G, int K, typename D, int N>
__device__ __forceinline__ void LoadTile(const Vec<D, N>* p, const TileSlots<G>& s, Vec<D, N> (&out)[K]) {
#pragma unroll
  for (int i = 0; i < K; ++i) {
    if (s.Has(i)) out[i] = p[i * G];
  }
}

// Pointers to one row (or tile) of the forward's tensors; residual and sum
// are null without the add.
template <typename D, int N>
struct ForwardRow {
  const Vec<D, N>* x;
  const Vec<D, N>* residual;
  Vec<D, N>* sum;
  Vec<D, N>* y;

  // The tile starting `first` vectors further.
  __device__ __forceinline__ ForwardRow At(int64_t first) const {
    return ForwardRow{x + first, Advance(residual, first), Advance(sum, first), y + first};
  }
  // Where the normalized input is once LoadInput has run.
  __device__ __forceinline__ const Vec<D, N>* Input() const { return sum != nullptr ? sum : x; }
};

// The forward's input: x, or with kAdd x + residual rounded to D (as an
// unfused add stores it), which is also written to `sum`. All loads are
// issued before the first store.
template <bool kAdd, int G, int K, typename D, int N>
__device__ __forceinline__ void LoadInput(const ForwardRow<D, N>& row, const TileSlots<G>& s,
                                          Vec<D, N> (&out)[K]) {
  LoadTile(row.x, s, out);
  if constexpr (kAdd) {
    Vec<D, N> other[K];
    LoadTile(row.residual, s, other);
#pragma unroll
    for (int i = 0; i < K; ++i) {
      if (!s.Has(i)) continue;
#pragma unroll
      for (int k = 0; k < N; ++k) {
        out[i].values[k] = FromAcc<D>(Widen(out[i], k) + Widen(other[i], k));
      }
      row.sum[i * G] = out[i];
    }
  }
}

// Pointers to one row (or tile) of the backward's tensors; grad_add and
// grad_x may be null.
template <typename D, int N>
struct BackwardRow {
  const Vec<D, N>* grad_y;
  const Vec<D, N>* grad_add;
  const Vec<D, N>* x;
  Vec<D, N>* grad_x;

  __device__ __forceinline__ BackwardRow At(int64_t first) const {
    return BackwardRow{grad_y + first, Advance(grad_add, first), x + first, Advance(grad_x, first)};
  }
};

// Column sums of the weight and bias gradients over the first tile's
// columns, in registers: the `add` of the backward's last pass.
template <int K, int N, typename A>
struct ColumnSums {
  A w[K][N] = {};
  A b[K][N] = {};

  __device__ __forceinline__ void operator()(int i, int k, A weight_term, A bias_term) {
    w[i][k] += weight_term;
    b[i][k] += bias_term;
  }

  // Stores them as the chunk's scratch column sums (pw, pb: null when not
  // needed), row slot after row slot, so the result does not depend on
  // scheduling. Called by every thread of the block.
  template <int G>
  __device__ __forceinline__ void Write(A* pw, A* pb, int slots, int slot, int t, int64_t vectors) const {
    const TileSlots<G> s{t, vectors, true};
    for (int writer = 0; writer < slots; ++writer) {
      if (writer == slot) {
#pragma unroll
        for (int i = 0; i < K; ++i) {
          if (!s.Has(i)) continue;
#pragma unroll
          for (int k = 0; k < N; ++k) {
            const int64_t c = s.At(i) * N + k;
            if (pw != nullptr) pw[c] = (writer == 0 ? A(0) : pw[c]) + w[i][k];
            if (pb != nullptr) pb[c] = (writer == 0 ? A(0) : pb[c]) + b[i][k];
          }
        }
      }
      if (slots > 1) __syncthreads();  // the same for the whole block
    }
  }
};

// The `add` of the backward's last pass over a later tile (kLong): adds to
// the chunk's scratch column sums in place. Such a block has one row slot, so
// each of these columns belongs to one thread.
template <int G, int N, typename A>
struct ScratchColumnSums {
  A* pw;
  A* pb;
  TileSlots<G> s;

  __device__ __forceinline__ void operator()(int i, int k, A weight_term, A bias_term) const {
    const int64_t c = s.At(i) * N + k;
    if (pw != nullptr) pw[c] += weight_term;
    if (pb != nullptr) pb[c] += bias_term;
  }
};

// Zeroes the chunk's scratch column sums past the first tile (kLong).
template <int G, int K, int N, typename A>
__device__ __forceinline__ void ZeroLaterTiles(A* pw, A* pb, int64_t vectors, int t) {
#pragma unroll 1
  for (int64_t v = static_cast<int64_t>(G) * K + t; v < vectors; v += G) {
#pragma unroll
    for (int k = 0; k < N; ++k) {
      if (pw != nullptr) pw[v * N + k] = A(0);
      if (pb != nullptr) pb[v * N + k] = A(0);
    }
  }
}

// The rows [row_begin, row_end) of a backward block's chunk.
struct ChunkRows {
  int64_t begin;
  int64_t end;
};
__device__ __forceinline__ ChunkRows ThisChunk(int64_t rows, int64_t rows_per_chunk) {
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * rows_per_chunk;
  if (begin >= rows) return {rows, rows};
  return {begin, rows - begin < rows_per_chunk ? rows : begin + rows_per_chunk};
}

// ---------------------------------------------------------------------------
// rms_norm / add_rms_norm

template <int G, int K, typename D, int N>
__device__ __forceinline__ Acc<D> SumSquares(const Vec<D, N> (&in)[K], const TileSlots<G>& s) {
  Acc<D> total = 0;
#pragma unroll
  for (int i = 0; i < K; ++i) {
    if (!s.Has(i)) continue;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const Acc<D> value = Widen(in[i], k);
      total += value * value;
    }
  }
  return total;
}

// y = in * rstd * weight (+ bias); weight and bias point at the tile's slot 0.
template <int G, int K, typename D, int N>
__device__ __forceinline__ void RmsWriteTile(const Vec<D, N> (&in)[K], const TileSlots<G>& s,
                                             const Vec<D, N>* weight, const Vec<D, N>* bias, Vec<D, N>* y,
                                             Acc<D> rstd) {
#pragma unroll
  for (int i = 0; i < K; ++i) {
    if (!s.Has(i)) continue;
    const Vec<D, N> w = weight[i * G];
    Vec<D, N> out;
    if (bias != nullptr) {
      const Vec<D, N> b = bias[i * G];
#pragma unroll
      for (int k = 0; k < N; ++k) {
        out.values[k] = FromAcc<D>(Widen(in[i], k) * rstd * Widen(w, k) + Widen(b, k));
      }
    } else {
#pragma unroll
      for (int k = 0; k < N; ++k) out.values[k] = FromAcc<D>(Widen(in[i], k) * rstd * Widen(w, k));
    }
    y[i * G] = out;
  }
}

// Rows in grid-stride steps of whole blocks: every thread of a block runs the
// same number of iterations, idle row slots included. With kAdd: the norm of
// sum = x + residual, also written out.
template <typename D, int N, int K, int G, bool kLong, bool kAdd>
__global__ void __launch_bounds__(BlockThreads(G, kForwardMinThreads))
    RmsNormForwardKernel(const D* __restrict__ x, const D* __restrict__ residual,
                         const D* __restrict__ weight, const D* __restrict__ bias, D* __restrict__ y,
                         D* __restrict__ sum, int64_t rows, int64_t cols, Acc<D> eps) {
  using A = Acc<D>;
  __shared__ A shared[32];
  const int slots = static_cast<int>(blockDim.x) / G;
  const int slot = static_cast<int>(threadIdx.x) / G;
  const int t = static_cast<int>(threadIdx.x) % G;
  const int64_t vectors = cols / N;
  const Vec<D, N>* w = VecAt<D, N>(weight, t);
  const Vec<D, N>* b = VecAt<D, N>(bias, t);
  const int64_t step = static_cast<int64_t>(gridDim.x) * slots;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * slots; base < rows; base += step) {
    const int64_t row_index = base + slot;
    const TileSlots<G> first{t, vectors, row_index < rows};
    const int64_t offset = row_index * vectors + t;
    const ForwardRow<D, N> row{VecAt<D, N>(x, offset), kAdd ? VecAt<D, N>(residual, offset) : nullptr,
                               kAdd ? VecAt<D, N>(sum, offset) : nullptr, VecAt<D, N>(y, offset)};
    Vec<D, N> cache[K];
    LoadInput<kAdd>(row, first, cache);
    A total[1] = {SumSquares(cache, first)};
    ForLaterTiles<K, kLong>(first, [&](int64_t start, const TileSlots<G>& s) {
      Vec<D, N> other[K];
      LoadInput<kAdd>(row.At(start), s, other);
      total[0] += SumSquares(other, s);
    });
    GroupSum<G>(total, shared);
    const A rstd = InvSqrt(total[0] / static_cast<A>(cols) + eps);
    RmsWriteTile(cache, first, w, b, row.y, rstd);
    ForLaterTiles<K, kLong>(first, [&](int64_t start, const TileSlots<G>& s) {
      const ForwardRow<D, N> tile = row.At(start);
      Vec<D, N> other[K];
      LoadTile(tile.Input(), s, other);
      RmsWriteTile(other, s, w + start, Advance(b, start), tile.y, rstd);
    });
  }
}

// sums[0] += x^2, sums[1] += g * w * x.
template <int G, int K, typename D, int N>
__device__ __forceinline__ void RmsBackwardSums(const Vec<D, N> (&xs)[K], const Vec<D, N> (&gs)[K],
                                                const TileSlots<G>& s, const Vec<D, N>* weight,
                                                Acc<D> (&sums)[2]) {
#pragma unroll
  for (int i = 0; i < K; ++i) {
    if (!s.Has(i)) continue;
    const Vec<D, N> w = weight[i * G];
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const Acc<D> xv = Widen(xs[i], k);
      sums[0] += xv * xv;
      sums[1] += Widen(gs[i], k) * Widen(w, k) * xv;
    }
  }
}

// The last pass of a backward row over one tile: grad_x (when not null) and
// the column terms g * x * rstd (weight) and g (bias), handed to
// add(i, k, weight_term, bias_term).
template <int G, int K, typename D, int N, typename Add>
__device__ __forceinline__ void RmsBackwardTile(const Vec<D, N> (&xs)[K], const Vec<D, N> (&gs)[K],
                                                const TileSlots<G>& s, const Vec<D, N>* weight,
                                                const Vec<D, N>* grad_add, Vec<D, N>* grad_x, Acc<D> rstd,
                                                Acc<D> coef, Add&& add) {
#pragma unroll
  for (int i = 0; i < K; ++i) {
    if (!s.Has(i)) continue;
    const Vec<D, N> w = weight[i * G];
    Vec<D, N> extra;
    if (grad_add != nullptr) extra = grad_add[i * G];
    Vec<D, N> dx;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const Acc<D> g = Widen(gs[i], k);
      const Acc<D> xv = Widen(xs[i], k);
      // dx = rstd * g * w - coef * x (+ grad_add)
      Acc<D> value = rstd * (g * Widen(w, k)) - coef * xv;
      if (grad_add != nullptr) value += Widen(extra, k);
      dx.values[k] = FromAcc<D>(value);
      add(i, k, g * xv * rstd, g);
    }
    if (grad_x != nullptr) grad_x[i * G] = dx;
  }
}

// One block per chunk of rows (blockIdx.x = chunk), its rows in steps of the
// block's row slots (every thread runs the same number of iterations).
// partial_w / partial_b (null when not needed) are chunk-major [chunks, cols]
// scratch sums.
template <typename D, int N, int K, int G, bool kLong>
__global__ void __launch_bounds__(BlockThreads(G, kBackwardMinThreads))
    RmsNormBackwardKernel(const D* __restrict__ grad_y, const D* __restrict__ grad_add,
                          const D* __restrict__ x, const D* __restrict__ weight, D* __restrict__ grad_x,
                          Acc<D>* __restrict__ partial_w, Acc<D>* __restrict__ partial_b, int64_t rows,
                          int64_t rows_per_chunk, int64_t cols, Acc<D> eps) {
  using A = Acc<D>;
  __shared__ A shared[2 * 32];
  const int slots = static_cast<int>(blockDim.x) / G;
  const int slot = static_cast<int>(threadIdx.x) / G;
  const int t = static_cast<int>(threadIdx.x) % G;
  const int64_t vectors = cols / N;
  const ChunkRows chunk = ThisChunk(rows, rows_per_chunk);
  A* pw = Advance(partial_w, static_cast<int64_t>(blockIdx.x) * cols);
  A* pb = Advance(partial_b, static_cast<int64_t>(blockIdx.x) * cols);
  if constexpr (kLong) ZeroLaterTiles<G, K, N>(pw, pb, vectors, t);
  const Vec<D, N>* w = VecAt<D, N>(weight, t);
  ColumnSums<K, N, A> column_sums;
  for (int64_t base = chunk.begin; base < chunk.end; base += slots) {
    const int64_t row_index = base + slot;
    const TileSlots<G> first{t, vectors, row_index < chunk.end};
    const int64_t offset = row_index * vectors + t;
    const BackwardRow<D, N> row{VecAt<D, N>(grad_y, offset), VecAt<D, N>(grad_add, offset),
                                VecAt<D, N>(x, offset), VecAt<D, N>(grad_x, offset)};
    Vec<D, N> xs[K], gs[K];
    LoadTile(row.x, first, xs);
    LoadTile(row.grad_y, first, gs);
    A sums[2] = {A(0), A(0)};
    RmsBackwardSums(xs, gs, first, w, sums);
    ForLaterTiles<K, kLong>(first, [&](int64_t start, const TileSlots<G>& s) {
      const BackwardRow<D, N> tile = row.At(start);
      Vec<D, N> xo[K], go[K];
      LoadTile(tile.x, s, xo);
      LoadTile(tile.grad_y, s, go);
      RmsBackwardSums(xo, go, s, w + start, sums);
    });
    GroupSum<G>(sums, shared);
    const A rstd = InvSqrt(sums[0] / static_cast<A>(cols) + eps);
    const A coef = rstd * rstd * rstd * sums[1] / static_cast<A>(cols);
    RmsBackwardTile(xs, gs, first, w, row.grad_add, row.grad_x, rstd, coef, column_sums);
    ForLaterTiles<K, kLong>(first, [&](int64_t start, const TileSlots<G>& s) {
      const BackwardRow<D, N> tile = row.At(start);
      Vec<D, N> xo[K], go[K];
      LoadTile(tile.x, s, xo);
      LoadTile(tile.grad_y, s, go);
      RmsBackwardTile(xo, go, s, w + start, tile.grad_add, tile.grad_x, rstd, coef,
                      ScratchColumnSums<G, N, A>{pw, pb, s});
    });
  }
  column_sums.template Write<G>(pw, pb, slots, slot, t, vectors);
}

// ---------------------------------------------------------------------------
// layer_norm / add_layer_norm
//
// As the CPU kernels: `shift` is the row mean (its sum over cols, in the
// compute type), the variance is the mean of the squared deviations
// c = x - shift corrected by their own mean `delta`, and the normalized value
// subtracts shift, then delta.

template <int G, int K, typename D, int N>
__device__ __forceinline__ Acc<D> SumTile(const Vec<D, N> (&in)[K], const TileSlots<G>& s) {
  Acc<D> total = 0;
#pragma unroll
  for (int i = 0; i < K; ++i) {
    if (!s.Has(i)) continue;
#pragma unroll
    for (int k = 0; k < N; ++k) total += Widen(in[i], k);
  }
  return total;
}

// sums[0] += c, sums[1] += c^2 with c = x - shift.
template <int G, int K, typename D, int N>
__device__ __forceinline__ void CenteredSums(const Vec<D, N> (&in)[K], const TileSlots<G>& s, Acc<D> shift,
                                             Acc<D> (&sums)[2]) {
#pragma unroll
  for (int i = 0; i < K; ++i) {
    if (!s.Has(i)) continue;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const Acc<D> c = Widen(in[i], k) - shift;
      sums[0] += c;
      sums[1] += c * c;
    }
  }
}

// y = ((x - shift) - delta) * rstd (* weight) (+ bias); weight and bias (each
// may be null) point at the tile's slot 0.
template <int G, int K, typename D, int N>
__device__ __forceinline__ void LayerNormWriteTile(const Vec<D, N> (&in)[K], const TileSlots<G>& s,
                                                   const Vec<D, N>* weight, const Vec<D, N>* bias,
                                                   Vec<D, N>* y, Acc<D> shift, Acc<D> delta, Acc<D> rstd) {
#pragma unroll
  for (int i = 0; i < K; ++i) {
    if (!s.Has(i)) continue;
    Vec<D, N> w, b;
    if (weight != nullptr) w = weight[i * G];
    if (bias != nullptr) b = bias[i * G];
    Vec<D, N> out;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      Acc<D> value = ((Widen(in[i], k) - shift) - delta) * rstd;
      if (weight != nullptr && bias != nullptr) {
        value = value * Widen(w, k) + Widen(b, k);
      } else if (weight != nullptr) {
        value = value * Widen(w, k);
      } else if (bias != nullptr) {
        value = value + Widen(b, k);
      }
      out.values[k] = FromAcc<D>(value);
    }
    y[i * G] = out;
  }
}

// As RmsNormForwardKernel; weight and bias may each be null.
template <typename D, int N, int K, int G, bool kLong, bool kAdd>
__global__ void __launch_bounds__(BlockThreads(G, kForwardMinThreads))
    LayerNormForwardKernel(const D* __restrict__ x, const D* __restrict__ residual,
                           const D* __restrict__ weight, const D* __restrict__ bias, D* __restrict__ y,
                           D* __restrict__ sum, int64_t rows, int64_t cols, Acc<D> eps) {
  using A = Acc<D>;
  __shared__ A shared[2 * 32];
  const int slots = static_cast<int>(blockDim.x) / G;
  const int slot = static_cast<int>(threadIdx.x) / G;
  const int t = static_cast<int>(threadIdx.x) % G;
  const int64_t vectors = cols / N;
  const A n = static_cast<A>(cols);
  const Vec<D, N>* w = VecAt<D, N>(weight, t);
  const Vec<D, N>* b = VecAt<D, N>(bias, t);
  const int64_t step = static_cast<int64_t>(gridDim.x) * slots;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * slots; base < rows; base += step) {
    const int64_t row_index = base + slot;
    const TileSlots<G> first{t, vectors, row_index < rows};
    const int64_t offset = row_index * vectors + t;
    const ForwardRow<D, N> row{VecAt<D, N>(x, offset), kAdd ? VecAt<D, N>(residual, offset) : nullptr,
                               kAdd ? VecAt<D, N>(sum, offset) : nullptr, VecAt<D, N>(y, offset)};
    Vec<D, N> cache[K];
    LoadInput<kAdd>(row, first, cache);
    A total[1] = {SumTile(cache, first)};
    ForLaterTiles<K, kLong>(first, [&](int64_t start, const TileSlots<G>& s) {
      Vec<D, N> other[K];
      LoadInput<kAdd>(row.At(start), s, other);
      total[0] += SumTile(other, s);
    });
    GroupSum<G>(total, shared);
    const A shift = total[0] / n;
    A centered[2] = {A(0), A(0)};
    CenteredSums(cache, first, shift, centered);
    ForLaterTiles<K, kLong>(first, [&](int64_t start, const TileSlots<G>& s) {
      Vec<D, N> other[K];
      LoadTile(row.At(start).Input(), s, other);
      CenteredSums(other, s, shift, centered);
    });
    GroupSum<G>(centered, shared);
    const A delta = centered[0] / n;
    const A var = centered[1] / n - delta * delta;
    const A rstd = InvSqrt((A(0) < var ? var : A(0)) + eps);  // as std::max(0, var)
    LayerNormWriteTile(cache, first, w, b, row.y, shift, delta, rstd);
    ForLaterTiles<K, kLong>(first, [&](int64_t start, const TileSlots<G>& s) {
      const ForwardRow<D, N> tile = row.At(start);
      Vec<D, N> other[K];
      LoadTile(tile.Input(), s, other);
      LayerNormWriteTile(other, s, Advance(w, start), Advance(b, start), tile.y, shift, delta, rstd);
    });
  }
}

// sums += {c, c^2, gw, gw * c} with c = x - shift, gw = g (* w).
template <int G, int K, typename D, int N>
__device__ __forceinline__ void LayerNormBackwardSums(const Vec<D, N> (&xs)[K], const Vec<D, N> (&gs)[K],
                                                      const TileSlots<G>& s, const Vec<D, N>* weight,
                                                      Acc<D> shift, Acc<D> (&sums)[4]) {
#pragma unroll
  for (int i = 0; i < K; ++i) {
    if (!s.Has(i)) continue;
    Vec<D, N> w;
    if (weight != nullptr) w = weight[i * G];
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const Acc<D> c = Widen(xs[i], k) - shift;
      Acc<D> gw = Widen(gs[i], k);
      if (weight != nullptr) gw *= Widen(w, k);
      sums[0] += c;
      sums[1] += c * c;
      sums[2] += gw;
      sums[3] += gw * c;
    }
  }
}

// A backward row's coefficients.
template <typename A>
struct LayerNormGradCoefs {
  A shift, delta, rstd;
  A k;    // rstd^3 * mean(gw * (x - mean))
  A cst;  // k * delta - rstd * mean(gw)
};

// The last pass of a backward row over one tile:
//   dx = rstd * gw + cst - k * c (+ grad_add), c = x - shift;
// the column terms g * (c - delta) * rstd (weight) and g (bias) go to `add`.
template <int G, int K, typename D, int N, typename Add>
__device__ __forceinline__ void LayerNormBackwardTile(const Vec<D, N> (&xs)[K], const Vec<D, N> (&gs)[K],
                                                      const TileSlots<G>& s, const Vec<D, N>* weight,
                                                      const Vec<D, N>* grad_add, Vec<D, N>* grad_x,
                                                      const LayerNormGradCoefs<Acc<D>>& f, Add&& add) {
#pragma unroll
  for (int i = 0; i < K; ++i) {
    if (!s.Has(i)) continue;
    Vec<D, N> w, extra;
    if (weight != nullptr) w = weight[i * G];
    if (grad_add != nullptr) extra = grad_add[i * G];
    Vec<D, N> dx;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const Acc<D> g = Widen(gs[i], k);
      const Acc<D> c = Widen(xs[i], k) - f.shift;
      const Acc<D> gw = weight != nullptr ? g * Widen(w, k) : g;
      Acc<D> value = f.rstd * gw + (f.cst - f.k * c);
      if (grad_add != nullptr) value += Widen(extra, k);
      dx.values[k] = FromAcc<D>(value);
      add(i, k, g * ((c - f.delta) * f.rstd), g);
    }
    if (grad_x != nullptr) grad_x[i * G] = dx;
  }
}

// As RmsNormBackwardKernel; weight may be null (ones).
template <typename D, int N, int K, int G, bool kLong>
__global__ void __launch_bounds__(BlockThreads(G, kBackwardMinThreads))
    LayerNormBackwardKernel(const D* __restrict__ grad_y, const D* __restrict__ grad_add,
                            const D* __restrict__ x, const D* __restrict__ weight, D* __restrict__ grad_x,
                            Acc<D>* __restrict__ partial_w, Acc<D>* __restrict__ partial_b, int64_t rows,
                            int64_t rows_per_chunk, int64_t cols, Acc<D> eps) {
  using A = Acc<D>;
  __shared__ A shared[4 * 32];
  const int slots = static_cast<int>(blockDim.x) / G;
  const int slot = static_cast<int>(threadIdx.x) / G;
  const int t = static_cast<int>(threadIdx.x) % G;
  const int64_t vectors = cols / N;
  const A n = static_cast<A>(cols);
  const ChunkRows chunk = ThisChunk(rows, rows_per_chunk);
  A* pw = Advance(partial_w, static_cast<int64_t>(blockIdx.x) * cols);
  A* pb = Advance(partial_b, static_cast<int64_t>(blockIdx.x) * cols);
  if constexpr (kLong) ZeroLaterTiles<G, K, N>(pw, pb, vectors, t);
  const Vec<D, N>* w = VecAt<D, N>(weight, t);
  ColumnSums<K, N, A> column_sums;
  for (int64_t base = chunk.begin; base < chunk.end; base += slots) {
    const int64_t row_index = base + slot;
    const TileSlots<G> first{t, vectors, row_index < chunk.end};
    const int64_t offset = row_index * vectors + t;
    const BackwardRow<D, N> row{VecAt<D, N>(grad_y, offset), VecAt<D, N>(grad_add, offset),
                                VecAt<D, N>(x, offset), VecAt<D, N>(grad_x, offset)};
    Vec<D, N> xs[K], gs[K];
    LoadTile(row.x, first, xs);
    LoadTile(row.grad_y, first, gs);
    A total[1] = {SumTile(xs, first)};
    ForLaterTiles<K, kLong>(first, [&](int64_t start, const TileSlots<G>& s) {
      Vec<D, N> xo[K];
      LoadTile(row.x + start, s, xo);
      total[0] += SumTile(xo, s);
    });
    GroupSum<G>(total, shared);
    LayerNormGradCoefs<A> f;
    f.shift = total[0] / n;
    A sums[4] = {A(0), A(0), A(0), A(0)};
    LayerNormBackwardSums(xs, gs, first, w, f.shift, sums);
    ForLaterTiles<K, kLong>(first, [&](int64_t start, const TileSlots<G>& s) {
      const BackwardRow<D, N> tile = row.At(start);
      Vec<D, N> xo[K], go[K];
      LoadTile(tile.x, s, xo);
      LoadTile(tile.grad_y, s, go);
      LayerNormBackwardSums(xo, go, s, Advance(w, start), f.shift, sums);
    });
    GroupSum<G>(sums, shared);
    f.delta = sums[0] / n;
    const A var = sums[1] / n - f.delta * f.delta;
    f.rstd = InvSqrt((A(0) < var ? var : A(0)) + eps);  // as std::max(0, var)
    const A mean_gw = sums[2] / n;
    const A mean_gwc = sums[3] / n - f.delta * mean_gw;
    f.k = f.rstd * f.rstd * f.rstd * mean_gwc;
    f.cst = f.k * f.delta - f.rstd * mean_gw;
    LayerNormBackwardTile(xs, gs, first, w, row.grad_add, row.grad_x, f, column_sums);
    ForLaterTiles<K, kLong>(first, [&](int64_t start, const TileSlots<G>& s) {
      const BackwardRow<D, N> tile = row.At(start);
      Vec<D, N> xo[K], go[K];
      LoadTile(tile.x, s, xo);
      LoadTile(tile.grad_y, s, go);
      LayerNormBackwardTile(xo, go, s, Advance(w, start), tile.grad_add, tile.grad_x, f,
                            ScratchColumnSums<G, N, A>{pw, pb, s});
    });
  }
  column_sums.template Write<G>(pw, pb, slots, slot, t, vectors);
}

// ---------------------------------------------------------------------------
// Host side

enum class Norm { kRms, kLayer };

inline Status ZeroFill(const OpSpec& spec, void* data, size_t bytes, CudaStream stream, const char* what) {
  if (data == nullptr || bytes == 0) return Status::Ok();
  const cudaError_t error = cudaMemsetAsync(data, 0, bytes, stream);
  if (error == cudaSuccess) return Status::Ok();
  (void)cudaGetLastError();  // not left for the next launch check
  return Status::Error(spec.TorchName() + ": zero-filling " + what + " failed: " + cudaGetErrorString(error));
}

template <Norm kNorm, bool kAdd, typename D, int N>
Status LaunchForwardAs(const OpSpec& spec, const D* x, const D* residual, const D* weight, const D* bias,
                       D* y, D* sum, int64_t rows, int64_t cols, Acc<D> eps, CudaStream stream) {
  constexpr int K = kForwardCache<D, N>;
  const Geometry geometry = ChooseGeometry(cols / N, K, kForwardMinThreads);
  const unsigned blocks = GridFor(rows, geometry.slots);
  const unsigned threads = static_cast<unsigned>(geometry.group * geometry.slots);
  return WithGeometry(geometry, [&](auto group, auto long_rows) {
    constexpr int G = decltype(group)::value;
    constexpr bool kLong = decltype(long_rows)::value;
    if constexpr (kNorm == Norm::kRms) {
      RmsNormForwardKernel<D, N, K, G, kLong, kAdd>
          <<<blocks, threads, 0, stream>>>(x, residual, weight, bias, y, sum, rows, cols, eps);
      return LaunchStatus(spec, "RmsNormForwardKernel");
    } else {
      LayerNormForwardKernel<D, N, K, G, kLong, kAdd>
          <<<blocks, threads, 0, stream>>>(x, residual, weight, bias, y, sum, rows, cols, eps);
      return LaunchStatus(spec, "LayerNormForwardKernel");
    }
  });
}

// y = norm(x) over rows of cols (kAdd false: residual and sum are null), or
// with kAdd: sum = x + residual rounded to D, y = norm(sum). weight (required
// by rms) and bias may be null.
template <Norm kNorm, bool kAdd, typename D>
Status LaunchForward(const OpSpec& spec, const D* x, const D* residual, const D* weight, const D* bias, D* y,
                     D* sum, int64_t rows, int64_t cols, double eps, CudaStream stream) {
  if (rows <= 0 || cols <= 0) return Status::Ok();
  constexpr int N = kVecWidth<D>;
  const Acc<D> eps_acc = static_cast<Acc<D>>(eps);  // as the CPU kernels: rounded to the compute type
  if (cols % N == 0 && VecAligned<D>({x, residual, weight, bias, y, sum})) {
    return LaunchForwardAs<kNorm, kAdd, D, N>(spec, x, residual, weight, bias, y, sum, rows, cols, eps_acc,
                                              stream);
  }
  return LaunchForwardAs<kNorm, kAdd, D, 1>(spec, x, residual, weight, bias, y, sum, rows, cols, eps_acc,
                                            stream);
}

// out[c] = the sum over chunks, in chunk order and in double, of
// partial[chunk * cols + c], narrowed as the CPU kernels' FromDouble (to
// float first for 16-bit D). Adding the 256 chunk partials in float32 (as
// FinishColumnSums does) loses up to ~1e-4 on columns whose sum is near zero.
template <typename D>
__global__ void FinishPartialsKernel(const Acc<D>* __restrict__ partial, int64_t chunks, int64_t cols,
                                     D* __restrict__ out) {
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < cols;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double sum = 0;
    for (int64_t k = 0; k < chunks; ++k) sum += static_cast<double>(partial[k * cols + c]);
    out[c] = FromAcc<D>(static_cast<Acc<D>>(sum));
  }
}

template <typename D>
Status FinishPartials(const OpSpec& spec, const Acc<D>* partial, int64_t chunks, int64_t cols, D* out,
                      CudaStream stream) {
  FinishPartialsKernel<D><<<GridFor(cols, 256), 256, 0, stream>>>(partial, chunks, cols, out);
  return LaunchStatus(spec, "FinishPartialsKernel");
}

// Scratch for the backward's weight and bias column sums.
template <typename D>
size_t BackwardScratchBytes(int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return 0;
  return static_cast<size_t>(2 * ColumnChunks(rows) * cols) * sizeof(Acc<D>);
}

template <Norm kNorm, typename D, int N>
Status LaunchBackwardAs(const OpSpec& spec, const D* grad_y, const D* grad_add, const D* x, const D* weight,
                        D* grad_x, Acc<D>* partial_w, Acc<D>* partial_b, int64_t rows, int64_t cols,
                        Acc<D> eps, CudaStream stream) {
  constexpr int K = kBackwardCache<D, N>;
  const Geometry geometry = ChooseGeometry(cols / N, K, kBackwardMinThreads);
  const unsigned blocks = static_cast<unsigned>(ColumnChunks(rows));
  const unsigned threads = static_cast<unsigned>(geometry.group * geometry.slots);
  const int64_t rows_per_chunk = RowsPerChunk(rows);
  return WithGeometry(geometry, [&](auto group, auto long_rows) {
    constexpr int G = decltype(group)::value;
    constexpr bool kLong = decltype(long_rows)::value;
    if constexpr (kNorm == Norm::kRms) {
      RmsNormBackwardKernel<D, N, K, G, kLong><<<blocks, threads, 0, stream>>>(
          grad_y, grad_add, x, weight, grad_x, partial_w, partial_b, rows, rows_per_chunk, cols, eps);
      return LaunchStatus(spec, "RmsNormBackwardKernel");
    } else {
      LayerNormBackwardKernel<D, N, K, G, kLong><<<blocks, threads, 0, stream>>>(
          grad_y, grad_add, x, weight, grad_x, partial_w, partial_b, rows, rows_per_chunk, cols, eps);
      return LaunchStatus(spec, "LayerNormBackwardKernel");
    }
  });
}

// Gradients of LaunchForward's y with respect to x (grad_x, plus grad_add
// when not null: the gradient of the add's own output), weight and bias.
// grad_weight and grad_bias may be null; `scratch` holds
// BackwardScratchBytes<D>(rows, cols) bytes when either is not. rows == 0
// zero-fills grad_weight and grad_bias.
template <Norm kNorm, typename D>
Status LaunchBackward(const OpSpec& spec, const D* grad_y, const D* grad_add, const D* x, const D* weight,
                      D* grad_x, D* grad_weight, D* grad_bias, int64_t rows, int64_t cols, double eps,
                      void* scratch, CudaStream stream) {
  using A = Acc<D>;
  if (cols <= 0) return Status::Ok();
  const size_t vector_bytes = static_cast<size_t>(cols) * sizeof(D);
  if (rows <= 0) {
    OPBRIDGE_RETURN_IF_ERROR(ZeroFill(spec, grad_weight, vector_bytes, stream, "grad_weight"));
    return ZeroFill(spec, grad_bias, vector_bytes, stream, "grad_bias");
  }
  if (grad_x == nullptr && grad_weight == nullptr && grad_bias == nullptr) return Status::Ok();
  const int64_t chunks = ColumnChunks(rows);
  A* partial_w = nullptr;
  A* partial_b = nullptr;
  if (grad_weight != nullptr || grad_bias != nullptr) {
    if (scratch == nullptr) {
      return Status::Error(spec.TorchName() + ": no CUDA scratch memory for the weight and bias gradients");
    }
    A* next = static_cast<A*>(scratch);
    if (grad_weight != nullptr) {
      partial_w = next;
      next += chunks * cols;
    }
    if (grad_bias != nullptr) partial_b = next;
  }
  constexpr int N = kVecWidth<D>;
  const A eps_acc = static_cast<A>(eps);  // as the CPU kernels: rounded to the compute type
  if (cols % N == 0 && VecAligned<D>({grad_y, grad_add, x, weight, grad_x})) {
    OPBRIDGE_RETURN_IF_ERROR((LaunchBackwardAs<kNorm, D, N>(
        spec, grad_y, grad_add, x, weight, grad_x, partial_w, partial_b, rows, cols, eps_acc, stream)));
  } else {
    OPBRIDGE_RETURN_IF_ERROR((LaunchBackwardAs<kNorm, D, 1>(
        spec, grad_y, grad_add, x, weight, grad_x, partial_w, partial_b, rows, cols, eps_acc, stream)));
  }
  if (partial_w != nullptr) {
    OPBRIDGE_RETURN_IF_ERROR(FinishPartials<D>(spec, partial_w, chunks, cols, grad_weight, stream));
  }
  if (partial_b != nullptr) {
    OPBRIDGE_RETURN_IF_ERROR(FinishPartials<D>(spec, partial_b, chunks, cols, grad_bias, stream));
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// Entry points in storage types and from KernelArgs: all an operator's
// kernel.cu needs. T is the host storage type (float, double, Float16,
// BFloat16), cast here to the kernels' DeviceType<T>.

template <typename T>
const DeviceType<T>* ToDevice(const T* p) {
  return reinterpret_cast<const DeviceType<T>*>(p);
}
template <typename T>
DeviceType<T>* ToDevice(T* p) {
  return reinterpret_cast<DeviceType<T>*>(p);
}

// LaunchForward on storage types: kResidual kNone normalizes x (residual and
// sum null), kAdded writes sum = x + residual and normalizes it.
template <Norm kNorm, NormResidual kResidual, typename T>
Status Forward(const OpSpec& spec, const T* x, const T* residual, const T* weight, const T* bias, T* y,
               T* sum, int64_t rows, int64_t cols, double eps, CudaStream stream) {
  return LaunchForward<kNorm, kResidual == NormResidual::kAdded, DeviceType<T>>(
      spec, ToDevice(x), ToDevice(residual), ToDevice(weight), ToDevice(bias), ToDevice(y), ToDevice(sum),
      rows, cols, eps, stream);
}

// LaunchBackward on storage types; grad_sum is the gradient of the forward's
// sum output (null without a residual).
template <Norm kNorm, typename T>
Status Backward(const OpSpec& spec, const T* grad_y, const T* grad_sum, const T* x, const T* weight,
                T* grad_x, T* grad_weight, T* grad_bias, int64_t rows, int64_t cols, double eps,
                void* scratch, CudaStream stream) {
  return LaunchBackward<kNorm, DeviceType<T>>(spec, ToDevice(grad_y), ToDevice(grad_sum), ToDevice(x),
                                              ToDevice(weight), ToDevice(grad_x), ToDevice(grad_weight),
                                              ToDevice(grad_bias), rows, cols, eps, scratch, stream);
}

// Bytes of scratch memory Backward needs for rows x cols of T.
template <typename T>
size_t ScratchBytes(int64_t rows, int64_t cols) {
  return BackwardScratchBytes<DeviceType<T>>(rows, cols);
}

// A norm's CUDA forward from KernelArgs (opbridge/norm_launch.h's layout for
// kResidual), for OPBRIDGE_REGISTER_CUDA_KERNELS.
template <Norm kNorm, NormResidual kResidual>
Status LaunchForwardArgs(const OpSpec& spec, const KernelArgs& args) {
  return DispatchNormForward<kResidual>(spec, args, [&](const auto& t) {
    return Forward<kNorm, kResidual>(spec, t.x, t.residual, t.weight, t.bias, t.y, t.sum, t.rows, t.cols,
                                     t.eps, args.stream);
  });
}

// A norm's CUDA backward from KernelArgs; a dtype error names
// `dtype_argument`. Scratch memory for the weight and bias gradients comes
// from args.scratch, only when one of them is wanted.
template <Norm kNorm, NormResidual kResidual>
Status LaunchBackwardArgs(const OpSpec& spec, const char* dtype_argument, const KernelArgs& args) {
  return DispatchNormBackward<kResidual>(spec, dtype_argument, args, [&](const auto& t) -> Status {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(t.x)>>;
    unsigned char* scratch = nullptr;
    const size_t scratch_bytes = ScratchBytes<T>(t.rows, t.cols);
    if (scratch_bytes > 0 && (t.grad_weight != nullptr || t.grad_bias != nullptr)) {
      OPBRIDGE_RETURN_IF_ERROR(cuda::Scratch(spec, args, scratch_bytes, &scratch));
    }
    return Backward<kNorm>(spec, t.grad_y, t.grad_sum, t.x, t.weight, t.grad_x, t.grad_weight, t.grad_bias,
                           t.rows, t.cols, t.eps, scratch, args.stream);
  });
}

// LaunchForwardArgs / LaunchBackwardArgs for one op, as the plain launch
// functions a registration takes.
template <Norm kNorm, NormResidual kResidual, const OpSpec& kSpec>
Status LaunchForwardOf(const KernelArgs& args) {
  return LaunchForwardArgs<kNorm, kResidual>(kSpec, args);
}

template <Norm kNorm, NormResidual kResidual, const OpSpec& kSpec>
Status LaunchBackwardOf(const KernelArgs& args) {
  return LaunchBackwardArgs<kNorm, kResidual>(kSpec, "x", args);
}

}  // namespace
}  // namespace opbridge::cuda::norms

// A normalization op's CUDA kernels: the shared kernels above for `norm`
// (Norm::kLayer or Norm::kRms) and `residual` (NormResidual::kNone, or
// kAdded for the add_* ops), registered as `spec`'s. A dtype error of the
// backward names its argument "x".
#define OPBRIDGE_REGISTER_CUDA_NORM_KERNELS(spec, norm, residual)                                        \
  OPBRIDGE_REGISTER_CUDA_KERNELS(spec, (::opbridge::cuda::norms::LaunchForwardOf<norm, residual, spec>), \
                                 (::opbridge::cuda::norms::LaunchBackwardOf<norm, residual, spec>))
