// bias_gelu CUDA kernels: one pass over memory in each direction, 16-byte
// vectors when rows hold whole vectors and the pointers allow. The math is
// the CPU kernel's (kernel.cpp) with CUDA's erff / tanhf / expf (erf / tanh /
// exp for float64); 16-bit types compute in float32. The bias gradient is a
// deterministic two-stage column sum (opbridge/cuda_device.cuh).
#include <algorithm>
#include <cstdint>

#include "opbridge/checks.h"
#include "opbridge/cuda_device.cuh"
#include "ops/bias_gelu/kernel.h"
#include "ops/bias_gelu/spec.h"

namespace opbridge {
namespace {

constexpr int kThreads = 256;
// The most row lanes of a column-sum block (see ColumnLanes).
constexpr int kMaxRowLanes = 8;

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kTanhCubic = 0.044715;

// gelu(v): 0.5 v (1 + erf(v / sqrt(2))), or 0.5 v (1 + tanh(sqrt(2 / pi) (v + 0.044715 v^3))).
template <bool kTanh>
__device__ __forceinline__ float GeluOf(float v) {
  const float half_v = 0.5f * v;
  float t;
  if constexpr (kTanh) {
    const float inner = fmaf(static_cast<float>(kTanhCubic) * (v * v), v, v);
    t = tanhf(static_cast<float>(kSqrt2OverPi) * inner);
  } else {
    t = erff(v * static_cast<float>(kInvSqrt2));
  }
  return fmaf(half_v, t, half_v);
}

template <bool kTanh>
__device__ __forceinline__ double GeluOf(double v) {
  if constexpr (kTanh) {
    const double inner = kSqrt2OverPi * (v + kTanhCubic * v * v * v);
    return 0.5 * v * (1.0 + tanh(inner));
  } else {
    return 0.5 * v * (1.0 + erf(v * kInvSqrt2));
  }
}

// d gelu / dv: cdf + v pdf for erf; for tanh
// 0.5 (1 + t) + 0.5 v (1 - t^2) sqrt(2 / pi) (1 + 3 * 0.044715 v^2).
template <bool kTanh>
__device__ __forceinline__ float GeluGradOf(float v) {
  if constexpr (kTanh) {
    const float inner = fmaf(static_cast<float>(kTanhCubic) * (v * v), v, v);
    const float t = tanhf(static_cast<float>(kSqrt2OverPi) * inner);
    const float slope = fmaf(static_cast<float>(3.0 * kTanhCubic), v * v, 1.0f);
    const float dt = fmaf(-t, t, 1.0f) * static_cast<float>(kSqrt2OverPi) * slope;
    return fmaf(0.5f * v, dt, fmaf(0.5f, t, 0.5f));
  } else {
    const float cdf = fmaf(0.5f, erff(v * static_cast<float>(kInvSqrt2)), 0.5f);
    const float pdf = static_cast<float>(kInvSqrt2Pi) * expf(-0.5f * (v * v));
    return fmaf(v, pdf, cdf);
  }
}

template <bool kTanh>
__device__ __forceinline__ double GeluGradOf(double v) {
  if constexpr (kTanh) {
    const double t = tanh(kSqrt2OverPi * (v + kTanhCubic * v * v * v));
    return 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3.0 * kTanhCubic * v * v);
  } else {
    const double cdf = 0.5 * (1.0 + erf(v * kInvSqrt2));
    return cdf + v * kInvSqrt2Pi * exp(-0.5 * v * v);
  }
}

// y = gelu(x + bias) over `vectors` vectors of W elements; a row holds
// row_vectors of them (W == 1: element by element, any alignment). The
// column of a thread's vector advances by a fixed step: no division per
// vector.
template <typename D, int W, bool kTanh>
__global__ void BiasGeluForwardKernel(const D* __restrict__ x, const D* __restrict__ bias, D* __restrict__ y,
                                      int64_t vectors, int64_t row_vectors) {
  using V = cuda::Vec<D, W>;
  const int64_t start = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if (start >= vectors) return;
  int64_t col = start % row_vectors;
  const int64_t col_step = stride % row_vectors;
  for (int64_t i = start; i < vectors; i += stride) {
    const V xv = reinterpret_cast<const V*>(x)[i];
    const V bv = reinterpret_cast<const V*>(bias)[col];
    V out;
#pragma unroll
    for (int k = 0; k < W; ++k) {
      out.values[k] = cuda::FromAcc<D>(GeluOf<kTanh>(cuda::ToAcc(xv.values[k]) + cuda::ToAcc(bv.values[k])));
    }
    reinterpret_cast<V*>(y)[i] = out;
    col += col_step;
    if (col >= row_vectors) col -= row_vectors;
  }
}

// grad_x = grad_y * gelu'(x + bias) alone (no bias gradient wanted).
template <typename D, int W, bool kTanh>
__global__ void BiasGeluBackwardKernel(const D* __restrict__ grad_y, const D* __restrict__ x,
                                       const D* __restrict__ bias, D* __restrict__ grad_x, int64_t vectors,
                                       int64_t row_vectors) {
  using V = cuda::Vec<D, W>;
  const int64_t start = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if (start >= vectors) return;
  int64_t col = start % row_vectors;
  const int64_t col_step = stride % row_vectors;
  for (int64_t i = start; i < vectors; i += stride) {
    const V gv = reinterpret_cast<const V*>(grad_y)[i];
    const V xv = reinterpret_cast<const V*>(x)[i];
    const V bv = reinterpret_cast<const V*>(bias)[col];
    V out;
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const auto v = cuda::ToAcc(xv.values[k]) + cuda::ToAcc(bv.values[k]);
      out.values[k] = cuda::FromAcc<D>(cuda::ToAcc(gv.values[k]) * GeluGradOf<kTanh>(v));
    }
    reinterpret_cast<V*>(grad_x)[i] = out;
    col += col_step;
    if (col >= row_vectors) col -= row_vectors;
  }
}

