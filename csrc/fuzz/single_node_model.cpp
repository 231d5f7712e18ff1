// See single_node_model.h.
#include "single_node_model.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace opbridge_fuzz {
namespace {

// Memory bound: elements per tensor and over all inputs of one model.
constexpr int64_t kMaxElements = 100000;
constexpr int64_t kMaxTotalElements = 300000;
constexpr int kMaxRank = 6;

// ---------------------------------------------------------------------------
// A minimal protobuf writer: varints, fixed32 and length-delimited fields.
// Field numbers are onnx.proto's.
class Pb {
 public:
  void Varint(int field, uint64_t value) {
    Key(field, 0);
    Raw(value);
  }
  void Int(int field, int64_t value) { Varint(field, static_cast<uint64_t>(value)); }
  void Float(int field, float value) {
    Key(field, 5);
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    for (int i = 0; i < 4; ++i) buf_.push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));
  }
  void Bytes(int field, const std::string& bytes) {
    Key(field, 2);
    Raw(bytes.size());
    buf_ += bytes;
  }
  void Message(int field, const Pb& message) { Bytes(field, message.buf_); }
  const std::string& str() const { return buf_; }

 private:
  void Key(int field, int wire_type) {
    Raw((static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(wire_type));
  }
  void Raw(uint64_t value) {
    while (value >= 0x80) {
      buf_.push_back(static_cast<char>((value & 0x7F) | 0x80));
      value >>= 7;
    }
    buf_.push_back(static_cast<char>(value));
  }
  std::string buf_;
};

// onnx.proto field numbers.
namespace model {
constexpr int kIrVersion = 1, kProducerName = 2, kGraph = 7, kOpsetImport = 8;
}
namespace opset {
constexpr int kDomain = 1, kVersion = 2;
}
namespace graph {
constexpr int kNode = 1, kName = 2, kInitializer = 5, kInput = 11, kOutput = 12;
}
namespace node {
constexpr int kInput = 1, kOutput = 2, kName = 3, kOpType = 4, kAttribute = 5, kDomain = 7;
}
namespace attr {
constexpr int kName = 1, kF = 2, kI = 3, kS = 4, kT = 5, kFloats = 7, kInts = 8, kStrings = 9, kType = 20;
// AttributeProto.AttributeType. GRAPH (5) and GRAPHS (10) are never written:
// ONNX Runtime itself crashes on a GRAPH attribute of a custom-op node.
// SPARSE_TENSOR and TYPE_PROTO(S) no custom op can read; left out.
constexpr int kFLOAT = 1, kINT = 2, kSTRING = 3, kTENSOR = 4, kFLOATS = 6, kINTS = 7, kSTRINGS = 8;
}  // namespace attr
namespace value_info {
constexpr int kName = 1, kType = 2;
}
namespace type_proto {
constexpr int kTensorType = 1, kSequenceType = 4;
constexpr int kElemType = 1, kShape = 2;     // TypeProto.Tensor
constexpr int kSequenceElemType = 1;         // TypeProto.Sequence
constexpr int kDim = 1;                      // TensorShapeProto
constexpr int kDimValue = 1, kDimParam = 2;  // TensorShapeProto.Dimension
}  // namespace type_proto
namespace tensor {
constexpr int kDims = 1, kDataType = 2, kName = 8, kRawData = 9;
}

uint16_t HalfBits(float value) {
  uint32_t f;
  std::memcpy(&f, &value, sizeof(f));
  const uint32_t sign = (f >> 16) & 0x8000u;
  const uint32_t abs = f & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);   // NaN
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // overflow: inf
  if (abs < 0x38800000u) {                                               // subnormal or zero
    const uint32_t shift = 113u - (abs >> 23);
    if (shift > 24) return static_cast<uint16_t>(sign);
    const uint32_t mantissa = (abs & 0x7FFFFFu) | 0x800000u;
    return static_cast<uint16_t>(sign | (mantissa >> (shift + 0)) >> 13);
  }
  return static_cast<uint16_t>(sign | ((abs - 0x38000000u) >> 13));
}

uint16_t BFloatBits(float value) {
  uint32_t f;
  std::memcpy(&f, &value, sizeof(f));
  return static_cast<uint16_t>(f >> 16);
}

