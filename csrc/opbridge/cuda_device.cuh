// Device-side helpers for the operators' CUDA kernels (kernel.cu files only):
// storage types, float32/float64 accumulation, block reductions,
// deterministic column sums, dtype dispatch and launch checks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "opbridge/checks.h"
#include "opbridge/cuda.h"
#include "opbridge/half.h"

namespace opbridge::cuda {

// opbridge's host storage types and CUDA's device types share their bits.
template <typename T>
struct DeviceTypeOf {
  using type = T;
};
template <>
struct DeviceTypeOf<Float16> {
  using type = __half;
};
template <>
struct DeviceTypeOf<BFloat16> {
  using type = __nv_bfloat16;
};
template <typename T>
using DeviceType = typename DeviceTypeOf<T>::type;
static_assert(sizeof(__half) == sizeof(Float16) && sizeof(__nv_bfloat16) == sizeof(BFloat16),
              "16-bit storage types must match CUDA's");

// What a kernel computes and accumulates in for device type T: double for
// double, float32 for float32, float16 and bfloat16.
template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

__device__ __forceinline__ float ToAcc(float value) { return value; }
__device__ __forceinline__ double ToAcc(double value) { return value; }
__device__ __forceinline__ float ToAcc(__half value) { return __half2float(value); }
__device__ __forceinline__ float ToAcc(__nv_bfloat16 value) { return __bfloat162float(value); }

// Rounds to nearest even when narrowing, as the CPU kernels do.
template <typename T>
__device__ __forceinline__ T FromAcc(Acc<T> value) {
  return static_cast<T>(value);
}
template <>
__device__ __forceinline__ __half FromAcc<__half>(float value) {
  return __float2half_rn(value);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromAcc<__nv_bfloat16>(float value) {
  return __float2bfloat16_rn(value);
}

// N elements of T loaded or stored as one (16-byte) access.
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T values[N];
};

// Elements of T per 16-byte access.
template <typename T>
constexpr int kVecWidth = static_cast<int>(16 / sizeof(T));

// True when every pointer given is aligned for Vec<T, kVecWidth<T>> (null
// pointers count as aligned).
template <typename T>
inline bool VecAligned(std::initializer_list<const void*> pointers) {
  for (const void* pointer : pointers) {
    if (pointer != nullptr && reinterpret_cast<uintptr_t>(pointer) % 16 != 0) return false;
  }
  return true;
}

template <typename A>
__device__ __forceinline__ A WarpSum(A value) {
  for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

// The sum of `value` over the block, returned to every thread, in a fixed
// order for a given block size. blockDim.x is a multiple of 32 (at most
// 1024); `shared` holds 32 values. Safe to call repeatedly.
template <typename A>
__device__ __forceinline__ A BlockSum(A value, A* shared) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  value = WarpSum(value);
  __syncthreads();  // the previous call's readers are done with `shared`
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  const int warps = static_cast<int>(blockDim.x + 31) >> 5;
  return WarpSum(lane < warps ? shared[lane] : A(0));
}

// Column reductions of a [rows, cols] matrix (weight, bias and table
// gradients) are deterministic: stage one sums fixed chunks of rows into a
// [chunks, cols] scratch buffer of Acc values, stage two (FinishColumnSums)
// adds the chunks in order. The chunking depends on the shape only, never on
// the device or on scheduling, and no atomics are used.
inline int64_t ColumnChunks(int64_t rows) { return std::min<int64_t>(std::max<int64_t>(rows, 1), 256); }
inline int64_t RowsPerChunk(int64_t rows) {
  const int64_t chunks = ColumnChunks(rows);
  return (rows + chunks - 1) / chunks;
}

template <typename T, typename P>
__global__ void FinishColumnSumsKernel(const P* partial, int64_t chunks, int64_t cols, T* out) {
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < cols;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    P sum = 0;
    for (int64_t k = 0; k < chunks; ++k) sum += partial[k * cols + c];
    out[c] = FromAcc<T>(static_cast<Acc<T>>(sum));
  }
}

// A grid of at most `max_blocks` blocks of `threads` covering n items with a
// grid-stride loop.
inline unsigned GridFor(int64_t n, int threads, int64_t max_blocks = 65536) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(blocks, max_blocks)));
}

__device__ __forceinline__ float Fma(float a, float b, float c) { return fmaf(a, b, c); }
__device__ __forceinline__ double Fma(double a, double b, double c) { return fma(a, b, c); }

// Element bits, for packing vectors into 32-bit words (LoadPacked, StorePacked).
template <typename D>
struct BitsOf;
template <>
struct BitsOf<uint8_t> {
  static __device__ __forceinline__ uint8_t Of(uint8_t v) { return v; }
  static __device__ __forceinline__ uint8_t From(uint64_t u) { return static_cast<uint8_t>(u); }
};
template <>
struct BitsOf<float> {
  static __device__ __forceinline__ uint32_t Of(float v) { return __float_as_uint(v); }
  static __device__ __forceinline__ float From(uint64_t u) {
    return __uint_as_float(static_cast<uint32_t>(u));
  }
};
template <>
struct BitsOf<double> {
  static __device__ __forceinline__ uint64_t Of(double v) {
    return static_cast<uint64_t>(__double_as_longlong(v));
  }
  static __device__ __forceinline__ double From(uint64_t u) {
    return __longlong_as_double(static_cast<long long>(u));
  }
};
template <>
struct BitsOf<__half> {
  static __device__ __forceinline__ uint16_t Of(__half v) { return __half_as_ushort(v); }
  static __device__ __forceinline__ __half From(uint64_t u) {
    return __ushort_as_half(static_cast<uint16_t>(u));
  }
};
template <>
struct BitsOf<__nv_bfloat16> {
  static __device__ __forceinline__ uint16_t Of(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }
  static __device__ __forceinline__ __nv_bfloat16 From(uint64_t u) {
    return __ushort_as_bfloat16(static_cast<uint16_t>(u));
  }
};

