// PyTorch binding of bias_gelu: CPU, Meta and Autograd kernels.
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <string>
#include <string_view>
#include <tuple>

#include "core/checks.h"
#include "ops/bias_gelu/kernel.h"
#include "ops/bias_gelu/spec.h"
#include "torch_adapter/adapter.h"

namespace opbridge {
namespace {

using torch_adapter::DtypeName;
using torch_adapter::FailArgument;
using torch_adapter::InfoOf;
using Pair = std::tuple<at::Tensor, at::Tensor>;

bool UseTanh(std::string_view approximate) {
  bool use_tanh = false;
  torch_adapter::ThrowIfError(ParseGeluApproximate(std::string(approximate), &use_tanh));
  return use_tanh;
}

at::Tensor BiasGeluCpu(const at::Tensor& x, const at::Tensor& bias, std::string_view approximate) {
  return torch_adapter::RunForward(kBiasGeluSpec, {x, bias}, {std::string(approximate)})[0];
}

at::Tensor BiasGeluMeta(const at::Tensor& x, const at::Tensor& bias, std::string_view approximate) {
  return torch_adapter::MetaForward(kBiasGeluSpec, {x, bias}, {std::string(approximate)})[0];
}

void CheckBackwardArgs(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& bias) {
  std::vector<TensorInfo> outputs;
  torch_adapter::ThrowIfError(InferBiasGelu({InfoOf(x), InfoOf(bias)}, &outputs));
  if (grad_y.scalar_type() != x.scalar_type() || !grad_y.sym_sizes().equals(x.sym_sizes())) {
    FailArgument(kBiasGeluSpec, "grad_y",
                 "must match x (" + DtypeName(x.scalar_type()) + ", " + FormatShape(InfoOf(x).shape) +
                     "), got " + DtypeName(grad_y.scalar_type()) + ", " + FormatShape(InfoOf(grad_y).shape));
  }
}

Pair BiasGeluBackwardCpu(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& bias,
                         std::string_view approximate, bool bias_grad) {
  CheckBackwardArgs(grad_y, x, bias);
  const BiasGeluAttrs attrs{UseTanh(approximate)};
  const at::Tensor g = grad_y.contiguous();
  const at::Tensor xc = x.contiguous();
  const at::Tensor b = bias.contiguous();
  const int64_t cols = xc.size(-1);
  const int64_t rows = cols == 0 ? 0 : xc.numel() / cols;
  at::Tensor grad_x = at::empty(xc.sizes(), xc.options());
  at::Tensor grad_bias = at::empty({bias_grad ? cols : 0}, b.options());
  torch_adapter::ThrowIfError(DispatchFloating(kBiasGeluSpec, "x", DtypeName(x.scalar_type()), [&](auto tag) {
    using T = decltype(tag);
    BiasGeluBackward<T>(g.const_data_ptr<T>(), xc.const_data_ptr<T>(), b.const_data_ptr<T>(),
                        grad_x.mutable_data_ptr<T>(), bias_grad ? grad_bias.mutable_data_ptr<T>() : nullptr,
                        rows, cols, attrs, torch_adapter::TorchParallelFor());
  }));
  return {grad_x, grad_bias};
}

Pair BiasGeluBackwardMeta(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& bias,
                          std::string_view approximate, bool bias_grad) {
  CheckBackwardArgs(grad_y, x, bias);
  UseTanh(approximate);
  const c10::SymInt cols = x.sym_size(-1);
  return {at::empty_symint(x.sym_sizes(), x.options()),
          at::empty_symint({bias_grad ? cols : c10::SymInt(0)}, bias.options())};
}

class BiasGeluFunction : public torch::autograd::Function<BiasGeluFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& bias, std::string_view approximate) {
    at::AutoDispatchBelowADInplaceOrView guard;
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("opbridge::bias_gelu", "")
                         .typed<at::Tensor(const at::Tensor&, const at::Tensor&, std::string_view)>();
    ctx->save_for_backward({x, bias});
    ctx->saved_data["approximate"] = std::string(approximate);
    return op.call(x, bias, approximate);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    static auto op =
        c10::Dispatcher::singleton()
            .findSchemaOrThrow("opbridge::bias_gelu_backward", "")
            .typed<Pair(const at::Tensor&, const at::Tensor&, const at::Tensor&, std::string_view, bool)>();
    const auto saved = ctx->get_saved_variables();
    const bool bias_grad = ctx->needs_input_grad(1);
    const std::string approximate = ctx->saved_data["approximate"].toStringRef();
    auto [grad_x, grad_bias] = op.call(grads[0], saved[0], saved[1], approximate, bias_grad);
    return {grad_x, bias_grad ? grad_bias : at::Tensor(), at::Tensor()};
  }
};

at::Tensor BiasGeluAutograd(const at::Tensor& x, const at::Tensor& bias, std::string_view approximate) {
  return BiasGeluFunction::apply(x, bias, approximate);
}

}  // namespace
}  // namespace opbridge

TORCH_LIBRARY_FRAGMENT(opbridge, m) { opbridge::torch_adapter::DefineOp(m, opbridge::kBiasGeluSpec); }

TORCH_LIBRARY_IMPL(opbridge, CPU, m) {
  m.impl("bias_gelu", &opbridge::BiasGeluCpu);
  m.impl("bias_gelu_backward", &opbridge::BiasGeluBackwardCpu);
}

TORCH_LIBRARY_IMPL(opbridge, Meta, m) {
  m.impl("bias_gelu", &opbridge::BiasGeluMeta);
  m.impl("bias_gelu_backward", &opbridge::BiasGeluBackwardMeta);
}

TORCH_LIBRARY_IMPL(opbridge, Autograd, m) { m.impl("bias_gelu", &opbridge::BiasGeluAutograd); }