// ---------------------------------------------------------------------------
// Values.
float PickFloat(FuzzedDataProvider& fdp, float sane) {
  switch (fdp.ConsumeIntegralInRange<int>(0, 15)) {
    case 0:
      return sane;
    case 1:
      return 0.0f;
    case 2:
      return -0.0f;
    case 3:
      return 1.0f;
    case 4:
      return -1.0f;
    case 5:
      return std::numeric_limits<float>::quiet_NaN();
    case 6:
      return std::numeric_limits<float>::infinity();
    case 7:
      return -std::numeric_limits<float>::infinity();
    case 8:
      return std::numeric_limits<float>::max();
    case 9:
      return -std::numeric_limits<float>::max();
    case 10:
      return std::numeric_limits<float>::denorm_min();
    case 11:
      return 1e-12f;
    case 12:
      return 1e30f;
    case 13:
      return 0.5f;
    case 14:
      return fdp.ConsumeFloatingPointInRange<float>(-10.0f, 10.0f);
    default: {
      const uint32_t bits = fdp.ConsumeIntegral<uint32_t>();
      float value;
      std::memcpy(&value, &bits, sizeof(value));
      return value;
    }
  }
}

int64_t PickInt(FuzzedDataProvider& fdp, int64_t sane) {
  switch (fdp.ConsumeIntegralInRange<int>(0, 9)) {
    case 0:
      return sane;
    case 1:
      return 0;
    case 2:
      return 1;
    case 3:
      return -1;
    case 4:
      return 2;
    case 5:
      return std::numeric_limits<int64_t>::max();
    case 6:
      return std::numeric_limits<int64_t>::min();
    case 7:
      return int64_t{1} << 31;
    case 8:
      return int64_t{1} << 53;
    default:
      return fdp.ConsumeIntegral<int64_t>();
  }
}

std::string PickString(FuzzedDataProvider& fdp, const std::string& sane) {
  switch (fdp.ConsumeIntegralInRange<int>(0, 8)) {
    case 0:
      return sane;
    case 1:
      return "none";
    case 2:
      return "tanh";
    case 3:
      return "erf";
    case 4:
      return "";
    case 5:
      return std::string("none\0tanh", 9);
    case 6:
      return std::string(5000, 't');
    case 7:
      return "\xff\xfe\x80";
    default:
      return fdp.ConsumeRandomLengthString(64);
  }
}

size_t PickListLength(FuzzedDataProvider& fdp) {
  switch (fdp.ConsumeIntegralInRange<int>(0, 6)) {
    case 0:
      return 3;
    case 1:
      return 0;
    case 2:
      return 1;
    case 3:
      return 4;
    case 4:
      return 2;
    case 5:
      return 1000;
    default:
      return fdp.ConsumeIntegralInRange<size_t>(0, 64);
  }
}

// ---------------------------------------------------------------------------
// Attributes.

// What an attribute of the spec ends up as on the node, for the invariant
// check after a successful run.
enum class AttrOutcome { kExact, kOmitted, kWrongType, kUnknown };