// N elements (4, 8 or 16 bytes, aligned) as one access, packed into 32-bit
// words in registers (nvcc may split a plain store of a Vec into element
// stores).
template <int N, typename D>
__device__ __forceinline__ Vec<D, N> LoadPacked(const D* p) {
  constexpr int kSize = static_cast<int>(sizeof(D));
  constexpr int kWords = N * kSize / 4;
  static_assert(kWords == 1 || kWords == 2 || kWords == 4, "a Vec access is 4, 8 or 16 bytes");
  uint32_t w[kWords];
  if constexpr (kWords == 4) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    w[0] = raw.x, w[1] = raw.y, w[2] = raw.z, w[3] = raw.w;
  } else if constexpr (kWords == 2) {
    const uint2 raw = *reinterpret_cast<const uint2*>(p);
    w[0] = raw.x, w[1] = raw.y;
  } else {
    w[0] = *reinterpret_cast<const uint32_t*>(p);
  }
  Vec<D, N> v;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    if constexpr (kSize == 8) {
      v.values[i] = BitsOf<D>::From(w[2 * i] | (static_cast<uint64_t>(w[2 * i + 1]) << 32));
    } else {
      v.values[i] = BitsOf<D>::From(w[i * kSize / 4] >> (8 * (i * kSize % 4)));
    }
  }
  return v;
}

template <int N, typename D>
__device__ __forceinline__ void StorePacked(D* p, const Vec<D, N>& v) {
  constexpr int kSize = static_cast<int>(sizeof(D));
  constexpr int kWords = N * kSize / 4;
  static_assert(kWords == 1 || kWords == 2 || kWords == 4, "a Vec access is 4, 8 or 16 bytes");
  uint32_t w[kWords];
#pragma unroll
  for (int k = 0; k < kWords; ++k) w[k] = 0;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const uint64_t bits = BitsOf<D>::Of(v.values[i]);
    if constexpr (kSize == 8) {
      w[2 * i] = static_cast<uint32_t>(bits);
      w[2 * i + 1] = static_cast<uint32_t>(bits >> 32);
    } else {
      w[i * kSize / 4] |= static_cast<uint32_t>(bits) << (8 * (i * kSize % 4));
    }
  }
  // __stwb: a plain (write-back) store that nvcc keeps whole.
  if constexpr (kWords == 4) {
    __stwb(reinterpret_cast<uint4*>(p), make_uint4(w[0], w[1], w[2], w[3]));
  } else if constexpr (kWords == 2) {
    __stwb(reinterpret_cast<uint2*>(p), make_uint2(w[0], w[1]));
  } else {
    __stwb(reinterpret_cast<unsigned*>(p), w[0]);
  }
}

// The launch status of the kernels enqueued just before, naming the op.
inline Status LaunchStatus(const OpSpec& spec, const char* kernel) {
  const cudaError_t error = cudaGetLastError();
  if (error == cudaSuccess) return Status::Ok();
  return Status::Error(spec.TorchName() + ": CUDA kernel " + kernel +
                       " failed to launch: " + cudaGetErrorString(error));
}

// out[c] = the sum of partial[k * cols + c] over chunks k, in order, in the
// partials' type P (Acc<T>, or double where many rows per chunk call for it),
// narrowed to T once.
template <typename T, typename P = Acc<T>>
Status FinishColumnSums(const OpSpec& spec, const P* partial, int64_t chunks, int64_t cols, T* out,
                        CudaStream stream) {
  if (cols == 0) return Status::Ok();
  FinishColumnSumsKernel<T, P><<<GridFor(cols, 256), 256, 0, stream>>>(partial, chunks, cols, out);
  return LaunchStatus(spec, "FinishColumnSums");
}

// `count` elements of scratch memory from the adapter.
template <typename A>
Status Scratch(const OpSpec& spec, const KernelArgs& args, size_t count, A** out) {
  const size_t bytes = std::max<size_t>(count, 1) * sizeof(A);
  void* memory = args.scratch ? args.scratch(bytes) : nullptr;
  if (memory == nullptr) {
    return Status::Error(spec.TorchName() + ": could not get " + std::to_string(bytes) +
                         " bytes of CUDA scratch memory");
  }
  *out = static_cast<A*>(memory);
  return Status::Ok();
}

// Calls body(T{}) with T the host storage type for float32 / float64 /
// float16 / bfloat16 (float, double, Float16, BFloat16; DeviceType<T> is the
// kernel's) and returns its Status; the spec's dtype error for any other
// dtype.
template <typename Body>
Status DispatchStorage(const OpSpec& spec, const char* argument, const std::string& dtype, Body&& body) {
  Status launched;
  const Status dispatched =
      DispatchFloatingOrHalf(spec, argument, dtype, [&](auto tag) { launched = body(tag); });
  return dispatched.ok() ? launched : dispatched;
}

}  // namespace opbridge::cuda
