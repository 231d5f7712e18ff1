#include "torch_adapter/adapter.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/library.h>

#include <atomic>
#include <memory>
#include <mutex>

#ifdef OPBRIDGE_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "opbridge/adapter_kit.h"
#include "opbridge/checks.h"
#include "opbridge/cuda.h"
#include "opbridge/runtime_checks.h"
#include "torch_adapter/backward_rule.h"
#include "torch_adapter/registration.h"

namespace opbridge::torch_adapter {

std::string DtypeName(at::ScalarType type) {
  const char* name = DtypeNameOf(type);
  return name != nullptr ? name : std::string(c10::toString(type));
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

namespace {

using torch::jit::Stack;

at::ScalarType ScalarTypeOf(const std::string& dtype) {
  at::ScalarType type = at::kFloat;
  TORCH_CHECK(ScalarTypes<at::ScalarType>::Of(DtypeFromName(dtype), &type), "opbridge: no torch dtype for ",
              dtype);
  return type;
}

std::optional<at::Tensor> TensorOf(const c10::IValue& value) {
  if (value.isNone()) return std::nullopt;
  return value.toTensor();
}

AttrValue AttrOf(const AttrSpec& attr, const c10::IValue& value) {
  switch (attr.type) {
    case AttrType::kFloat:
      return value.toDouble();
    case AttrType::kInt:
      return static_cast<double>(value.toInt());
    case AttrType::kBool:
      return value.toBool() ? 1.0 : 0.0;
    case AttrType::kString:
      return std::string(value.toStringRef());
    case AttrType::kFloats:
      return value.toDoubleVector();
  }
  return {};
}

std::vector<AttrValue> AttrsOf(const OpSpec& spec, c10::ArrayRef<c10::IValue> values) {
  std::vector<AttrValue> attrs;
  attrs.reserve(spec.attrs.size());
  for (size_t i = 0; i < spec.attrs.size(); ++i) attrs.push_back(AttrOf(spec.attrs[i], values[i]));
  return attrs;
}

// Under torch.compile / torch.export a size may be symbolic. The shape rule
// then runs on Dims (opbridge/dim.h) whose symbolic ones are PyTorch's own
// symbolic sizes: its arithmetic is SymInt arithmetic, its comparisons are
// decided (and guarded) by PyTorch, a size it reads as a number is
// specialized. The output sizes come back as the SymInts it computed.
class TorchSymbols final : public DimSymbols {
 public:
  explicit TorchSymbols(const OpSpec& spec) : spec_(spec), scope_(this) {}

  Dim DimOf(const c10::SymInt& size) {
    if (const std::optional<int64_t> value = size.maybe_as_int()) return Dim(*value);
    sizes_.push_back(size);
    return Dim::Symbol(static_cast<int64_t>(sizes_.size() - 1));
  }

  std::vector<TensorInfo> InfosOf(const std::vector<std::optional<at::Tensor>>& tensors) {
    std::vector<TensorInfo> infos;
    infos.reserve(tensors.size());
    for (const auto& tensor : tensors) {
      TensorInfo info;
      if (!tensor.has_value() || !tensor->defined()) {
        info.present = false;
      } else {
        info.dtype = DtypeName(tensor->scalar_type());
        for (const c10::SymInt& size : tensor->sym_sizes()) info.shape.push_back(DimOf(size));
      }
      infos.push_back(std::move(info));
    }
    return infos;
  }

  c10::SymInt SizeOf(const Dim& d) const {
    return d.symbolic() ? sizes_.at(static_cast<size_t>(d.symbol())) : c10::SymInt(static_cast<int64_t>(d));
  }

  // Output `output`'s sizes. A negative size is one the rule could not
  // compute: it gave -1 (unknown), which a symbolic size never needs.
  std::vector<c10::SymInt> SymSizes(const std::string& output, const Shape& shape) const {
    std::vector<c10::SymInt> sizes;
    sizes.reserve(shape.size());
    for (size_t d = 0; d < shape.size(); ++d) {
      if (!shape[d].symbolic()) {
        TORCH_CHECK(static_cast<int64_t>(shape[d]) >= 0, spec_.TorchName(), ": the shape rule gives output '",
                    output, "' the unknown dimension ", d, " (", FormatShape(shape),
                    ") for symbolic input sizes; compute the size from the inputs' Dims instead (say ",
                    "f * (f - 1) / 2 from const Dim f = inputs[0].shape[1]; opbridge/dim.h), which PyTorch ",
                    "then follows symbolically");
      }
      sizes.push_back(SizeOf(shape[d]));
    }
    return sizes;
  }

  int64_t Apply(DimOp op, const Dim& a, const Dim& b) override {
    const c10::SymInt x = SizeOf(a), y = SizeOf(b);
    switch (op) {
      case DimOp::kAdd:
        return Keep(x + y);
      case DimOp::kSub:
        return Keep(x - y);
      case DimOp::kMul:
        return Keep(x * y);
      case DimOp::kDiv:
        return Keep(x / y);
      case DimOp::kMod:
        return Keep(x % y);
      case DimOp::kMin:
        return Keep(x.min(y));
      case DimOp::kMax:
        return Keep(x.max(y));
    }
    return Keep(x);
  }
  bool Compare(DimCompare op, const Dim& a, const Dim& b) override {
    const c10::SymInt x = SizeOf(a), y = SizeOf(b);
    switch (op) {
      case DimCompare::kEq:
        return x.sym_eq(y).guard_bool(__FILE__, __LINE__);
      case DimCompare::kNe:
        return x.sym_ne(y).guard_bool(__FILE__, __LINE__);
      case DimCompare::kLt:
        return x.sym_lt(y).guard_bool(__FILE__, __LINE__);
      case DimCompare::kLe:
        return x.sym_le(y).guard_bool(__FILE__, __LINE__);
      case DimCompare::kGt:
        return x.sym_gt(y).guard_bool(__FILE__, __LINE__);
      case DimCompare::kGe:
        return x.sym_ge(y).guard_bool(__FILE__, __LINE__);
    }
    return false;
  }
  int64_t Specialize(const Dim& a) override { return SizeOf(a).guard_int(__FILE__, __LINE__); }
  std::string Name(const Dim& a) override {
    const c10::SymInt size = SizeOf(a);
    if (const std::optional<int64_t> value = size.maybe_as_int()) return std::to_string(*value);
    return size.toSymNode()->str();
  }

 private:
  int64_t Keep(c10::SymInt size) {
    sizes_.push_back(std::move(size));
    return static_cast<int64_t>(sizes_.size() - 1);
  }

  const OpSpec& spec_;
  DimSymbolsScope scope_;
  std::vector<c10::SymInt> sizes_;
};

std::vector<TensorInfo> InfosOf(const std::vector<std::optional<at::Tensor>>& tensors) {
  std::vector<TensorInfo> infos;
  infos.reserve(tensors.size());
  for (const auto& tensor : tensors) infos.push_back(InfoOf(tensor));
  return infos;
}

// Where a kernel runs: the CPU (torch's parallel-for) or a CUDA device (its
// current stream, with scratch from torch's caching allocator).
enum class Device { kCpu, kCuda };

// Contiguous copies (where needed) of the tensors a kernel reads, after
// checking that all of them are on the kernel's device (one CUDA device for
// a CUDA kernel: the dispatcher picks CUDA when any one tensor is on CUDA).
struct KernelInputs {
  std::vector<at::Tensor> keep;
  std::vector<const void*> pointers;

  KernelInputs(const OpSpec& spec, const std::vector<const char*>& names,
               const std::vector<std::optional<at::Tensor>>& tensors, Device device) {
    keep.reserve(tensors.size());
    pointers.reserve(tensors.size());
    std::optional<size_t> first;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& tensor = tensors[i];
      if (tensor.has_value() && tensor->defined()) {
        const c10::Device where = tensor->device();
        if (device == Device::kCpu) {
          TORCH_CHECK(where.is_cpu(), spec.TorchName(), ": argument '", names.at(i),
                      "' must be a CPU tensor, got one on ", where);
        } else if (first.has_value()) {
          TORCH_CHECK(where == tensors[*first]->device(), spec.TorchName(), ": argument '", names.at(i),
                      "' must be on ", tensors[*first]->device(), " like argument '", names.at(*first),
                      "', got ", where);
        } else {
          TORCH_CHECK(where.is_cuda(), spec.TorchName(), ": argument '", names.at(i),
                      "' must be on the CUDA device of the other tensors, got ", where);
          first = i;
        }
        keep.push_back(tensor->contiguous());
        pointers.push_back(keep.back().const_data_ptr());
      } else {
        keep.emplace_back();
        pointers.push_back(nullptr);
      }
    }
  }
};

// What a launch needs besides its tensors: torch's parallel-for on the CPU;
// on CUDA a device guard, the device's current stream and scratch memory
// from the caching allocator (stream-ordered, so releasing it when the call
// returns is safe for the work still queued).
class LaunchContext {
 public:
  LaunchContext(Device device, const at::TensorOptions& options, KernelArgs* args) : options_(options) {
    if (device == Device::kCpu) {
      args->parallel_for = TorchParallelFor();
      return;
    }
#ifdef OPBRIDGE_WITH_CUDA
    guard_.emplace(options.device());
    args->stream = c10::cuda::getCurrentCUDAStream(options.device().index()).stream();
    args->scratch = [this](size_t bytes) -> void* {
      scratch_.push_back(at::empty({static_cast<int64_t>(bytes)}, options_.dtype(at::kByte)));
      return scratch_.back().mutable_data_ptr();
    };
#else
    TORCH_CHECK(false, "opbridge: this library was built without CUDA");
#endif
  }

 private:
  at::TensorOptions options_;
  std::vector<at::Tensor> scratch_;
#ifdef OPBRIDGE_WITH_CUDA
  std::optional<c10::cuda::CUDAGuard> guard_;
#endif
};

// The host view of a kernel's inputs for the opt-in runtime checks, which
// read the data: the inputs themselves on the CPU, host copies on CUDA.
struct HostInputs {
  std::vector<at::Tensor> copies;
  std::vector<const void*> pointers;

  HostInputs(const KernelInputs& inputs, Device device) : pointers(inputs.pointers) {
    if (device == Device::kCpu) return;
    copies.reserve(inputs.keep.size());
    for (size_t i = 0; i < inputs.keep.size(); ++i) {
      if (!inputs.keep[i].defined()) continue;
      copies.push_back(inputs.keep[i].cpu());
      pointers[i] = copies.back().const_data_ptr();
    }
  }
};

// The options (device, layout) of the first present tensor.
at::TensorOptions OptionsOf(const std::vector<std::optional<at::Tensor>>& tensors) {
  for (const auto& tensor : tensors) {
    if (tensor.has_value() && tensor->defined()) return tensor->options();
  }
  return at::TensorOptions();
}

std::vector<std::optional<at::Tensor>> PopTensors(Stack* stack, size_t count, size_t extra) {
  const auto values = torch::jit::last(*stack, count + extra);
  std::vector<std::optional<at::Tensor>> tensors;
  tensors.reserve(count);
  for (size_t i = 0; i < count; ++i) tensors.push_back(TensorOf(values[i]));
  return tensors;
}

// OPBRIDGE_CHECK's validation of a forward call (ValidateKernelArgs), on
// host copies of the inputs when they are on a GPU.
void ValidateOnHost(const OpSpec& spec, const KernelArgs& args, const KernelInputs& inputs, Device device) {
  const HostInputs host(inputs, device);
  KernelArgs checked = args;
  checked.inputs = host.pointers;
  ThrowIfError(ValidateKernelArgs(spec, checked));
}

// ------------------------------------------------------------ output guards

std::atomic<bool> guards_switched_on{false};

// Output guards (registration.h; the checks in runtime_checks.h): each output
// lies in a byte tensor on the kernel's device, between a head and a tail
// guard, checked on the host after the kernel. The outputs returned are copies
// into tensors of their own.
class OutputGuards {
 public:
  // op: the op as messages name it; input_names / inputs: the kernel's inputs.
  OutputGuards(std::string op, const std::vector<const char*>& input_names,
               const std::vector<TensorInfo>& inputs, const at::TensorOptions& options)
      : op_(std::move(op)),
        input_names_(input_names),
        inputs_(inputs),
        options_(options),
        tail_(OutputTailGuard(inputs)) {}

  // The guarded buffer for output `name` of `info`; its data pointer.
  void* Add(const char* name, const TensorInfo& info) {
    Guarded guarded{name, info, ScalarTypeOf(info.dtype), 0, {}};
    guarded.bytes = NumElements(info.shape) * static_cast<int64_t>(c10::elementSize(guarded.type));
    at::Tensor pattern =
        at::empty({kOutputHeadGuard + guarded.bytes + tail_}, at::TensorOptions().dtype(at::kByte));
    FillGuardPattern(pattern.mutable_data_ptr<unsigned char>(), pattern.numel());
    guarded.buffer = options_.device().is_cpu() ? pattern : pattern.to(options_.device());
    outputs_.push_back(std::move(guarded));
    return static_cast<unsigned char*>(outputs_.back().buffer.mutable_data_ptr()) + kOutputHeadGuard;
  }

  // Checks every guard (raising the first fault), then the outputs, each
  // copied out of its guarded buffer.
  std::vector<at::Tensor> Finish() const {
    std::vector<at::Tensor> results;
    results.reserve(outputs_.size());
    for (const Guarded& output : outputs_) {
      const at::Tensor host = output.buffer.is_cpu() ? output.buffer : output.buffer.cpu();
      ThrowIfError(CheckOutputGuards(op_, output.name, output.info, host.const_data_ptr<unsigned char>(),
                                     tail_, input_names_, inputs_));
      at::Tensor result = at::empty(Sizes(output.info.shape), options_.dtype(output.type));
      result.reshape({-1}).view(at::kByte).copy_(output.buffer.narrow(0, kOutputHeadGuard, output.bytes));
      results.push_back(std::move(result));
    }
    return results;
  }

 private:
  struct Guarded {
    const char* name;
    TensorInfo info;
    at::ScalarType type;
    int64_t bytes;
    at::Tensor buffer;
  };

  std::string op_;
  std::vector<const char*> input_names_;
  std::vector<TensorInfo> inputs_;
  at::TensorOptions options_;
  int64_t tail_;
  std::vector<Guarded> outputs_;
};

const char* OutputName(const OpSpec& spec, size_t k) {
  return k < spec.outputs.size() ? spec.outputs[k] : "?";
}

// ------------------------------------------------------------------ forward

class ForwardKernel final : public c10::OperatorKernel {
 public:
  ForwardKernel(const OpSpec& spec, LaunchFn launch, Device device)
      : spec_(spec), launch_(launch), device_(device) {}

  void operator()(const c10::OperatorHandle&, c10::DispatchKeySet, Stack* stack) {
    const size_t n_inputs = spec_.inputs.size();
    const size_t n_attrs = spec_.attrs.size();
    const auto inputs = PopTensors(stack, n_inputs, n_attrs);
    KernelArgs args;
    args.attrs = AttrsOf(spec_, torch::jit::last(*stack, n_attrs));
    torch::jit::drop(*stack, n_inputs + n_attrs);
    args.input_infos = InfosOf(inputs);
    ThrowIfError(InferWithAttrs(spec_, args.input_infos, args.attrs, &args.output_infos));
    const KernelInputs contiguous(spec_, ForwardInputNames(spec_), inputs, device_);
    args.inputs = contiguous.pointers;
    const at::TensorOptions options = OptionsOf(inputs);
    LaunchContext context(device_, options, &args);
    std::vector<at::Tensor> outputs;
    outputs.reserve(args.output_infos.size());
    std::optional<OutputGuards> guards;
    if (OutputGuardsEnabled())
      guards.emplace(spec_.TorchName(), ForwardInputNames(spec_), args.input_infos, options);
    for (size_t k = 0; k < args.output_infos.size(); ++k) {
      const TensorInfo& info = args.output_infos[k];
      if (guards.has_value()) {
        args.outputs.push_back(guards->Add(OutputName(spec_, k), info));
        continue;
      }
      outputs.push_back(at::empty(Sizes(info.shape), options.dtype(ScalarTypeOf(info.dtype))));
      args.outputs.push_back(outputs.back().mutable_data_ptr());
    }
    if (RuntimeChecksEnabled()) ValidateOnHost(spec_, args, contiguous, device_);
    ThrowIfError(LaunchChecked(spec_, launch_, args));
    if (guards.has_value()) outputs = guards->Finish();
    for (at::Tensor& output : outputs) stack->emplace_back(std::move(output));
  }

 private:
  const OpSpec& spec_;
  LaunchFn launch_;
  Device device_;
};

class ForwardMeta final : public c10::OperatorKernel {
 public:
  explicit ForwardMeta(const OpSpec& spec) : spec_(spec) {}

  void operator()(const c10::OperatorHandle&, c10::DispatchKeySet, Stack* stack) {
    const size_t n_inputs = spec_.inputs.size();
    const size_t n_attrs = spec_.attrs.size();
    const auto inputs = PopTensors(stack, n_inputs, n_attrs);
    const std::vector<AttrValue> attrs = AttrsOf(spec_, torch::jit::last(*stack, n_attrs));
    torch::jit::drop(*stack, n_inputs + n_attrs);
    std::vector<TensorInfo> outputs;
    TorchSymbols symbols(spec_);
    ThrowIfError(InferWithAttrs(spec_, symbols.InfosOf(inputs), attrs, &outputs));
    const at::TensorOptions options = OptionsOf(inputs);
    for (size_t k = 0; k < outputs.size(); ++k) {
      stack->emplace_back(at::empty_symint(symbols.SymSizes(spec_.outputs.at(k), outputs[k].shape),
                                           options.dtype(ScalarTypeOf(outputs[k].dtype))));
    }
  }

 private:
  const OpSpec& spec_;
};

// ------------------------------------------------------------ out= forms

// The out= form's tensors: the spec's inputs, attributes, then one out
// tensor per output (the stack's last values).
struct OutCall {
  std::vector<std::optional<at::Tensor>> inputs;
  std::vector<AttrValue> attrs;
  std::vector<at::Tensor> outs;
};

OutCall PopOutCall(const OpSpec& spec, Stack* stack) {
  const size_t n_inputs = spec.inputs.size();
  const size_t n_attrs = spec.attrs.size();
  const size_t n_outs = spec.outputs.size();
  OutCall call;
  call.inputs = PopTensors(stack, n_inputs, n_attrs + n_outs);
  call.attrs = AttrsOf(spec, torch::jit::last(*stack, n_attrs + n_outs));
  for (const c10::IValue& value : torch::jit::last(*stack, n_outs)) call.outs.push_back(value.toTensor());
  torch::jit::drop(*stack, n_inputs + n_attrs + n_outs);
  return call;
}

// Checks each out tensor's dtype and device against the inferred output and
// resizes it to the output's shape (PyTorch's out= convention).
void PrepareOuts(const OpSpec& spec, const std::vector<TensorInfo>& infos, const at::TensorOptions& options,
                 std::vector<at::Tensor>* outs) {
  const std::vector<std::string> names = spec.OutArgumentNames();
  for (size_t k = 0; k < outs->size(); ++k) {
    at::Tensor& out = (*outs)[k];
    const TensorInfo& info = infos[k];
    TORCH_CHECK(out.scalar_type() == ScalarTypeOf(info.dtype), spec.TorchName(), ".out: argument '", names[k],
                "' must be ", info.dtype, ", got ", DtypeName(out.scalar_type()));
    TORCH_CHECK(out.device() == options.device(), spec.TorchName(), ".out: argument '", names[k],
                "' must be on ", options.device(), " like the inputs, got ", out.device());
  }
}

class ForwardOutKernel final : public c10::OperatorKernel {
 public:
  ForwardOutKernel(const OpSpec& spec, LaunchFn launch, Device device)
      : spec_(spec), launch_(launch), device_(device) {}

  void operator()(const c10::OperatorHandle&, c10::DispatchKeySet, Stack* stack) {
    OutCall call = PopOutCall(spec_, stack);
    KernelArgs args;
    args.attrs = call.attrs;
    args.input_infos = InfosOf(call.inputs);
    ThrowIfError(InferWithAttrs(spec_, args.input_infos, args.attrs, &args.output_infos));
    const KernelInputs contiguous(spec_, ForwardInputNames(spec_), call.inputs, device_);
    args.inputs = contiguous.pointers;
    const at::TensorOptions options = OptionsOf(call.inputs);
    PrepareOuts(spec_, args.output_infos, options, &call.outs);
    LaunchContext context(device_, options, &args);
    // The kernel writes into each out tensor directly when it is contiguous
    // and shares no memory with an input; else into a temporary, copied over.
    // With output guards, always into a guarded temporary.
    std::vector<at::Tensor> targets;
    std::optional<OutputGuards> guards;
    if (OutputGuardsEnabled())
      guards.emplace(spec_.TorchName() + ".out", ForwardInputNames(spec_), args.input_infos, options);
    for (size_t k = 0; k < call.outs.size(); ++k) {
      at::Tensor& out = call.outs[k];
      const std::vector<int64_t> shape = Sizes(args.output_infos[k].shape);
      if (out.sizes() != c10::IntArrayRef(shape)) out.resize_(shape);
      if (guards.has_value()) {
        args.outputs.push_back(guards->Add(OutputName(spec_, k), args.output_infos[k]));
        continue;
      }
      bool direct = out.is_contiguous();
      for (const at::Tensor& input : contiguous.keep)
        direct = direct && !(input.defined() && input.is_alias_of(out));
      for (size_t j = 0; j < k; ++j) direct = direct && !call.outs[j].is_alias_of(out);
      targets.push_back(direct ? out : at::empty(shape, out.options()));
      args.outputs.push_back(targets.back().mutable_data_ptr());
    }
    if (RuntimeChecksEnabled()) ValidateOnHost(spec_, args, contiguous, device_);
    ThrowIfError(LaunchChecked(spec_, launch_, args));
    if (guards.has_value()) targets = guards->Finish();
    for (size_t k = 0; k < call.outs.size(); ++k) {
      if (!targets[k].is_same(call.outs[k])) call.outs[k].copy_(targets[k]);
      stack->emplace_back(call.outs[k]);
    }
  }

 private:
  const OpSpec& spec_;
  LaunchFn launch_;
  Device device_;
};

class ForwardOutMeta final : public c10::OperatorKernel {
 public:
  explicit ForwardOutMeta(const OpSpec& spec) : spec_(spec) {}

  void operator()(const c10::OperatorHandle&, c10::DispatchKeySet, Stack* stack) {
    OutCall call = PopOutCall(spec_, stack);
    std::vector<TensorInfo> outputs;
    TorchSymbols symbols(spec_);
    ThrowIfError(InferWithAttrs(spec_, symbols.InfosOf(call.inputs), call.attrs, &outputs));
    PrepareOuts(spec_, outputs, OptionsOf(call.inputs), &call.outs);
    for (size_t k = 0; k < call.outs.size(); ++k) {
      call.outs[k].resize__symint(symbols.SymSizes(spec_.outputs.at(k), outputs[k].shape));
      stack->emplace_back(call.outs[k]);
    }
  }

 private:
  const OpSpec& spec_;
};

// out= forms are not differentiable (as PyTorch's own); the out tensors'
// version counters move, so autograd notices a saved tensor overwritten.
class ForwardOutAutograd final : public c10::OperatorKernel {
 public:
  explicit ForwardOutAutograd(const OpSpec& spec) : spec_(spec) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet keys, Stack* stack) {
    const size_t n_outs = spec_.outputs.size();
    const size_t n_args = spec_.inputs.size() + spec_.attrs.size() + n_outs;
    if (at::GradMode::is_enabled()) {
      const auto args = torch::jit::last(*stack, n_args);
      for (size_t i = 0; i < spec_.inputs.size(); ++i) {
        TORCH_CHECK(!(args[i].isTensor() && args[i].toTensor().requires_grad()), spec_.TorchName(),
                    ".out: the out= form does not support automatic differentiation, but argument '",
                    spec_.inputs[i].name, "' requires grad (call it without out=, or under torch.no_grad())");
      }
    }
    op.redispatchBoxed(keys & c10::after_autograd_keyset, stack);
    for (const c10::IValue& value : torch::jit::last(*stack, n_outs)) {
      torch::autograd::impl::bump_version(value.toTensor());
    }
  }

 private:
  const OpSpec& spec_;
};

// ----------------------------------------------------------------- backward

// The shapes and dtypes of the backward's outputs, after checking its inputs
// (backward_rule.h).
std::vector<TensorInfo> InferBackward(const OpSpec& spec, const std::vector<TensorInfo>& infos,
                                      const std::vector<AttrValue>& attrs) {
  std::vector<TensorInfo> outputs;
  ThrowIfError(InferBackwardWithAttrs(spec, infos, attrs, &outputs));
  return outputs;
}

struct BackwardCall {
  std::vector<std::optional<at::Tensor>> inputs;
  std::vector<AttrValue> attrs;
  std::vector<bool> wanted;  // per output: requested or always computed
};

BackwardCall PopBackwardCall(const OpSpec& spec, Stack* stack) {
  const size_t n_inputs = spec.backward.inputs.size();
  const size_t n_attrs = spec.attrs.size();
  BackwardCall call;
  call.inputs = PopTensors(stack, n_inputs, n_attrs + 1);
  call.attrs = AttrsOf(spec, torch::jit::last(*stack, n_attrs + 1));
  const std::vector<bool> mask = torch::jit::last(*stack, 1)[0].toBoolList().vec();
  torch::jit::drop(*stack, n_inputs + n_attrs + 1);
  TORCH_CHECK(mask.size() == spec.backward.outputs.size(), spec.BackwardName(), ": output_mask must have ",
              spec.backward.outputs.size(), " entries, got ", mask.size());
  for (size_t o = 0; o < mask.size(); ++o)
    call.wanted.push_back(mask[o] || !spec.backward.outputs[o].optional);
  return call;
}

class BackwardKernel final : public c10::OperatorKernel {
 public:
  BackwardKernel(const OpSpec& spec, LaunchFn launch, Device device)
      : spec_(spec), launch_(launch), device_(device) {}

