// The PyTorch adapter on LibTorch's stable ABI (OPBRIDGE_TORCH_STABLE_ABI=ON):
// the same registrations as adapter.cpp -- each spec's op, its out= form and
// its backward, with CPU kernels -- through torch's stable C shims only, so
// that one build of lib<name>_torch.so loads in every torch from the targeted
// stable version on (TORCH_TARGET_VERSION, cmake/opbridge.cmake). The stable
// ABI has no symbolic sizes and no autograd: the Meta (fake) kernels and the
// autograd formulas are registered from Python (opbridge/_stable.py) when
// opbridge.load_library registers the library; a C++ host without Python
// gets the CPU kernels, which is what an AOTInductor graph calls.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include <array>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "opbridge/adapter_kit.h"
#include "opbridge/checks.h"
#include "opbridge/library.h"
#include "opbridge/runtime_checks.h"
#include "opbridge/spec.h"
#include "torch_adapter/backward_rule.h"
#include "torch_adapter/registration.h"

#ifdef OPBRIDGE_WITH_CUDA
#error \
    "the stable-ABI PyTorch adapter registers CPU kernels only (build CUDA with OPBRIDGE_TORCH_STABLE_ABI=OFF)"
#endif

namespace opbridge::torch_adapter {
namespace {

namespace st = torch::stable;
using torch::headeronly::ScalarType;

// Errors are the message alone (STD_TORCH_CHECK would prefix the function,
// file and line): what the op, argument, expected and given value say.
template <typename... Parts>
[[noreturn]] void Fail(const Parts&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  throw std::runtime_error(message.str());
}

#define OPBRIDGE_STABLE_CHECK(cond, ...) \
  do {                                   \
    if (!(cond)) Fail(__VA_ARGS__);      \
  } while (false)

void ThrowIfError(const Status& status) {
  if (!status.ok()) throw std::runtime_error(status.message());
}

std::string DtypeName(ScalarType type) {
  const char* name = DtypeNameOf(type);
  return name != nullptr ? name : "dtype " + std::to_string(static_cast<int>(type));
}

ScalarType ScalarTypeOf(const std::string& dtype) {
  ScalarType type = ScalarType::Float;
  OPBRIDGE_STABLE_CHECK(ScalarTypes<ScalarType>::Of(DtypeFromName(dtype), &type),
                        "opbridge: no torch dtype for ", dtype);
  return type;
}

using MaybeTensor = std::optional<st::Tensor>;

TensorInfo InfoOf(const MaybeTensor& tensor) {
  TensorInfo info;
  if (!tensor.has_value() || !tensor->defined()) {
    info.present = false;
    return info;
  }
  info.dtype = DtypeName(tensor->scalar_type());
  for (const int64_t size : tensor->sizes()) info.shape.push_back(size);
  return info;
}

std::vector<TensorInfo> InfosOf(const std::vector<MaybeTensor>& tensors) {
  std::vector<TensorInfo> infos;
  infos.reserve(tensors.size());
  for (const MaybeTensor& tensor : tensors) infos.push_back(InfoOf(tensor));
  return infos;
}

// A contiguous CPU tensor through aoti_torch_empty_strided, which calls
// at::empty_strided itself: st::empty goes through torch_call_dispatcher,
// which looks the operator up by name and boxes the sizes on every call.
st::Tensor Empty(const Shape& dims, ScalarType type) {
  const std::vector<int64_t> shape = Sizes(dims);
  std::vector<int64_t> strides(shape.size());
  int64_t stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= shape[d] > 1 ? shape[d] : 1;
  }
  AtenTensorHandle handle = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(
      static_cast<int64_t>(shape.size()), shape.data(), strides.data(),
      st::detail::to<int32_t>(st::detail::from(type)), aoti_torch_device_type_cpu(), 0, &handle));
  return st::Tensor(handle);
}

ParallelFor StableParallelFor() {
  return [](int64_t n, int64_t grain, const RangeBody& body) {
    if (n <= 0) return;
    st::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) { body(begin, end); });
  };
}

// ------------------------------------------------------------ the stack

