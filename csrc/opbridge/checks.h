// Argument checks and messages shared by both adapters, so that PyTorch and
// ONNX Runtime reject the same input with the same words.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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
inline bool DimsDiffer(int64_t a, int64_t b) { return a >= 0 && b >= 0 && a != b; }

// Calls body(T{}) for float32 / float64; an error for any other dtype.
template <typename Body>
Status DispatchFloating(const OpSpec& spec, const char* argument, const std::string& dtype, Body&& body) {
  if (dtype == "float32") {
    body(float{});
    return Status::Ok();
  }
  if (dtype == "float64") {
    body(double{});
    return Status::Ok();
  }
  return CheckFloatingDtype(spec, argument, dtype);
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
  if (dtype == "float16") {
    body(Float16{});
    return Status::Ok();
  }
  if (dtype == "bfloat16") {
    body(BFloat16{});
    return Status::Ok();
  }
  if (dtype == "float32" || dtype == "float64") return DispatchFloating(spec, argument, dtype, body);
  return CheckFloatingOrHalfDtype(spec, argument, dtype);
}

}  // namespace opbridge
