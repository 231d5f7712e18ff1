// The ONNX Runtime custom-op library: one generic OrtCustomOp per registered
// OpSpec, in the "opbridge" domain.
//
// Why not ONNX Runtime's lite custom-op API: its CreateKernel cannot return a
// status (an exception from a missing attribute would cross the C API), it
// marks every input optional (so a node with too few inputs is not
// rejected), and it takes inputs and attributes from a C++ signature rather
// than from the spec. Driving OrtCustomOp from the spec keeps input names,
// optionality, attribute names and types in one place, and every callback
// returns an OrtStatus instead of throwing.
//
// In a CUDA build (OPBRIDGE_CUDA), every op with CUDA kernels (opbridge/cuda.h)
// is registered a second time for the CUDA execution provider: the same spec,
// shape rule and attribute handling, with the CUDA launch function running on
// the kernel context's GPU compute stream and scratch memory from the
// session's CUDA allocator. That path is compiled in CI but has not run
// against onnxruntime-gpu (see README).
//
// One build serves every ONNX Runtime release from the floor (kOrtApiFloor in
// opbridge/version.h, which says why) up: the library asks for the floor's C
// API version, declares its ops with a version no newer than the floor, and
// uses nothing the floor lacks. RegisterCustomOps refuses an older runtime.
#define ORT_API_MANUAL_INIT
#include <onnxruntime_cxx_api.h>
#undef ORT_API_MANUAL_INIT

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "opbridge/adapter_kit.h"
#include "opbridge/checks.h"
#include "opbridge/cuda.h"
#include "opbridge/runtime_checks.h"
#include "opbridge/spec.h"
#include "opbridge/version.h"
#include "ort_adapter/runtime_version.h"