// A boxed call's arguments, read in schema order (each read takes ownership
// of its StableIValue, as the stable calling convention asks).
class Arguments {
 public:
  explicit Arguments(StableIValue* stack) : stack_(stack) {}

  // A `Tensor?` argument arrives boxed (null for None), a `Tensor` as its handle.
  MaybeTensor Tensor(bool optional) {
    const StableIValue value = stack_[next_++];
    if (optional) return st::detail::to<MaybeTensor>(value);
    return st::detail::to<st::Tensor>(value);
  }

  // `optional`: per tensor, whether the schema declares it `Tensor?`.
  std::vector<MaybeTensor> Tensors(const std::vector<bool>& optional) {
    std::vector<MaybeTensor> tensors;
    tensors.reserve(optional.size());
    for (const bool maybe : optional) tensors.push_back(Tensor(maybe));
    return tensors;
  }

  AttrValue Attr(const AttrSpec& attr) {
    const StableIValue value = stack_[next_++];
    switch (attr.type) {
      case AttrType::kFloat:
        return st::detail::to<double>(value);
      case AttrType::kInt:
        return static_cast<double>(st::detail::to<int64_t>(value));
      case AttrType::kBool:
        return st::detail::to<bool>(value) ? 1.0 : 0.0;
      case AttrType::kString: {
        // Read through the handle (and free it) rather than to<std::string>.
        const StringHandle handle = st::detail::to<StringHandle>(value);
        size_t length = 0;
        const char* data = nullptr;
        STABLE_TORCH_ERROR_CODE_CHECK(torch_string_length(handle, &length));
        STABLE_TORCH_ERROR_CODE_CHECK(torch_string_c_str(handle, &data));
        std::string text(data, length);
        STABLE_TORCH_ERROR_CODE_CHECK(torch_delete_string(handle));
        return text;
      }
      case AttrType::kFloats:
        return st::detail::to<std::vector<double>>(value);
    }
    return {};
  }

  std::vector<AttrValue> Attrs(const OpSpec& spec) {
    std::vector<AttrValue> attrs;
    attrs.reserve(spec.attrs.size());
    for (const AttrSpec& attr : spec.attrs) attrs.push_back(Attr(attr));
    return attrs;
  }

  std::vector<bool> Bools() { return st::detail::to<std::vector<bool>>(stack_[next_++]); }

 private:
  StableIValue* stack_;
  size_t next_ = 0;
};

// Which of the forward's and the backward's tensors are `Tensor?` (as
// OpSpec::TorchSchema and BackwardSchema write them).
std::vector<bool> ForwardOptional(const OpSpec& spec) {
  std::vector<bool> optional;
  for (const InputSpec& input : spec.inputs) optional.push_back(input.optional);
  return optional;
}

std::vector<bool> BackwardOptional(const OpSpec& spec) {
  std::vector<bool> optional;
  for (const BackwardInput& input : spec.backward.inputs) {
    optional.push_back(input.source == TensorSource::kInput &&
                       spec.inputs.at(static_cast<size_t>(input.index)).optional);
  }
  return optional;
}

// --------------------------------------------------------- kernel inputs

std::string DeviceName(const st::Tensor& tensor) {
  return tensor.is_cuda() ? "cuda:" + std::to_string(tensor.get_device_index()) : "a non-CPU device";
}

// Contiguous copies (where needed) of the tensors a CPU kernel reads.
struct KernelInputs {
  std::vector<MaybeTensor> keep;
  std::vector<const void*> pointers;

  KernelInputs(const std::string& op, const std::vector<const char*>& names,
               const std::vector<MaybeTensor>& tensors) {
    keep.reserve(tensors.size());
    pointers.reserve(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      const MaybeTensor& tensor = tensors[i];
      if (!tensor.has_value() || !tensor->defined()) {
        keep.emplace_back();
        pointers.push_back(nullptr);
        continue;
      }
      OPBRIDGE_STABLE_CHECK(tensor->is_cpu(), op, ": argument '", names.at(i),
                            "' must be a CPU tensor, got one on ", DeviceName(*tensor));
      keep.push_back(tensor->is_contiguous() ? *tensor : st::contiguous(*tensor));
      pointers.push_back(keep.back()->const_data_ptr());
    }
  }
};

