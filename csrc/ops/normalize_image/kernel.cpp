// normalize_image kernels, vectorized with Highway: compiled once per SIMD
// target (foreach_target re-includes this file) and dispatched at run time.
// A channels-last row of 1, 3 or 4 channels is split into its channel
// planes with de-interleaving loads (uint8, float32, float64); other channel
// counts and 16-bit channels-last images go element by element. Planar
// (NCHW) rows are one multiply-add per vector.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/normalize_image/kernel.cpp"
#include "ops/normalize_image/kernel.h"

#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include <cstdint>
#include <type_traits>
#include <vector>

#include "opbridge/checks.h"
#include "opbridge/dynamic_for.h"
#include "opbridge/half.h"
#include "opbridge/simd-inl.h"
#include "opbridge/simd.h"
#include "ops/normalize_image/spec.h"

HWY_BEFORE_NAMESPACE();
namespace opbridge {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using simd::AlignedFor;
using simd::kMaxLanes;
using simd::ReadLanes;
using simd::ReadTail;
using simd::WriteLanes;
using simd::WriteLanesStream;
using simd::WriteTail;

// Lanes of In widened to the compute type of D (uint8 through int32).
template <class D>
HWY_INLINE hn::VFromD<D> Widen(D d, hn::VFromD<hn::Rebind<uint8_t, D>> v) {
  const hn::Rebind<int32_t, D> di;
  return hn::ConvertTo(d, hn::PromoteTo(di, v));
}

template <class D, typename In>
HWY_INLINE hn::VFromD<D> LoadAs(D d, const In* p) {
  if constexpr (std::is_same_v<In, uint8_t>) {
    const hn::Rebind<uint8_t, D> d8;
    return Widen(d, hn::LoadU(d8, p));
  } else {
    return ReadLanes(d, p);
  }
}

template <class D, typename In>
HWY_INLINE hn::VFromD<D> LoadTailAs(D d, const In* p, int64_t count) {
  if constexpr (std::is_same_v<In, uint8_t>) {
    alignas(64) uint8_t buffer[kMaxLanes] = {};
    for (int64_t k = 0; k < count; ++k) buffer[k] = p[k];
    const hn::Rebind<uint8_t, D> d8;
    return Widen(d, hn::LoadU(d8, buffer));
  } else {
    alignas(64) In buffer[kMaxLanes];
    return ReadTail(d, p, count, buffer);
  }
}

// One element in the compute type C.
template <typename C, typename In>
HWY_INLINE C AsCompute(In v) {
  if constexpr (std::is_same_v<In, uint8_t>) {
    return static_cast<C>(v);
  } else {
    return static_cast<C>(ToFloat(v));
  }
}

// Channels 1, 3, 4 of uint8 / float / double go through de-interleaving loads.
template <typename In>
constexpr bool kInterleavedLoads =
    std::is_same_v<In, uint8_t> || std::is_same_v<In, float> || std::is_same_v<In, double>;

// Loads `lanes` pixels of kChannels interleaved channels, one vector per channel.
template <int kChannels, class D, typename In>
HWY_INLINE void LoadPixels(D d, const In* p, hn::VFromD<D>* v) {
  if constexpr (kChannels == 1) {
    v[0] = LoadAs(d, p);
  } else {
    using Lane = std::conditional_t<std::is_same_v<In, uint8_t>, uint8_t, In>;
    const hn::Rebind<Lane, D> dl;
    hn::VFromD<decltype(dl)> c0, c1, c2, c3;
    if constexpr (kChannels == 3) {
      hn::LoadInterleaved3(dl, p, c0, c1, c2);
    } else {
      hn::LoadInterleaved4(dl, p, c0, c1, c2, c3);
    }
    if constexpr (std::is_same_v<In, uint8_t>) {
      v[0] = Widen(d, c0);
      v[1] = Widen(d, c1);
      v[2] = Widen(d, c2);
      if constexpr (kChannels == 4) v[3] = Widen(d, c3);
    } else {
      v[0] = c0;
      v[1] = c1;
      v[2] = c2;
      if constexpr (kChannels == 4) v[3] = c3;
    }
  }
}

// One channels-last row (w pixels of kChannels) into the kChannels planes
// out[c] (each w long), y = x * scale[c] + shift[c].
template <int kChannels, typename In, typename Out, class D>
HWY_INLINE void SplitRow(D d, const In* row, Out* const* out, int64_t width, const hn::TFromD<D>* scales,
                         const hn::TFromD<D>* shifts, bool stream) {
  hn::VFromD<D> scale[4], shift[4];
  for (int c = 0; c < kChannels; ++c) {
    scale[c] = hn::Set(d, scales[c]);
    shift[c] = hn::Set(d, shifts[c]);
  }
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  bool aligned = stream;
  for (int c = 0; c < kChannels; ++c) aligned = aligned && AlignedFor(d, out[c]);
  int64_t w = 0;
  hn::VFromD<D> v[4];
  auto loop = [&](auto write) {
    for (; w + lanes <= width; w += lanes) {
      LoadPixels<kChannels>(d, row + w * kChannels, v);
      for (int c = 0; c < kChannels; ++c) write(hn::MulAdd(v[c], scale[c], shift[c]), out[c] + w);
    }
  };
  if (aligned) {
    loop([d](hn::VFromD<D> x, Out* p) { WriteLanesStream(d, x, p); });
  } else {
    loop([d](hn::VFromD<D> x, Out* p) { WriteLanes(d, x, p); });
  }
  if (w < width) {
    // The last pixels through a zero-padded copy of whole pixels.
    alignas(64) In pixels[kMaxLanes * 4] = {};
    alignas(64) Out buffer[kMaxLanes];
    const int64_t rest = width - w;
    for (int64_t k = 0; k < rest * kChannels; ++k) pixels[k] = row[w * kChannels + k];
    LoadPixels<kChannels>(d, pixels, v);
    for (int c = 0; c < kChannels; ++c) {
      WriteTail(d, hn::MulAdd(v[c], scale[c], shift[c]), out[c] + w, rest, buffer);
    }
  }
}

template <typename In, typename Out>
void ForwardRowsImpl(const In* image, Out* y, int64_t row_begin, int64_t row_end, const ImageDims& dims,
                     const ComputeType<Out>* scale, const ComputeType<Out>* shift, bool channels_last,
                     bool stream) {
  using C = ComputeType<Out>;
  const hn::ScalableTag<C> d;
  using V = hn::VFromD<decltype(d)>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const ImageDims g = dims;
  if (!channels_last) {
    // Row r = (n * c + ch) * h + hh of the planar image maps onto row r of y.
    for (int64_t r = row_begin; r < row_end; ++r) {
      const int64_t ch = (r / g.h) % g.c;
      const V s = hn::Set(d, scale[ch]);
      const V t = hn::Set(d, shift[ch]);
      const In* in = image + r * g.w;
      Out* out = y + r * g.w;
      int64_t w = 0;
      auto loop = [&](auto write) {
        for (; w + lanes <= g.w; w += lanes) write(hn::MulAdd(LoadAs(d, in + w), s, t), out + w);
      };
      if (stream && AlignedFor(d, out)) {
        loop([d](V x, Out* p) { WriteLanesStream(d, x, p); });
      } else {
        loop([d](V x, Out* p) { WriteLanes(d, x, p); });
      }
      if (w < g.w) {
        alignas(64) Out buffer[kMaxLanes];
        WriteTail(d, hn::MulAdd(LoadTailAs(d, in + w, g.w - w), s, t), out + w, g.w - w, buffer);
      }
    }
    if (stream) hwy::FlushStream();
    return;
  }
  // Channels-last: row r = n * h + hh holds w pixels of c channels.
  std::vector<Out*> planes(static_cast<size_t>(g.c));
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t n = r / g.h;
    const int64_t hh = r % g.h;
    const In* row = image + r * g.w * g.c;
    for (int64_t ch = 0; ch < g.c; ++ch)
      planes[static_cast<size_t>(ch)] = y + ((n * g.c + ch) * g.h + hh) * g.w;
    if constexpr (kInterleavedLoads<In>) {
      if (g.c == 3) {
        SplitRow<3>(d, row, planes.data(), g.w, scale, shift, stream);
        continue;
      }
      if (g.c == 4) {
        SplitRow<4>(d, row, planes.data(), g.w, scale, shift, stream);
        continue;
      }
    }
    if (g.c == 1) {
      SplitRow<1>(d, row, planes.data(), g.w, scale, shift, stream);
    } else {
      for (int64_t ch = 0; ch < g.c; ++ch) {
        Out* out = planes[static_cast<size_t>(ch)];
        const C s = scale[ch];
        const C t = shift[ch];
        for (int64_t w = 0; w < g.w; ++w) {
          out[w] = FromDouble<Out>(static_cast<double>(AsCompute<C>(row[w * g.c + ch]) * s + t));
        }
      }
    }
  }
  if (stream) hwy::FlushStream();
}