namespace opbridge {
namespace {

const OrtApi* g_api = nullptr;

// Every message goes out as a C string: a control byte that reached it
// unescaped (a NUL in an attribute's text) is escaped here rather than
// ending it early.
OrtStatus* MakeStatus(const std::string& message) {
  return g_api->CreateStatus(ORT_INVALID_ARGUMENT, WithoutControlBytes(message).c_str());
}

// ONNX Runtime's element types are ONNX's numbers, as Dtype's values are.
const char* DtypeName(ONNXTensorElementDataType type) {
  const char* name = opbridge::DtypeName(DtypeFromOnnx(static_cast<int>(type)));
  return name != nullptr ? name : "an unsupported element type";
}

ONNXTensorElementDataType ElementTypeOf(const std::string& name) {
  return static_cast<ONNXTensorElementDataType>(OnnxElementType(opbridge::DtypeFromName(name)));
}

// Which node of the model, at the end of a message: the node name is the
// model's text, escaped, and last, so that whatever it holds the rest of the
// message reads whole before it.
std::string NodeSuffix(const std::string& node_name) { return " [node " + QuotedForMessage(node_name) + "]"; }

// A message of this library's own about a node: the op, what is wrong, the node.
std::string NodeMessage(const OpSpec& spec, const std::string& node_name, const std::string& what) {
  return spec.QualifiedName() + " node: " + what + NodeSuffix(node_name);
}

// Runs fn and turns any C++ exception into an OrtStatus: nothing may unwind
// through ONNX Runtime's C API.
template <typename Fn>
OrtStatus* Guarded(const OpSpec& spec, Fn&& fn) noexcept {
  try {
    return fn();
  } catch (const std::exception& e) {
    return MakeStatus(spec.QualifiedName() + ": " + e.what());
  } catch (...) {
    return MakeStatus(spec.QualifiedName() + ": unknown error");
  }
}

struct SpecKernel {
  const OpSpec* spec;
  std::string node_name;
  std::vector<AttrValue> attrs;  // read once, at kernel creation
  // Said after a failed check of the attributes: which list attributes read
  // as empty without their type being known (see AttributeTypeOf).
  std::string attr_note;
  LaunchFn launch;  // the CPU kernel, or the CUDA one
  bool cuda;
};

struct SpecOp : OrtCustomOp {
  const OpSpec* spec;
  const CudaKernels* cuda;  // null: the CPU execution provider's op
};

const OpSpec& SpecOf(const OrtCustomOp* op) { return *static_cast<const SpecOp*>(op)->spec; }
const CudaKernels* CudaOf(const OrtCustomOp* op) { return static_cast<const SpecOp*>(op)->cuda; }

std::string NodeName(const OrtKernelInfo* info) {
  size_t size = 0;
  if (OrtStatus* s = g_api->KernelInfo_GetNodeName(info, nullptr, &size)) {
    g_api->ReleaseStatus(s);
    return "?";
  }
  std::string name(size, '\0');
  if (OrtStatus* s = g_api->KernelInfo_GetNodeName(info, name.data(), &size)) {
    g_api->ReleaseStatus(s);
    return "?";
  }
  if (!name.empty() && name.back() == '\0') name.pop_back();
  return name;
}

// An attribute that the C API shows only as an empty list: an empty list
// of any kind, or a type it cannot read (STRINGS, TENSORS, GRAPH, ...).
constexpr const char* kUnnamedType = "?";

// The ONNX type of the node's attribute `name` ("FLOAT", "INTS", ...),
// kUnnamedType when it is an empty list or a type the C API cannot read, or
// empty when the node has none of that name. The C API of the oldest
// supported runtime cannot say an attribute's type (OpAttr_GetType is newer),
// so each type is tried: the single-value reads (FLOAT, INT, STRING, TENSOR)
// check the type, the list reads do not (any attribute reads as an empty
// list of floats or ints), so a list is told by which of its fields has
// values, and an attribute that is none of these is described by what it can
// still be.
std::string AttributeTypeOf(const OrtKernelInfo* info, const char* name) {
  auto ok = [](OrtStatus* status) {
    if (status == nullptr) return true;
    g_api->ReleaseStatus(status);
    return false;
  };
  float f = 0.0f;
  int64_t i = 0;
  size_t size = 0;
  if (ok(g_api->KernelInfoGetAttribute_float(info, name, &f))) return "FLOAT";
  if (ok(g_api->KernelInfoGetAttribute_int64(info, name, &i))) return "INT";
  if (ok(g_api->KernelInfoGetAttribute_string(info, name, nullptr, &size))) return "STRING";
  OrtAllocator* allocator = nullptr;
  if (ok(g_api->GetAllocatorWithDefaultOptions(&allocator))) {
    OrtValue* tensor = nullptr;
    if (ok(g_api->KernelInfoGetAttribute_tensor(info, name, allocator, &tensor))) {
      g_api->ReleaseValue(tensor);
      return "TENSOR";
    }
  }
  size_t floats = 0;
  if (!ok(g_api->KernelInfoGetAttributeArray_float(info, name, nullptr, &floats))) return "";
  if (floats > 0) return "FLOATS";
  size_t ints = 0;
  if (ok(g_api->KernelInfoGetAttributeArray_int64(info, name, nullptr, &ints)) && ints > 0) return "INTS";
  return kUnnamedType;
}

// What the node has, for a message: "the node has it with type INT".
std::string FoundType(const std::string& found) {
  if (found == kUnnamedType) {
    return "the node has it as an empty list or with a type other than FLOAT, INT, STRING, TENSOR, FLOATS "
           "and INTS (STRINGS, TENSORS, GRAPH, ...)";
  }
  return "the node has it with type " + found;
}

// Reads an attribute of the node; an absent one with a default in the spec
// takes the default (as ONNX defines for attributes with a default value).
// A list that reads as empty, of a type the C API cannot name, is taken as
// empty, and `note` (appended to) says so for a later message.
OrtStatus* ReadAttribute(const OpSpec& spec, const std::string& node, const OrtKernelInfo* info,
                         const AttrSpec& attr, AttrValue* value, std::string* note) {
  OrtStatus* status = nullptr;
  switch (attr.type) {
    case AttrType::kFloat: {
      float v = 0.0f;
      status = g_api->KernelInfoGetAttribute_float(info, attr.name, &v);
      value->number = v;
      break;
    }
    case AttrType::kInt:
    case AttrType::kBool: {
      int64_t v = 0;
      status = g_api->KernelInfoGetAttribute_int64(info, attr.name, &v);
      value->number = static_cast<double>(v);
      break;
    }
    case AttrType::kString: {
      size_t size = 0;
      status = g_api->KernelInfoGetAttribute_string(info, attr.name, nullptr, &size);
      if (status == nullptr) {
        std::string text(size, '\0');
        status = g_api->KernelInfoGetAttribute_string(info, attr.name, text.data(), &size);
        if (!text.empty() && text.back() == '\0') text.pop_back();
        value->text = text;
      }
      break;
    }
    case AttrType::kFloats: {
      size_t size = 0;
      status = g_api->KernelInfoGetAttributeArray_float(info, attr.name, nullptr, &size);
      if (status == nullptr) {
        std::vector<float> floats(size);
        status = g_api->KernelInfoGetAttributeArray_float(info, attr.name, floats.data(), &size);
        value->numbers.assign(floats.begin(), floats.end());
      }
      break;
    }
  }
  const std::string expected = std::string("attribute '") + attr.name + "' must be present with type " +
                               OnnxAttributeType(attr.type) + " (" + AttrTypeName(attr.type) + ")";
  if (status == nullptr) {
    if (attr.type != AttrType::kFloats || !value->numbers.empty()) return nullptr;
    // Read as a list, an attribute of any type is an empty list of floats:
    // an empty one passes only when it is no other type of value.
    const std::string found = AttributeTypeOf(info, attr.name);
    if (found == kUnnamedType) {
      *note += std::string("; attribute '") + attr.name + "' reads as an empty list: " + FoundType(found);
      return nullptr;
    }
    return MakeStatus(NodeMessage(spec, node, expected + "; " + FoundType(found)));
  }
  g_api->ReleaseStatus(status);
  const std::string found = AttributeTypeOf(info, attr.name);
  if (found.empty()) {
    if (attr.has_default) {
      *value = OnnxDefaultValue(attr);
      return nullptr;
    }
    return MakeStatus(
        NodeMessage(spec, node, expected + ": it has no default and the node does not have it"));
  }
  return MakeStatus(NodeMessage(spec, node, expected + "; " + FoundType(found)));
}

// Input dtypes and shapes as declared in the graph; unknown dims are -1.
std::vector<TensorInfo> StaticInputInfos(const OrtKernelInfo* info, size_t input_count, size_t spec_inputs) {
  std::vector<TensorInfo> inputs(spec_inputs);
  for (size_t i = 0; i < spec_inputs; ++i) {
    TensorInfo& tensor = inputs[i];
    OrtTypeInfo* type_info = nullptr;
    if (i >= input_count) {
      tensor.present = false;
      continue;
    }
    if (OrtStatus* s = g_api->KernelInfo_GetInputTypeInfo(info, i, &type_info)) {
      g_api->ReleaseStatus(s);  // an empty input name: an absent optional input
      tensor.present = false;
      continue;
    }
    Ort::TypeInfo owned(type_info);
    if (owned.GetONNXType() != ONNX_TYPE_TENSOR) {
      tensor.dtype = "a non-tensor value";
      continue;
    }
    auto tensor_info = owned.GetTensorTypeAndShapeInfo();
    tensor.dtype = DtypeName(tensor_info.GetElementType());
    tensor.shape = DimsOf(tensor_info.GetShape());
  }
  return inputs;
}

OrtStatus* ORT_API_CALL CreateKernel(const OrtCustomOp* op, const OrtApi* /*api*/, const OrtKernelInfo* info,
                                     void** kernel) noexcept {
  const OpSpec& spec = SpecOf(op);
  *kernel = nullptr;
  return Guarded(spec, [&]() -> OrtStatus* {
    auto state = std::make_unique<SpecKernel>();
    state->spec = &spec;
    state->cuda = CudaOf(op) != nullptr;
    state->launch = state->cuda ? CudaOf(op)->forward : spec.forward;
    state->node_name = NodeName(info);
    size_t input_count = 0;
    if (OrtStatus* s = g_api->KernelInfo_GetInputCount(info, &input_count)) return s;
    size_t required = 0;
    for (const InputSpec& input : spec.inputs) required += input.optional ? 0 : 1;
    if (input_count < required || input_count > spec.inputs.size()) {
      std::string names;
      for (const InputSpec& input : spec.inputs) {
        names += (names.empty() ? "" : ", ") + std::string(input.name) + (input.optional ? "?" : "");
      }
      return MakeStatus(NodeMessage(
          spec, state->node_name,
          "expects " + std::to_string(required) +
              (required == spec.inputs.size() ? "" : " to " + std::to_string(spec.inputs.size())) +
              " inputs (" + names + "), the node has " + std::to_string(input_count)));
    }
    // Check dtypes and the shapes known when the session is created, so that a
    // bad model fails to load with the spec's message. (ONNX Runtime ignores
    // the status of InferOutputShapeFn, so that is too early to report.)
    std::vector<TensorInfo> inputs = StaticInputInfos(info, input_count, spec.inputs.size());
    // The C API shows an input of unknown rank as 0-D: such a graph is only
    // checked at run time, on the real shapes.
    bool rank_known = true;
    for (const TensorInfo& input : inputs)
      rank_known = rank_known && (!input.present || !input.shape.empty());
    std::vector<TensorInfo> outputs;
    Status checked = spec.infer(inputs, &outputs);
    if (!checked.ok() && rank_known) return MakeStatus(checked.message() + NodeSuffix(state->node_name));
    for (const AttrSpec& attr : spec.attrs) {
      AttrValue value;
      if (OrtStatus* s = ReadAttribute(spec, state->node_name, info, attr, &value, &state->attr_note))
        return s;
      state->attrs.push_back(std::move(value));
    }
    if (spec.infer_attrs != nullptr && rank_known) {
      checked = spec.infer_attrs(inputs, state->attrs, &outputs);
      if (!checked.ok())
        return MakeStatus(checked.message() + state->attr_note + NodeSuffix(state->node_name));
    }
    *kernel = state.release();
    return nullptr;
  });
}

void ORT_API_CALL DestroyKernel(void* kernel) noexcept { delete static_cast<SpecKernel*>(kernel); }

ParallelFor MakeParallelFor(const OrtKernelContext* context) {
  return [context](int64_t n, int64_t grain, const RangeBody& body) {
    ForGrainTasks(n, grain, body, [context](int64_t tasks, const auto& task_body) {
      auto job = task_body;
      auto run = [](void* data, size_t task) {
        (*static_cast<decltype(job)*>(data))(static_cast<int64_t>(task));
      };
      OrtStatus* status = g_api->KernelContext_ParallelFor(context, run, static_cast<size_t>(tasks), 0, &job);
      if (status == nullptr) return true;
      // Without a pool, run serially rather than fail.
      g_api->ReleaseStatus(status);
      return false;
    });
  };
}

// Scratch memory for a CUDA launch from the session's allocator for the
// inputs' device, released when the call returns (ONNX Runtime's CUDA
// kernels run in order on the compute stream, as the launch's work does).
class CudaScratch {
 public:
  CudaScratch(OrtKernelContext* context, int device) : context_(context), device_(device) {}
  CudaScratch(const CudaScratch&) = delete;
  CudaScratch& operator=(const CudaScratch&) = delete;
  ~CudaScratch() {
    for (void* block : blocks_) allocator_->Free(allocator_, block);
    if (allocator_ != nullptr) g_api->ReleaseAllocator(allocator_);
  }

