// PyTorch binding of rms_norm: CPU, Meta and Autograd kernels.
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <tuple>

#include "core/checks.h"
#include "ops/rms_norm/kernel.h"
#include "ops/rms_norm/spec.h"
#include "torch_adapter/adapter.h"

namespace opbridge {
namespace {

using torch_adapter::DtypeName;
using torch_adapter::FailArgument;
using torch_adapter::InfoOf;

at::Tensor RmsNormCpu(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                      double eps) {
  return torch_adapter::RunForward(kRmsNormSpec, {x, weight, bias}, {eps})[0];
}

at::Tensor RmsNormMeta(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       double) {
  return torch_adapter::MetaForward(kRmsNormSpec, {x, weight, bias})[0];
}

// The backward's arguments follow the forward's rule; grad_y must match x.
void CheckBackwardArgs(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& weight) {
  std::vector<TensorInfo> outputs;
  torch_adapter::ThrowIfError(InferRmsNorm({InfoOf(x), InfoOf(weight), TensorInfo{false, "", {}}}, &outputs));
  if (grad_y.scalar_type() != x.scalar_type() || !grad_y.sym_sizes().equals(x.sym_sizes())) {
    FailArgument(kRmsNormSpec, "grad_y",
                 "must match x (" + DtypeName(x.scalar_type()) + ", " + FormatShape(InfoOf(x).shape) +
                     "), got " + DtypeName(grad_y.scalar_type()) + ", " + FormatShape(InfoOf(grad_y).shape));
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> RmsNormBackwardCpu(const at::Tensor& grad_y,
                                                                  const at::Tensor& x,
                                                                  const at::Tensor& weight, double eps,
                                                                  bool bias_grad) {
  CheckBackwardArgs(grad_y, x, weight);
  const at::Tensor g = grad_y.contiguous();
  const at::Tensor xc = x.contiguous();
  const at::Tensor w = weight.contiguous();
  const int64_t cols = xc.size(-1);
  const int64_t rows = cols == 0 ? 0 : xc.numel() / cols;
  at::Tensor grad_x = at::empty(xc.sizes(), xc.options());
  at::Tensor grad_weight = at::empty({cols}, w.options());
  at::Tensor grad_bias = at::empty({bias_grad ? cols : 0}, w.options());
  torch_adapter::ThrowIfError(
      DispatchFloatingOrHalf(kRmsNormSpec, "x", DtypeName(x.scalar_type()), [&](auto tag) {
        using T = decltype(tag);
        RmsNormBackward<T>(
            static_cast<const T*>(g.const_data_ptr()), static_cast<const T*>(xc.const_data_ptr()),
            static_cast<const T*>(w.const_data_ptr()), static_cast<T*>(grad_x.mutable_data_ptr()),
            static_cast<T*>(grad_weight.mutable_data_ptr()),
            bias_grad ? static_cast<T*>(grad_bias.mutable_data_ptr()) : nullptr, rows, cols,
            RmsNormAttrs{eps}, torch_adapter::TorchParallelFor());
      }));
  return {grad_x, grad_weight, grad_bias};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> RmsNormBackwardMeta(const at::Tensor& grad_y,
                                                                   const at::Tensor& x,
                                                                   const at::Tensor& weight, double,
                                                                   bool bias_grad) {
  CheckBackwardArgs(grad_y, x, weight);
  const c10::SymInt cols = x.sym_size(-1);
  return {at::empty_symint(x.sym_sizes(), x.options()), at::empty_symint({cols}, weight.options()),
          at::empty_symint({bias_grad ? cols : c10::SymInt(0)}, weight.options())};
}

class RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& weight, const std::optional<at::Tensor>& bias, double eps) {
    at::AutoDispatchBelowADInplaceOrView guard;
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("opbridge::rms_norm", "")
                         .typed<at::Tensor(const at::Tensor&, const at::Tensor&,
                                           const std::optional<at::Tensor>&, double)>();
    ctx->save_for_backward({x, weight});
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["has_bias"] = bias.has_value() && bias->defined();
    return op.call(x, weight, bias, eps);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("opbridge::rms_norm_backward", "")
                         .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
                             const at::Tensor&, const at::Tensor&, const at::Tensor&, double, bool)>();
    const auto saved = ctx->get_saved_variables();
    const bool bias_grad = ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2);
    auto [grad_x, grad_weight, grad_bias] =
        op.call(grads[0], saved[0], saved[1], ctx->saved_data["eps"].toDouble(), bias_grad);
    return {grad_x, grad_weight, bias_grad ? grad_bias : at::Tensor(), at::Tensor()};
  }
};

at::Tensor RmsNormAutograd(const at::Tensor& x, const at::Tensor& weight,
                           const std::optional<at::Tensor>& bias, double eps) {
  // Without anything to differentiate, skip the autograd node: it is most of
  // the cost of a call on a small input.
  const bool bias_grad = bias.has_value() && bias->defined() && bias->requires_grad();
  if (!at::GradMode::is_enabled() || !(x.requires_grad() || weight.requires_grad() || bias_grad)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("opbridge::rms_norm", "")
                         .typed<at::Tensor(const at::Tensor&, const at::Tensor&,
                                           const std::optional<at::Tensor>&, double)>();
    return op.call(x, weight, bias, eps);
  }
  return RmsNormFunction::apply(x, weight, bias, eps);
}

}  // namespace
}  // namespace opbridge

TORCH_LIBRARY_FRAGMENT(opbridge, m) { opbridge::torch_adapter::DefineOp(m, opbridge::kRmsNormSpec); }

TORCH_LIBRARY_IMPL(opbridge, CPU, m) {
  m.impl("rms_norm", &opbridge::RmsNormCpu);
  m.impl("rms_norm_backward", &opbridge::RmsNormBackwardCpu);
}

TORCH_LIBRARY_IMPL(opbridge, Meta, m) {
  m.impl("rms_norm", &opbridge::RmsNormMeta);
  m.impl("rms_norm_backward", &opbridge::RmsNormBackwardMeta);
}

TORCH_LIBRARY_IMPL(opbridge, Autograd, m) { m.impl("rms_norm", &opbridge::RmsNormAutograd); }