// The bytes [begin, begin + size) a contiguous tensor spans.
std::pair<const char*, const char*> Span(const st::Tensor& tensor) {
  const char* begin = static_cast<const char*>(tensor.const_data_ptr());
  return {begin, begin + tensor.numel() * static_cast<int64_t>(tensor.element_size())};
}

bool Overlap(const st::Tensor& a, const st::Tensor& b) {
  const auto [a0, a1] = Span(a);
  const auto [b0, b1] = Span(b);
  return a0 < b1 && b0 < a1;
}

// ------------------------------------------------------------ output guards

std::atomic<bool> guards_switched_on{false};

// Output guards (registration.h): each output lies in a byte buffer between a
// head and a tail guard, checked after the kernel; the outputs returned are
// copies into tensors of their own. CPU only, as this adapter.
class OutputGuards {
 public:
  OutputGuards(std::string op, const std::vector<const char*>& input_names,
               const std::vector<TensorInfo>& inputs)
      : op_(std::move(op)), input_names_(input_names), inputs_(inputs), tail_(OutputTailGuard(inputs)) {}

  void* Add(const char* name, const TensorInfo& info) {
    const ScalarType type = ScalarTypeOf(info.dtype);
    Guarded guarded{name, info, type, 0, Empty({0}, ScalarType::Byte)};
    guarded.bytes = NumElements(info.shape) * static_cast<int64_t>(Empty({0}, type).element_size());
    guarded.buffer = Empty({kOutputHeadGuard + guarded.bytes + tail_}, ScalarType::Byte);
    auto* bytes = static_cast<unsigned char*>(guarded.buffer.mutable_data_ptr());
    FillGuardPattern(bytes, guarded.buffer.numel());
    outputs_.push_back(std::move(guarded));
    return bytes + kOutputHeadGuard;
  }

  std::vector<st::Tensor> Finish() const {
    std::vector<st::Tensor> results;
    results.reserve(outputs_.size());
    for (const Guarded& output : outputs_) {
      const auto* bytes = static_cast<const unsigned char*>(output.buffer.const_data_ptr());
      ThrowIfError(CheckOutputGuards(op_, output.name, output.info, bytes, tail_, input_names_, inputs_));
      st::Tensor result = Empty(output.info.shape, output.type);
      if (output.bytes > 0) std::memcpy(result.mutable_data_ptr(), bytes + kOutputHeadGuard, output.bytes);
      results.push_back(std::move(result));
    }
    return results;
  }

 private:
  struct Guarded {
    const char* name;
    TensorInfo info;
    ScalarType type;
    int64_t bytes;
    st::Tensor buffer;
  };

  std::string op_;
  std::vector<const char*> input_names_;
  std::vector<TensorInfo> inputs_;
  int64_t tail_;
  std::vector<Guarded> outputs_;
};

const char* OutputName(const OpSpec& spec, size_t k) {
  return k < spec.outputs.size() ? spec.outputs[k] : "?";
}

void ValidateForward(const OpSpec& spec, const KernelArgs& args) {
  ThrowIfError(ValidateKernelArgs(spec, args));
}

// ------------------------------------------------------------------ kernels

void Forward(const OpSpec& spec, StableIValue* stack) {
  Arguments arguments(stack);
  const std::vector<MaybeTensor> inputs = arguments.Tensors(ForwardOptional(spec));
  KernelArgs args;
  args.attrs = arguments.Attrs(spec);
  args.input_infos = InfosOf(inputs);
  ThrowIfError(InferWithAttrs(spec, args.input_infos, args.attrs, &args.output_infos));
  const std::string op = spec.TorchName();
  const KernelInputs contiguous(op, ForwardInputNames(spec), inputs);
  args.inputs = contiguous.pointers;
  args.parallel_for = StableParallelFor();
  std::vector<st::Tensor> outputs;
  outputs.reserve(args.output_infos.size());
  std::optional<OutputGuards> guards;
  if (OutputGuardsEnabled()) guards.emplace(op, ForwardInputNames(spec), args.input_infos);
  for (size_t k = 0; k < args.output_infos.size(); ++k) {
    const TensorInfo& info = args.output_infos[k];
    if (guards.has_value()) {
      args.outputs.push_back(guards->Add(OutputName(spec, k), info));
      continue;
    }
    outputs.push_back(Empty(info.shape, ScalarTypeOf(info.dtype)));
    args.outputs.push_back(outputs.back().mutable_data_ptr());
  }
  if (RuntimeChecksEnabled()) ValidateForward(spec, args);
  ThrowIfError(LaunchChecked(spec, spec.forward, args));
  if (guards.has_value()) outputs = guards->Finish();
  for (size_t k = 0; k < outputs.size(); ++k) stack[k] = st::detail::from(std::move(outputs[k]));
}