// Writes one AttributeProto of ONNX type `type` named `name`; `value` is set
// to what the library should read when the type is the spec's.
void WriteAttribute(FuzzedDataProvider& fdp, Pb* node_pb, const std::string& name, int type,
                    const opbridge::AttrSpec* spec_attr, opbridge::AttrValue* value, bool* exact) {
  Pb a;
  a.Bytes(attr::kName, name);
  a.Int(attr::kType, type);
  *exact = true;
  switch (type) {
    case attr::kFLOAT: {
      const float sane =
          spec_attr && spec_attr->has_default ? static_cast<float>(spec_attr->default_value) : 1.0f;
      const float v = PickFloat(fdp, sane);
      a.Float(attr::kF, v);
      value->number = v;
      break;
    }
    case attr::kINT: {
      const int64_t sane = spec_attr && spec_attr->has_default && std::isfinite(spec_attr->default_value)
                               ? static_cast<int64_t>(spec_attr->default_value)
                               : 1;
      const int64_t v = PickInt(fdp, sane);
      a.Int(attr::kI, v);
      value->number = static_cast<double>(v);
      break;
    }
    case attr::kSTRING: {
      const std::string sane =
          spec_attr && spec_attr->default_text != nullptr ? spec_attr->default_text : "none";
      const std::string v = PickString(fdp, sane);
      a.Bytes(attr::kS, v);
      value->text = v;
      // The library reads the string through a C API that ends it at a NUL.
      *exact = v.find('\0') == std::string::npos;
      break;
    }
    case attr::kFLOATS: {
      const size_t n = PickListLength(fdp);
      for (size_t i = 0; i < n; ++i) {
        const float v = PickFloat(fdp, 0.5f);
        a.Float(attr::kFloats, v);
        value->numbers.push_back(v);
      }
      break;
    }
    case attr::kINTS: {
      const size_t n = PickListLength(fdp);
      for (size_t i = 0; i < n; ++i) a.Int(attr::kInts, PickInt(fdp, 1));
      break;
    }
    case attr::kSTRINGS: {
      const size_t n = PickListLength(fdp) % 8;
      for (size_t i = 0; i < n; ++i) a.Bytes(attr::kStrings, PickString(fdp, "none"));
      break;
    }
    case attr::kTENSOR: {
      Pb t;
      const int64_t n = fdp.ConsumeIntegralInRange<int64_t>(0, 4);
      t.Int(tensor::kDims, n);
      t.Int(tensor::kDataType, 1);
      std::string raw;
      for (int64_t i = 0; i < n; ++i) {
        const float v = PickFloat(fdp, 1.0f);
        raw.append(reinterpret_cast<const char*>(&v), sizeof(v));
      }
      t.Bytes(tensor::kRawData, raw);
      a.Message(attr::kT, t);
      break;
    }
  }
  node_pb->Message(node::kAttribute, a);
}

// The ONNX attribute type that carries a spec attribute type.
int OnnxType(opbridge::AttrType type) {
  switch (type) {
    case opbridge::AttrType::kFloat:
      return attr::kFLOAT;
    case opbridge::AttrType::kInt:
    case opbridge::AttrType::kBool:
      return attr::kINT;
    case opbridge::AttrType::kString:
      return attr::kSTRING;
    case opbridge::AttrType::kFloats:
      return attr::kFLOATS;
  }
  return attr::kFLOAT;
}

constexpr int kAttrTypes[] = {attr::kFLOAT, attr::kINT,     attr::kSTRING, attr::kFLOATS,
                              attr::kINTS,  attr::kSTRINGS, attr::kTENSOR};

// The spec's default as the library takes it (float defaults rounded to
// float32, like an ONNX FLOAT attribute).
opbridge::AttrValue SpecDefault(const opbridge::AttrSpec& a) {
  opbridge::AttrValue value;
  switch (a.type) {
    case opbridge::AttrType::kFloat:
      value.number = static_cast<float>(a.default_value);
      break;
    case opbridge::AttrType::kInt:
    case opbridge::AttrType::kBool:
      value.number = a.default_value;
      break;
    case opbridge::AttrType::kString:
      value.text = a.default_text ? a.default_text : "";
      break;
    case opbridge::AttrType::kFloats:
      break;
  }
  return value;
}

// ---------------------------------------------------------------------------
// Inputs.

int64_t PickDim(FuzzedDataProvider& fdp) {
  static const int64_t kDims[] = {4, 1, 2, 0, 3, 8, 16, 7, 64, 5, 6, 128, 1000, 4096, 65536};
  const int i = fdp.ConsumeIntegralInRange<int>(0, sizeof(kDims) / sizeof(kDims[0]));
  if (i == sizeof(kDims) / sizeof(kDims[0])) return fdp.ConsumeIntegralInRange<int64_t>(0, kMaxElements);
  return kDims[i];
}

// Appends dims while the element count stays bounded (a dim that would
// exceed it becomes 1).
void PushDim(std::vector<int64_t>* dims, int64_t d) {
  if (d < 0) d = 0;
  const int64_t n = Elements(*dims);
  if (n != 0 && d > kMaxElements / n) d = 1;
  dims->push_back(d);
}

