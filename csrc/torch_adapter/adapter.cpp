#include "torch_adapter/adapter.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "core/checks.h"
#include "core/runtime_checks.h"

namespace opbridge::torch_adapter {

std::string DtypeName(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return "float32";
    case at::kDouble:
      return "float64";
    case at::kHalf:
      return "float16";
    case at::kBFloat16:
      return "bfloat16";
    case at::kByte:
      return "uint8";
    case at::kChar:
      return "int8";
    case at::kShort:
      return "int16";
    case at::kInt:
      return "int32";
    case at::kLong:
      return "int64";
    case at::kBool:
      return "bool";
    default:
      return std::string(c10::toString(type));
  }
}

TensorInfo InfoOf(const std::optional<at::Tensor>& tensor) {
  TensorInfo info;
  if (!tensor.has_value() || !tensor->defined()) {
    info.present = false;
    return info;
  }
  info.dtype = DtypeName(tensor->scalar_type());
  for (const c10::SymInt& size : tensor->sym_sizes()) {
    const std::optional<int64_t> value = size.maybe_as_int();
    info.shape.push_back(value.has_value() ? *value : -1);
  }
  return info;
}

ParallelFor TorchParallelFor() {
  return [](int64_t n, int64_t grain, const RangeBody& body) {
    if (n <= 0) return;
    at::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) { body(begin, end); });
  };
}

void ThrowIfError(const Status& status) { TORCH_CHECK(status.ok(), status.message()); }

void FailArgument(const OpSpec& spec, const char* argument, const std::string& detail) {
  ThrowIfError(ArgError(spec, argument, detail));
  TORCH_INTERNAL_ASSERT(false, "unreachable");
}

void DefineOp(torch::Library& library, const OpSpec& spec) {
  // pt2_compliant: the ops trace under torch.compile / torch.export without
  // graph breaks (tested).
  library.def(torch::schema(spec.TorchSchema().c_str()), {at::Tag::pt2_compliant_tag});
  library.def(torch::schema(spec.backward_schema), {at::Tag::pt2_compliant_tag});
}

namespace {

std::vector<TensorInfo> InfosOf(const std::vector<std::optional<at::Tensor>>& inputs) {
  std::vector<TensorInfo> infos;
  infos.reserve(inputs.size());
  for (const auto& input : inputs) infos.push_back(InfoOf(input));
  return infos;
}

std::vector<TensorInfo> Infer(const OpSpec& spec, const std::vector<TensorInfo>& infos,
                              const std::vector<AttrValue>* attrs) {
  std::vector<TensorInfo> outputs;
  ThrowIfError(attrs != nullptr ? InferWithAttrs(spec, infos, *attrs, &outputs)
                                : spec.infer(infos, &outputs));
  return outputs;
}

at::ScalarType ScalarTypeOf(const std::string& dtype) {
  if (dtype == "float32") return at::kFloat;
  if (dtype == "float64") return at::kDouble;
  if (dtype == "float16") return at::kHalf;
  if (dtype == "bfloat16") return at::kBFloat16;
  if (dtype == "uint8") return at::kByte;
  TORCH_CHECK(false, "opbridge: no torch dtype for ", dtype);
}

}  // namespace

std::vector<at::Tensor> RunForward(const OpSpec& spec, const std::vector<std::optional<at::Tensor>>& inputs,
                                   const std::vector<AttrValue>& attrs) {
  KernelArgs args;
  args.input_infos = InfosOf(inputs);
  args.output_infos = Infer(spec, args.input_infos, &attrs);
  std::vector<at::Tensor> contiguous;
  contiguous.reserve(inputs.size());
  for (const auto& input : inputs) {
    if (input.has_value() && input->defined()) {
      TORCH_CHECK(input->device().is_cpu(), spec.name, ": expected CPU tensors, got ", input->device());
      contiguous.push_back(input->contiguous());
      args.inputs.push_back(contiguous.back().const_data_ptr());
    } else {
      contiguous.emplace_back();
      args.inputs.push_back(nullptr);
    }
  }
  const at::TensorOptions options = contiguous[0].options();
  std::vector<at::Tensor> outputs;
  for (const TensorInfo& info : args.output_infos) {
    outputs.push_back(at::empty(info.shape, options.dtype(ScalarTypeOf(info.dtype))));
    args.outputs.push_back(outputs.back().mutable_data_ptr());
  }
  args.attrs = attrs;
  args.parallel_for = TorchParallelFor();
  if (RuntimeChecksEnabled()) {
    for (size_t i = 0; i < contiguous.size(); ++i) {
      TORCH_CHECK(!contiguous[i].defined() || contiguous[i].is_contiguous(), spec.name, ": input ",
                  spec.inputs[i].name, " reached the kernel non-contiguous (OPBRIDGE_CHECK)");
    }
    ThrowIfError(ValidateKernelArgs(spec, args));
  }
  ThrowIfError(spec.forward(args));
  return outputs;
}

namespace {

std::vector<at::Tensor> MetaForwardImpl(const OpSpec& spec,
                                        const std::vector<std::optional<at::Tensor>>& inputs,
                                        const std::vector<AttrValue>* attrs) {
  const std::vector<TensorInfo> infos = InfosOf(inputs);
  const std::vector<TensorInfo> output_infos = Infer(spec, infos, attrs);
  std::vector<at::Tensor> outputs;
  for (const TensorInfo& out : output_infos) {
    const at::TensorOptions options = inputs[0]->options().dtype(ScalarTypeOf(out.dtype));
    std::optional<at::Tensor> like;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (infos[i].present && infos[i].shape == out.shape) {
        like = inputs[i];
        break;
      }
    }
    if (like.has_value()) {
      outputs.push_back(at::empty_symint(like->sym_sizes(), options));
    } else {
      for (int64_t d : out.shape) {
        TORCH_CHECK(d >= 0, spec.name, ": cannot express a symbolic output shape ", FormatShape(out.shape));
      }
      outputs.push_back(at::empty(out.shape, options));
    }
  }
  return outputs;
}

}  // namespace

std::vector<at::Tensor> MetaForward(const OpSpec& spec,
                                    const std::vector<std::optional<at::Tensor>>& inputs) {
  return MetaForwardImpl(spec, inputs, nullptr);
}

std::vector<at::Tensor> MetaForward(const OpSpec& spec, const std::vector<std::optional<at::Tensor>>& inputs,
                                    const std::vector<AttrValue>& attrs) {
  return MetaForwardImpl(spec, inputs, &attrs);
}

}  // namespace opbridge::torch_adapter
