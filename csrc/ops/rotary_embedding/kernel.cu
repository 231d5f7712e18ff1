// rotary_embedding CUDA kernels. A thread handles one unit of a head at a
// time: a run of pairs that it rotates (16-byte vectors of x when the
// shape and pointers allow, else one pair) or a run of dims past rotary_dim
// that it copies. Threads of a block walk the heads of one row, so the row's
// cos / sin values come from cache. The backward's table gradients are a
// deterministic two-stage reduction over (batch row, head): each thread
// sums its pairs over a fixed chunk in order, the chunks are added in order.
// The math is the CPU kernel's (kernel.cpp); 16-bit types compute in float32.
#include <algorithm>
#include <cstdint>

#include "opbridge/checks.h"
#include "opbridge/cuda_device.cuh"
#include "ops/rotary_embedding/kernel.h"
#include "ops/rotary_embedding/spec.h"

namespace opbridge {
namespace {

constexpr int kThreads = 256;
// Table-gradient chunks: enough (batch row, head) chunks that the table's
// pairs times the chunks reach kTargetPairs (parallelism), at most
// kMaxChunks; a function of the shape alone.
constexpr int64_t kTargetPairs = int64_t{1} << 20;
constexpr int64_t kMaxChunks = 256;

// One call's shape as the kernels walk it (units: see the file comment).
struct Geometry {
  int64_t seq;
  int64_t heads;
  int64_t head_dim;
  int64_t half;
  bool shared;           // one table for the whole batch (table_batch == 1)
  int64_t rotary_units;  // units of a head that rotate pairs: half / pairs per unit
  int64_t units;         // units of a head: rotary_units, then the pass-through ones
};

// N consecutive elements, as one Vec<D, N> access (kVec, aligned) or one by one.
template <int N, bool kVec, typename D>
__device__ __forceinline__ void LoadAcc(const D* p, cuda::Acc<D> (&out)[N]) {
  if constexpr (kVec) {
    const cuda::Vec<D, N> v = cuda::LoadPacked<N>(p);
#pragma unroll
    for (int j = 0; j < N; ++j) out[j] = cuda::ToAcc(v.values[j]);
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) out[j] = cuda::ToAcc(p[j]);
  }
}

template <int N, bool kVec, typename D>
__device__ __forceinline__ void StoreAcc(D* p, const cuda::Acc<D> (&in)[N]) {
  if constexpr (kVec) {
    cuda::Vec<D, N> v;
#pragma unroll
    for (int j = 0; j < N; ++j) v.values[j] = cuda::FromAcc<D>(in[j]);
    cuda::StorePacked<N>(p, v);
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) p[j] = cuda::FromAcc<D>(in[j]);
  }
}

// The P pairs (a, b) of unit k of a head: (2i, 2i + 1) interleaved, else
// (i, i + half), for i = k P ... k P + P - 1.
template <int P, bool kVec, bool kInterleaved, typename D>
__device__ __forceinline__ void LoadPairs(const D* head, int64_t half, int64_t k, cuda::Acc<D> (&a)[P],
                                          cuda::Acc<D> (&b)[P]) {
  if constexpr (kInterleaved) {
    cuda::Acc<D> v[2 * P];
    LoadAcc<2 * P, kVec>(head + 2 * k * P, v);
#pragma unroll
    for (int j = 0; j < P; ++j) {
      a[j] = v[2 * j];
      b[j] = v[2 * j + 1];
    }
  } else {
    LoadAcc<P, kVec>(head + k * P, a);
    LoadAcc<P, kVec>(head + half + k * P, b);
  }
}

template <int P, bool kVec, bool kInterleaved, typename D>
__device__ __forceinline__ void StorePairs(D* head, int64_t half, int64_t k, const cuda::Acc<D> (&a)[P],
                                           const cuda::Acc<D> (&b)[P]) {
  if constexpr (kInterleaved) {
    cuda::Acc<D> v[2 * P];
#pragma unroll
    for (int j = 0; j < P; ++j) {
      v[2 * j] = a[j];
      v[2 * j + 1] = b[j];
    }
    StoreAcc<2 * P, kVec>(head + 2 * k * P, v);
  } else {
    StoreAcc<P, kVec>(head + k * P, a);
    StoreAcc<P, kVec>(head + half + k * P, b);
  }
}