std::vector<int64_t> PickShape(FuzzedDataProvider& fdp, const std::vector<Input>& earlier) {
  std::vector<int64_t> dims;
  if (earlier.empty()) {
    // The first input: rank 2 first (what an exhausted input reads), then 0..kMaxRank.
    const int rank = (fdp.ConsumeIntegralInRange<int>(0, kMaxRank) + 2) % (kMaxRank + 1);
    for (int i = 0; i < rank; ++i) PushDim(&dims, PickDim(fdp));
    return dims;
  }
  const std::vector<int64_t>& x = earlier[0].dims;
  switch (fdp.ConsumeIntegralInRange<int>(0, 5)) {
    case 0:  // [last dim of x]: a weight or bias over the last dimension
      PushDim(&dims, x.empty() ? 1 : x.back());
      break;
    case 1:  // like x: a residual
      dims = x;
      break;
    case 2:  // like the previous input
      dims = earlier.back().dims;
      break;
    case 3: {  // a mix of x's dims, halved ones and literals (cos/sin tables)
      const int rank = fdp.ConsumeIntegralInRange<int>(0, kMaxRank);
      for (int i = 0; i < rank; ++i) {
        const int64_t from = x.empty() ? 1 : x[fdp.ConsumeIntegralInRange<size_t>(0, x.size() - 1)];
        switch (fdp.ConsumeIntegralInRange<int>(0, 3)) {
          case 0:
            PushDim(&dims, from);
            break;
          case 1:
            PushDim(&dims, from / 2);
            break;
          case 2:
            PushDim(&dims, 1);
            break;
          default:
            PushDim(&dims, PickDim(fdp));
            break;
        }
      }
      break;
    }
    case 4: {  // x's trailing dims
      const size_t keep = fdp.ConsumeIntegralInRange<size_t>(0, x.size());
      dims.assign(x.end() - static_cast<std::ptrdiff_t>(keep), x.end());
      break;
    }
    default: {
      const int rank = fdp.ConsumeIntegralInRange<int>(0, kMaxRank);
      for (int i = 0; i < rank; ++i) PushDim(&dims, PickDim(fdp));
      break;
    }
  }
  return dims;
}

// Fills an input's raw data: fuzz bytes (repeated), or a pattern.
void FillData(FuzzedDataProvider& fdp, Input* in) {
  const Dtype& dt = kDtypes[in->dtype];
  const int64_t n = Elements(in->dims);
  in->data.assign(static_cast<size_t>(n) * dt.size, '\0');
  if (in->data.empty()) return;
  const int mode = fdp.ConsumeIntegralInRange<int>(0, 7);
  if (mode == 0 || !dt.floating) {
    if (mode == 1) return;  // zeros
    std::string bytes = fdp.ConsumeBytesAsString(fdp.ConsumeIntegralInRange<size_t>(0, 256));
    if (bytes.empty()) bytes = mode % 2 ? std::string(1, '\x01') : std::string("\x3f\x80\x00\x00\xc0", 5);
    for (size_t i = 0; i < in->data.size(); ++i) in->data[i] = bytes[i % bytes.size()];
  } else {
    uint64_t seed = fdp.ConsumeIntegral<uint64_t>() | 1;
    for (int64_t i = 0; i < n; ++i) {
      float v = 0.0f;
      switch (mode) {
        case 1:
          v = 0.0f;
          break;
        case 2:
          v = 1.0f;
          break;
        case 3:
          v = std::numeric_limits<float>::quiet_NaN();
          break;
        case 4:
          v = (i % 2) ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
          break;
        case 5:
          v = std::numeric_limits<float>::max();
          break;
        default: {
          seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
          const uint32_t bits = static_cast<uint32_t>(seed >> 32);
          if (mode == 6) {
            v = static_cast<float>(static_cast<int32_t>(bits)) / 2147483648.0f * 4.0f;
          } else {
            std::memcpy(&v, &bits, sizeof(v));  // any bit pattern: NaNs, infs, subnormals
          }
        }
      }
      char* p = &in->data[static_cast<size_t>(i) * dt.size];
      switch (dt.onnx) {
        case 1:
          std::memcpy(p, &v, 4);
          break;
        case 11: {
          const double d = v;
          std::memcpy(p, &d, 8);
          break;
        }
        case 10: {
          const uint16_t h = HalfBits(v);
          std::memcpy(p, &h, 2);
          break;
        }
        case 16: {
          const uint16_t b = BFloatBits(v);
          std::memcpy(p, &b, 2);
          break;
        }
      }
    }
  }
  if (dt.onnx == 9) {
    for (char& c : in->data) c = static_cast<char>(c & 1);  // bool: 0 or 1
  }
}