  void operator()(const c10::OperatorHandle&, c10::DispatchKeySet, Stack* stack) {
    const BackwardCall call = PopBackwardCall(spec_, stack);
    KernelArgs args;
    args.attrs = call.attrs;
    args.input_infos = InfosOf(call.inputs);
    args.output_infos = InferBackward(spec_, args.input_infos, args.attrs);
    const KernelInputs contiguous(spec_, BackwardInputNames(spec_), call.inputs, device_);
    args.inputs = contiguous.pointers;
    const at::TensorOptions options = OptionsOf(call.inputs);
    LaunchContext context(device_, options, &args);
    std::vector<at::Tensor> outputs;
    std::optional<OutputGuards> guards;
    if (OutputGuardsEnabled()) {
      guards.emplace(std::string(ThisLibrary().torch_namespace) + "::" + spec_.BackwardName(),
                     BackwardInputNames(spec_), args.input_infos, options);
    }
    for (size_t o = 0; o < args.output_infos.size(); ++o) {
      const TensorInfo& info = args.output_infos[o];
      const at::TensorOptions typed = options.dtype(ScalarTypeOf(info.dtype));
      outputs.push_back(call.wanted[o] && !guards.has_value() ? at::empty(Sizes(info.shape), typed)
                                                              : at::empty({0}, typed));
      if (!call.wanted[o]) {
        args.outputs.push_back(nullptr);
      } else if (guards.has_value()) {
        args.outputs.push_back(guards->Add(spec_.backward.outputs[o].name, info));
      } else {
        args.outputs.push_back(outputs.back().mutable_data_ptr());
      }
    }
    if (RuntimeChecksEnabled()) {
      const HostInputs host(contiguous, device_);
      for (size_t i = 0; i < args.inputs.size(); ++i) {
        if (!args.input_infos[i].present) continue;
        ThrowIfError(
            CheckFiniteTensor(spec_, spec_.backward.inputs[i].name, args.input_infos[i], host.pointers[i]));
      }
      for (size_t a = 0; a < args.attrs.size(); ++a) {
        ThrowIfError(CheckAttributeValue(spec_, spec_.attrs[a].name, args.attrs[a]));
      }
    }
    ThrowIfError(LaunchChecked(spec_, launch_, args));
    if (guards.has_value()) {
      std::vector<at::Tensor> guarded = guards->Finish();
      size_t next = 0;
      for (size_t o = 0; o < outputs.size(); ++o) {
        if (call.wanted[o]) outputs[o] = std::move(guarded[next++]);
      }
    }
    for (at::Tensor& output : outputs) stack->emplace_back(std::move(output));
  }

