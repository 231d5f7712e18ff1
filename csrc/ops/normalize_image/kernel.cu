// normalize_image CUDA kernels, y = x * scale[c] + shift[c] with
// scale = 1 / (255 std) and shift = -mean / std (the CPU kernel's
// ChannelAffine, rounded to the compute type), one pass over memory:
//   planar (NCHW) images, and channels-last ones with one channel: 16-byte
//   vectors of the output (uint8 inputs read 4 bytes at a time) walking the
//   planes;
//   channels-last (NHWC) images: tiles of up to kTileElements values go
//   through shared memory, read in the input's order and written in the
//   output's, so that both sides are coalesced. The backward is the same
//   transposition the other way, grad_image = grad_y * scale[c].
// The per-channel values are kernel arguments, kGroup channels per launch
// (a launch per group of channels; one for up to kGroup channels).
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "opbridge/checks.h"
#include "opbridge/cuda_device.cuh"
#include "ops/normalize_image/kernel.h"
#include "ops/normalize_image/spec.h"

namespace opbridge {
namespace {

constexpr int kThreads = 256;
constexpr int kGroup = 32;           // channels per launch
constexpr int kTileElements = 4096;  // shared-memory tile, in compute-type values

// The scale and shift of channels [first, first + count).
template <typename A>
struct ChannelGroup {
  int64_t first;
  int count;
  A scale[kGroup];
  A shift[kGroup];
};

// The group's values into shared memory (constant indices: the argument is
// read in place). Every thread of the block must call it.
template <typename A>
__device__ __forceinline__ void LoadGroup(const ChannelGroup<A>& group, A* scale, A* shift) {
  if (threadIdx.x == 0) {
#pragma unroll
    for (int k = 0; k < kGroup; ++k) {
      scale[k] = group.scale[k];
      shift[k] = group.shift[k];
    }
  }
  __syncthreads();
}

// One input element in the compute type A.
template <typename A, typename In>
__device__ __forceinline__ A InAcc(In v) {
  if constexpr (std::is_same_v<In, uint8_t>) {
    return static_cast<A>(v);
  } else {
    return static_cast<A>(cuda::ToAcc(v));
  }
}

// y = x * scale + shift (forward) or x * scale (backward).
template <bool kShift, typename A>
__device__ __forceinline__ A Affine(A x, A scale, A shift) {
  if constexpr (kShift) {
    return cuda::Fma(x, scale, shift);
  } else {
    return x * scale;
  }
}

// Planar in and out ([batch, channels, plane]), the group's channels: W
// elements at a time (W == 1: any alignment; W > 1: plane % W == 0 and
// aligned pointers, so a vector never crosses a plane). A thread's
// (n, channel, position) advances by a fixed step: no division per vector.
template <typename In, typename Out, int W, bool kShift>
__global__ void PlanarKernel(const In* __restrict__ in, Out* __restrict__ out, int64_t batch,
                             int64_t channels, int64_t plane, ChannelGroup<cuda::Acc<Out>> group) {
  using A = cuda::Acc<Out>;
  __shared__ A scale[kGroup];
  __shared__ A shift[kGroup];
  LoadGroup(group, scale, shift);
  const int64_t count = group.count;
  const int64_t plane_vectors = plane / W;
  const int64_t total = batch * count * plane_vectors;
  const int64_t start = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t p = start % plane_vectors;
  int64_t k = (start / plane_vectors) % count;
  int64_t n = start / plane_vectors / count;
  const int64_t dp = stride % plane_vectors;
  const int64_t dk = (stride / plane_vectors) % count;
  const int64_t dn = stride / plane_vectors / count;
  for (int64_t i = start; i < total; i += stride) {
    const int64_t offset = ((n * channels + group.first + k) * plane_vectors + p) * W;
    const A s = scale[k];
    const A t = shift[k];
    if constexpr (W > 1) {
      const cuda::Vec<In, W> x = cuda::LoadPacked<W>(in + offset);
      cuda::Vec<Out, W> y;
#pragma unroll
      for (int j = 0; j < W; ++j)
        y.values[j] = cuda::FromAcc<Out>(Affine<kShift>(InAcc<A>(x.values[j]), s, t));
      cuda::StorePacked<W>(out + offset, y);
    } else {
      out[offset] = cuda::FromAcc<Out>(Affine<kShift>(InAcc<A>(in[offset]), s, t));
    }
    p += dp;
    k += dk;
    n += dn;
    if (p >= plane_vectors) {
      p -= plane_vectors;
      ++k;
    }
    if (k >= count) {
      k -= count;
      ++n;
    }
  }
}

// A row-major walk over rows of `size` positions, `step` positions at a
// time, without division per position.
struct Walk {
  __device__ Walk(int start, int size, int step)
      : outer(start / size), inner(start % size), d_outer(step / size), d_inner(step % size), size(size) {}
  __device__ void Next() {
    outer += d_outer;
    inner += d_inner;
    if (inner >= size) {
      inner -= size;
      ++outer;
    }
  }
  int outer;
  int inner;
  int d_outer;
  int d_inner;
  int size;
};

// Channels-last <-> planar through shared memory, the group's channels:
// a tile holds `tile_pixels` consecutive pixels of one image (fewer at the
// end of the image) by the group's channels, at tile[p * stride + k] (stride
// odd: conflict-free both ways). kToPlanar (forward): read channels-last
// runs of `count` channels (the whole tile, contiguous, when the group is
// all the channels), write `count` planar runs of pixels; else (backward)
// the other way. The affine is applied on the way in.
template <typename In, typename Out, bool kToPlanar>
__global__ void TileKernel(const In* __restrict__ in, Out* __restrict__ out, int64_t batch, int64_t channels,
                           int64_t plane, int tile_pixels, int stride, ChannelGroup<cuda::Acc<Out>> group) {
  using A = cuda::Acc<Out>;
  __shared__ A tile[kTileElements];
  __shared__ A scale[kGroup];
  __shared__ A shift[kGroup];
  LoadGroup(group, scale, shift);
  const int count = group.count;
  const int threads = static_cast<int>(blockDim.x);
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t tiles_per_image = (plane + tile_pixels - 1) / tile_pixels;
  const int64_t tiles = batch * tiles_per_image;
  // The same trip count for every thread of the block: the barriers below are uniform.
  for (int64_t index = blockIdx.x; index < tiles; index += gridDim.x) {
    const int64_t n = index / tiles_per_image;
    const int64_t p0 = (index - n * tiles_per_image) * tile_pixels;
    const int pixels = static_cast<int>(std::min<int64_t>(tile_pixels, plane - p0));
    // Element (pixel p0, channel first) on the channels-last side and on the planar side.
    const int64_t interleaved = (n * plane + p0) * channels + group.first;
    const int64_t planar = (n * channels + group.first) * plane + p0;
    __syncthreads();  // the previous tile's readers are done with `tile`
    if constexpr (kToPlanar) {
#pragma unroll 4
      for (Walk w(tid, count, threads); w.outer < pixels; w.Next()) {
        const int p = w.outer;
        const int k = w.inner;
        tile[p * stride + k] = Affine<true>(
            InAcc<A>(in[interleaved + static_cast<int64_t>(p) * channels + k]), scale[k], shift[k]);
      }
      __syncthreads();
#pragma unroll 4
      for (Walk w(tid, pixels, threads); w.outer < count; w.Next()) {
        const int k = w.outer;
        const int p = w.inner;
        out[planar + static_cast<int64_t>(k) * plane + p] = cuda::FromAcc<Out>(tile[p * stride + k]);
      }
    } else {
#pragma unroll 4
      for (Walk w(tid, pixels, threads); w.outer < count; w.Next()) {
        const int k = w.outer;
        const int p = w.inner;
        tile[p * stride + k] =
            Affine<false>(InAcc<A>(in[planar + static_cast<int64_t>(k) * plane + p]), scale[k], shift[k]);
      }
      __syncthreads();
#pragma unroll 4
      for (Walk w(tid, count, threads); w.outer < pixels; w.Next()) {
        const int p = w.outer;
        const int k = w.inner;
        out[interleaved + static_cast<int64_t>(p) * channels + k] = cuda::FromAcc<Out>(tile[p * stride + k]);
      }
    }
  }
}

bool Empty(const ImageDims& d) { return d.n <= 0 || d.c <= 0 || d.h <= 0 || d.w <= 0; }

bool Aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Forward (kForward: channels-last or planar `in` to planar `out`, with the
// shift) or backward (planar `in` to channels-last or planar `out`, scale
// only); In and Out are device types.
template <typename In, typename Out, bool kForward>
Status Normalize(const In* in, Out* out, const ImageDims& d, const NormalizeImageAttrs& attrs,
                 CudaStream stream) {
  using A = cuda::Acc<Out>;
  const OpSpec& spec = kNormalizeImageSpec;
  if (Empty(d)) return Status::Ok();
  // (InferNormalizeImageAttrs checks these; a launch must not read past them.)
  if (static_cast<int64_t>(attrs.std.size()) < d.c) {
    return ArgError(spec, "std",
                    "must have one value per channel (" + std::to_string(d.c) + "), got " +
                        std::to_string(attrs.std.size()) + " values");
  }
  if (kForward && static_cast<int64_t>(attrs.mean.size()) < d.c) {
    return ArgError(spec, "mean",
                    "must have one value per channel (" + std::to_string(d.c) + "), got " +
                        std::to_string(attrs.mean.size()) + " values");
  }
  const int64_t plane = d.h * d.w;
  // A one-channel channels-last image is laid out as a planar one.
  const bool transpose = attrs.channels_last_in && d.c > 1;
  constexpr int W = cuda::kVecWidth<Out>;
  const bool vectors = plane % W == 0 && Aligned(out, 16) && Aligned(in, W * sizeof(In));
  for (int64_t first = 0; first < d.c; first += kGroup) {
    ChannelGroup<A> group{};
    group.first = first;
    group.count = static_cast<int>(std::min<int64_t>(kGroup, d.c - first));
    for (int k = 0; k < group.count; ++k) {
      const double std_value = attrs.std[static_cast<size_t>(first + k)];
      group.scale[k] = static_cast<A>(1.0 / (255.0 * std_value));
      group.shift[k] =
          kForward ? static_cast<A>(-attrs.mean[static_cast<size_t>(first + k)] / std_value) : A(0);
    }
    if (!transpose) {
      const int64_t elements = d.n * group.count * plane;
      if (vectors) {
        PlanarKernel<In, Out, W, kForward>
            <<<cuda::GridFor(elements / W, kThreads), kThreads, 0, stream>>>(in, out, d.n, d.c, plane, group);
      } else {
        PlanarKernel<In, Out, 1, kForward>
            <<<cuda::GridFor(elements, kThreads), kThreads, 0, stream>>>(in, out, d.n, d.c, plane, group);
      }
      OPBRIDGE_RETURN_IF_ERROR(
          cuda::LaunchStatus(spec, kForward ? "NormalizeImagePlanar" : "NormalizeImageBackwardPlanar"));
    } else {
      const int stride = group.count | 1;  // odd
      const int tile_pixels = std::max(32, kTileElements / stride / 32 * 32);
      const int64_t tiles = d.n * ((plane + tile_pixels - 1) / tile_pixels);
      TileKernel<In, Out, kForward><<<cuda::GridFor(tiles, 1), kThreads, 0, stream>>>(
          in, out, d.n, d.c, plane, tile_pixels, stride, group);
      OPBRIDGE_RETURN_IF_ERROR(cuda::LaunchStatus(
          spec, kForward ? "NormalizeImageChannelsLast" : "NormalizeImageBackwardChannelsLast"));
    }
  }
  return Status::Ok();
}

}  // namespace

template <typename In, typename Out>
Status NormalizeImageForwardCuda(const In* image, Out* y, const ImageDims& dims,
                                 const NormalizeImageAttrs& attrs, CudaStream stream) {
  using DIn = cuda::DeviceType<In>;
  using DOut = cuda::DeviceType<Out>;
  return Normalize<DIn, DOut, true>(reinterpret_cast<const DIn*>(image), reinterpret_cast<DOut*>(y), dims,
                                    attrs, stream);
}

template <typename T>
Status NormalizeImageBackwardCuda(const T* grad_y, T* grad_image, const ImageDims& dims,
                                  const NormalizeImageAttrs& attrs, CudaStream stream) {
  using D = cuda::DeviceType<T>;
  return Normalize<D, D, false>(reinterpret_cast<const D*>(grad_y), reinterpret_cast<D*>(grad_image), dims,
                                attrs, stream);
}

template Status NormalizeImageForwardCuda<uint8_t, float>(const uint8_t*, float*, const ImageDims&,
                                                          const NormalizeImageAttrs&, CudaStream);
template Status NormalizeImageForwardCuda<float, float>(const float*, float*, const ImageDims&,
                                                        const NormalizeImageAttrs&, CudaStream);
template Status NormalizeImageForwardCuda<double, double>(const double*, double*, const ImageDims&,
                                                          const NormalizeImageAttrs&, CudaStream);
template Status NormalizeImageForwardCuda<Float16, Float16>(const Float16*, Float16*, const ImageDims&,
                                                            const NormalizeImageAttrs&, CudaStream);
template Status NormalizeImageForwardCuda<BFloat16, BFloat16>(const BFloat16*, BFloat16*, const ImageDims&,
                                                              const NormalizeImageAttrs&, CudaStream);
template Status NormalizeImageBackwardCuda<float>(const float*, float*, const ImageDims&,
                                                  const NormalizeImageAttrs&, CudaStream);
template Status NormalizeImageBackwardCuda<double>(const double*, double*, const ImageDims&,
                                                   const NormalizeImageAttrs&, CudaStream);
template Status NormalizeImageBackwardCuda<Float16>(const Float16*, Float16*, const ImageDims&,
                                                    const NormalizeImageAttrs&, CudaStream);
template Status NormalizeImageBackwardCuda<BFloat16>(const BFloat16*, BFloat16*, const ImageDims&,
                                                     const NormalizeImageAttrs&, CudaStream);

namespace {

Status LaunchNormalizeImageCuda(const KernelArgs& args) {
  const NormalizeImageAttrs attrs{args.attrs[0].numbers, args.attrs[1].numbers, args.attrs[2].number != 0.0};
  const ImageDims dims = ImageDimsOf(args.input_infos[0].shape, attrs.channels_last_in);
  const std::string& dtype = args.input_infos[0].dtype;
  if (dtype == "uint8") {
    return NormalizeImageForwardCuda<uint8_t, float>(static_cast<const uint8_t*>(args.inputs[0]),
                                                     static_cast<float*>(args.outputs[0]), dims, attrs,
                                                     args.stream);
  }
  return cuda::DispatchStorage(kNormalizeImageSpec, "image", dtype, [&](auto tag) {
    using T = decltype(tag);
    return NormalizeImageForwardCuda<T, T>(static_cast<const T*>(args.inputs[0]),
                                           static_cast<T*>(args.outputs[0]), dims, attrs, args.stream);
  });
}

// Backward input: grad_y [N, C, H, W]; output: grad_image in the image's layout.
Status LaunchNormalizeImageBackwardCuda(const KernelArgs& args) {
  const Shape& g = args.input_infos[0].shape;
  const ImageDims dims{g[0], g[1], g[2], g[3]};
  const NormalizeImageAttrs attrs{std::vector<double>(args.attrs[1].numbers.size(), 0.0),
                                  args.attrs[1].numbers, args.attrs[2].number != 0.0};
  return cuda::DispatchStorage(kNormalizeImageSpec, "grad_y", args.input_infos[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    return NormalizeImageBackwardCuda<T>(static_cast<const T*>(args.inputs[0]),
                                         static_cast<T*>(args.outputs[0]), dims, attrs, args.stream);
  });
}

}  // namespace

OPBRIDGE_REGISTER_CUDA_KERNELS(kNormalizeImageSpec, LaunchNormalizeImageCuda,
                               LaunchNormalizeImageBackwardCuda)

}  // namespace opbridge