template <typename T>
void BackwardRowsImpl(const T* grad_y, T* grad_image, int64_t row_begin, int64_t row_end,
                      const ImageDims& dims, const ComputeType<T>* scale, bool channels_last, bool stream) {
  using C = ComputeType<T>;
  const hn::ScalableTag<C> d;
  using V = hn::VFromD<decltype(d)>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  alignas(64) T buffer[kMaxLanes];
  const ImageDims g = dims;
  if (!channels_last) {
    for (int64_t r = row_begin; r < row_end; ++r) {
      const V s = hn::Set(d, scale[(r / g.h) % g.c]);
      const T* in = grad_y + r * g.w;
      T* out = grad_image + r * g.w;
      int64_t w = 0;
      auto loop = [&](auto write) {
        for (; w + lanes <= g.w; w += lanes) write(hn::Mul(ReadLanes(d, in + w), s), out + w);
      };
      if (stream && AlignedFor(d, out)) {
        loop([d](V x, T* p) { WriteLanesStream(d, x, p); });
      } else {
        loop([d](V x, T* p) { WriteLanes(d, x, p); });
      }
      if (w < g.w) WriteTail(d, hn::Mul(ReadTail(d, in + w, g.w - w, buffer), s), out + w, g.w - w, buffer);
    }
    if (stream) hwy::FlushStream();
    return;
  }
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t n = r / g.h;
    const int64_t hh = r % g.h;
    T* row = grad_image + r * g.w * g.c;
    const T* plane0 = grad_y + (n * g.c * g.h + hh) * g.w;
    const int64_t plane_stride = g.h * g.w;
    int64_t w = 0;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      if (g.c == 3) {
        const V s0 = hn::Set(d, scale[0]), s1 = hn::Set(d, scale[1]), s2 = hn::Set(d, scale[2]);
        for (; w + lanes <= g.w; w += lanes) {
          hn::StoreInterleaved3(hn::Mul(hn::LoadU(d, plane0 + w), s0),
                                hn::Mul(hn::LoadU(d, plane0 + plane_stride + w), s1),
                                hn::Mul(hn::LoadU(d, plane0 + 2 * plane_stride + w), s2), d, row + 3 * w);
        }
      }
    }
    for (int64_t ch = 0; ch < g.c; ++ch) {
      const T* plane = plane0 + ch * plane_stride;
      const C s = scale[ch];
      for (int64_t k = w; k < g.w; ++k) {
        row[k * g.c + ch] = FromDouble<T>(static_cast<double>(static_cast<C>(ToFloat(plane[k])) * s));
      }
    }
  }
}

}  // namespace