st::Tensor Resize(const st::Tensor& tensor, const Shape& dims) {
  const std::vector<int64_t> shape = Sizes(dims);
  std::array<StableIValue, 3> stack{
      st::detail::from(tensor),
      st::detail::from(torch::headeronly::IntHeaderOnlyArrayRef(shape.data(), shape.size())),
      st::detail::from(std::nullopt)};
  STABLE_TORCH_ERROR_CODE_CHECK(torch_call_dispatcher("aten::resize_", "", stack.data(), TORCH_ABI_VERSION));
  return st::detail::to<st::Tensor>(stack[0]);
}

bool SameShape(const st::Tensor& tensor, const Shape& shape) {
  const auto sizes = tensor.sizes();
  if (sizes.size() != shape.size()) return false;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (sizes[d] != shape[d]) return false;
  }
  return true;
}

void ForwardOut(const OpSpec& spec, StableIValue* stack) {
  Arguments arguments(stack);
  const std::vector<MaybeTensor> inputs = arguments.Tensors(ForwardOptional(spec));
  KernelArgs args;
  args.attrs = arguments.Attrs(spec);
  std::vector<st::Tensor> outs;
  for (const MaybeTensor& out : arguments.Tensors(std::vector<bool>(spec.outputs.size(), false)))
    outs.push_back(*out);
  args.input_infos = InfosOf(inputs);
  ThrowIfError(InferWithAttrs(spec, args.input_infos, args.attrs, &args.output_infos));
  const std::string op = spec.TorchName() + ".out";
  const KernelInputs contiguous(spec.TorchName(), ForwardInputNames(spec), inputs);
  args.inputs = contiguous.pointers;
  args.parallel_for = StableParallelFor();
  const std::vector<std::string> names = spec.OutArgumentNames();
  for (size_t k = 0; k < outs.size(); ++k) {
    const TensorInfo& info = args.output_infos[k];
    OPBRIDGE_STABLE_CHECK(outs[k].scalar_type() == ScalarTypeOf(info.dtype), op, ": argument '", names[k],
                          "' must be ", info.dtype, ", got ", DtypeName(outs[k].scalar_type()));
    OPBRIDGE_STABLE_CHECK(outs[k].is_cpu(), op, ": argument '", names[k],
                          "' must be on cpu like the inputs, got ", DeviceName(outs[k]));
  }
  // As adapter.cpp: into each out tensor directly when it is contiguous and
  // shares no memory with an input or an earlier out; else into a temporary.
  std::vector<st::Tensor> targets;
  std::optional<OutputGuards> guards;
  if (OutputGuardsEnabled()) guards.emplace(op, ForwardInputNames(spec), args.input_infos);
  for (size_t k = 0; k < outs.size(); ++k) {
    const Shape& shape = args.output_infos[k].shape;
    if (!SameShape(outs[k], shape)) outs[k] = Resize(outs[k], shape);
    if (guards.has_value()) {
      args.outputs.push_back(guards->Add(OutputName(spec, k), args.output_infos[k]));
      continue;
    }
    bool direct = outs[k].is_contiguous();
    for (const MaybeTensor& input : contiguous.keep)
      direct = direct && !(input.has_value() && Overlap(*input, outs[k]));
    for (size_t j = 0; j < k; ++j) direct = direct && !Overlap(outs[j], outs[k]);
    targets.push_back(direct ? outs[k] : Empty(shape, outs[k].scalar_type()));
    args.outputs.push_back(targets.back().mutable_data_ptr());
  }
  if (RuntimeChecksEnabled()) ValidateForward(spec, args);
  ThrowIfError(LaunchChecked(spec, spec.forward, args));
  if (guards.has_value()) targets = guards->Finish();
  for (size_t k = 0; k < outs.size(); ++k) {
    if (targets[k].mutable_data_ptr() != outs[k].mutable_data_ptr()) st::copy_(outs[k], targets[k]);
    stack[k] = st::detail::from(outs[k]);
  }
}

