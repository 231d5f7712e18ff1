#include "ops/normalize_image/kernel.h"

#include <cstdint>
#include <vector>

#include "opbridge/checks.h"
#include "ops/normalize_image/spec.h"

namespace opbridge {

namespace {

template <typename Out>
void ChannelAffine(const NormalizeImageAttrs& attrs, std::vector<Out>* scale, std::vector<Out>* shift) {
  for (size_t c = 0; c < attrs.std.size(); ++c) {
    scale->push_back(static_cast<Out>(1.0 / (255.0 * attrs.std[c])));
    shift->push_back(static_cast<Out>(-attrs.mean[c] / attrs.std[c]));
  }
}

}  // namespace

template <typename In, typename Out>
void NormalizeImageForward(const In* image, Out* y, const ImageDims& dims, const NormalizeImageAttrs& attrs,
                           const ParallelFor& parallel_for) {
  if (dims.n <= 0 || dims.c <= 0 || dims.h <= 0 || dims.w <= 0) return;
  std::vector<Out> scale_values, shift_values;
  ChannelAffine(attrs, &scale_values, &shift_values);
  const Out* scale = scale_values.data();
  const Out* shift = shift_values.data();
  const ImageDims d = dims;
  if (attrs.channels_last_in) {
    // One task per image row: read the row's w * c pixels once, write c
    // contiguous runs of w outputs.
    parallel_for(d.n * d.h, RowGrain(d.w * d.c), [=](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t n = r / d.h;
        const int64_t h = r % d.h;
        const In* row = image + r * d.w * d.c;
        for (int64_t c = 0; c < d.c; ++c) {
          Out* out = y + ((n * d.c + c) * d.h + h) * d.w;
          const Out s = scale[c];
          const Out t = shift[c];
          for (int64_t w = 0; w < d.w; ++w) out[w] = static_cast<Out>(row[w * d.c + c]) * s + t;
        }
      }
    });
  } else {
    parallel_for(d.n * d.c * d.h, RowGrain(d.w), [=](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t c = (r / d.h) % d.c;
        const In* row = image + r * d.w;
        Out* out = y + r * d.w;
        const Out s = scale[c];
        const Out t = shift[c];
        for (int64_t w = 0; w < d.w; ++w) out[w] = static_cast<Out>(row[w]) * s + t;
      }
    });
  }
}

template <typename T>
void NormalizeImageBackward(const T* grad_y, T* grad_image, const ImageDims& dims,
                            const NormalizeImageAttrs& attrs, const ParallelFor& parallel_for) {
  if (dims.n <= 0 || dims.c <= 0 || dims.h <= 0 || dims.w <= 0) return;
  std::vector<T> scale_values, shift_values;
  ChannelAffine(attrs, &scale_values, &shift_values);
  const T* scale = scale_values.data();
  const ImageDims d = dims;
  if (attrs.channels_last_in) {
    parallel_for(d.n * d.h, RowGrain(d.w * d.c), [=](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t n = r / d.h;
        const int64_t h = r % d.h;
        T* row = grad_image + r * d.w * d.c;
        for (int64_t c = 0; c < d.c; ++c) {
          const T* g = grad_y + ((n * d.c + c) * d.h + h) * d.w;
          for (int64_t w = 0; w < d.w; ++w) row[w * d.c + c] = g[w] * scale[c];
        }
      }
    });
  } else {
    parallel_for(d.n * d.c * d.h, RowGrain(d.w), [=](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T s = scale[(r / d.h) % d.c];
        for (int64_t w = 0; w < d.w; ++w) grad_image[r * d.w + w] = grad_y[r * d.w + w] * s;
      }
    });
  }
}

template void NormalizeImageForward<uint8_t, float>(const uint8_t*, float*, const ImageDims&,
                                                    const NormalizeImageAttrs&, const ParallelFor&);
template void NormalizeImageForward<float, float>(const float*, float*, const ImageDims&,
                                                  const NormalizeImageAttrs&, const ParallelFor&);
template void NormalizeImageForward<double, double>(const double*, double*, const ImageDims&,
                                                    const NormalizeImageAttrs&, const ParallelFor&);
template void NormalizeImageBackward<float>(const float*, float*, const ImageDims&,
                                            const NormalizeImageAttrs&, const ParallelFor&);
template void NormalizeImageBackward<double>(const double*, double*, const ImageDims&,
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
  return DispatchFloating(kNormalizeImageSpec, "image", dtype, [&](auto tag) {
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
  return DispatchFloating(kNormalizeImageSpec, "grad_y", args.input_infos[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    NormalizeImageBackward<T>(static_cast<const T*>(args.inputs[0]), static_cast<T*>(args.outputs[0]), dims,
                              attrs, args.parallel_for);
  });
}

}  // namespace opbridge