Pb TensorType(const Input& in, FuzzedDataProvider& fdp, int shape_mode) {
  Pb tensor_type;
  tensor_type.Int(type_proto::kElemType, kDtypes[in.dtype].onnx);
  if (shape_mode != 2) {  // 2: no shape, a tensor of unknown rank
    Pb shape;
    for (size_t d = 0; d < in.dims.size(); ++d) {
      Pb dim;
      if (shape_mode == 1 && fdp.ConsumeBool()) {
        dim.Bytes(type_proto::kDimParam, "d" + std::to_string(fdp.ConsumeIntegralInRange<int>(0, 3)));
      } else if (shape_mode == 3 && fdp.ConsumeBool()) {
        // neither value nor param: unknown
      } else if (shape_mode == 4 && fdp.ConsumeBool()) {
        dim.Int(type_proto::kDimValue, in.dims[d] + fdp.ConsumeIntegralInRange<int64_t>(-2, 2));
      } else {
        dim.Int(type_proto::kDimValue, in.dims[d]);
      }
      shape.Message(type_proto::kDim, dim);
    }
    tensor_type.Message(type_proto::kShape, shape);
  }
  Pb type;
  type.Message(type_proto::kTensorType, tensor_type);
  return type;
}

bool g_verbose = false;

std::string ShapeText(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

}  // namespace

