// PyTorch binding of rotary_embedding: CPU, Meta and Autograd kernels.
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <tuple>

#include "core/checks.h"
#include "ops/rotary_embedding/kernel.h"
#include "ops/rotary_embedding/spec.h"
#include "torch_adapter/adapter.h"

namespace opbridge {
namespace {

using torch_adapter::DtypeName;
using torch_adapter::FailArgument;
using torch_adapter::InfoOf;
using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

at::Tensor RotaryEmbeddingCpu(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                              bool interleaved) {
  return torch_adapter::RunForward(kRotaryEmbeddingSpec, {x, cos, sin}, {interleaved ? 1.0 : 0.0})[0];
}

at::Tensor RotaryEmbeddingMeta(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool) {
  return torch_adapter::MetaForward(kRotaryEmbeddingSpec, {x, cos, sin})[0];
}

void CheckBackwardArgs(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& cos,
                       const at::Tensor& sin) {
  std::vector<TensorInfo> outputs;
  torch_adapter::ThrowIfError(InferRotaryEmbedding({InfoOf(x), InfoOf(cos), InfoOf(sin)}, &outputs));
  if (grad_y.scalar_type() != x.scalar_type() || !grad_y.sym_sizes().equals(x.sym_sizes())) {
    FailArgument(kRotaryEmbeddingSpec, "grad_y",
                 "must match x (" + DtypeName(x.scalar_type()) + ", " + FormatShape(InfoOf(x).shape) +
                     "), got " + DtypeName(grad_y.scalar_type()) + ", " + FormatShape(InfoOf(grad_y).shape));
  }
}

Triple RotaryEmbeddingBackwardCpu(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& cos,
                                  const at::Tensor& sin, bool interleaved, bool cos_sin_grad) {
  CheckBackwardArgs(grad_y, x, cos, sin);
  const at::Tensor g = grad_y.contiguous();
  const at::Tensor xc = x.contiguous();
  const at::Tensor cc = cos.contiguous();
  const at::Tensor sc = sin.contiguous();
  const RotaryDims dims = RotaryDimsOf(InfoOf(xc).shape, InfoOf(cc).shape);
  at::Tensor grad_x = at::empty(xc.sizes(), xc.options());
  at::Tensor grad_cos = cos_sin_grad ? at::empty(cc.sizes(), cc.options()) : at::empty({0}, cc.options());
  at::Tensor grad_sin = cos_sin_grad ? at::empty(sc.sizes(), sc.options()) : at::empty({0}, sc.options());
  torch_adapter::ThrowIfError(
      DispatchFloating(kRotaryEmbeddingSpec, "x", DtypeName(x.scalar_type()), [&](auto tag) {
        using T = decltype(tag);
        RotaryEmbeddingBackward<T>(g.const_data_ptr<T>(), xc.const_data_ptr<T>(), cc.const_data_ptr<T>(),
                                   sc.const_data_ptr<T>(), grad_x.mutable_data_ptr<T>(),
                                   cos_sin_grad ? grad_cos.mutable_data_ptr<T>() : nullptr,
                                   cos_sin_grad ? grad_sin.mutable_data_ptr<T>() : nullptr, dims,
                                   RotaryAttrs{interleaved}, torch_adapter::TorchParallelFor());
      }));
  return {grad_x, grad_cos, grad_sin};
}

Triple RotaryEmbeddingBackwardMeta(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& cos,
                                   const at::Tensor& sin, bool, bool cos_sin_grad) {
  CheckBackwardArgs(grad_y, x, cos, sin);
  auto like = [&](const at::Tensor& t) {
    return cos_sin_grad ? at::empty_symint(t.sym_sizes(), t.options()) : at::empty({0}, t.options());
  };
  return {at::empty_symint(x.sym_sizes(), x.options()), like(cos), like(sin)};
}

class RotaryEmbeddingFunction : public torch::autograd::Function<RotaryEmbeddingFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos,
                            const at::Tensor& sin, bool interleaved) {
    at::AutoDispatchBelowADInplaceOrView guard;
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("opbridge::rotary_embedding", "")
                         .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, bool)>();
    ctx->save_for_backward({x, cos, sin});
    ctx->saved_data["interleaved"] = interleaved;
    return op.call(x, cos, sin, interleaved);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("opbridge::rotary_embedding_backward", "")
                         .typed<Triple(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                       const at::Tensor&, bool, bool)>();
    const auto saved = ctx->get_saved_variables();
    // cos and sin are usually fixed tables: their gradients (a reduction
    // over batch and heads) are computed only when asked for.
    const bool cos_sin_grad = ctx->needs_input_grad(1) || ctx->needs_input_grad(2);
    auto [grad_x, grad_cos, grad_sin] = op.call(grads[0], saved[0], saved[1], saved[2],
                                                ctx->saved_data["interleaved"].toBool(), cos_sin_grad);
    return {grad_x, ctx->needs_input_grad(1) ? grad_cos : at::Tensor(),
            ctx->needs_input_grad(2) ? grad_sin : at::Tensor(), at::Tensor()};
  }
};

at::Tensor RotaryEmbeddingAutograd(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                   bool interleaved) {
  return RotaryEmbeddingFunction::apply(x, cos, sin, interleaved);
}

}  // namespace
}  // namespace opbridge

TORCH_LIBRARY_FRAGMENT(opbridge, m) { opbridge::torch_adapter::DefineOp(m, opbridge::kRotaryEmbeddingSpec); }

TORCH_LIBRARY_IMPL(opbridge, CPU, m) {
  m.impl("rotary_embedding", &opbridge::RotaryEmbeddingCpu);
  m.impl("rotary_embedding_backward", &opbridge::RotaryEmbeddingBackwardCpu);
}

TORCH_LIBRARY_IMPL(opbridge, Meta, m) {
  m.impl("rotary_embedding", &opbridge::RotaryEmbeddingMeta);
  m.impl("rotary_embedding_backward", &opbridge::RotaryEmbeddingBackwardMeta);
}

TORCH_LIBRARY_IMPL(opbridge, Autograd, m) { m.impl("rotary_embedding", &opbridge::RotaryEmbeddingAutograd); }