// E elements past rotary_dim, copied.
template <int E, bool kVec, typename D>
__device__ __forceinline__ void CopyUnit(const D* from, D* to) {
  if constexpr (kVec) {
    cuda::StorePacked<E>(to, cuda::LoadPacked<E>(from));
  } else {
#pragma unroll
    for (int j = 0; j < E; ++j) to[j] = from[j];
  }
}

// y = rotation of x by the angles (sign 1) or by minus them (sign -1, the
// backward's grad_x): a' = a c - b s, b' = b c + a s with s = sign * sin.
// Block (bx, by): threadIdx.y picks a row (n, s), threadIdx.x walks the
// row's (head, unit) pairs with a fixed step (no division per unit).
template <typename D, int P, int E, bool kVec, bool kInterleaved>
__global__ void __launch_bounds__(kThreads)
    RotaryKernel(const D* __restrict__ x, const D* __restrict__ cos, const D* __restrict__ sin,
                 D* __restrict__ y, Geometry g, int64_t rows, cuda::Acc<D> sign) {
  using A = cuda::Acc<D>;
  const int64_t units = g.units;
  const int64_t h0 = threadIdx.x / units;
  const int64_t k0 = threadIdx.x % units;
  const int64_t dh = blockDim.x / units;
  const int64_t dk = blockDim.x % units;
  const int64_t first_row = blockIdx.x * static_cast<int64_t>(blockDim.y) + threadIdx.y;
  const int64_t row_step = static_cast<int64_t>(gridDim.x) * blockDim.y;
  const int64_t row_size = g.heads * g.head_dim;
  int64_t s = first_row % g.seq;  // the row's position
  const int64_t s_step = row_step % g.seq;
  for (int64_t r = first_row; r < rows; r += row_step) {
    const int64_t t = g.shared ? s : r;  // the table row
    const D* ct = cos + t * g.half;
    const D* st = sin + t * g.half;
    const D* xr = x + r * row_size;
    D* yr = y + r * row_size;
    int64_t h = h0;
    int64_t k = k0;
    while (h < g.heads) {
      const int64_t offset = h * g.head_dim;
      if (k < g.rotary_units) {
        A c[P], sn[P], a[P], b[P], ya[P], yb[P];
        LoadAcc<P, kVec>(ct + k * P, c);
        LoadAcc<P, kVec>(st + k * P, sn);
        LoadPairs<P, kVec, kInterleaved>(xr + offset, g.half, k, a, b);
#pragma unroll
        for (int j = 0; j < P; ++j) {
          const A sj = sign * sn[j];
          ya[j] = cuda::Fma(-b[j], sj, a[j] * c[j]);
          yb[j] = cuda::Fma(a[j], sj, b[j] * c[j]);
        }
        StorePairs<P, kVec, kInterleaved>(yr + offset, g.half, k, ya, yb);
      } else {
        const int64_t j = offset + 2 * g.half + (k - g.rotary_units) * E;
        CopyUnit<E, kVec>(xr + j, yr + j);
      }
      k += dk;
      h += dh;
      if (k >= units) {
        k -= units;
        ++h;
      }
    }
    s += s_step;
    if (s >= g.seq) s -= g.seq;
  }
}