 private:
  const OpSpec& spec_;
  LaunchFn launch_;
  Device device_;
};

class BackwardMeta final : public c10::OperatorKernel {
 public:
  explicit BackwardMeta(const OpSpec& spec) : spec_(spec) {}

  void operator()(const c10::OperatorHandle&, c10::DispatchKeySet, Stack* stack) {
    const BackwardCall call = PopBackwardCall(spec_, stack);
    TorchSymbols symbols(spec_);
    const std::vector<TensorInfo> outputs = InferBackward(spec_, symbols.InfosOf(call.inputs), call.attrs);
    const at::TensorOptions options = OptionsOf(call.inputs);
    for (size_t o = 0; o < outputs.size(); ++o) {
      const at::TensorOptions typed = options.dtype(ScalarTypeOf(outputs[o].dtype));
      stack->emplace_back(
          call.wanted[o]
              ? at::empty_symint(symbols.SymSizes(spec_.backward.outputs.at(o).name, outputs[o].shape), typed)
              : at::empty({0}, typed));
    }
  }

 private:
  const OpSpec& spec_;
};

// ----------------------------------------------------------------- autograd

// The operator handles, looked up once the registration is complete.
struct OpHandles {
  c10::OperatorHandle forward;
  std::optional<c10::OperatorHandle> backward;
};

const OpHandles& HandlesOf(const OpSpec& spec) {
  // One entry per spec; specs live as long as the library.
  static std::mutex mutex;
  static std::vector<std::pair<const OpSpec*, std::unique_ptr<OpHandles>>> handles;
  const std::lock_guard<std::mutex> lock(mutex);
  for (const auto& [known, entry] : handles) {
    if (known == &spec) return *entry;
  }
  auto& dispatcher = c10::Dispatcher::singleton();
  auto entry =
      std::make_unique<OpHandles>(OpHandles{dispatcher.findSchemaOrThrow(spec.TorchName().c_str(), ""), {}});
  if (spec.has_backward()) {
    const std::string name = std::string(ThisLibrary().torch_namespace) + "::" + spec.BackwardName();
    entry->backward = dispatcher.findSchemaOrThrow(name.c_str(), "");
  }
  handles.emplace_back(&spec, std::move(entry));
  return *handles.back().second;
}

bool AnyRequiresGrad(c10::ArrayRef<c10::IValue> values) {
  for (const c10::IValue& value : values) {
    if (value.isTensor() && value.toTensor().requires_grad()) return true;
  }
  return false;
}

// Outputs computed without a backward get a node that raises `message` if a
// gradient ever flows into them: the error comes when (and only if) it is
// needed, naming the op.
void AttachErrorNode(const std::string& message, c10::ArrayRef<c10::IValue> inputs, Stack* stack,
                     size_t n_outputs) {
  std::vector<at::Tensor> tensors;
  for (const c10::IValue& value : inputs) {
    if (value.isTensor()) tensors.push_back(value.toTensor());
  }
  auto node =
      c10::make_intrusive<torch::autograd::Error>(message, torch::autograd::collect_next_edges(tensors));
  for (const c10::IValue& value : torch::jit::last(*stack, n_outputs)) {
    const at::Tensor& output = value.toTensor();
    if (torch::autograd::isDifferentiableType(output.scalar_type()))
      torch::autograd::set_history(output, node);
  }
}

// One autograd node type for every op: forward runs the op below autograd
// and saves what the backward spec names; backward calls the backward op.
// One autograd node type for every op: forward runs the op below autograd
// and saves what the backward spec names; backward calls the backward op.
// Only present inputs are autograd inputs (`present` maps them to the
// spec's inputs): an absent optional input has no tensor to track.
struct GenericFunction : public torch::autograd::Function<GenericFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const OpSpec* spec,
                                                at::TensorList present_inputs,
                                                const std::vector<int64_t>* present,
                                                const std::vector<c10::IValue>* attrs) {
    at::AutoDispatchBelowADInplaceOrView guard;
    std::vector<at::Tensor> inputs(spec->inputs.size());
    for (size_t k = 0; k < present->size(); ++k)
      inputs[static_cast<size_t>((*present)[k])] = present_inputs[k];
    Stack stack;
    stack.reserve(inputs.size() + attrs->size());
    for (const at::Tensor& input : inputs)
      stack.emplace_back(input.defined() ? c10::IValue(input) : c10::IValue());
    for (const c10::IValue& attr : *attrs) stack.push_back(attr);
    HandlesOf(*spec).forward.callBoxed(&stack);
    torch::autograd::variable_list outputs;
    outputs.reserve(stack.size());
    for (c10::IValue& value : stack) outputs.push_back(std::move(value).toTensor());
    torch::autograd::variable_list saved;
    for (const BackwardInput& input : spec->backward.inputs) {
      if (input.source == TensorSource::kInput) saved.push_back(inputs[static_cast<size_t>(input.index)]);
      if (input.source == TensorSource::kOutput) saved.push_back(outputs[static_cast<size_t>(input.index)]);
    }
    ctx->save_for_backward(std::move(saved));
    c10::impl::GenericList attr_list(c10::AnyType::get());
    for (const c10::IValue& attr : *attrs) attr_list.push_back(attr);
    ctx->saved_data["attrs"] = std::move(attr_list);
    ctx->saved_data["present"] = c10::IValue(*present);
    // The spec outlives every graph that uses it (it is a static of the library).
    ctx->saved_data["spec"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(spec));
    return outputs;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto* spec =
        reinterpret_cast<const OpSpec*>(static_cast<intptr_t>(ctx->saved_data["spec"].toInt()));
    const BackwardSpec& backward = spec->backward;
    const std::vector<int64_t> present = ctx->saved_data["present"].toIntVector();
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    Stack stack;
    size_t next_saved = 0;
    for (const BackwardInput& input : backward.inputs) {
      const at::Tensor& tensor = input.source == TensorSource::kGradOutput
                                     ? grads.at(static_cast<size_t>(input.index))
                                     : saved.at(next_saved++);
      stack.emplace_back(tensor.defined() ? c10::IValue(tensor) : c10::IValue());
    }
    for (const c10::IValue& attr : ctx->saved_data["attrs"].toListRef()) stack.push_back(attr);
    std::vector<bool> needed(present.size());
    c10::List<bool> mask;
    for (size_t o = 0; o < backward.outputs.size(); ++o) mask.push_back(false);
    for (size_t k = 0; k < present.size(); ++k) {
      const int grad = backward.input_grads.at(static_cast<size_t>(present[k]));
      needed[k] = grad >= 0 && ctx->needs_input_grad(k);
      if (needed[k]) mask.set(static_cast<size_t>(grad), true);
    }
    stack.emplace_back(std::move(mask));
    HandlesOf(*spec).backward->callBoxed(&stack);
    // One gradient per forward argument: the spec pointer, each present
    // input, the index map and the attributes.
    torch::autograd::variable_list result(present.size() + 3);
    for (size_t k = 0; k < present.size(); ++k) {
      if (needed[k]) {
        const int grad = backward.input_grads[static_cast<size_t>(present[k])];
        result[k + 1] = stack.at(static_cast<size_t>(grad)).toTensor();
      }
    }
    return result;
  }
};

