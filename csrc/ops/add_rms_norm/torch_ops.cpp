// PyTorch binding of add_rms_norm: CPU, Meta and Autograd kernels.
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <tuple>

#include "core/checks.h"
#include "ops/add_rms_norm/kernel.h"
#include "ops/add_rms_norm/spec.h"
#include "torch_adapter/adapter.h"

namespace opbridge {
namespace {

using torch_adapter::DtypeName;
using torch_adapter::FailArgument;
using torch_adapter::InfoOf;
using Pair = std::tuple<at::Tensor, at::Tensor>;
using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

Pair AddRmsNormCpu(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                   const std::optional<at::Tensor>& bias, double eps) {
  auto outputs = torch_adapter::RunForward(kAddRmsNormSpec, {x, residual, weight, bias}, {eps});
  return {outputs[0], outputs[1]};
}

Pair AddRmsNormMeta(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                    const std::optional<at::Tensor>& bias, double) {
  auto outputs = torch_adapter::MetaForward(kAddRmsNormSpec, {x, residual, weight, bias});
  return {outputs[0], outputs[1]};
}

void CheckGradLike(const char* argument, const at::Tensor& grad, const at::Tensor& like) {
  if (grad.scalar_type() != like.scalar_type() || !grad.sym_sizes().equals(like.sym_sizes())) {
    FailArgument(kAddRmsNormSpec, argument,
                 "must match residual_out (" + DtypeName(like.scalar_type()) + ", " +
                     FormatShape(InfoOf(like).shape) + "), got " + DtypeName(grad.scalar_type()) + ", " +
                     FormatShape(InfoOf(grad).shape));
  }
}

// The backward's arguments follow the forward's rule.
void CheckBackwardArgs(const at::Tensor& grad_out, const std::optional<at::Tensor>& grad_residual_out,
                       const at::Tensor& residual_out, const at::Tensor& weight) {
  std::vector<TensorInfo> outputs;
  torch_adapter::ThrowIfError(InferAddRmsNorm(
      {InfoOf(residual_out), InfoOf(residual_out), InfoOf(weight), TensorInfo{false, "", {}}}, &outputs));
  CheckGradLike("grad_out", grad_out, residual_out);
  if (grad_residual_out.has_value() && grad_residual_out->defined()) {
    CheckGradLike("grad_residual_out", *grad_residual_out, residual_out);
  }
}

Triple AddRmsNormBackwardCpu(const at::Tensor& grad_out, const std::optional<at::Tensor>& grad_residual_out,
                             const at::Tensor& residual_out, const at::Tensor& weight, double eps,
                             bool bias_grad) {
  CheckBackwardArgs(grad_out, grad_residual_out, residual_out, weight);
  const at::Tensor g = grad_out.contiguous();
  const bool has_gr = grad_residual_out.has_value() && grad_residual_out->defined();
  const at::Tensor gr = has_gr ? grad_residual_out->contiguous() : at::Tensor();
  const at::Tensor s = residual_out.contiguous();
  const at::Tensor w = weight.contiguous();
  const int64_t cols = s.size(-1);
  const int64_t rows = cols == 0 ? 0 : s.numel() / cols;
  at::Tensor grad_sum = at::empty(s.sizes(), s.options());
  at::Tensor grad_weight = at::empty({cols}, w.options());
  at::Tensor grad_bias = at::empty({bias_grad ? cols : 0}, w.options());
  torch_adapter::ThrowIfError(
      DispatchFloating(kAddRmsNormSpec, "x", DtypeName(s.scalar_type()), [&](auto tag) {
        using T = decltype(tag);
        AddRmsNormBackward<T>(g.const_data_ptr<T>(), has_gr ? gr.const_data_ptr<T>() : nullptr,
                              s.const_data_ptr<T>(), w.const_data_ptr<T>(), grad_sum.mutable_data_ptr<T>(),
                              grad_weight.mutable_data_ptr<T>(),
                              bias_grad ? grad_bias.mutable_data_ptr<T>() : nullptr, rows, cols,
                              AddRmsNormAttrs{eps}, torch_adapter::TorchParallelFor());
      }));
  return {grad_sum, grad_weight, grad_bias};
}

Triple AddRmsNormBackwardMeta(const at::Tensor& grad_out, const std::optional<at::Tensor>& grad_residual_out,
                              const at::Tensor& residual_out, const at::Tensor& weight, double,
                              bool bias_grad) {
  CheckBackwardArgs(grad_out, grad_residual_out, residual_out, weight);
  const c10::SymInt cols = residual_out.sym_size(-1);
  return {at::empty_symint(residual_out.sym_sizes(), residual_out.options()),
          at::empty_symint({cols}, weight.options()),
          at::empty_symint({bias_grad ? cols : c10::SymInt(0)}, weight.options())};
}

class AddRmsNormFunction : public torch::autograd::Function<AddRmsNormFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                                                const at::Tensor& residual, const at::Tensor& weight,
                                                const std::optional<at::Tensor>& bias, double eps) {
    at::AutoDispatchBelowADInplaceOrView guard;
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("opbridge::add_rms_norm", "")
                         .typed<Pair(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                     const std::optional<at::Tensor>&, double)>();
    auto [out, residual_out] = op.call(x, residual, weight, bias, eps);
    // residual_out is all the backward needs (rstd is recomputed from it).
    ctx->save_for_backward({residual_out, weight});
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["has_bias"] = bias.has_value() && bias->defined();
    return {out, residual_out};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("opbridge::add_rms_norm_backward", "")
                         .typed<Triple(const at::Tensor&, const std::optional<at::Tensor>&, const at::Tensor&,
                                       const at::Tensor&, double, bool)>();
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& residual_out = saved[0];
    const bool bias_grad = ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(3);
    // Only residual_out may have been used: out then contributes nothing.
    const at::Tensor grad_out = grads[0].defined() ? grads[0] : at::zeros_like(residual_out);
    std::optional<at::Tensor> grad_residual_out;
    if (grads[1].defined()) grad_residual_out = grads[1];
    auto [grad_sum, grad_weight, grad_bias] = op.call(grad_out, grad_residual_out, residual_out, saved[1],
                                                      ctx->saved_data["eps"].toDouble(), bias_grad);
    return {grad_sum, grad_sum, grad_weight, bias_grad ? grad_bias : at::Tensor(), at::Tensor()};
  }
};

Pair AddRmsNormAutograd(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                        const std::optional<at::Tensor>& bias, double eps) {
  auto outputs = AddRmsNormFunction::apply(x, residual, weight, bias, eps);
  return {outputs[0], outputs[1]};
}

}  // namespace
}  // namespace opbridge

TORCH_LIBRARY_FRAGMENT(opbridge, m) { opbridge::torch_adapter::DefineOp(m, opbridge::kAddRmsNormSpec); }

TORCH_LIBRARY_IMPL(opbridge, CPU, m) {
  m.impl("add_rms_norm", &opbridge::AddRmsNormCpu);
  m.impl("add_rms_norm_backward", &opbridge::AddRmsNormBackwardCpu);
}

TORCH_LIBRARY_IMPL(opbridge, Meta, m) {
  m.impl("add_rms_norm", &opbridge::AddRmsNormMeta);
  m.impl("add_rms_norm_backward", &opbridge::AddRmsNormBackwardMeta);
}

TORCH_LIBRARY_IMPL(opbridge, Autograd, m) { m.impl("add_rms_norm", &opbridge::AddRmsNormAutograd); }