// Backward with table gradients. Block (bx, by): threadIdx.y picks a table
// row t, threadIdx.x walks the units of a head, blockIdx.y is the chunk of
// (batch row, head) items [q_begin, q_end) this block reduces (items are
// the batch rows times heads for a shared table, the heads of row t
// otherwise). For each item in order a thread writes grad_x (the inverse
// rotation of grad_y) and adds ga xa + gb xb (cos) and gb xa - ga xb (sin)
// into its sums, written unrounded to partial_*[chunk, t, pair].
template <typename D, int P, int E, bool kVec, bool kInterleaved>
__global__ void __launch_bounds__(kThreads)
    RotaryTablesBackwardKernel(const D* __restrict__ grad_y, const D* __restrict__ x,
                               const D* __restrict__ cos, const D* __restrict__ sin, D* __restrict__ grad_x,
                               cuda::Acc<D>* __restrict__ partial_cos, cuda::Acc<D>* __restrict__ partial_sin,
                               Geometry g, int64_t table_rows, int64_t items, int64_t items_per_chunk) {
  using A = cuda::Acc<D>;
  const int64_t chunk = blockIdx.y;
  const int64_t q_begin = chunk * items_per_chunk;
  const int64_t q_end = std::min(items, q_begin + items_per_chunk);
  const int64_t row_size = g.heads * g.head_dim;
  const int64_t table_size = table_rows * g.half;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.y) + threadIdx.y; t < table_rows;
       t += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const D* ct = cos + t * g.half;
    const D* st = sin + t * g.half;
    const int64_t s = g.shared ? t : t % g.seq;
    const int64_t n_first = (g.shared ? 0 : t / g.seq) + q_begin / g.heads;
    const int64_t h_first = q_begin % g.heads;
    for (int64_t k = threadIdx.x; k < g.units; k += blockDim.x) {
      int64_t n = n_first;
      int64_t h = h_first;
      if (k < g.rotary_units) {
        A c[P], sn[P], sum_cos[P], sum_sin[P];
        LoadAcc<P, kVec>(ct + k * P, c);
        LoadAcc<P, kVec>(st + k * P, sn);
#pragma unroll
        for (int j = 0; j < P; ++j) sum_cos[j] = sum_sin[j] = A(0);
        for (int64_t q = q_begin; q < q_end; ++q) {
          const int64_t offset = (n * g.seq + s) * row_size + h * g.head_dim;
          A ga[P], gb[P], xa[P], xb[P], dxa[P], dxb[P];
          LoadPairs<P, kVec, kInterleaved>(grad_y + offset, g.half, k, ga, gb);
          LoadPairs<P, kVec, kInterleaved>(x + offset, g.half, k, xa, xb);
#pragma unroll
          for (int j = 0; j < P; ++j) {
            // Rotation by minus the angle: a c + b s, b c - a s.
            dxa[j] = cuda::Fma(gb[j], sn[j], ga[j] * c[j]);
            dxb[j] = cuda::Fma(-ga[j], sn[j], gb[j] * c[j]);
            sum_cos[j] += cuda::Fma(gb[j], xb[j], ga[j] * xa[j]);
            sum_sin[j] += cuda::Fma(-ga[j], xb[j], gb[j] * xa[j]);
          }
          StorePairs<P, kVec, kInterleaved>(grad_x + offset, g.half, k, dxa, dxb);
          if (++h == g.heads) {
            h = 0;
            ++n;
          }
        }
        const int64_t column = chunk * table_size + t * g.half + k * P;
        if (partial_cos != nullptr) {
#pragma unroll
          for (int j = 0; j < P; ++j) partial_cos[column + j] = sum_cos[j];
        }
        if (partial_sin != nullptr) {
#pragma unroll
          for (int j = 0; j < P; ++j) partial_sin[column + j] = sum_sin[j];
        }
      } else {
        const int64_t within = 2 * g.half + (k - g.rotary_units) * E;
        for (int64_t q = q_begin; q < q_end; ++q) {
          const int64_t offset = (n * g.seq + s) * row_size + h * g.head_dim + within;
          CopyUnit<E, kVec>(grad_y + offset, grad_x + offset);
          if (++h == g.heads) {
            h = 0;
            ++n;
          }
        }
      }
    }
  }
}

// The table-gradient chunking, from the shape alone.
struct Chunking {
  int64_t items;      // (batch row, head) items per table row
  int64_t per_chunk;  // items per chunk
  int64_t chunks;
};

Chunking ChunkingOf(const RotaryDims& d) {
  const int64_t items = std::max<int64_t>(1, (d.table_batch == 1 ? d.batch : 1) * d.heads);
  const int64_t pairs = std::max<int64_t>(1, d.table_batch * d.seq * d.half);
  const int64_t wanted = (kTargetPairs + pairs - 1) / pairs;
  const int64_t chunks = std::max<int64_t>(1, std::min({wanted, items, kMaxChunks}));
  const int64_t per_chunk = (items + chunks - 1) / chunks;
  return {items, per_chunk, (items + per_chunk - 1) / per_chunk};
}