// grad_x and the first stage of grad_bias: block (blockIdx.x, blockIdx.y)
// covers blockDim.x column vectors of row chunk blockIdx.y; row lane
// threadIdx.y adds rows row_begin + threadIdx.y, + blockDim.y, ... in order,
// then lane 0 adds the lanes in order and writes the chunk's unrounded sums
// to partial[chunk, col]. The order depends on the shape only.
template <typename D, int W, bool kTanh>
__global__ void BiasGeluBackwardColumnsKernel(const D* __restrict__ grad_y, const D* __restrict__ x,
                                              const D* __restrict__ bias, D* __restrict__ grad_x,
                                              cuda::Acc<D>* __restrict__ partial, int64_t rows,
                                              int64_t row_vectors, int64_t rows_per_chunk) {
  using A = cuda::Acc<D>;
  using V = cuda::Vec<D, W>;
  __shared__ A lanes[kThreads * W];
  const int64_t cv = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  const int64_t row_begin = chunk * rows_per_chunk;
  const int64_t row_end = std::min(rows, row_begin + rows_per_chunk);
  A sum[W];
#pragma unroll
  for (int k = 0; k < W; ++k) sum[k] = A(0);
  if (cv < row_vectors) {
    const V bv = reinterpret_cast<const V*>(bias)[cv];
    A b[W];
#pragma unroll
    for (int k = 0; k < W; ++k) b[k] = cuda::ToAcc(bv.values[k]);
#pragma unroll 4
    for (int64_t r = row_begin + threadIdx.y; r < row_end; r += blockDim.y) {
      const int64_t i = r * row_vectors + cv;
      const V gv = reinterpret_cast<const V*>(grad_y)[i];
      const V xv = reinterpret_cast<const V*>(x)[i];
      V out;
#pragma unroll
      for (int k = 0; k < W; ++k) {
        const A dx = cuda::ToAcc(gv.values[k]) * GeluGradOf<kTanh>(cuda::ToAcc(xv.values[k]) + b[k]);
        out.values[k] = cuda::FromAcc<D>(dx);
        sum[k] += dx;
      }
      reinterpret_cast<V*>(grad_x)[i] = out;
    }
  }
  const int bx = static_cast<int>(blockDim.x);
  const int by = static_cast<int>(blockDim.y);
  if (by > 1) {  // the same for the whole block
#pragma unroll
    for (int k = 0; k < W; ++k) lanes[(k * by + static_cast<int>(threadIdx.y)) * bx + threadIdx.x] = sum[k];
    __syncthreads();
    if (threadIdx.y == 0) {
#pragma unroll
      for (int k = 0; k < W; ++k) {
        for (int lane = 1; lane < by; ++lane) sum[k] += lanes[(k * by + lane) * bx + threadIdx.x];
      }
    }
  }
  if (threadIdx.y == 0 && cv < row_vectors) {
    A* out = partial + chunk * row_vectors * W + cv * W;
#pragma unroll
    for (int k = 0; k < W; ++k) out[k] = sum[k];
  }
}

// Row lanes of a column-sum block, from the number of columns alone (so the
// summation order never depends on the vector width): more lanes for narrow
// rows, one from 256 columns up.
int ColumnLanes(int64_t cols) {
  return static_cast<int>(
      std::min<int64_t>(kMaxRowLanes, std::max<int64_t>(1, kThreads / std::max<int64_t>(cols, 32))));
}

