// The dtypes of the specs, in one table: each one's name (as TensorInfo::dtype
// writes it: "float32", "int64", ...), its size and whether it is floating.
// Dtype's values are ONNX's TensorProto.DataType numbers, which ONNX Runtime's
// ONNXTensorElementDataType shares. Every adapter maps its runtime's types
// onto Dtype and takes names, sizes and ONNX numbers from here; the ScalarType
// of PyTorch, its stable ABI and ExecuTorch (which name their enumerators as
// c10 does) maps through one list, ScalarTypes<ScalarType>.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>

namespace opbridge {

enum class Dtype : int {
  kUndefined = 0,
  kFloat32 = 1,
  kUint8 = 2,
  kInt8 = 3,
  kUint16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kFloat64 = 11,
  kUint32 = 12,
  kUint64 = 13,
  kBFloat16 = 16,
};

struct DtypeRow {
  Dtype dtype;
  const char* name;
  int64_t bytes;  // 0 for string
  bool floating;  // float32, float64, float16, bfloat16
};

inline constexpr DtypeRow kDtypes[] = {
    {Dtype::kFloat32, "float32", 4, true}, {Dtype::kFloat64, "float64", 8, true},
    {Dtype::kFloat16, "float16", 2, true}, {Dtype::kBFloat16, "bfloat16", 2, true},
    {Dtype::kUint8, "uint8", 1, false},    {Dtype::kInt8, "int8", 1, false},
    {Dtype::kUint16, "uint16", 2, false},  {Dtype::kInt16, "int16", 2, false},
    {Dtype::kUint32, "uint32", 4, false},  {Dtype::kInt32, "int32", 4, false},
    {Dtype::kUint64, "uint64", 8, false},  {Dtype::kInt64, "int64", 8, false},
    {Dtype::kBool, "bool", 1, false},      {Dtype::kString, "string", 0, false},
};

// The index of `dtype`'s row in kDtypes, or -1 for kUndefined (or a value
// outside the table). The lookups below go by index, not by comparing a row's
// address with nullptr: GCC does not fold that comparison in a constant
// expression under -fsanitize=undefined.
constexpr int DtypeIndex(Dtype dtype) {
  for (int i = 0; i < static_cast<int>(sizeof(kDtypes) / sizeof(kDtypes[0])); ++i) {
    if (kDtypes[i].dtype == dtype) return i;
  }
  return -1;
}

// The row of `dtype`, or nullptr for kUndefined (or a value outside the table).
constexpr const DtypeRow* DtypeRowOf(Dtype dtype) {
  const int index = DtypeIndex(dtype);
  return index < 0 ? nullptr : &kDtypes[index];
}

// The name of `dtype`, or nullptr where it has none (each adapter says what
// else the type is in its messages).
constexpr const char* DtypeName(Dtype dtype) {
  const int index = DtypeIndex(dtype);
  return index < 0 ? nullptr : kDtypes[index].name;
}

// The Dtype a name stands for; kUndefined for any other text.
constexpr Dtype DtypeFromName(std::string_view name) {
  for (const DtypeRow& row : kDtypes) {
    if (name == row.name) return row.dtype;
  }
  return Dtype::kUndefined;
}

// Bytes per element (0: unknown, or string).
constexpr int64_t DtypeSize(Dtype dtype) {
  const int index = DtypeIndex(dtype);
  return index < 0 ? 0 : kDtypes[index].bytes;
}
constexpr int64_t DtypeSize(std::string_view name) { return DtypeSize(DtypeFromName(name)); }

// float32, float64, float16 or bfloat16.
constexpr bool IsFloating(std::string_view name) {
  const int index = DtypeIndex(DtypeFromName(name));
  return index >= 0 && kDtypes[index].floating;
}

// ONNX's TensorProto.DataType number of `dtype`, and back (kUndefined for a
// number outside the table).
constexpr int OnnxElementType(Dtype dtype) { return static_cast<int>(dtype); }
constexpr Dtype DtypeFromOnnx(int element_type) {
  const Dtype dtype = static_cast<Dtype>(element_type);
  return DtypeIndex(dtype) >= 0 ? dtype : Dtype::kUndefined;
}

// The c10-named ScalarType enumerators the specs name, and their Dtype.
template <typename ScalarType>
struct ScalarTypes {
  static constexpr std::pair<ScalarType, Dtype> kPairs[] = {
      {ScalarType::Float, Dtype::kFloat32}, {ScalarType::Double, Dtype::kFloat64},
      {ScalarType::Half, Dtype::kFloat16},  {ScalarType::BFloat16, Dtype::kBFloat16},
      {ScalarType::Byte, Dtype::kUint8},    {ScalarType::Char, Dtype::kInt8},
      {ScalarType::Short, Dtype::kInt16},   {ScalarType::Int, Dtype::kInt32},
      {ScalarType::Long, Dtype::kInt64},    {ScalarType::Bool, Dtype::kBool},
  };

  // The Dtype of `type`; kUndefined for one the specs do not name.
  static constexpr Dtype DtypeOf(ScalarType type) {
    for (const auto& pair : kPairs) {
      if (pair.first == type) return pair.second;
    }
    return Dtype::kUndefined;
  }

  // The ScalarType of `dtype` into *type; false where it has none.
  static constexpr bool Of(Dtype dtype, ScalarType* type) {
    for (const auto& pair : kPairs) {
      if (pair.second == dtype) {
        *type = pair.first;
        return true;
      }
    }
    return false;
  }
};

// The spec's name of a c10-named ScalarType, or nullptr for a dtype the specs
// do not name.
template <typename ScalarType>
constexpr const char* DtypeNameOf(ScalarType type) {
  return DtypeName(ScalarTypes<ScalarType>::DtypeOf(type));
}

}  // namespace opbridge