  void* Allocate(size_t bytes) {
    if (allocator_ == nullptr) {
      Ort::MemoryInfo info("Cuda", OrtArenaAllocator, device_, OrtMemTypeDefault);
      if (OrtStatus* s = g_api->KernelContext_GetAllocator(context_, info, &allocator_)) {
        g_api->ReleaseStatus(s);
        allocator_ = nullptr;
        return nullptr;
      }
    }
    void* block = allocator_->Alloc(allocator_, bytes);
    if (block != nullptr) blocks_.push_back(block);
    return block;
  }

 private:
  OrtKernelContext* context_;
  int device_;
  OrtAllocator* allocator_ = nullptr;
  std::vector<void*> blocks_;
};

OrtStatus* ORT_API_CALL Compute(void* kernel_state, OrtKernelContext* context) noexcept {
  const SpecKernel& kernel = *static_cast<const SpecKernel*>(kernel_state);
  const OpSpec& spec = *kernel.spec;
  return Guarded(spec, [&]() -> OrtStatus* {
    Ort::KernelContext ctx(context);
    KernelArgs args;
    int device = 0;
    const size_t input_count = ctx.GetInputCount();
    for (size_t i = 0; i < spec.inputs.size(); ++i) {
      TensorInfo info;
      const void* data = nullptr;
      Ort::ConstValue value = i < input_count ? ctx.GetInput(i) : Ort::ConstValue{nullptr};
      if (value == nullptr) {
        info.present = false;
      } else {
        auto type_shape = value.GetTensorTypeAndShapeInfo();
        info.dtype = DtypeName(type_shape.GetElementType());
        info.shape = DimsOf(type_shape.GetShape());
        data = value.GetTensorRawData();
        if (kernel.cuda) device = value.GetTensorMemoryInfo().GetDeviceId();
      }
      args.inputs.push_back(data);
      args.input_infos.push_back(std::move(info));
    }
    Status status = InferWithAttrs(spec, args.input_infos, kernel.attrs, &args.output_infos);
    if (!status.ok()) return MakeStatus(status.message() + kernel.attr_note + NodeSuffix(kernel.node_name));
    for (size_t k = 0; k < args.output_infos.size(); ++k) {
      const Shape& shape = args.output_infos[k].shape;
      const std::vector<int64_t> sizes = Sizes(shape);
      Ort::UnownedValue output = ctx.GetOutput(k, sizes.data(), sizes.size());
      args.outputs.push_back(output.GetTensorMutableRawData());
    }
    args.attrs = kernel.attrs;
    CudaScratch scratch(context, device);
    if (kernel.cuda) {
      args.stream = static_cast<CudaStream>(ctx.GetGPUComputeStream());
      args.scratch = [&scratch](size_t bytes) { return scratch.Allocate(bytes); };
    } else {
      args.parallel_for = MakeParallelFor(context);
    }
    // OPBRIDGE_CHECK (argument checks, output guards) reads the data: CPU
    // kernels only (device memory is not readable from here).
    if (kernel.cuda) {
      status = LaunchChecked(spec, kernel.launch, args);
    } else {
      status = LaunchOnHost(spec, args, kernel.launch, [&spec] { return spec.MessageName(); });
    }
    if (!status.ok()) return MakeStatus(status.message() + NodeSuffix(kernel.node_name));
    return nullptr;
  });
}

uint64_t NextSymbol() {
  static std::atomic<uint64_t> counter{0};
  return counter.fetch_add(1);
}

// The node's attributes at shape-inference time, with the spec's default for
// an absent one; false when a required one is missing or one is mistyped
// (kernel creation then reports it).
bool ReadShapeInferAttributes(const OpSpec& spec, OrtShapeInferContext* context,
                              std::vector<AttrValue>* attrs) {
  for (const AttrSpec& attr : spec.attrs) {
    const OrtOpAttr* op_attr = nullptr;
    if (OrtStatus* s = g_api->ShapeInferContext_GetAttribute(context, attr.name, &op_attr)) {
      g_api->ReleaseStatus(s);
      op_attr = nullptr;
    }
    if (op_attr == nullptr) {
      // Absent: the spec's default, as kernel creation takes it.
      if (!attr.has_default) return false;
      attrs->push_back(OnnxDefaultValue(attr));
      continue;
    }
    AttrValue value;
    size_t size = 0;
    OrtStatus* status = nullptr;
    switch (attr.type) {
      case AttrType::kFloat: {
        float v = 0.0f;
        status = g_api->ReadOpAttr(op_attr, ORT_OP_ATTR_FLOAT, &v, sizeof(v), &size);
        value.number = v;
        break;
      }
      case AttrType::kInt:
      case AttrType::kBool: {
        int64_t v = 0;
        status = g_api->ReadOpAttr(op_attr, ORT_OP_ATTR_INT, &v, sizeof(v), &size);
        value.number = static_cast<double>(v);
        break;
      }
      case AttrType::kString:
      case AttrType::kFloats: {
        const OrtOpAttrType type = attr.type == AttrType::kString ? ORT_OP_ATTR_STRING : ORT_OP_ATTR_FLOATS;
        // A first call with no room reports the size.
        if (OrtStatus* s = g_api->ReadOpAttr(op_attr, type, nullptr, 0, &size)) g_api->ReleaseStatus(s);
        std::vector<char> bytes(size);
        status = g_api->ReadOpAttr(op_attr, type, bytes.data(), bytes.size(), &size);
        if (status == nullptr && attr.type == AttrType::kString) {
          value.text.assign(bytes.data(), size);
          while (!value.text.empty() && value.text.back() == '\0') value.text.pop_back();
        } else if (status == nullptr) {
          std::vector<float> floats(size / sizeof(float));
          if (!floats.empty()) std::memcpy(floats.data(), bytes.data(), floats.size() * sizeof(float));
          value.numbers.assign(floats.begin(), floats.end());
        }
        break;
      }
    }
    if (status != nullptr) {
      g_api->ReleaseStatus(status);
      return false;
    }
    attrs->push_back(std::move(value));
  }
  return true;
}

OrtStatus* ORT_API_CALL InferOutputShape(const OrtCustomOp* op, OrtShapeInferContext* context) noexcept {
  const OpSpec& spec = SpecOf(op);
  return Guarded(spec, [&]() -> OrtStatus* {
    size_t input_count = 0;
    if (OrtStatus* s = g_api->ShapeInferContext_GetInputCount(context, &input_count)) return s;
    std::vector<TensorInfo> inputs(spec.inputs.size());
    std::vector<std::vector<std::string>> symbols(spec.inputs.size());
    // The rule sees each unknown dimension as a symbol (opbridge/dim.h).
    UnknownDims unknown;
    const DimSymbolsScope scope(&unknown);
    for (size_t i = 0; i < spec.inputs.size(); ++i) {
      TensorInfo& info = inputs[i];
      OrtTensorTypeAndShapeInfo* type_shape = nullptr;
      if (i >= input_count) {
        info.present = false;
        continue;
      }
      if (OrtStatus* s = g_api->ShapeInferContext_GetInputTypeShape(context, i, &type_shape)) {
        // An empty input name (absent optional input) has no type.
        g_api->ReleaseStatus(s);
        info.present = false;
        continue;
      }
      // Owned by the context: view it, never release it.
      Ort::ConstTensorTypeAndShapeInfo view(type_shape);
      info.dtype = DtypeName(view.GetElementType());
      info.shape = DimsOf(view.GetShape());
      std::vector<const char*> names(info.shape.size(), nullptr);
      if (!names.empty()) view.GetSymbolicDimensions(names.data(), names.size());
      for (size_t d = 0; d < names.size(); ++d) {
        symbols[i].push_back(names[d] ? names[d] : "");
        if (info.shape[d] < 0 || (names[d] && names[d][0] != '\0')) info.shape[d] = unknown.Input(i, d);
      }
    }
    std::vector<TensorInfo> outputs;
    // ONNX Runtime drops a status returned from here (and leaks it); the
    // same check at kernel creation reports the error instead.
    // With bad or unreadable attributes, the rule without them still gives
    // the output dtypes; failing that, outputs are shaped like the first
    // input, of no element type (the model's declared one stands: the first
    // input's, an int32 x say, would clash with it). Either way graph
    // resolution gets as far as kernel creation, which reports the error,
    // instead of stopping at a vaguer type mismatch.
    std::vector<AttrValue> attrs;
    const bool with_attrs = spec.infer_attrs != nullptr && ReadShapeInferAttributes(spec, context, &attrs) &&
                            spec.infer_attrs(inputs, attrs, &outputs).ok();
    if (!with_attrs) {
      outputs.clear();
      if (!spec.infer(inputs, &outputs).ok()) {
        // An input shown as 0-D may be of unknown rank: then claim nothing.
        for (const TensorInfo& input : inputs) {
          if (input.present && input.shape.empty()) return nullptr;
        }
        if (!inputs[0].present) return nullptr;
        outputs.assign(spec.outputs.size(), inputs[0]);
        for (TensorInfo& output : outputs) output.dtype.clear();
      }
    }
    for (size_t k = 0; k < outputs.size(); ++k) {
      OrtTensorTypeAndShapeInfo* raw = nullptr;
      if (OrtStatus* s = g_api->CreateTensorTypeAndShapeInfo(&raw)) return s;
      Ort::TensorTypeAndShapeInfo owned(raw);
      const Shape& shape = outputs[k].shape;
      if (OrtStatus* s = g_api->SetTensorElementType(raw, ElementTypeOf(outputs[k].dtype))) return s;
      // An unknown dimension keeps its symbolic name (e.g. a dynamic batch)
      // where the output has an input's dimension; one computed from an
      // unknown dimension, or unknown otherwise, gets a fresh name: without
      // one, ONNX Runtime would record it as the dim value -1.
      std::vector<int64_t> sizes(shape.size(), -1);
      std::vector<std::string> names(shape.size());
      for (size_t d = 0; d < shape.size(); ++d) {
        size_t input = 0, dim = 0;
        if (!shape[d].symbolic()) {
          sizes[d] = static_cast<int64_t>(shape[d]);
        } else if (unknown.SourceOf(shape[d], &input, &dim) && input < symbols.size() &&
                   dim < symbols[input].size()) {
          names[d] = symbols[input][dim];
        }
      }
      if (OrtStatus* s = g_api->SetDimensions(raw, sizes.data(), sizes.size())) return s;
      std::vector<const char*> name_ptrs;
      for (size_t d = 0; d < shape.size(); ++d) {
        if (sizes[d] < 0 && names[d].empty()) names[d] = "opbridge_unk__" + std::to_string(NextSymbol());
        name_ptrs.push_back(names[d].c_str());
      }
      if (OrtStatus* s = g_api->SetSymbolicDimensions(raw, name_ptrs.data(), name_ptrs.size())) return s;
      if (OrtStatus* s = g_api->ShapeInferContext_SetOutputTypeShape(context, k, raw)) return s;
    }
    return nullptr;
  });
}

std::unique_ptr<SpecOp> MakeOp(const OpSpec& spec, const CudaKernels* cuda) {
  auto op = std::make_unique<SpecOp>();
  std::memset(static_cast<OrtCustomOp*>(op.get()), 0, sizeof(OrtCustomOp));
  op->spec = &spec;
  op->cuda = cuda;
  // ONNX Runtime reads only the fields that existed at op->version: no newer
  // than the headers (the struct has no fields past them) nor than the floor.
  op->version = std::min<uint32_t>(kOrtApiFloor, ORT_API_VERSION);
  op->GetName = [](const OrtCustomOp* self) { return SpecOf(self).onnx_type; };
  op->GetExecutionProviderType = [](const OrtCustomOp* self) {
    return CudaOf(self) != nullptr ? "CUDAExecutionProvider" : "CPUExecutionProvider";
  };
  op->GetInputTypeCount = [](const OrtCustomOp* self) { return SpecOf(self).inputs.size(); };
  op->GetOutputTypeCount = [](const OrtCustomOp* self) { return SpecOf(self).outputs.size(); };
  // Dtypes are checked by the spec's shape rule, which names the argument.
  op->GetInputType = [](const OrtCustomOp*, size_t) { return ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED; };
  op->GetOutputType = [](const OrtCustomOp*, size_t) { return ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED; };
  op->GetInputCharacteristic = [](const OrtCustomOp* self, size_t i) {
    return SpecOf(self).inputs[i].optional ? INPUT_OUTPUT_OPTIONAL : INPUT_OUTPUT_REQUIRED;
  };
  op->GetOutputCharacteristic = [](const OrtCustomOp*, size_t) { return INPUT_OUTPUT_REQUIRED; };
  op->GetInputMemoryType = [](const OrtCustomOp*, size_t) { return OrtMemTypeDefault; };
  op->GetVariadicInputMinArity = [](const OrtCustomOp*) { return 1; };
  op->GetVariadicInputHomogeneity = [](const OrtCustomOp*) { return 0; };
  op->GetVariadicOutputMinArity = [](const OrtCustomOp*) { return 1; };
  op->GetVariadicOutputHomogeneity = [](const OrtCustomOp*) { return 0; };
  op->CreateKernelV2 = CreateKernel;
  op->KernelComputeV2 = Compute;
  op->KernelDestroy = DestroyKernel;
  op->InferOutputShapeFn = InferOutputShape;
  op->GetStartVersion = [](const OrtCustomOp*) { return 1; };
  op->GetEndVersion = [](const OrtCustomOp*) { return ThisLibrary().domain_version; };
  return op;
}

// Ops and the domain live for the whole process: ONNX Runtime keeps raw
// pointers to them in every session that registered the library. They are
// built once (see PinLibrary) and never freed.
struct Library {
  std::vector<std::unique_ptr<SpecOp>> ops;
  Ort::CustomOpDomain domain{nullptr};
  std::mutex mutex;
};

Library& GetLibrary() {
  static Library* library = new Library();
  return *library;
}

// ONNX Runtime unloads a custom-op library when the last session that
// registered it closes, and loads it afresh for the next one: every such
// cycle would build a new op table and lose the old one. An extra reference
// that is never released, with RTLD_NODELETE, keeps this library (and its one
// table) loaded for the life of the process.
void PinLibrary() {
  static const char anchor = 0;
  Dl_info info{};
  if (dladdr(&anchor, &info) == 0 || info.dli_fname == nullptr) return;
  // RTLD_NOLOAD: only takes a reference to the already loaded library.
  dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
}

// A domain given twice to one SessionOptions makes ONNX Runtime refuse every
// session made with it ("Domain already set in registry"), and a host cannot
// see what an options object already holds: the user registered the library
// and so did a wrapper, one object is shared by threads, a session is retried.
// The options remember the registration in a config entry that names the
// domain and the object, so registering again into the same object adds
// nothing. The object's address in the value keeps a copy of the options (a
// session's get_session_options(), which copies the entries but not the
// domains) from passing for one that holds the domain.
std::string RegisteredKey() { return std::string("opbridge.registered.") + ThisLibrary().onnx_domain; }

std::string AddressOf(const OrtSessionOptions* options) {
  char text[2 + 2 * sizeof(void*) + 1];
  std::snprintf(text, sizeof text, "%p", static_cast<const void*>(options));
  return text;
}

bool AlreadyRegisteredIn(Ort::UnownedSessionOptions& session_options, const OrtSessionOptions* options) {
  const std::string key = RegisteredKey();
  return session_options.HasConfigEntry(key.c_str()) &&
         session_options.GetConfigEntry(key.c_str()) == AddressOf(options);
}

void MarkRegisteredIn(Ort::UnownedSessionOptions& session_options, const OrtSessionOptions* options) {
  const std::string key = RegisteredKey();
  // ONNX Runtime limits a config key's length; a domain too long for one is
  // registered without the mark (as any library is).
  constexpr std::size_t kMaxConfigKey = 128;
  if (key.size() <= kMaxConfigKey) session_options.AddConfigEntry(key.c_str(), AddressOf(options).c_str());
}

}  // namespace
}  // namespace opbridge