// The vector width the pointers and shape allow: W (kVecWidth) when every
// head and every unit starts on a 16-byte boundary, else 1.
template <typename D>
bool UseVectors(std::initializer_list<const void*> pointers, const RotaryDims& d, bool interleaved) {
  constexpr int64_t W = cuda::kVecWidth<D>;
  const int64_t rotary = interleaved ? 2 * d.half : d.half;
  return cuda::VecAligned<D>(pointers) && d.head_dim % W == 0 && rotary % W == 0;
}

// Pairs per unit P and pass-through elements per unit E.
template <int P, int E>
Geometry GeometryOf(const RotaryDims& d) {
  const int64_t rotary_units = d.half / P;
  return Geometry{d.seq,
                  d.heads,
                  d.head_dim,
                  d.half,
                  d.table_batch == 1,
                  rotary_units,
                  rotary_units + (d.head_dim - 2 * d.half) / E};
}

template <typename D, int P, int E, bool kVec, bool kInterleaved>
void LaunchRotate(const D* x, const D* cos, const D* sin, D* y, const RotaryDims& d, cuda::Acc<D> sign,
                  CudaStream stream) {
  const Geometry g = GeometryOf<P, E>(d);
  const int64_t rows = d.batch * d.seq;
  const int bx = static_cast<int>(std::min<int64_t>(g.heads * g.units, kThreads));
  const int by = std::max(1, kThreads / bx);
  RotaryKernel<D, P, E, kVec, kInterleaved>
      <<<cuda::GridFor(rows, by), dim3(static_cast<unsigned>(bx), static_cast<unsigned>(by)), 0, stream>>>(
          x, cos, sin, y, g, rows, sign);
}

template <typename D>
Status Rotate(const D* x, const D* cos, const D* sin, D* y, const RotaryDims& d, bool interleaved,
              bool inverse, CudaStream stream) {
  if (d.batch <= 0 || d.seq <= 0 || d.heads <= 0 || d.head_dim <= 0 || d.half <= 0) return Status::Ok();
  constexpr int W = cuda::kVecWidth<D>;
  const cuda::Acc<D> sign = inverse ? -1 : 1;
  const bool vectors = UseVectors<D>({x, cos, sin, y}, d, interleaved);
  if (interleaved) {
    if (vectors) {
      LaunchRotate<D, W / 2, W, true, true>(x, cos, sin, y, d, sign, stream);
    } else {
      LaunchRotate<D, 1, 1, false, true>(x, cos, sin, y, d, sign, stream);
    }
  } else {
    if (vectors) {
      LaunchRotate<D, W, W, true, false>(x, cos, sin, y, d, sign, stream);
    } else {
      LaunchRotate<D, 1, 1, false, false>(x, cos, sin, y, d, sign, stream);
    }
  }
  return cuda::LaunchStatus(kRotaryEmbeddingSpec,
                            inverse ? "RotaryEmbeddingBackward" : "RotaryEmbeddingForward");
}

template <typename D, int P, int E, bool kVec, bool kInterleaved>
void LaunchTablesBackward(const D* grad_y, const D* x, const D* cos, const D* sin, D* grad_x,
                          cuda::Acc<D>* partial_cos, cuda::Acc<D>* partial_sin, const RotaryDims& d,
                          const Chunking& chunking, CudaStream stream) {
  const Geometry g = GeometryOf<P, E>(d);
  const int64_t table_rows = d.table_batch * d.seq;
  const int bx = static_cast<int>(std::min<int64_t>(g.units, kThreads));
  const int by = std::max(1, kThreads / bx);
  const dim3 grid(cuda::GridFor(table_rows, by), static_cast<unsigned>(chunking.chunks));
  RotaryTablesBackwardKernel<D, P, E, kVec, kInterleaved>
      <<<grid, dim3(static_cast<unsigned>(bx), static_cast<unsigned>(by)), 0, stream>>>(
          grad_y, x, cos, sin, grad_x, partial_cos, partial_sin, g, table_rows, chunking.items,
          chunking.per_chunk);
}