class ForwardAutograd final : public c10::OperatorKernel {
 public:
  explicit ForwardAutograd(const OpSpec& spec) : spec_(spec) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet keys, Stack* stack) {
    const size_t n_inputs = spec_.inputs.size();
    const size_t n_args = n_inputs + spec_.attrs.size();
    // Without anything to differentiate, skip the autograd node: it is most
    // of the cost of a call on a small input.
    if (!at::GradMode::is_enabled() || !AnyRequiresGrad(torch::jit::last(*stack, n_args))) {
      op.redispatchBoxed(keys & c10::after_autograd_keyset, stack);
      return;
    }
    if (!spec_.has_backward()) {
      const std::vector<c10::IValue> inputs(torch::jit::last(*stack, n_args).begin(),
                                            torch::jit::last(*stack, n_args).end());
      op.redispatchBoxed(keys & c10::after_autograd_keyset, stack);
      AttachErrorNode(spec_.TorchName() + " has no backward: its spec declares none", inputs, stack,
                      spec_.outputs.size());
      return;
    }
    const auto args = torch::jit::last(*stack, n_args);
    std::vector<at::Tensor> inputs;
    std::vector<int64_t> present;
    for (size_t i = 0; i < n_inputs; ++i) {
      if (args[i].isNone()) continue;
      inputs.push_back(args[i].toTensor());
      present.push_back(static_cast<int64_t>(i));
    }
    const std::vector<c10::IValue> attrs(args.begin() + static_cast<std::ptrdiff_t>(n_inputs), args.end());
    torch::jit::drop(*stack, n_args);
    for (at::Tensor& output : GenericFunction::apply(&spec_, at::TensorList(inputs), &present, &attrs)) {
      stack->emplace_back(std::move(output));
    }
  }

 private:
  const OpSpec& spec_;
};

