// The ExecuTorch kernel library: every registered OpSpec of the library gets
// one ExecuTorch kernel for its out= form, "<namespace>::<op>.out", the
// overload the PyTorch adapter registers from the same spec and that
// ExecuTorch's to_executorch() puts into a .pte program. The kernels go into
// the operator registry of the ExecuTorch runtime this library is linked
// against (the executorch wheel's pybindings module, _portable_lib) at the
// first opbridge_executorch_kernels() call: a program loaded through that
// runtime then finds them.
//
// A kernel reads its arguments in schema order (the inputs, then the
// attributes, then the out tensors; the returned value comes last), checks
// dtypes and shapes with the spec's shape rule, resizes the out tensors (a
// program exported with dynamic shapes plans them at their upper bound) and
// runs the same CPU kernel as the other adapters, with ExecuTorch's
// threadpool as its parallel-for. ExecuTorch kernels report errors through
// KernelRuntimeContext::fail only, as a code: the message (naming the op, the
// argument, what was expected and what was given) goes to stderr and is kept
// for opbridge_executorch_last_error(). Nothing throws into the runtime.
//
// ExecuTorch's OpFunction is a plain function pointer with no user data, so
// each spec is bound to one of kMaxOperators instantiated trampolines.
// ExecuTorch's logging is not exported by the wheel's runtime, so these
// sources compile with ET_LOG_ENABLED=0 (see executorch.cmake).
#include <executorch/runtime/core/evalue.h>
#include <executorch/runtime/core/exec_aten/util/tensor_util.h>
#include <executorch/runtime/kernel/kernel_runtime_context.h>
#include <executorch/runtime/kernel/operator_registry.h>
#include <executorch/runtime/kernel/thread_parallel_interface.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "opbridge/adapter_kit.h"
#include "opbridge/checks.h"
#include "opbridge/runtime_checks.h"
#include "opbridge/spec.h"

