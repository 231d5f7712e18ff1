// PyTorch binding of scaled_clamp: CPU, Meta and Autograd kernels.
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "core/checks.h"
#include "ops/scaled_clamp/kernel.h"
#include "ops/scaled_clamp/spec.h"
#include "torch_adapter/adapter.h"

namespace opbridge {
namespace {

using torch_adapter::FailArgument;

at::Tensor ScaledClampCpu(const at::Tensor& x, double scale, double min_val, double max_val) {
  return torch_adapter::RunForward(kScaledClampSpec, {x}, {scale, min_val, max_val})[0];
}

at::Tensor ScaledClampMeta(const at::Tensor& x, double, double, double) {
  return torch_adapter::MetaForward(kScaledClampSpec, {x})[0];
}

void CheckGrad(const at::Tensor& grad_y, const at::Tensor& x) {
  if (grad_y.scalar_type() != x.scalar_type() || !grad_y.sym_sizes().equals(x.sym_sizes())) {
    FailArgument(kScaledClampSpec, "grad_y",
                 "must match x (" + torch_adapter::DtypeName(x.scalar_type()) + ", " +
                     FormatShape(torch_adapter::InfoOf(x).shape) + "), got " +
                     torch_adapter::DtypeName(grad_y.scalar_type()) + ", " +
                     FormatShape(torch_adapter::InfoOf(grad_y).shape));
  }
}

at::Tensor ScaledClampBackwardCpu(const at::Tensor& grad_y, const at::Tensor& x, double scale, double min_val,
                                  double max_val) {
  torch_adapter::ThrowIfError(
      CheckFloatingOrHalfDtype(kScaledClampSpec, "x", torch_adapter::DtypeName(x.scalar_type())));
  CheckGrad(grad_y, x);
  const at::Tensor g = grad_y.contiguous();
  const at::Tensor xc = x.contiguous();
  at::Tensor grad_x = at::empty(xc.sizes(), xc.options());
  const ScaledClampAttrs attrs{scale, min_val, max_val};
  torch_adapter::ThrowIfError(
      DispatchFloatingOrHalf(kScaledClampSpec, "x", torch_adapter::DtypeName(x.scalar_type()), [&](auto tag) {
        using T = decltype(tag);
        ScaledClampBackward<T>(
            static_cast<const T*>(g.const_data_ptr()), static_cast<const T*>(xc.const_data_ptr()),
            static_cast<T*>(grad_x.mutable_data_ptr()), xc.numel(), attrs, torch_adapter::TorchParallelFor());
      }));
  return grad_x;
}

at::Tensor ScaledClampBackwardMeta(const at::Tensor& grad_y, const at::Tensor& x, double, double, double) {
  torch_adapter::ThrowIfError(
      CheckFloatingOrHalfDtype(kScaledClampSpec, "x", torch_adapter::DtypeName(x.scalar_type())));
  CheckGrad(grad_y, x);
  return at::empty_symint(x.sym_sizes(), x.options());
}

class ScaledClampFunction : public torch::autograd::Function<ScaledClampFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, double scale,
                            double min_val, double max_val) {
    at::AutoDispatchBelowADInplaceOrView guard;
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("opbridge::scaled_clamp", "")
                         .typed<at::Tensor(const at::Tensor&, double, double, double)>();
    ctx->save_for_backward({x});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["min_val"] = min_val;
    ctx->saved_data["max_val"] = max_val;
    return op.call(x, scale, min_val, max_val);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("opbridge::scaled_clamp_backward", "")
                         .typed<at::Tensor(const at::Tensor&, const at::Tensor&, double, double, double)>();
    const at::Tensor x = ctx->get_saved_variables()[0];
    at::Tensor grad_x = op.call(grads[0], x, ctx->saved_data["scale"].toDouble(),
                                ctx->saved_data["min_val"].toDouble(), ctx->saved_data["max_val"].toDouble());
    return {grad_x, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor ScaledClampAutograd(const at::Tensor& x, double scale, double min_val, double max_val) {
  // Without anything to differentiate, skip the autograd node (most of the
  // cost of a call on a small input).
  if (!at::GradMode::is_enabled() || !x.requires_grad()) {
    at::AutoDispatchBelowADInplaceOrView guard;
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("opbridge::scaled_clamp", "")
                         .typed<at::Tensor(const at::Tensor&, double, double, double)>();
    return op.call(x, scale, min_val, max_val);
  }
  return ScaledClampFunction::apply(x, scale, min_val, max_val);
}

}  // namespace
}  // namespace opbridge

TORCH_LIBRARY_FRAGMENT(opbridge, m) { opbridge::torch_adapter::DefineOp(m, opbridge::kScaledClampSpec); }

TORCH_LIBRARY_IMPL(opbridge, CPU, m) {
  m.impl("scaled_clamp", &opbridge::ScaledClampCpu);
  m.impl("scaled_clamp_backward", &opbridge::ScaledClampBackwardCpu);
}

TORCH_LIBRARY_IMPL(opbridge, Meta, m) {
  m.impl("scaled_clamp", &opbridge::ScaledClampMeta);
  m.impl("scaled_clamp_backward", &opbridge::ScaledClampBackwardMeta);
}

TORCH_LIBRARY_IMPL(opbridge, Autograd, m) { m.impl("scaled_clamp", &opbridge::ScaledClampAutograd); }