// The backward is not differentiable: a gradient of a gradient stops with an
// error naming the op (only if one is actually asked for).
class BackwardAutograd final : public c10::OperatorKernel {
 public:
  explicit BackwardAutograd(const OpSpec& spec) : spec_(spec) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet keys, Stack* stack) {
    const size_t n_args = spec_.backward.inputs.size() + spec_.attrs.size() + 1;
    if (!at::GradMode::is_enabled() || !AnyRequiresGrad(torch::jit::last(*stack, n_args))) {
      op.redispatchBoxed(keys & c10::after_autograd_keyset, stack);
      return;
    }
    const std::vector<c10::IValue> inputs(torch::jit::last(*stack, n_args).begin(),
                                          torch::jit::last(*stack, n_args).end());
    op.redispatchBoxed(keys & c10::after_autograd_keyset, stack);
    AttachErrorNode(spec_.TorchName() + ": double backward (a gradient of its gradient) is not supported",
                    inputs, stack, spec_.backward.outputs.size());
  }

 private:
  const OpSpec& spec_;
};

// ------------------------------------------------------------- registration

template <typename Kernel, typename... Args>
torch::CppFunction Boxed(const OpSpec& spec, Args... args) {
  return torch::CppFunction::makeFromBoxedFunctor(std::make_unique<Kernel>(spec, args...));
}