template <typename D, int W>
void LaunchForward(const D* x, const D* bias, D* y, int64_t rows, int64_t cols, bool use_tanh,
                   CudaStream stream) {
  const int64_t vectors = rows * cols / W;
  const unsigned blocks = cuda::GridFor(vectors, kThreads);
  if (use_tanh) {
    BiasGeluForwardKernel<D, W, true><<<blocks, kThreads, 0, stream>>>(x, bias, y, vectors, cols / W);
  } else {
    BiasGeluForwardKernel<D, W, false><<<blocks, kThreads, 0, stream>>>(x, bias, y, vectors, cols / W);
  }
}

template <typename D, int W>
void LaunchBackward(const D* grad_y, const D* x, const D* bias, D* grad_x, int64_t rows, int64_t cols,
                    bool use_tanh, CudaStream stream) {
  const int64_t vectors = rows * cols / W;
  const unsigned blocks = cuda::GridFor(vectors, kThreads);
  if (use_tanh) {
    BiasGeluBackwardKernel<D, W, true>
        <<<blocks, kThreads, 0, stream>>>(grad_y, x, bias, grad_x, vectors, cols / W);
  } else {
    BiasGeluBackwardKernel<D, W, false>
        <<<blocks, kThreads, 0, stream>>>(grad_y, x, bias, grad_x, vectors, cols / W);
  }
}

template <typename D, int W>
void LaunchBackwardColumns(const D* grad_y, const D* x, const D* bias, D* grad_x, cuda::Acc<D>* partial,
                           int64_t rows, int64_t cols, bool use_tanh, CudaStream stream) {
  const int64_t row_vectors = cols / W;
  const int by = ColumnLanes(cols);
  const int bx = static_cast<int>(std::min<int64_t>(kThreads / by, row_vectors));
  const dim3 block(static_cast<unsigned>(bx), static_cast<unsigned>(by));
  const dim3 grid(static_cast<unsigned>((row_vectors + bx - 1) / bx),
                  static_cast<unsigned>(cuda::ColumnChunks(rows)));
  const int64_t rows_per_chunk = cuda::RowsPerChunk(rows);
  if (use_tanh) {
    BiasGeluBackwardColumnsKernel<D, W, true>
        <<<grid, block, 0, stream>>>(grad_y, x, bias, grad_x, partial, rows, row_vectors, rows_per_chunk);
  } else {
    BiasGeluBackwardColumnsKernel<D, W, false>
        <<<grid, block, 0, stream>>>(grad_y, x, bias, grad_x, partial, rows, row_vectors, rows_per_chunk);
  }
}

}  // namespace

template <typename T>
Status BiasGeluForwardCuda(const T* x, const T* bias, T* y, int64_t rows, int64_t cols,
                           const BiasGeluAttrs& attrs, CudaStream stream) {
  using D = cuda::DeviceType<T>;
  if (rows <= 0 || cols <= 0) return Status::Ok();
  const D* dx = reinterpret_cast<const D*>(x);
  const D* db = reinterpret_cast<const D*>(bias);
  D* dy = reinterpret_cast<D*>(y);
  constexpr int W = cuda::kVecWidth<D>;
  if (cols % W == 0 && cuda::VecAligned<D>({x, bias, y})) {
    LaunchForward<D, W>(dx, db, dy, rows, cols, attrs.use_tanh, stream);
  } else {
    LaunchForward<D, 1>(dx, db, dy, rows, cols, attrs.use_tanh, stream);
  }
  return cuda::LaunchStatus(kBiasGeluSpec, "BiasGeluForward");
}

template <typename T>
size_t BiasGeluBackwardCudaScratchBytes(int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return 0;
  return static_cast<size_t>(cuda::ColumnChunks(rows) * cols) * sizeof(cuda::Acc<cuda::DeviceType<T>>);
}