Case BuildCase(FuzzedDataProvider& fdp, const std::vector<const opbridge::OpSpec*>& specs) {
  const opbridge::OpSpec& spec = *specs[fdp.ConsumeIntegralInRange<size_t>(0, specs.size() - 1)];
  const std::string kDomain = opbridge::ThisLibrary().onnx_domain;
  std::string invalid;  // why the node is invalid (it must then not run); empty: valid

  // Domain, op type and opset: mostly right. Other domains are unregistered
  // ones only (see the top of this file).
  std::string domain = kDomain;
  int64_t domain_version = opbridge::ThisLibrary().domain_version;
  std::string op_type = spec.onnx_type;
  switch (fdp.ConsumeIntegralInRange<int>(0, 15)) {
    case 1:
      domain = kDomain + ".unknown";
      break;
    case 2:
      domain_version = 0;
      break;
    case 3:
      domain_version = domain_version + 1;
      break;
    case 4:
      op_type = spec.name;
      break;  // the snake_case PyTorch name
    case 5:
      op_type = std::string(spec.onnx_type) + "X";
      break;
    default:
      break;
  }

  // Node inputs: all of the spec's (0), the required ones (1), or any count.
  size_t required = 0;
  for (const opbridge::InputSpec& in : spec.inputs) required += in.optional ? 0 : 1;
  size_t input_count = spec.inputs.size();
  switch (fdp.ConsumeIntegralInRange<int>(0, 3)) {
    case 1:
      input_count = required;
      break;
    case 2:
      input_count = fdp.ConsumeIntegralInRange<size_t>(0, spec.inputs.size() + 2);
      break;
    default:
      break;
  }
  if (input_count < required || input_count > spec.inputs.size()) invalid = "the input count";

  std::vector<Input> inputs;
  Pb graph_pb;
  Pb node_pb;
  int64_t total_elements = 0;
  for (size_t i = 0; i < input_count; ++i) {
    Input in;
    const bool optional = i < spec.inputs.size() && spec.inputs[i].optional;
    const int source = fdp.ConsumeIntegralInRange<int>(0, 7);
    if (source == 5 || (source == 6 && !optional)) {  // an empty name: absent
      if (!optional) invalid = "an empty name for a required input";
      node_pb.Bytes(node::kInput, "");
      inputs.push_back(in);
      continue;
    }
    if (source == 7 && !inputs.empty()) {  // the name of an earlier input
      const Input& other = inputs[fdp.ConsumeIntegralInRange<size_t>(0, inputs.size() - 1)];
      in = other;
      in.fed = false;
      node_pb.Bytes(node::kInput, in.name);
      inputs.push_back(in);
      continue;
    }
    in.name = "x" + std::to_string(i);
    // dtype: input 0 float32 first, later inputs like input 0 first.
    const int dtype_choice = fdp.ConsumeIntegralInRange<int>(0, kNumDtypes);
    if (i == 0 || inputs[0].name.empty()) {
      in.dtype = dtype_choice % kNumDtypes;
    } else {
      in.dtype = dtype_choice == 0 ? inputs[0].dtype : dtype_choice - 1;
    }
    in.dims = PickShape(fdp, inputs);
    if (total_elements + Elements(in.dims) > kMaxTotalElements) in.dims.assign(in.dims.size(), 1);
    total_elements += Elements(in.dims);
    in.sequence = fdp.ConsumeIntegralInRange<int>(0, 31) == 31;
    const bool initializer = !in.sequence && in.dtype != kStringDtype && source == 4;
    if (in.dtype != kStringDtype) FillData(fdp, &in);
    if (initializer) {
      Pb t;
      for (int64_t d : in.dims) t.Int(tensor::kDims, d);
      t.Int(tensor::kDataType, kDtypes[in.dtype].onnx);
      t.Bytes(tensor::kName, in.name);
      t.Bytes(tensor::kRawData, in.data);
      graph_pb.Message(graph::kInitializer, t);
    } else {
      in.fed = true;
      const int shape_mode = fdp.ConsumeIntegralInRange<int>(0, 4);
      Pb type = TensorType(in, fdp, shape_mode);
      if (in.sequence) {
        Pb sequence;
        sequence.Message(type_proto::kSequenceElemType, type);
        type = Pb();
        type.Message(type_proto::kSequenceType, sequence);
      }
      Pb vi;
      vi.Bytes(value_info::kName, in.name);
      vi.Message(value_info::kType, type);
      graph_pb.Message(graph::kInput, vi);
    }
    node_pb.Bytes(node::kInput, in.name);
    inputs.push_back(std::move(in));
  }

  // Node outputs: the spec's count first, else one fewer or more.
  size_t output_count = spec.outputs.size();
  switch (fdp.ConsumeIntegralInRange<int>(0, 7)) {
    case 1:
      output_count = output_count > 0 ? output_count - 1 : 0;
      break;
    case 2:
      output_count = output_count + 1;
      break;
    default:
      break;
  }
  // (Fewer outputs than the spec's may be valid ONNX; the check below then
  // looks at the outputs there are.)
  if (output_count > spec.outputs.size()) invalid = "more outputs than the spec";
  const bool typed_outputs = fdp.ConsumeBool();
  std::vector<std::string> output_names;
  for (size_t k = 0; k < output_count; ++k) {
    output_names.push_back("y" + std::to_string(k));
    node_pb.Bytes(node::kOutput, output_names.back());
    Pb vi;
    vi.Bytes(value_info::kName, output_names.back());
    if (typed_outputs) {
      Pb tensor_type;
      tensor_type.Int(type_proto::kElemType,
                      kDtypes[fdp.ConsumeIntegralInRange<int>(0, kNumDtypes - 1)].onnx);
      Pb type;
      type.Message(type_proto::kTensorType, tensor_type);
      vi.Message(value_info::kType, type);
    }
    graph_pb.Message(graph::kOutput, vi);
  }

  // Attributes of the spec, each: right (0), omitted, mistyped, twice, or
  // under a near name; then a few extra ones.
  std::vector<opbridge::AttrValue> expected_attrs;
  bool attrs_known = true;
  for (const opbridge::AttrSpec& a : spec.attrs) {
    opbridge::AttrValue value;
    bool exact = true;
    AttrOutcome outcome = AttrOutcome::kExact;
    switch (fdp.ConsumeIntegralInRange<int>(0, 7)) {
      case 1:
      case 2:
        outcome = AttrOutcome::kOmitted;
        break;
      case 3: {
        int type = kAttrTypes[fdp.ConsumeIntegralInRange<size_t>(0, 6)];
        if (type == OnnxType(a.type)) type = type == attr::kFLOAT ? attr::kINT : attr::kFLOAT;
        opbridge::AttrValue ignored;
        WriteAttribute(fdp, &node_pb, a.name, type, &a, &ignored, &exact);
        outcome = AttrOutcome::kWrongType;
        break;
      }
      case 4: {
        opbridge::AttrValue ignored;
        WriteAttribute(fdp, &node_pb, a.name, OnnxType(a.type), &a, &value, &exact);
        WriteAttribute(fdp, &node_pb, a.name, kAttrTypes[fdp.ConsumeIntegralInRange<size_t>(0, 6)], &a,
                       &ignored, &exact);
        outcome = AttrOutcome::kUnknown;
        break;
      }
      case 5: {
        std::string near = a.name;
        switch (fdp.ConsumeIntegralInRange<int>(0, 2)) {
          case 0:
            near += "_";
            break;
          case 1:
            near[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(near[0])));
            break;
          default:
            near = near.substr(0, near.size() - 1);
            break;
        }
        if (near == a.name) near += "2";
        opbridge::AttrValue ignored;
        WriteAttribute(fdp, &node_pb, near, OnnxType(a.type), &a, &ignored, &exact);
        outcome = AttrOutcome::kOmitted;
        break;
      }
      default:
        WriteAttribute(fdp, &node_pb, a.name, OnnxType(a.type), &a, &value, &exact);
        if (!exact) outcome = AttrOutcome::kUnknown;
        break;
    }
    if (outcome == AttrOutcome::kOmitted) {
      if (a.has_default) {
        value = SpecDefault(a);
      } else {
        invalid = "a required attribute missing";
      }
    } else if (outcome == AttrOutcome::kWrongType) {
      invalid = "a mistyped attribute";
    }
    if (outcome == AttrOutcome::kUnknown) attrs_known = false;
    expected_attrs.push_back(std::move(value));
  }
  const int extra = fdp.ConsumeIntegralInRange<int>(0, 3);
  for (int e = 0; e < extra; ++e) {
    std::string name;
    if (fdp.ConsumeBool()) {
      const opbridge::OpSpec& other = *specs[fdp.ConsumeIntegralInRange<size_t>(0, specs.size() - 1)];
      name = other.attrs.empty()
                 ? "eps"
                 : other.attrs[fdp.ConsumeIntegralInRange<size_t>(0, other.attrs.size() - 1)].name;
    } else {
      name = fdp.ConsumeRandomLengthString(32);
    }
    for (const opbridge::AttrSpec& a : spec.attrs) {
      if (name == a.name) attrs_known = false;  // it may replace or duplicate the spec's
    }
    opbridge::AttrValue ignored;
    bool exact = true;
    WriteAttribute(fdp, &node_pb, name, kAttrTypes[fdp.ConsumeIntegralInRange<size_t>(0, 6)], nullptr,
                   &ignored, &exact);
  }

  // The node's name: "n", any bytes, or none.
  switch (fdp.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:
      node_pb.Bytes(node::kName, "n");
      break;
    case 1:
      break;
    default:
      node_pb.Bytes(node::kName, fdp.ConsumeRandomLengthString(256));
      break;
  }
  node_pb.Bytes(node::kOpType, op_type);
  node_pb.Bytes(node::kDomain, domain);

  graph_pb.Message(graph::kNode, node_pb);
  graph_pb.Bytes(graph::kName, "fuzz");

  static const int64_t kIrVersions[] = {10, 8, 9, 7};
  static const int64_t kOnnxOpsets[] = {18, 17, 21, 13};
  Pb model_pb;
  model_pb.Int(model::kIrVersion, kIrVersions[fdp.ConsumeIntegralInRange<int>(0, 3)]);
  model_pb.Bytes(model::kProducerName, "opbridge_fuzz");
  model_pb.Message(model::kGraph, graph_pb);
  {
    Pb onnx_opset;
    onnx_opset.Bytes(opset::kDomain, "");
    onnx_opset.Int(opset::kVersion, kOnnxOpsets[fdp.ConsumeIntegralInRange<int>(0, 3)]);
    model_pb.Message(model::kOpsetImport, onnx_opset);
  }
  // Rarely no import of the domain at all. Not flagged: ONNX Runtime then
  // imports a registered custom domain at its latest version itself.
  if (fdp.ConsumeIntegralInRange<int>(0, 15) != 1) {
    Pb ours;
    ours.Bytes(opset::kDomain, domain);
    ours.Int(opset::kVersion, domain_version);
    model_pb.Message(model::kOpsetImport, ours);
  }
  // A newer opset of the domain than the library's is not flagged: ONNX
  // Runtime matches the node to the op's schema (since version 1) and runs
  // it; GetEndVersion does not keep a model of opset N+1 away from an
  // opset-N library.
  if (domain != kDomain || op_type != spec.onnx_type) invalid = "the domain or op type";

  Case c;
  c.spec = &spec;
  c.bytes = model_pb.str();
  c.inputs = std::move(inputs);
  c.output_names = std::move(output_names);
  c.invalid = std::move(invalid);
  c.attrs_known = attrs_known;
  c.domain_version_invalid = domain_version < 1;
  c.expected_attrs = std::move(expected_attrs);
  return c;
}