#define OPBRIDGE_NORMALIZE_IMAGE_FORWARD(In, Out, Suffix)                                                  \
  void NormalizeImageForwardRows##Suffix(const In* image, Out* y, int64_t row_begin, int64_t row_end,      \
                                         const ImageDims& dims, const ComputeType<Out>* scale,             \
                                         const ComputeType<Out>* shift, bool channels_last, bool stream) { \
    ForwardRowsImpl<In, Out>(image, y, row_begin, row_end, dims, scale, shift, channels_last, stream);     \
  }
OPBRIDGE_NORMALIZE_IMAGE_FORWARD(uint8_t, float, U8)
OPBRIDGE_NORMALIZE_IMAGE_FORWARD(float, float, F32)
OPBRIDGE_NORMALIZE_IMAGE_FORWARD(double, double, F64)
OPBRIDGE_NORMALIZE_IMAGE_FORWARD(Float16, Float16, F16)
OPBRIDGE_NORMALIZE_IMAGE_FORWARD(BFloat16, BFloat16, BF16)
#undef OPBRIDGE_NORMALIZE_IMAGE_FORWARD

#define OPBRIDGE_NORMALIZE_IMAGE_BACKWARD(T, Suffix)                                                      \
  void NormalizeImageBackwardRows##Suffix(const T* grad_y, T* grad_image, int64_t row_begin,              \
                                          int64_t row_end, const ImageDims& dims,                         \
                                          const ComputeType<T>* scale, bool channels_last, bool stream) { \
    BackwardRowsImpl<T>(grad_y, grad_image, row_begin, row_end, dims, scale, channels_last, stream);      \
  }