Status ZeroFill(void* p, size_t bytes, CudaStream stream) {
  if (p == nullptr || bytes == 0) return Status::Ok();
  const cudaError_t error = cudaMemsetAsync(p, 0, bytes, stream);
  if (error == cudaSuccess) return Status::Ok();
  (void)cudaGetLastError();  // consumed here
  return Status::Error(kRotaryEmbeddingSpec.TorchName() +
                       ": zero-filling a table gradient failed: " + cudaGetErrorString(error));
}

}  // namespace

template <typename T>
Status RotaryEmbeddingForwardCuda(const T* x, const T* cos, const T* sin, T* y, const RotaryDims& dims,
                                  const RotaryAttrs& attrs, CudaStream stream) {
  using D = cuda::DeviceType<T>;
  return Rotate<D>(reinterpret_cast<const D*>(x), reinterpret_cast<const D*>(cos),
                   reinterpret_cast<const D*>(sin), reinterpret_cast<D*>(y), dims, attrs.interleaved, false,
                   stream);
}

template <typename T>
size_t RotaryEmbeddingBackwardCudaScratchBytes(const RotaryDims& d) {
  const int64_t table_size = d.table_batch * d.seq * d.half;
  if (d.batch <= 0 || d.heads <= 0 || d.head_dim <= 0 || table_size <= 0) return 0;
  return 2 * static_cast<size_t>(ChunkingOf(d).chunks * table_size) * sizeof(cuda::Acc<cuda::DeviceType<T>>);
}

template <typename T>
Status RotaryEmbeddingBackwardCuda(const T* grad_y, const T* x, const T* cos, const T* sin, T* grad_x,
                                   T* grad_cos, T* grad_sin, const RotaryDims& dims, const RotaryAttrs& attrs,
                                   void* scratch, CudaStream stream) {
  using D = cuda::DeviceType<T>;
  using A = cuda::Acc<D>;
  const OpSpec& spec = kRotaryEmbeddingSpec;
  const RotaryDims d = dims;
  const D* dg = reinterpret_cast<const D*>(grad_y);
  const D* dx = reinterpret_cast<const D*>(x);
  const D* dc = reinterpret_cast<const D*>(cos);
  const D* ds = reinterpret_cast<const D*>(sin);
  D* dgx = reinterpret_cast<D*>(grad_x);
  const int64_t table_size = d.table_batch * d.seq * d.half;
  if ((grad_cos == nullptr && grad_sin == nullptr) || table_size <= 0) {
    return Rotate<D>(dg, dc, ds, dgx, d, attrs.interleaved, true, stream);
  }
  if (d.batch <= 0 || d.heads <= 0 || d.head_dim <= 0) {
    // No (batch row, head) items: the table gradients are empty sums.
    const size_t bytes = static_cast<size_t>(table_size) * sizeof(T);
    OPBRIDGE_RETURN_IF_ERROR(ZeroFill(grad_cos, bytes, stream));
    return ZeroFill(grad_sin, bytes, stream);
  }
  if (scratch == nullptr)
    return Status::Error(spec.TorchName() + ": no CUDA scratch memory for grad_cos / grad_sin");
  const Chunking chunking = ChunkingOf(d);
  A* partial_cos = grad_cos != nullptr ? static_cast<A*>(scratch) : nullptr;
  A* partial_sin = grad_sin != nullptr ? static_cast<A*>(scratch) + chunking.chunks * table_size : nullptr;
  constexpr int W = cuda::kVecWidth<D>;
  const bool vectors = UseVectors<D>({grad_y, x, cos, sin, grad_x}, d, attrs.interleaved);
  if (attrs.interleaved) {
    if (vectors) {
      LaunchTablesBackward<D, W / 2, W, true, true>(dg, dx, dc, ds, dgx, partial_cos, partial_sin, d,
                                                    chunking, stream);
    } else {
      LaunchTablesBackward<D, 1, 1, false, true>(dg, dx, dc, ds, dgx, partial_cos, partial_sin, d, chunking,
                                                 stream);
    }
  } else {
    if (vectors) {
      LaunchTablesBackward<D, W, W, true, false>(dg, dx, dc, ds, dgx, partial_cos, partial_sin, d, chunking,
                                                 stream);
    } else {
      LaunchTablesBackward<D, 1, 1, false, false>(dg, dx, dc, ds, dgx, partial_cos, partial_sin, d, chunking,
                                                  stream);
    }
  }
  OPBRIDGE_RETURN_IF_ERROR(cuda::LaunchStatus(spec, "RotaryEmbeddingTablesBackward"));
  if (grad_cos != nullptr) {
    OPBRIDGE_RETURN_IF_ERROR(cuda::FinishColumnSums(spec, static_cast<const A*>(partial_cos), chunking.chunks,
                                                    table_size, reinterpret_cast<D*>(grad_cos), stream));
  }
  if (grad_sin != nullptr) {
    OPBRIDGE_RETURN_IF_ERROR(cuda::FinishColumnSums(spec, static_cast<const A*>(partial_sin), chunking.chunks,
                                                    table_size, reinterpret_cast<D*>(grad_sin), stream));
  }
  return Status::Ok();
}