// The torch::Library objects of the library's registration (registration.h);
// they unregister on destruction.
Registrations<torch::Library> registrations;

torch::Library& NewLibrary(torch::Library::Kind kind, std::optional<c10::DispatchKey> key) {
  torch::Library* library = registrations.New(kind, ThisLibrary().torch_namespace, key, __FILE__, __LINE__);
  TORCH_CHECK(library != nullptr, "opbridge: an operator registration outside RegisterOperators");
  return *library;
}

void RegisterWithTorch(const OpSpec& spec) {
  // pt2_compliant: the ops trace under torch.compile / torch.export without
  // graph breaks (tested).
  torch::Library& defs = NewLibrary(torch::Library::FRAGMENT, std::nullopt);
  defs.def(torch::schema(spec.TorchSchema().c_str()), {at::Tag::pt2_compliant_tag});
  if (spec.has_backward())
    defs.def(torch::schema(spec.BackwardSchema().c_str()), {at::Tag::pt2_compliant_tag});

  torch::Library& cpu = NewLibrary(torch::Library::IMPL, c10::DispatchKey::CPU);
  torch::Library& meta = NewLibrary(torch::Library::IMPL, c10::DispatchKey::Meta);
  torch::Library& autograd = NewLibrary(torch::Library::IMPL, c10::DispatchKey::Autograd);
  cpu.impl(spec.name, Boxed<ForwardKernel>(spec, spec.forward, Device::kCpu));
  meta.impl(spec.name, Boxed<ForwardMeta>(spec));
  autograd.impl(spec.name, Boxed<ForwardAutograd>(spec));
  // The out= form: torch.ops.<ns>.<op>.out(..., out=...).
  defs.def(torch::schema(spec.TorchOutSchema().c_str()));
  const std::string out = std::string(spec.name) + ".out";
  cpu.impl(out.c_str(), Boxed<ForwardOutKernel>(spec, spec.forward, Device::kCpu));
  meta.impl(out.c_str(), Boxed<ForwardOutMeta>(spec));
  autograd.impl(out.c_str(), Boxed<ForwardOutAutograd>(spec));
  if (spec.has_backward()) {
    const std::string backward = spec.BackwardName();
    cpu.impl(backward.c_str(), Boxed<BackwardKernel>(spec, spec.backward.launch, Device::kCpu));
    meta.impl(backward.c_str(), Boxed<BackwardMeta>(spec));
    autograd.impl(backward.c_str(), Boxed<BackwardAutograd>(spec));
  }
}