template <typename T>
Status BiasGeluBackwardCuda(const T* grad_y, const T* x, const T* bias, T* grad_x, T* grad_bias, int64_t rows,
                            int64_t cols, const BiasGeluAttrs& attrs, void* scratch, CudaStream stream) {
  using D = cuda::DeviceType<T>;
  using A = cuda::Acc<D>;
  const OpSpec& spec = kBiasGeluSpec;
  if (cols <= 0) return Status::Ok();
  if (rows <= 0) {
    // No rows: the bias gradient is an empty sum.
    if (grad_bias == nullptr) return Status::Ok();
    const cudaError_t error = cudaMemsetAsync(grad_bias, 0, static_cast<size_t>(cols) * sizeof(T), stream);
    if (error == cudaSuccess) return Status::Ok();
    (void)cudaGetLastError();  // consumed here
    return Status::Error(spec.TorchName() + ": zero-filling grad_bias failed: " + cudaGetErrorString(error));
  }
  const D* dg = reinterpret_cast<const D*>(grad_y);
  const D* dx = reinterpret_cast<const D*>(x);
  const D* db = reinterpret_cast<const D*>(bias);
  D* dgx = reinterpret_cast<D*>(grad_x);
  constexpr int W = cuda::kVecWidth<D>;
  const bool vectors = cols % W == 0 && cuda::VecAligned<D>({grad_y, x, bias, grad_x});
  if (grad_bias == nullptr) {
    if (vectors) {
      LaunchBackward<D, W>(dg, dx, db, dgx, rows, cols, attrs.use_tanh, stream);
    } else {
      LaunchBackward<D, 1>(dg, dx, db, dgx, rows, cols, attrs.use_tanh, stream);
    }
    return cuda::LaunchStatus(spec, "BiasGeluBackward");
  }
  if (scratch == nullptr) return Status::Error(spec.TorchName() + ": no CUDA scratch memory for grad_bias");
  A* partial = static_cast<A*>(scratch);
  if (vectors) {
    LaunchBackwardColumns<D, W>(dg, dx, db, dgx, partial, rows, cols, attrs.use_tanh, stream);
  } else {
    LaunchBackwardColumns<D, 1>(dg, dx, db, dgx, partial, rows, cols, attrs.use_tanh, stream);
  }
  OPBRIDGE_RETURN_IF_ERROR(cuda::LaunchStatus(spec, "BiasGeluBackwardColumns"));
  return cuda::FinishColumnSums(spec, partial, cuda::ColumnChunks(rows), cols,
                                reinterpret_cast<D*>(grad_bias), stream);
}

#define OPBRIDGE_INSTANTIATE(T)                                                                          \
  template Status BiasGeluForwardCuda<T>(const T*, const T*, T*, int64_t, int64_t, const BiasGeluAttrs&, \
                                         CudaStream);                                                    \
  template size_t BiasGeluBackwardCudaScratchBytes<T>(int64_t, int64_t);                                 \
  template Status BiasGeluBackwardCuda<T>(const T*, const T*, const T*, T*, T*, int64_t, int64_t,        \
                                          const BiasGeluAttrs&, void*, CudaStream);
OPBRIDGE_FOR_EACH_FLOATING_TYPE(OPBRIDGE_INSTANTIATE)
#undef OPBRIDGE_INSTANTIATE

namespace {

Status LaunchBiasGeluCuda(const KernelArgs& args) {
  BiasGeluAttrs attrs{false};
  OPBRIDGE_RETURN_IF_ERROR(ParseGeluApproximate(args.attrs[0].text, &attrs.use_tanh));
  const Shape& x_shape = args.input_infos[0].shape;
  const int64_t cols = x_shape.back();
  const int64_t rows = cols == 0 ? 0 : NumElements(x_shape) / cols;
  return cuda::DispatchStorage(kBiasGeluSpec, "x", args.input_infos[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    return BiasGeluForwardCuda<T>(static_cast<const T*>(args.inputs[0]),
                                  static_cast<const T*>(args.inputs[1]), static_cast<T*>(args.outputs[0]),
                                  rows, cols, attrs, args.stream);
  });
}

// Backward inputs: grad_y, x, bias; outputs: grad_x, grad_bias (or null).
Status LaunchBiasGeluBackwardCuda(const KernelArgs& args) {
  BiasGeluAttrs attrs{false};
  OPBRIDGE_RETURN_IF_ERROR(ParseGeluApproximate(args.attrs[0].text, &attrs.use_tanh));
  const Shape& x_shape = args.input_infos[1].shape;
  const int64_t cols = x_shape.back();
  const int64_t rows = cols == 0 ? 0 : NumElements(x_shape) / cols;
  return cuda::DispatchStorage(kBiasGeluSpec, "x", args.input_infos[1].dtype, [&](auto tag) {
    using T = decltype(tag);
    T* grad_bias = static_cast<T*>(args.outputs[1]);
    void* scratch = nullptr;
    const size_t bytes = BiasGeluBackwardCudaScratchBytes<T>(rows, cols);
    if (grad_bias != nullptr && bytes > 0) {
      unsigned char* memory = nullptr;
      OPBRIDGE_RETURN_IF_ERROR(cuda::Scratch(kBiasGeluSpec, args, bytes, &memory));
      scratch = memory;
    }
    return BiasGeluBackwardCuda<T>(static_cast<const T*>(args.inputs[0]),
                                   static_cast<const T*>(args.inputs[1]),
                                   static_cast<const T*>(args.inputs[2]), static_cast<T*>(args.outputs[0]),
                                   grad_bias, rows, cols, attrs, scratch, args.stream);
  });
}

}  // namespace

OPBRIDGE_REGISTER_CUDA_KERNELS(kBiasGeluSpec, LaunchBiasGeluCuda, LaunchBiasGeluBackwardCuda)

}  // namespace opbridge
