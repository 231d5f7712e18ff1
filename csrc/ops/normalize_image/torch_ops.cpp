// PyTorch binding of normalize_image: CPU, Meta and Autograd kernels.
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <vector>

#include "core/checks.h"
#include "ops/normalize_image/kernel.h"
#include "ops/normalize_image/spec.h"
#include "torch_adapter/adapter.h"

namespace opbridge {
namespace {

using torch_adapter::DtypeName;
using torch_adapter::FailArgument;
using torch_adapter::InfoOf;

std::vector<AttrValue> AttrsOf(c10::ArrayRef<double> mean, c10::ArrayRef<double> std, bool channels_last_in) {
  return {AttrValue(mean.vec()), AttrValue(std.vec()), AttrValue(channels_last_in ? 1.0 : 0.0)};
}

at::Tensor NormalizeImageCpu(const at::Tensor& image, c10::ArrayRef<double> mean, c10::ArrayRef<double> std,
                             bool channels_last_in) {
  return torch_adapter::RunForward(kNormalizeImageSpec, {image}, AttrsOf(mean, std, channels_last_in))[0];
}

// [N, H, W, C] -> [N, C, H, W] (or unchanged), keeping symbolic sizes.
std::vector<c10::SymInt> ChannelsFirstSizes(const at::Tensor& t, bool channels_last) {
  const auto s = t.sym_sizes();
  if (!channels_last) return s.vec();
  return {s[0], s[3], s[1], s[2]};
}

at::Tensor NormalizeImageMeta(const at::Tensor& image, c10::ArrayRef<double> mean, c10::ArrayRef<double> std,
                              bool channels_last_in) {
  std::vector<TensorInfo> outputs;
  torch_adapter::ThrowIfError(
      InferWithAttrs(kNormalizeImageSpec, {InfoOf(image)}, AttrsOf(mean, std, channels_last_in), &outputs));
  const at::ScalarType out_type = image.scalar_type() == at::kByte ? at::kFloat : image.scalar_type();
  return at::empty_symint(ChannelsFirstSizes(image, channels_last_in), image.options().dtype(out_type));
}

// grad_y is a float [N, C, H, W] tensor with std.size() channels.
void CheckBackwardArgs(const at::Tensor& grad_y, c10::ArrayRef<double> std) {
  torch_adapter::ThrowIfError(
      CheckFloatingDtype(kNormalizeImageSpec, "grad_y", DtypeName(grad_y.scalar_type())));
  torch_adapter::ThrowIfError(
      CheckRank(kNormalizeImageSpec, "grad_y", InfoOf(grad_y).shape, 4, "[N, C, H, W]"));
  const std::optional<int64_t> channels = grad_y.sym_size(1).maybe_as_int();
  if (channels.has_value() && *channels != static_cast<int64_t>(std.size())) {
    FailArgument(kNormalizeImageSpec, "grad_y",
                 "must have " + std::to_string(std.size()) + " channels (one per std value), got shape " +
                     FormatShape(InfoOf(grad_y).shape));
  }
}

at::Tensor NormalizeImageBackwardCpu(const at::Tensor& grad_y, c10::ArrayRef<double> std,
                                     bool channels_last_in) {
  CheckBackwardArgs(grad_y, std);
  const at::Tensor g = grad_y.contiguous();
  const ImageDims dims{g.size(0), g.size(1), g.size(2), g.size(3)};
  const std::vector<int64_t> sizes =
      channels_last_in ? std::vector<int64_t>{dims.n, dims.h, dims.w, dims.c} : g.sizes().vec();
  at::Tensor grad_image = at::empty(sizes, g.options());
  const NormalizeImageAttrs attrs{std::vector<double>(std.size(), 0.0), std.vec(), channels_last_in};
  torch_adapter::ThrowIfError(
      DispatchFloating(kNormalizeImageSpec, "grad_y", DtypeName(g.scalar_type()), [&](auto tag) {
        using T = decltype(tag);
        NormalizeImageBackward<T>(g.const_data_ptr<T>(), grad_image.mutable_data_ptr<T>(), dims, attrs,
                                  torch_adapter::TorchParallelFor());
      }));
  return grad_image;
}

at::Tensor NormalizeImageBackwardMeta(const at::Tensor& grad_y, c10::ArrayRef<double> std,
                                      bool channels_last_in) {
  CheckBackwardArgs(grad_y, std);
  const auto s = grad_y.sym_sizes();
  if (!channels_last_in) return at::empty_symint(s, grad_y.options());
  return at::empty_symint({s[0], s[2], s[3], s[1]}, grad_y.options());
}

class NormalizeImageFunction : public torch::autograd::Function<NormalizeImageFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& image,
                            c10::ArrayRef<double> mean, c10::ArrayRef<double> std, bool channels_last_in) {
    at::AutoDispatchBelowADInplaceOrView guard;
    static auto op =
        c10::Dispatcher::singleton()
            .findSchemaOrThrow("opbridge::normalize_image", "")
            .typed<at::Tensor(const at::Tensor&, c10::ArrayRef<double>, c10::ArrayRef<double>, bool)>();
    // The op is affine: the backward needs only std and the layout.
    ctx->saved_data["std"] = std.vec();
    ctx->saved_data["channels_last_in"] = channels_last_in;
    return op.call(image, mean, std, channels_last_in);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("opbridge::normalize_image_backward", "")
                         .typed<at::Tensor(const at::Tensor&, c10::ArrayRef<double>, bool)>();
    const std::vector<double> std = ctx->saved_data["std"].toDoubleVector();
    at::Tensor grad_image = op.call(grads[0], std, ctx->saved_data["channels_last_in"].toBool());
    return {grad_image, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor NormalizeImageAutograd(const at::Tensor& image, c10::ArrayRef<double> mean,
                                  c10::ArrayRef<double> std, bool channels_last_in) {
  return NormalizeImageFunction::apply(image, mean, std, channels_last_in);
}

}  // namespace
}  // namespace opbridge

TORCH_LIBRARY_FRAGMENT(opbridge, m) { opbridge::torch_adapter::DefineOp(m, opbridge::kNormalizeImageSpec); }

TORCH_LIBRARY_IMPL(opbridge, CPU, m) {
  m.impl("normalize_image", &opbridge::NormalizeImageCpu);
  m.impl("normalize_image_backward", &opbridge::NormalizeImageBackwardCpu);
}

TORCH_LIBRARY_IMPL(opbridge, Meta, m) {
  m.impl("normalize_image", &opbridge::NormalizeImageMeta);
  m.impl("normalize_image_backward", &opbridge::NormalizeImageBackwardMeta);
}

TORCH_LIBRARY_IMPL(opbridge, Autograd, m) { m.impl("normalize_image", &opbridge::NormalizeImageAutograd); }