#ifdef OPBRIDGE_WITH_CUDA
// CUDA kernels (an op's kernel.cu) under the CUDA dispatch key; the Meta and
// Autograd kernels above serve CUDA tensors as they serve CPU ones. An op
// whose kernel.cu registers no backward gets none on CUDA: its backward op
// then fails on CUDA tensors with PyTorch's "no CUDA kernel" error.
void RegisterCudaWithTorch(const OpSpec& spec, const CudaKernels& kernels) {
  torch::Library& cuda = NewLibrary(torch::Library::IMPL, c10::DispatchKey::CUDA);
  cuda.impl(spec.name, Boxed<ForwardKernel>(spec, kernels.forward, Device::kCuda));
  cuda.impl((std::string(spec.name) + ".out").c_str(),
            Boxed<ForwardOutKernel>(spec, kernels.forward, Device::kCuda));
  if (spec.has_backward() && kernels.backward != nullptr) {
    cuda.impl(spec.BackwardName().c_str(), Boxed<BackwardKernel>(spec, kernels.backward, Device::kCuda));
  }
}
#endif

}  // namespace

void RegisterOperators() {
  registrations.RegisterOnce([] {
    for (const OpSpec* spec : AllSpecs()) ThrowIfError(CheckGradients(*spec));
    for (const OpSpec* spec : AllSpecs()) {
      RegisterWithTorch(*spec);
#ifdef OPBRIDGE_WITH_CUDA
      if (const CudaKernels* kernels = FindCudaKernels(*spec)) RegisterCudaWithTorch(*spec, *kernels);
#endif
    }
  });
}

bool OperatorsRegistered() { return registrations.Registered(); }

std::vector<std::string> OperatorsTakenElsewhere() {
  std::vector<std::string> taken;
  registrations.UnlessRegistered([&] {
    const std::string ns = ThisLibrary().torch_namespace;
    auto& dispatcher = c10::Dispatcher::singleton();
    const auto check = [&](const std::string& name, const char* overload) {
      if (dispatcher.findSchema({ns + "::" + name, overload}).has_value())
        taken.push_back(ns + "::" + name + (*overload != '\0' ? std::string(".") + overload : ""));
    };
    for (const OpSpec* spec : AllSpecs()) {
      check(spec->name, "");
      check(spec->name, "out");
      if (spec->has_backward()) check(spec->BackwardName(), "");
    }
  });
  return taken;
}

void SetOutputGuards(bool enabled) { guards_switched_on.store(enabled, std::memory_order_relaxed); }

bool OutputGuardsEnabled() {
  return RuntimeChecksEnabled() || guards_switched_on.load(std::memory_order_relaxed);
}

}  // namespace opbridge::torch_adapter
