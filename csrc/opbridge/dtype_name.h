// The dtype names of the specs ("float32", "int64", ... as TensorInfo::dtype
// writes them) for a framework's ScalarType: PyTorch's at::ScalarType, its
// stable ABI's torch::headeronly::ScalarType and ExecuTorch's ScalarType all
// name their enumerators as c10 does, so one switch serves the three.
#pragma once

namespace opbridge {

// The spec's name of `type`, or nullptr for a dtype the specs do not name
// (each adapter says what else it is in its messages).
template <typename ScalarType>
constexpr const char* DtypeNameOf(ScalarType type) {
  switch (type) {
    case ScalarType::Float:
      return "float32";
    case ScalarType::Double:
      return "float64";
    case ScalarType::Half:
      return "float16";
    case ScalarType::BFloat16:
      return "bfloat16";
    case ScalarType::Byte:
      return "uint8";
    case ScalarType::Char:
      return "int8";
    case ScalarType::Short:
      return "int16";
    case ScalarType::Int:
      return "int32";
    case ScalarType::Long:
      return "int64";
    case ScalarType::Bool:
      return "bool";
    default:
      return nullptr;
  }
}

}  // namespace opbridge