OPBRIDGE_NORMALIZE_IMAGE_BACKWARD(float, F32)
OPBRIDGE_NORMALIZE_IMAGE_BACKWARD(double, F64)
OPBRIDGE_NORMALIZE_IMAGE_BACKWARD(Float16, F16)
OPBRIDGE_NORMALIZE_IMAGE_BACKWARD(BFloat16, BF16)
#undef OPBRIDGE_NORMALIZE_IMAGE_BACKWARD

}  // namespace HWY_NAMESPACE
}  // namespace opbridge
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opbridge {

HWY_EXPORT(NormalizeImageForwardRowsU8);
HWY_EXPORT(NormalizeImageForwardRowsF32);
HWY_EXPORT(NormalizeImageForwardRowsF64);
HWY_EXPORT(NormalizeImageForwardRowsF16);
HWY_EXPORT(NormalizeImageForwardRowsBF16);
HWY_EXPORT(NormalizeImageBackwardRowsF32);
HWY_EXPORT(NormalizeImageBackwardRowsF64);
HWY_EXPORT(NormalizeImageBackwardRowsF16);
HWY_EXPORT(NormalizeImageBackwardRowsBF16);

namespace {

template <typename In, typename Out>
struct ForwardKernel;
#define OPBRIDGE_NORMALIZE_IMAGE_FORWARD_KERNEL(In, Out, Suffix)                                         \
  template <>                                                                                            \
  struct ForwardKernel<In, Out> {                                                                        \
    static void Rows(const In* image, Out* y, int64_t row_begin, int64_t row_end, const ImageDims& dims, \
                     const ComputeType<Out>* scale, const ComputeType<Out>* shift, bool channels_last,   \
                     bool stream) {                                                                      \
      OPBRIDGE_DYNAMIC_DISPATCH(NormalizeImageForwardRows##Suffix)                                       \
      (image, y, row_begin, row_end, dims, scale, shift, channels_last, stream);                         \
    }                                                                                                    \
  };
OPBRIDGE_NORMALIZE_IMAGE_FORWARD_KERNEL(uint8_t, float, U8)
OPBRIDGE_NORMALIZE_IMAGE_FORWARD_KERNEL(float, float, F32)
OPBRIDGE_NORMALIZE_IMAGE_FORWARD_KERNEL(double, double, F64)
OPBRIDGE_NORMALIZE_IMAGE_FORWARD_KERNEL(Float16, Float16, F16)
OPBRIDGE_NORMALIZE_IMAGE_FORWARD_KERNEL(BFloat16, BFloat16, BF16)
#undef OPBRIDGE_NORMALIZE_IMAGE_FORWARD_KERNEL

template <typename T>
struct BackwardKernel;
#define OPBRIDGE_NORMALIZE_IMAGE_BACKWARD_KERNEL(T, Suffix)                                                 \
  template <>                                                                                               \
  struct BackwardKernel<T> {                                                                                \
    static void Rows(const T* grad_y, T* grad_image, int64_t row_begin, int64_t row_end,                    \
                     const ImageDims& dims, const ComputeType<T>* scale, bool channels_last, bool stream) { \
      OPBRIDGE_DYNAMIC_DISPATCH(NormalizeImageBackwardRows##Suffix)                                         \
      (grad_y, grad_image, row_begin, row_end, dims, scale, channels_last, stream);                         \
    }                                                                                                       \
  };
OPBRIDGE_NORMALIZE_IMAGE_BACKWARD_KERNEL(float, F32)
OPBRIDGE_NORMALIZE_IMAGE_BACKWARD_KERNEL(double, F64)
OPBRIDGE_NORMALIZE_IMAGE_BACKWARD_KERNEL(Float16, F16)
OPBRIDGE_NORMALIZE_IMAGE_BACKWARD_KERNEL(BFloat16, BF16)
#undef OPBRIDGE_NORMALIZE_IMAGE_BACKWARD_KERNEL

// Per channel, (x / 255 - mean) / std as x * scale + shift.
template <typename C>
void ChannelAffine(const NormalizeImageAttrs& attrs, std::vector<C>* scale, std::vector<C>* shift) {
  for (size_t c = 0; c < attrs.std.size(); ++c) {
    scale->push_back(static_cast<C>(1.0 / (255.0 * attrs.std[c])));
    shift->push_back(static_cast<C>(-attrs.mean[c] / attrs.std[c]));
  }
}

bool Empty(const ImageDims& d) { return d.n <= 0 || d.c <= 0 || d.h <= 0 || d.w <= 0; }

// An output that does not fit in the last-level cache is written with
// non-temporal stores (float32 / float64 outputs only).
template <typename T>
bool OutputStreams(const ImageDims& d) {
  return d.n * d.c * d.h * d.w * static_cast<int64_t>(sizeof(T)) > StreamingStoreBytes();
}

}  // namespace

template <typename In, typename Out>
void NormalizeImageForward(const In* image, Out* y, const ImageDims& dims, const NormalizeImageAttrs& attrs,
                           const ParallelFor& parallel_for) {
  if (Empty(dims)) return;
  using C = ComputeType<Out>;
  std::vector<C> scale_values, shift_values;
  ChannelAffine(attrs, &scale_values, &shift_values);
  const C* scale = scale_values.data();
  const C* shift = shift_values.data();
  const ImageDims d = dims;
  const bool channels_last = attrs.channels_last_in;
  const bool stream = OutputStreams<Out>(d);
  // Channels-last: one task reads whole image rows (w * c pixels) and writes
  // c runs of w outputs; planar: rows of w.
  const int64_t rows = channels_last ? d.n * d.h : d.n * d.c * d.h;
  const int64_t row_size = channels_last ? d.w * d.c : d.w;
  DynamicFor(parallel_for, rows, RowGrain(row_size), [=](int64_t begin, int64_t end) {
    ForwardKernel<In, Out>::Rows(image, y, begin, end, d, scale, shift, channels_last, stream);
  });
}

template <typename T>
void NormalizeImageBackward(const T* grad_y, T* grad_image, const ImageDims& dims,
                            const NormalizeImageAttrs& attrs, const ParallelFor& parallel_for) {
  if (Empty(dims)) return;
  using C = ComputeType<T>;
  std::vector<C> scale_values, shift_values;
  ChannelAffine(attrs, &scale_values, &shift_values);
  const C* scale = scale_values.data();
  const ImageDims d = dims;
  const bool channels_last = attrs.channels_last_in;
  const bool stream = OutputStreams<T>(d);
  const int64_t rows = channels_last ? d.n * d.h : d.n * d.c * d.h;
  const int64_t row_size = channels_last ? d.w * d.c : d.w;
  DynamicFor(parallel_for, rows, RowGrain(row_size), [=](int64_t begin, int64_t end) {
    BackwardKernel<T>::Rows(grad_y, grad_image, begin, end, d, scale, channels_last, stream);
  });
}

template void NormalizeImageForward<uint8_t, float>(const uint8_t*, float*, const ImageDims&,
                                                    const NormalizeImageAttrs&, const ParallelFor&);
template void NormalizeImageForward<float, float>(const float*, float*, const ImageDims&,
                                                  const NormalizeImageAttrs&, const ParallelFor&);
template void NormalizeImageForward<double, double>(const double*, double*, const ImageDims&,
                                                    const NormalizeImageAttrs&, const ParallelFor&);
template void NormalizeImageForward<Float16, Float16>(const Float16*, Float16*, const ImageDims&,
                                                      const NormalizeImageAttrs&, const ParallelFor&);
template void NormalizeImageForward<BFloat16, BFloat16>(const BFloat16*, BFloat16*, const ImageDims&,
                                                        const NormalizeImageAttrs&, const ParallelFor&);
template void NormalizeImageBackward<float>(const float*, float*, const ImageDims&,
                                            const NormalizeImageAttrs&, const ParallelFor&);
template void NormalizeImageBackward<double>(const double*, double*, const ImageDims&,
                                             const NormalizeImageAttrs&, const ParallelFor&);
template void NormalizeImageBackward<Float16>(const Float16*, Float16*, const ImageDims&,
                                              const NormalizeImageAttrs&, const ParallelFor&);
template void NormalizeImageBackward<BFloat16>(const BFloat16*, BFloat16*, const ImageDims&,
                                               const NormalizeImageAttrs&, const ParallelFor&);

ImageDims ImageDimsOf(const Shape& image, bool channels_last) {
  return channels_last ? ImageDims{image[0], image[3], image[1], image[2]}
                       : ImageDims{image[0], image[1], image[2], image[3]};
}

Status LaunchNormalizeImage(const KernelArgs& args) {
  const NormalizeImageAttrs attrs{args.attrs[0].numbers, args.attrs[1].numbers, args.attrs[2].number != 0.0};
  const ImageDims dims = ImageDimsOf(args.input_infos[0].shape, attrs.channels_last_in);
  const std::string& dtype = args.input_infos[0].dtype;
  if (dtype == "uint8") {
    NormalizeImageForward<uint8_t, float>(static_cast<const uint8_t*>(args.inputs[0]),
                                          static_cast<float*>(args.outputs[0]), dims, attrs,
                                          args.parallel_for);
    return Status::Ok();
  }
  return DispatchFloatingOrHalf(kNormalizeImageSpec, "image", dtype, [&](auto tag) {
    using T = decltype(tag);
    NormalizeImageForward<T, T>(static_cast<const T*>(args.inputs[0]), static_cast<T*>(args.outputs[0]), dims,
                                attrs, args.parallel_for);
  });
}

// Backward input: grad_y [N, C, H, W]; output: grad_image in the image's layout.
Status LaunchNormalizeImageBackward(const KernelArgs& args) {
  const Shape& g = args.input_infos[0].shape;
  const ImageDims dims{g[0], g[1], g[2], g[3]};
  const NormalizeImageAttrs attrs{std::vector<double>(args.attrs[1].numbers.size(), 0.0),
                                  args.attrs[1].numbers, args.attrs[2].number != 0.0};
  return DispatchFloatingOrHalf(kNormalizeImageSpec, "grad_y", args.input_infos[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    NormalizeImageBackward<T>(static_cast<const T*>(args.inputs[0]), static_cast<T*>(args.outputs[0]), dims,
                              attrs, args.parallel_for);
  });
}

}  // namespace opbridge
#endif  // HWY_ONCE