std::vector<TensorInfo> InferBackward(const OpSpec& spec, const std::vector<TensorInfo>& infos,
                                      const std::vector<AttrValue>& attrs) {
  std::vector<TensorInfo> outputs;
  ThrowIfError(InferBackwardWithAttrs(spec, infos, attrs, &outputs));
  return outputs;
}

void Backward(const OpSpec& spec, StableIValue* stack) {
  Arguments arguments(stack);
  const std::vector<MaybeTensor> inputs = arguments.Tensors(BackwardOptional(spec));
  KernelArgs args;
  args.attrs = arguments.Attrs(spec);
  const std::vector<bool> mask = arguments.Bools();
  const std::string op = std::string(ThisLibrary().torch_namespace) + "::" + spec.BackwardName();
  OPBRIDGE_STABLE_CHECK(mask.size() == spec.backward.outputs.size(), spec.BackwardName(),
                        ": output_mask must have ", spec.backward.outputs.size(), " entries, got ",
                        mask.size());
  std::vector<bool> wanted;
  for (size_t o = 0; o < mask.size(); ++o) wanted.push_back(mask[o] || !spec.backward.outputs[o].optional);
  args.input_infos = InfosOf(inputs);
  args.output_infos = InferBackward(spec, args.input_infos, args.attrs);
  const KernelInputs contiguous(spec.TorchName(), BackwardInputNames(spec), inputs);
  args.inputs = contiguous.pointers;
  args.parallel_for = StableParallelFor();
  std::vector<st::Tensor> outputs;
  std::optional<OutputGuards> guards;
  if (OutputGuardsEnabled()) guards.emplace(op, BackwardInputNames(spec), args.input_infos);
  for (size_t o = 0; o < args.output_infos.size(); ++o) {
    const TensorInfo& info = args.output_infos[o];
    const ScalarType type = ScalarTypeOf(info.dtype);
    outputs.push_back(wanted[o] && !guards.has_value() ? Empty(info.shape, type) : Empty({0}, type));
    if (!wanted[o]) {
      args.outputs.push_back(nullptr);
    } else if (guards.has_value()) {
      args.outputs.push_back(guards->Add(spec.backward.outputs[o].name, info));
    } else {
      args.outputs.push_back(outputs.back().mutable_data_ptr());
    }
  }
  if (RuntimeChecksEnabled()) {
    for (size_t i = 0; i < args.inputs.size(); ++i) {
      if (!args.input_infos[i].present) continue;
      ThrowIfError(
          CheckFiniteTensor(spec, spec.backward.inputs[i].name, args.input_infos[i], args.inputs[i]));
    }
    for (size_t a = 0; a < args.attrs.size(); ++a)
      ThrowIfError(CheckAttributeValue(spec, spec.attrs[a].name, args.attrs[a]));
  }
  ThrowIfError(LaunchChecked(spec, spec.backward.launch, args));
  if (guards.has_value()) {
    std::vector<st::Tensor> guarded = guards->Finish();
    size_t next = 0;
    for (size_t o = 0; o < outputs.size(); ++o) {
      if (wanted[o]) outputs[o] = std::move(guarded[next++]);
    }
  }
  for (size_t o = 0; o < outputs.size(); ++o) stack[o] = st::detail::from(std::move(outputs[o]));
}

// ------------------------------------------------------- boxed trampolines

// A stable boxed kernel is a bare function pointer: each (spec, kind) gets a
// slot of a fixed table, and slot I's function reads its spec from there.
enum class Kind { kForward, kOut, kBackward };