extern "C" __attribute__((visibility("default"))) OrtStatus* ORT_API_CALL
RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
  using namespace opbridge;
  // Every release has API version 1, which can report an error even where
  // the floor's version is missing.
  const OrtApi* oldest = api_base->GetApi(1);
  try {
    const LibraryInfo& self = ThisLibrary();
    std::string who = std::string(self.name) + " " + self.version;
    if (std::string(self.name) != "opbridge") who += std::string(" (opbridge ") + kVersion + ")";
    const char* runtime_version = api_base->GetVersionString();
    std::string refusal = OrtRuntimeRefusal(who, runtime_version);
    const OrtApi* api = refusal.empty() ? api_base->GetApi(kOrtApiFloor) : nullptr;
    if (api == nullptr) {
      if (refusal.empty()) refusal = OrtRefusalMessage(who, runtime_version ? runtime_version : "(unknown)");
      return oldest ? oldest->CreateStatus(ORT_FAIL, refusal.c_str()) : nullptr;
    }
    g_api = api;
    Ort::InitApi(api);
    Library& library = GetLibrary();
    std::lock_guard<std::mutex> lock(library.mutex);
    if (library.ops.empty()) {
      PinLibrary();
      // One domain serves every session: sessions only keep a pointer to it.
      library.domain = Ort::CustomOpDomain(ThisLibrary().onnx_domain);
      for (const OpSpec* spec : AllSpecs()) {
        library.ops.push_back(MakeOp(*spec, nullptr));
        library.domain.Add(library.ops.back().get());
      }
      // A CUDA build: the same ops for the CUDA execution provider.
      for (const OpSpec* spec : CudaSpecs()) {
        library.ops.push_back(MakeOp(*spec, FindCudaKernels(*spec)));
        library.domain.Add(library.ops.back().get());
      }
    }
    Ort::UnownedSessionOptions session_options(options);
    if (AlreadyRegisteredIn(session_options, options)) return nullptr;
    session_options.Add(library.domain);
    MarkRegisteredIn(session_options, options);
    return nullptr;
  } catch (const std::exception& e) {
    const std::string message = std::string(ThisLibrary().name) + ": RegisterCustomOps failed: " + e.what();
    return oldest ? oldest->CreateStatus(ORT_FAIL, message.c_str()) : nullptr;
  }
}
