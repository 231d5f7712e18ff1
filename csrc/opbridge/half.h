// 16-bit floating-point storage types for kernels (IEEE binary16 and
// bfloat16). Kernels load them into float32, compute and accumulate in float32
// (or wider), and round back to nearest-even only when storing.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace opbridge {

struct Float16 {
  uint16_t bits = 0;
};

struct BFloat16 {
  uint16_t bits = 0;
};

// M(T) for each floating storage type a kernel takes (the types
// DispatchFloatingOrHalf calls its body with): what a kernel's source
// instantiates its templates for.
#define OPBRIDGE_FOR_EACH_FLOATING_TYPE(M) \
  M(float)                                 \
  M(double)                                \
  M(::opbridge::Float16)                   \
  M(::opbridge::BFloat16)

inline float FloatBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

inline uint32_t BitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

inline float ToFloat(BFloat16 value) { return FloatBits(static_cast<uint32_t>(value.bits) << 16); }

inline BFloat16 ToBFloat16(float value) {
  const uint32_t bits = BitsOf(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return BFloat16{static_cast<uint16_t>((bits >> 16) | 0x0040u)};
  const uint32_t rounded = bits + 0x7FFFu + ((bits >> 16) & 1u);
  return BFloat16{static_cast<uint16_t>(rounded >> 16)};
}

inline float ToFloat(Float16 value) {
  const uint32_t sign = static_cast<uint32_t>(value.bits & 0x8000u) << 16;
  const uint32_t exponent = (value.bits >> 10) & 0x1Fu;
  const uint32_t mantissa = value.bits & 0x3FFu;
  if (exponent == 0x1F) return FloatBits(sign | 0x7F800000u | (mantissa << 13));
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24.
    const float magnitude = static_cast<float>(mantissa) * FloatBits(0x33800000u);
    return sign ? -magnitude : magnitude;
  }
  return FloatBits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline Float16 ToFloat16(float value) {
  const uint32_t bits = BitsOf(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return Float16{static_cast<uint16_t>(sign | 0x7E00u)};   // NaN
  if (magnitude >= 0x477FF000u) return Float16{static_cast<uint16_t>(sign | 0x7C00u)};  // rounds to inf
  if (magnitude < 0x38800000u) {
    // Result is subnormal (or zero): round magnitude / 2^-24 to nearest even.
    const float scaled = FloatBits(magnitude) * FloatBits(0x4B800000u);  // * 2^24, exact
    float whole = static_cast<float>(static_cast<uint32_t>(scaled));
    const float fraction = scaled - whole;
    if (fraction > 0.5f || (fraction == 0.5f && (static_cast<uint32_t>(whole) & 1u))) whole += 1.0f;
    return Float16{static_cast<uint16_t>(sign | static_cast<uint16_t>(whole))};
  }
  const uint32_t rounded = magnitude + 0xFFFu + ((magnitude >> 13) & 1u);
  return Float16{static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13))};
}

// Converts from float to a kernel's storage type, rounding to nearest even.
template <typename T>
inline T FromFloat(float value) {
  return static_cast<T>(value);
}
template <>
inline Float16 FromFloat<Float16>(float value) {
  return ToFloat16(value);
}
template <>
inline BFloat16 FromFloat<BFloat16>(float value) {
  return ToBFloat16(value);
}

// Narrows a double result (e.g. a gradient summed in double).
template <typename T>
inline T FromDouble(double value) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    return static_cast<T>(value);
  } else {
    return FromFloat<T>(static_cast<float>(value));
  }
}

// The type a kernel computes in for storage type T: double for float64,
// float32 for float32 and the 16-bit types.
template <typename T>
using ComputeType = std::conditional_t<std::is_same_v<T, double>, double, float>;

inline float ToFloat(float value) { return value; }
inline double ToFloat(double value) { return value; }

}  // namespace opbridge
