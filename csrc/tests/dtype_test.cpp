#include "opbridge/dtype.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "opbridge/checks.h"

namespace opbridge {
namespace {

// An enum named as c10's ScalarType, with other numbers.
enum class FakeScalarType { Bool, BFloat16, Long, Int, Short, Char, Byte, Half, Double, Float, ComplexFloat };

TEST(Dtype, NamesTheScalarTypesByEnumeratorNotByNumber) {
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

TEST(Dtype, ScalarTypesGoBothWays) {
  for (const auto& pair : ScalarTypes<FakeScalarType>::kPairs) {
    FakeScalarType type = FakeScalarType::ComplexFloat;
    ASSERT_TRUE(ScalarTypes<FakeScalarType>::Of(pair.second, &type)) << DtypeName(pair.second);
    EXPECT_EQ(type, pair.first) << DtypeName(pair.second);
    EXPECT_EQ(ScalarTypes<FakeScalarType>::DtypeOf(type), pair.second);
  }
  FakeScalarType type = FakeScalarType::Float;
  EXPECT_FALSE(ScalarTypes<FakeScalarType>::Of(Dtype::kString, &type));
  EXPECT_FALSE(ScalarTypes<FakeScalarType>::Of(Dtype::kUndefined, &type));
}

TEST(Dtype, OneRowPerDtypeAndNamesRoundTrip) {
  std::set<std::string> names;
  for (const DtypeRow& row : kDtypes) {
    EXPECT_TRUE(names.insert(row.name).second) << row.name;
    EXPECT_EQ(DtypeFromName(row.name), row.dtype) << row.name;
    EXPECT_STREQ(DtypeName(row.dtype), row.name);
    EXPECT_EQ(DtypeFromOnnx(OnnxElementType(row.dtype)), row.dtype) << row.name;
    EXPECT_EQ(DtypeSize(row.name), row.bytes) << row.name;
  }
  EXPECT_EQ(DtypeFromName("float"), Dtype::kUndefined);
  EXPECT_EQ(DtypeFromName(""), Dtype::kUndefined);
  EXPECT_EQ(DtypeName(Dtype::kUndefined), nullptr);
  EXPECT_EQ(DtypeFromOnnx(14), Dtype::kUndefined);  // COMPLEX64: not a spec's dtype
  EXPECT_EQ(DtypeFromOnnx(-1), Dtype::kUndefined);
  EXPECT_EQ(DtypeSize("complex64"), 0);
  // Every lookup folds in a constant expression, the sanitizer build's too.
  static_assert(DtypeSize("bfloat16") == 2, "bfloat16 is two bytes");
  static_assert(DtypeSize(Dtype::kUndefined) == 0, "undefined has no size");
  static_assert(IsFloating("float16") && !IsFloating("int8"), "floating types");
  static_assert(DtypeFromOnnx(16) == Dtype::kBFloat16, "ONNX's 16 is bfloat16");
  static_assert(DtypeFromOnnx(14) == Dtype::kUndefined, "ONNX's 14 is no spec's");
  static_assert(DtypeName(Dtype::kUndefined) == nullptr, "undefined has no name");
  static_assert(DtypeRowOf(Dtype::kInt64)->bytes == 8, "int64's row");
}

TEST(Dtype, OnnxNumbersAreOnnxs) {
  // TensorProto.DataType, as onnx.proto numbers it.
  EXPECT_EQ(OnnxElementType(Dtype::kFloat32), 1);
  EXPECT_EQ(OnnxElementType(Dtype::kUint8), 2);
  EXPECT_EQ(OnnxElementType(Dtype::kInt64), 7);
  EXPECT_EQ(OnnxElementType(Dtype::kBool), 9);
  EXPECT_EQ(OnnxElementType(Dtype::kFloat16), 10);
  EXPECT_EQ(OnnxElementType(Dtype::kFloat64), 11);
  EXPECT_EQ(OnnxElementType(Dtype::kBFloat16), 16);
}

TEST(Dtype, FloatingAndStorageTypes) {
  EXPECT_TRUE(IsFloating("float32"));
  EXPECT_TRUE(IsFloating("bfloat16"));
  EXPECT_FALSE(IsFloating("int32"));
  EXPECT_FALSE(IsFloating("nonsense"));
  static_assert(StorageDtype<Float16>() == Dtype::kFloat16, "Float16 stores float16");
  EXPECT_STREQ(DtypeOf<double>(), "float64");
  EXPECT_STREQ(DtypeOf<BFloat16>(), "bfloat16");
  EXPECT_STREQ(DtypeOf<int64_t>(), "int64");
  EXPECT_STREQ(DtypeOf<bool>(), "bool");
}

}  // namespace
}  // namespace opbridge