struct Slot {
  const OpSpec* spec = nullptr;
  Kind kind = Kind::kForward;
};

constexpr size_t kSlots = 768;  // three per spec: 256 specs in one library
std::array<Slot, kSlots> slots;
size_t slots_used = 0;

void Run(const Slot& slot, StableIValue* stack) {
  switch (slot.kind) {
    case Kind::kForward:
      return Forward(*slot.spec, stack);
    case Kind::kOut:
      return ForwardOut(*slot.spec, stack);
    case Kind::kBackward:
      return Backward(*slot.spec, stack);
  }
}

template <size_t I>
void BoxedKernel(StableIValue* stack, uint64_t /*num_args*/, uint64_t /*num_outputs*/) {
  Run(slots[I], stack);
}

using BoxedFn = void (*)(StableIValue*, uint64_t, uint64_t);

template <size_t... I>
constexpr std::array<BoxedFn, sizeof...(I)> MakeTable(std::index_sequence<I...>) {
  return {&BoxedKernel<I>...};
}

constexpr std::array<BoxedFn, kSlots> kKernels = MakeTable(std::make_index_sequence<kSlots>());

BoxedFn NewSlot(const OpSpec& spec, Kind kind) {
  OPBRIDGE_STABLE_CHECK(slots_used < kSlots, ThisLibrary().name, ": more than ", kSlots / 3,
                        " operators in one library (the stable-ABI adapter's slot table)");
  slots[slots_used] = Slot{&spec, kind};
  return kKernels[slots_used++];
}

// ------------------------------------------------------------- registration

using Library = st::detail::StableLibrary;

// The StableLibrary objects of the library's registration (registration.h);
// they unregister on destruction.
Registrations<Library> registrations;

Library& NewLibrary(Library::Kind kind, const char* key) {
  Library* library =
      registrations.New(kind, ThisLibrary().torch_namespace, key, __FILE__, static_cast<uint32_t>(__LINE__));
  OPBRIDGE_STABLE_CHECK(library != nullptr, "opbridge: an operator registration outside RegisterOperators");
  return *library;
}

void RegisterWithTorch(const OpSpec& spec) {
  // pt2_compliant: the ops trace under torch.compile / torch.export (the
  // fake kernels come from Python).
  const std::vector<at::Tag> tags{at::Tag::pt2_compliant_tag};
  Library& defs = NewLibrary(Library::Kind::FRAGMENT, nullptr);
  defs.def(spec.TorchSchema().c_str(), tags);
  if (spec.has_backward()) defs.def(spec.BackwardSchema().c_str(), tags);
  defs.def(spec.TorchOutSchema().c_str());
  Library& cpu = NewLibrary(Library::Kind::IMPL, "CPU");
  cpu.impl(spec.name, NewSlot(spec, Kind::kForward));
  cpu.impl((std::string(spec.name) + ".out").c_str(), NewSlot(spec, Kind::kOut));
  if (spec.has_backward()) cpu.impl(spec.BackwardName().c_str(), NewSlot(spec, Kind::kBackward));
}

}  // namespace

void RegisterOperators() {
  registrations.RegisterOnce([] {
    for (const OpSpec* spec : AllSpecs()) ThrowIfError(CheckGradients(*spec));
    const size_t first_slot = slots_used;
    try {
      for (const OpSpec* spec : AllSpecs()) RegisterWithTorch(*spec);
    } catch (...) {
      slots_used = first_slot;
      throw;
    }
  });
}

bool OperatorsRegistered() { return registrations.Registered(); }

// The stable ABI cannot look a schema up: opbridge.load_library asks
// PyTorch from Python (opbridge/_stable.py); a C++ host learns of a taken
// name from RegisterOperators' error.
std::vector<std::string> OperatorsTakenElsewhere() { return {}; }

void SetOutputGuards(bool enabled) { guards_switched_on.store(enabled, std::memory_order_relaxed); }

bool OutputGuardsEnabled() {
  return RuntimeChecksEnabled() || guards_switched_on.load(std::memory_order_relaxed);
}

}  // namespace opbridge::torch_adapter