namespace opbridge {
namespace {

namespace et = ::executorch::runtime;
using ::executorch::aten::ScalarType;
using ::executorch::aten::Tensor;

// More operators than this in one library are refused, naming the op.
constexpr size_t kMaxOperators = 64;

struct Registered {
  const OpSpec* spec = nullptr;
  std::string name;  // "opbridge::rms_norm.out"; the registry keeps the pointer
};

std::array<Registered, kMaxOperators>& Operators() {
  static std::array<Registered, kMaxOperators> operators;
  return operators;
}

size_t& OperatorCount() {
  static size_t count = 0;
  return count;
}

std::string& LastError() {
  thread_local std::string message;
  return message;
}

void Report(const std::string& message) {
  LastError() = message;
  std::fprintf(stderr, "[opbridge] %s\n", message.c_str());
}

const char* DtypeName(ScalarType type) {
  const char* name = DtypeNameOf(type);
  return name != nullptr ? name : "an unsupported dtype";
}

// What an argument of the program is, for messages.
const char* ValueKind(const et::EValue& value) {
  if (value.isNone()) return "None";
  if (value.isTensor()) return "a tensor";
  if (value.isDouble()) return "a float";
  if (value.isInt()) return "an int";
  if (value.isBool()) return "a bool";
  if (value.isString()) return "a string";
  if (value.isDoubleList()) return "a float list";
  if (value.isIntList()) return "an int list";
  if (value.isTensorList()) return "a tensor list";
  return "another kind of value";
}

const char* ExpectedKind(AttrType type) {
  switch (type) {
    case AttrType::kFloat:
      return "a float";
    case AttrType::kInt:
      return "an int";
    case AttrType::kBool:
      return "a bool";
    case AttrType::kString:
      return "a string";
    case AttrType::kFloats:
      return "a float list";
  }
  return "?";
}

// The dtype and shape of a tensor of the program, or an error naming the
// argument when the kernels cannot take it (a dtype opbridge does not name,
// a layout other than contiguous).
Status Describe(const OpSpec& spec, const std::string& what, const Tensor& tensor, TensorInfo* info) {
  info->present = true;
  info->dtype = DtypeName(tensor.scalar_type());
  if (info->dtype == "an unsupported dtype") {
    return Status::Error(spec.QualifiedName() + ": " + what + " has ExecuTorch dtype " +
                         std::to_string(static_cast<int>(tensor.scalar_type())) +
                         ", which opbridge's kernels do not take");
  }
  info->shape.clear();
  for (const auto size : tensor.sizes()) info->shape.push_back(static_cast<int64_t>(size));
  if (!et::tensor_is_default_dim_order(tensor)) {
    return Status::Error(spec.QualifiedName() + ": " + what +
                         " must be contiguous (the default dim order), the program gives another dim order");
  }
  return Status::Ok();
}

Status ReadAttribute(const OpSpec& spec, const AttrSpec& attr, const et::EValue& value, AttrValue* out) {
  bool matches = false;
  switch (attr.type) {
    case AttrType::kFloat:
      if ((matches = value.isDouble())) *out = AttrValue(value.toDouble());
      break;
    case AttrType::kInt:
      if ((matches = value.isInt())) *out = AttrValue(static_cast<double>(value.toInt()));
      break;
    case AttrType::kBool:
      if ((matches = value.isBool())) *out = AttrValue(value.toBool() ? 1.0 : 0.0);
      break;
    case AttrType::kString:
      if ((matches = value.isString())) *out = AttrValue(std::string(value.toString()));
      break;
    case AttrType::kFloats:
      if ((matches = value.isDoubleList())) {
        const auto list = value.toDoubleList();
        *out = AttrValue(std::vector<double>(list.begin(), list.end()));
      }
      break;
  }
  if (matches) return Status::Ok();
  return Status::Error(spec.QualifiedName() + ": attribute '" + attr.name + "' must be " +
                       ExpectedKind(attr.type) + " (" + AttrTypeName(attr.type) + "), the program passes " +
                       ValueKind(value));
}

ParallelFor ExecuTorchParallelFor() {
  return [](int64_t n, int64_t grain, const RangeBody& body) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (n <= grain) {
      body(0, n);
      return;
    }
    auto run = [&body](int64_t begin, int64_t end) { body(begin, end); };
    if (!::executorch::extension::parallel_for(0, n, grain, run)) body(0, n);
  };
}

// The kernel of one spec: the stack holds the inputs, the attributes and the
// out tensors in schema order, then the returned value (the out tensor, or a
// list of them).
Status Run(const OpSpec& spec, et::Span<et::EValue*> stack) {
  const size_t inputs = spec.inputs.size();
  const size_t attrs = spec.attrs.size();
  const size_t outputs = spec.outputs.size();
  const size_t expected = inputs + attrs + outputs + 1;
  if (stack.size() != expected) {
    return Status::Error(spec.QualifiedName() + ": its out= kernel takes " + std::to_string(expected) +
                         " values (" + std::to_string(inputs) + " inputs, " + std::to_string(attrs) +
                         " attributes, " + std::to_string(outputs) +
                         " out tensors and the result), the program passes " + std::to_string(stack.size()));
  }
  KernelArgs args;
  for (size_t i = 0; i < inputs; ++i) {
    const InputSpec& input = spec.inputs[i];
    const et::EValue& value = *stack[i];
    TensorInfo info;
    const void* data = nullptr;
    if (value.isTensor()) {
      OPBRIDGE_RETURN_IF_ERROR(
          Describe(spec, std::string("input '") + input.name + "'", value.toTensor(), &info));
      data = value.toTensor().const_data_ptr();
    } else if (value.isNone() && input.optional) {
      info.present = false;
    } else {
      return Status::Error(spec.QualifiedName() + ": input '" + input.name + "' must be a tensor" +
                           (input.optional ? " or None" : "") + ", the program passes " + ValueKind(value));
    }
    args.inputs.push_back(data);
    args.input_infos.push_back(std::move(info));
  }
  for (size_t i = 0; i < attrs; ++i) {
    AttrValue value;
    OPBRIDGE_RETURN_IF_ERROR(ReadAttribute(spec, spec.attrs[i], *stack[inputs + i], &value));
    args.attrs.push_back(std::move(value));
  }
  OPBRIDGE_RETURN_IF_ERROR(InferWithAttrs(spec, args.input_infos, args.attrs, &args.output_infos));
  if (args.output_infos.size() != outputs) {
    return Status::Error(spec.QualifiedName() + ": its shape rule gives " +
                         std::to_string(args.output_infos.size()) + " outputs, the spec names " +
                         std::to_string(outputs));
  }
  const std::vector<std::string> out_names = spec.OutArgumentNames();
  for (size_t k = 0; k < outputs; ++k) {
    const et::EValue& value = *stack[inputs + attrs + k];
    const std::string what = "out tensor '" + out_names[k] + "'";
    if (!value.isTensor()) {
      return Status::Error(spec.QualifiedName() + ": " + what + " must be a tensor, the program passes " +
                           ValueKind(value));
    }
    const Tensor& out = value.toTensor();
    const TensorInfo& want = args.output_infos[k];
    if (DtypeName(out.scalar_type()) != want.dtype) {
      return Status::Error(spec.QualifiedName() + ": " + what + " must be " + want.dtype +
                           ", the program gives " + DtypeName(out.scalar_type()));
    }
    std::vector<::executorch::aten::SizesType> sizes;
    for (int64_t dim : want.shape) {
      if (dim < 0 || dim > std::numeric_limits<::executorch::aten::SizesType>::max()) {
        return Status::Error(spec.QualifiedName() + ": " + what + " would have shape " +
                             FormatShape(want.shape) + ", beyond what an ExecuTorch tensor holds");
      }
      sizes.push_back(static_cast<::executorch::aten::SizesType>(dim));
    }
    if (et::resize_tensor(out, {sizes.data(), sizes.size()}) != et::Error::Ok) {
      TensorInfo planned;
      OPBRIDGE_RETURN_IF_ERROR(Describe(spec, what, out, &planned));
      return Status::Error(spec.QualifiedName() + ": " + what + " must have shape " +
                           FormatShape(want.shape) + ", the program planned it as " +
                           FormatShape(planned.shape) +
                           " and it cannot be resized (a static shape, or beyond its upper bound)");
    }
    TensorInfo info;
    OPBRIDGE_RETURN_IF_ERROR(Describe(spec, what, out, &info));
    args.outputs.push_back(out.mutable_data_ptr());
  }
  args.parallel_for = ExecuTorchParallelFor();
  // OPBRIDGE_CHECK: argument checks and output guards.
  return LaunchOnHost(spec, args, spec.forward, [&spec] { return spec.TorchName(); });
}

template <size_t I>
void Kernel(et::KernelRuntimeContext& context, et::Span<et::EValue*> stack) {
  const Registered& op = Operators()[I];
  Status status;
  try {
    status = Run(*op.spec, stack);
  } catch (const std::exception& error) {
    status = Status::Error(op.spec->QualifiedName() + ": " + error.what());
  } catch (...) {
    status = Status::Error(op.spec->QualifiedName() + ": an unknown C++ exception");
  }
  if (status.ok()) {
    LastError().clear();
    return;
  }
  Report(status.message());
  context.fail(et::Error::InvalidArgument);
}

template <size_t... I>
constexpr std::array<et::OpFunction, sizeof...(I)> MakeKernels(std::index_sequence<I...> /*unused*/) {
  return {&Kernel<I>...};
}
constexpr std::array<et::OpFunction, kMaxOperators> kKernels =
    MakeKernels(std::make_index_sequence<kMaxOperators>());

void RegisterSpec(const OpSpec& spec) {
  const std::string name = spec.TorchName() + ".out";
  size_t& count = OperatorCount();
  if (count == kMaxOperators) {
    Report(spec.QualifiedName() + ": not registered with ExecuTorch: a library holds at most " +
           std::to_string(kMaxOperators) + " operators");
    return;
  }
  // The registry aborts the process on a second kernel of one name (another
  // copy of this library already loaded): refuse it here instead. (Read from
  // the registered kernels: registry_has_op_function logs every miss.)
  bool taken = false;
  for (const et::Kernel& kernel : et::get_registered_kernels()) {
    taken = taken || (kernel.name_ != nullptr && name == kernel.name_);
  }
  if (taken) {
    Report(spec.QualifiedName() + ": not registered with ExecuTorch: the runtime already has a kernel '" +
           name + "' (another copy of this library, or another library of the same namespace, is loaded)");
    return;
  }
  Registered& op = Operators()[count];
  op.spec = &spec;
  op.name = name;
  const et::Kernel kernel(op.name.c_str(), kKernels[count]);
  ++count;
  if (et::register_kernels({&kernel, 1}) != et::Error::Ok) {
    Report(spec.QualifiedName() + ": ExecuTorch refused the kernel '" + name + "'");
  }
}

// Once, at the first opbridge_executorch_kernels() call (not when the
// library is loaded): a caller first compares opbridge_executorch_built_with()
// with its runtime's release.
void RegisterOnce() {
  static const bool registered = (OnEachSpec(RegisterSpec), true);
  (void)registered;
}

std::string& KernelNames() {
  static std::string names;
  return names;
}

}  // namespace
}  // namespace opbridge

// The message of the last failed kernel call (or registration) on this
// thread; empty after a successful call.
extern "C" __attribute__((visibility("default"))) const char* opbridge_executorch_last_error() {
  return opbridge::LastError().c_str();
}

// Registers the library's kernels with the runtime (on the first call) and
// returns those registered, one name a line ("opbridge::rms_norm.out").
extern "C" __attribute__((visibility("default"))) const char* opbridge_executorch_kernels() {
  opbridge::RegisterOnce();
  std::string& names = opbridge::KernelNames();
  names.clear();
  for (size_t i = 0; i < opbridge::OperatorCount(); ++i) names += opbridge::Operators()[i].name + "\n";
  return names.c_str();
}

// "1.4.1+cpu": the executorch release whose headers and runtime this library
// was built against. Its kernels may only be registered with that release's
// runtime (ExecuTorch's C++ ABI is not stable across releases).
extern "C" __attribute__((visibility("default"))) const char* opbridge_executorch_built_with() {
  return OPBRIDGE_EXECUTORCH_BUILT_WITH;
}