const char* DtypeName(int onnx_type) {
  const char* name = opbridge::DtypeName(opbridge::DtypeFromOnnx(onnx_type));
  return name != nullptr ? name : "?";
}

void CheckOutputs(const Case& c, const std::vector<Seen>& outputs) {
  const opbridge::OpSpec& spec = *c.spec;
  if (!c.attrs_known) return;
  std::string invalid = c.invalid;
  for (const Input& in : c.inputs) {
    if (in.sequence) invalid = "a sequence input";
  }
  if (!invalid.empty()) Violation(spec.QualifiedName() + " ran although the node is invalid: " + invalid);
  // What was fed: each spec input present (a name) or absent, with its dtype and dims.
  std::vector<opbridge::TensorInfo> fed(spec.inputs.size());
  for (size_t i = 0; i < fed.size(); ++i) {
    fed[i].present = i < c.inputs.size() && !c.inputs[i].name.empty();
    if (i < c.inputs.size()) {
      fed[i].dtype = kDtypes[c.inputs[i].dtype].name;
      fed[i].shape = opbridge::DimsOf(c.inputs[i].dims);
    }
  }
  std::vector<opbridge::TensorInfo> expected;
  opbridge::Status status = opbridge::InferWithAttrs(spec, fed, c.expected_attrs, &expected);
  if (!status.ok()) Violation(spec.QualifiedName() + " ran, but its shape rule says: " + status.message());
  if (outputs.size() > expected.size()) Violation(spec.QualifiedName() + ": more outputs than its spec has");
  for (size_t k = 0; k < outputs.size(); ++k) {
    const std::vector<int64_t> rule = opbridge::Sizes(expected[k].shape);
    if (outputs[k].shape != rule || expected[k].dtype != outputs[k].dtype) {
      Violation(spec.QualifiedName() + " output " + std::to_string(k) + ": got " + outputs[k].dtype + " " +
                ShapeText(outputs[k].shape) + ", the shape rule says " + expected[k].dtype + " " +
                ShapeText(rule));
    }
  }
}

const std::vector<const opbridge::OpSpec*>& Specs() {
  // Kept for the life of the process, like the runtimes keep the ops.
  static const auto* specs = new std::vector<const opbridge::OpSpec*>(opbridge::AllSpecs());
  return *specs;
}

void Init() {
  g_verbose = std::getenv("OPBRIDGE_FUZZ_VERBOSE") != nullptr;
  if (Specs().empty()) {
    std::fprintf(stderr, "no operator specs registered\n");
    std::abort();
  }
}

void Say(const char* what, const std::string& detail) {
  if (g_verbose) std::fprintf(stderr, "[fuzz] %s: %s\n", what, detail.c_str());
}

void DumpModel(const Case& c) {
  if (const char* dump = std::getenv("OPBRIDGE_FUZZ_DUMP")) {
    if (FILE* f = std::fopen(dump, "wb")) {
      std::fwrite(c.bytes.data(), 1, c.bytes.size(), f);
      std::fclose(f);
    }
  }
}

void Violation(const std::string& message) {
  std::fprintf(stderr, "[fuzz] INVARIANT VIOLATED: %s\n", message.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace opbridge_fuzz
