#include "opbridge/dtype_name.h"

#include <gtest/gtest.h>

namespace opbridge {
namespace {

// An enum named as c10's ScalarType, with other numbers.
enum class FakeScalarType { Bool, BFloat16, Long, Int, Short, Char, Byte, Half, Double, Float, ComplexFloat };

TEST(DtypeNameOf, NamesTheDtypesByEnumeratorNotByNumber) {
  EXPECT_STREQ(DtypeNameOf(FakeScalarType::Float), "float32");
  EXPECT_STREQ(DtypeNameOf(FakeScalarType::Double), "float64");
  EXPECT_STREQ(DtypeNameOf(FakeScalarType::Half), "float16");
  EXPECT_STREQ(DtypeNameOf(FakeScalarType::BFloat16), "bfloat16");
  EXPECT_STREQ(DtypeNameOf(FakeScalarType::Byte), "uint8");
  EXPECT_STREQ(DtypeNameOf(FakeScalarType::Char), "int8");
  EXPECT_STREQ(DtypeNameOf(FakeScalarType::Short), "int16");
  EXPECT_STREQ(DtypeNameOf(FakeScalarType::Int), "int32");
  EXPECT_STREQ(DtypeNameOf(FakeScalarType::Long), "int64");
  EXPECT_STREQ(DtypeNameOf(FakeScalarType::Bool), "bool");
  EXPECT_EQ(DtypeNameOf(FakeScalarType::ComplexFloat), nullptr);
  static_assert(DtypeNameOf(FakeScalarType::Float)[5] == '3', "usable in constant expressions");
}

}  // namespace
}  // namespace opbridge