#define OPBRIDGE_INSTANTIATE(T)                                                                      \
  template Status RotaryEmbeddingForwardCuda<T>(const T*, const T*, const T*, T*, const RotaryDims&, \
                                                const RotaryAttrs&, CudaStream);                     \
  template size_t RotaryEmbeddingBackwardCudaScratchBytes<T>(const RotaryDims&);                     \
  template Status RotaryEmbeddingBackwardCuda<T>(const T*, const T*, const T*, const T*, T*, T*, T*, \
                                                 const RotaryDims&, const RotaryAttrs&, void*, CudaStream);
OPBRIDGE_FOR_EACH_FLOATING_TYPE(OPBRIDGE_INSTANTIATE)
#undef OPBRIDGE_INSTANTIATE

namespace {

Status LaunchRotaryEmbeddingCuda(const KernelArgs& args) {
  const RotaryDims dims = RotaryDimsOf(args.input_infos[0].shape, args.input_infos[1].shape);
  const RotaryAttrs attrs{args.attrs[0].number != 0.0};
  return cuda::DispatchStorage(kRotaryEmbeddingSpec, "x", args.input_infos[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    return RotaryEmbeddingForwardCuda<T>(
        static_cast<const T*>(args.inputs[0]), static_cast<const T*>(args.inputs[1]),
        static_cast<const T*>(args.inputs[2]), static_cast<T*>(args.outputs[0]), dims, attrs, args.stream);
  });
}

// Backward inputs: grad_y, x, cos, sin; outputs: grad_x, grad_cos, grad_sin
// (either table gradient may be null: it is then not computed).
Status LaunchRotaryEmbeddingBackwardCuda(const KernelArgs& args) {
  const RotaryDims dims = RotaryDimsOf(args.input_infos[1].shape, args.input_infos[2].shape);
  const RotaryAttrs attrs{args.attrs[0].number != 0.0};
  return cuda::DispatchStorage(kRotaryEmbeddingSpec, "x", args.input_infos[1].dtype, [&](auto tag) {
    using T = decltype(tag);
    T* grad_cos = static_cast<T*>(args.outputs[1]);
    T* grad_sin = static_cast<T*>(args.outputs[2]);
    void* scratch = nullptr;
    const size_t bytes = RotaryEmbeddingBackwardCudaScratchBytes<T>(dims);
    if ((grad_cos != nullptr || grad_sin != nullptr) && bytes > 0) {
      unsigned char* memory = nullptr;
      OPBRIDGE_RETURN_IF_ERROR(cuda::Scratch(kRotaryEmbeddingSpec, args, bytes, &memory));
      scratch = memory;
    }
    return RotaryEmbeddingBackwardCuda<T>(
        static_cast<const T*>(args.inputs[0]), static_cast<const T*>(args.inputs[1]),
        static_cast<const T*>(args.inputs[2]), static_cast<const T*>(args.inputs[3]),
        static_cast<T*>(args.outputs[0]), grad_cos, grad_sin, dims, attrs, scratch, args.stream);
  });
}

}  // namespace

OPBRIDGE_REGISTER_CUDA_KERNELS(kRotaryEmbeddingSpec, LaunchRotaryEmbeddingCuda,
                               LaunchRotaryEmbeddingBackwardCuda)

}  // namespace opbridge
