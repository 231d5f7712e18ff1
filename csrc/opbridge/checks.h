// Argument checks and messages shared by every adapter, so that PyTorch,
// ONNX Runtime, OpenVINO and ExecuTorch reject the same input with the same words.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "opbridge/dtype.h"
#include "opbridge/half.h"
#include "opbridge/spec.h"
#include "opbridge/status.h"

namespace opbridge {

std::string FormatShape(const Shape& shape);

// "opbridge::rms_norm: argument 'weight' " + detail
Status ArgError(const OpSpec& spec, const char* argument, const std::string& detail);

Status CheckFloatingDtype(const OpSpec& spec, const char* argument, const std::string& given);

// x must have at least one dimension.
Status CheckAtLeast1d(const OpSpec& spec, const char* argument, const Shape& shape);

// `shape` must be exactly [size] where size is x's (the op's first input's) last dimension.
Status CheckVectorOfLastDim(const OpSpec& spec, const char* argument, const Shape& shape,
                            const Shape& x_shape);

Status CheckSameDtype(const OpSpec& spec, const char* argument, const std::string& given,
                      const std::string& expected);

// Common rule of the first operators: x floating point, every other present
// input of x's dtype.
Status CheckFloatingInputs(const OpSpec& spec, const std::vector<TensorInfo>& inputs);

int64_t NumElements(const Shape& shape);

// `shape` must equal `expected` (the shape of argument `expected_name`);
// unknown dims (-1) on either side match anything.
Status CheckSameShape(const OpSpec& spec, const char* argument, const Shape& shape, const Shape& expected,
                      const char* expected_name);

// `shape` must have exactly `rank` dimensions; `layout` (e.g. "[batch, seq,
// heads, head_dim]") is named in the message.
Status CheckRank(const OpSpec& spec, const char* argument, const Shape& shape, size_t rank,
                 const std::string& layout);

// The input count the spec declares (a hand-made ONNX node may differ).
Status CheckInputCount(const OpSpec& spec, const std::vector<TensorInfo>& inputs);

// Both dims known and different.
inline bool DimsDiffer(const Dim& a, const Dim& b) { return a >= 0 && b >= 0 && a != b; }

// Calls body(T{}) for float32 / float64; an error for any other dtype.
template <typename Body>
Status DispatchFloating(const OpSpec& spec, const char* argument, const std::string& dtype, Body&& body) {
  switch (DtypeFromName(dtype)) {
    case Dtype::kFloat32:
      body(float{});
      return Status::Ok();
    case Dtype::kFloat64:
      body(double{});
      return Status::Ok();
    default:
      return CheckFloatingDtype(spec, argument, dtype);
  }
}

// float32, float64, float16 or bfloat16 (16-bit types compute in float32).
Status CheckFloatingOrHalfDtype(const OpSpec& spec, const char* argument, const std::string& given);

// CheckFloatingInputs for ops that also take float16 / bfloat16.
Status CheckFloatingOrHalfInputs(const OpSpec& spec, const std::vector<TensorInfo>& inputs);

// Calls body(T{}) for float32 / float64 / float16 (Float16) / bfloat16
// (BFloat16); an error for any other dtype.
template <typename Body>
Status DispatchFloatingOrHalf(const OpSpec& spec, const char* argument, const std::string& dtype,
                              Body&& body) {
  switch (DtypeFromName(dtype)) {
    case Dtype::kFloat16:
      body(Float16{});
      return Status::Ok();
    case Dtype::kBFloat16:
      body(BFloat16{});
      return Status::Ok();
    case Dtype::kFloat32:
    case Dtype::kFloat64:
      return DispatchFloating(spec, argument, dtype, body);
    default:
      return CheckFloatingOrHalfDtype(spec, argument, dtype);
  }
}

// ---------------------------------------------------------------------------
// Checked access to a kernel's tensors: the contract between a shape rule and
// its kernel, checked on every call (no switch to turn on). A kernel states
// what it reads and writes of each tensor (storage type T and element count)
// and gets the typed pointer only when the shape rule's TensorInfo agrees;
// otherwise an error naming the op, the tensor, what the shape rule gave and
// what the kernel takes, before a byte is touched. The toolkit's launchers
// (toolkit::Map, toolkit::LaunchRows, the norms' DispatchNorm*) go through
// these for every tensor; a hand-written kernel calls InputAs / OutputAs. A
// kernel that casts args.outputs[k] itself is checked only by the output
// guards of OPBRIDGE_CHECK=1 (opbridge/runtime_checks.h).

// The Dtype of storage type T.
template <typename T>
constexpr Dtype StorageDtype() {
  if constexpr (std::is_same_v<T, float>) {
    return Dtype::kFloat32;
  } else if constexpr (std::is_same_v<T, double>) {
    return Dtype::kFloat64;
  } else if constexpr (std::is_same_v<T, Float16>) {
    return Dtype::kFloat16;
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return Dtype::kBFloat16;
  } else if constexpr (std::is_same_v<T, uint8_t>) {
    return Dtype::kUint8;
  } else if constexpr (std::is_same_v<T, int8_t>) {
    return Dtype::kInt8;
  } else if constexpr (std::is_same_v<T, int16_t>) {
    return Dtype::kInt16;
  } else if constexpr (std::is_same_v<T, int32_t>) {
    return Dtype::kInt32;
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return Dtype::kInt64;
  } else {
    static_assert(std::is_same_v<T, bool>, "a storage type the specs name");
    return Dtype::kBool;
  }
}

// The dtype name (as TensorInfo writes it) of storage type T.
template <typename T>
constexpr const char* DtypeOf() {
  return DtypeName(StorageDtype<T>());
}

// The spec's name of tensor k of `args` (an input when !output): the
// forward's names when args has the forward's input and output counts, else
// the backward's; "input k" / "output k" otherwise.
std::string TensorName(const OpSpec& spec, const KernelArgs& args, bool output, size_t k);

// The error of CheckTensorAccess (below), built only when the check fails.
Status TensorAccessError(const OpSpec& spec, const KernelArgs& args, bool output, size_t k, const char* dtype,
                         int64_t elements, const char* how);

// Tensor k of `args` (an output when `output`) read or written as `elements`
// values of dtype `dtype`: Ok when its TensorInfo has that dtype and exactly
// that many elements, or when it is absent (a null pointer: an absent
// optional input, a gradient nobody needs). `how` says how the kernel sized
// it ("one per row"), for the message; may be null. Costs a few comparisons.
inline Status CheckTensorAccess(const OpSpec& spec, const KernelArgs& args, bool output, size_t k,
                                const char* dtype, int64_t elements, const char* how = nullptr) {
  const size_t count = output ? args.outputs.size() : args.inputs.size();
  const size_t infos = output ? args.output_infos.size() : args.input_infos.size();
  if (k < count && k < infos) {
    const void* data = output ? static_cast<const void*>(args.outputs[k]) : args.inputs[k];
    if (data == nullptr) return Status::Ok();
    const TensorInfo& info = output ? args.output_infos[k] : args.input_infos[k];
    if (info.dtype == dtype && NumElements(info.shape) == elements) return Status::Ok();
  }
  return TensorAccessError(spec, args, output, k, dtype, elements, how);
}

// Input k as `elements` values of T, checked (CheckTensorAccess); null when absent.
template <typename T>
Status InputAs(const OpSpec& spec, const KernelArgs& args, size_t k, int64_t elements, const T** data,
               const char* how = nullptr) {
  OPBRIDGE_RETURN_IF_ERROR(CheckTensorAccess(spec, args, false, k, DtypeOf<T>(), elements, how));
  *data = static_cast<const T*>(args.inputs[k]);
  return Status::Ok();
}

// Output k as `elements` values of T, checked (CheckTensorAccess); null when not wanted.
template <typename T>
Status OutputAs(const OpSpec& spec, const KernelArgs& args, size_t k, int64_t elements, T** data,
                const char* how = nullptr) {
  OPBRIDGE_RETURN_IF_ERROR(CheckTensorAccess(spec, args, true, k, DtypeOf<T>(), elements, how));
  *data = static_cast<T*>(args.outputs[k]);
  return Status::Ok();
}

// After a launch that returned Ok: an output the launch wanted (a non-null
// pointer to at least one element) whose pointer the kernel never took
// (OutputPointers) is an error naming the op and the output, which would
// otherwise hold whatever its memory held. Every adapter checks it.
Status CheckOutputsTaken(const OpSpec& spec, const KernelArgs& args);

// launch(args), then CheckOutputsTaken: how every adapter launches a kernel.
template <typename Launch>
Status LaunchChecked(const OpSpec& spec, Launch&& launch, const KernelArgs& args) {
  args.outputs.ForgetTaken();
  OPBRIDGE_RETURN_IF_ERROR(launch(args));
  return CheckOutputsTaken(spec, args);
}

}  // namespace opbridge
