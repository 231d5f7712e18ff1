#include "opbridge/checks.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace opbridge {
namespace {

Status LaunchStub(const KernelArgs&) { return Status::Ok(); }

// An op whose first input is not named x: the dtype message names it.
TEST(Checks, SameDtypeMessageNamesTheOpsFirstInput) {
  const OpSpec spec = OpSpec::Builder("swiglu", "SwiGlu")
                          .Inputs({Input("gate"), Input("up")})
                          .Outputs({"y"})
                          .Forward(LaunchStub);
  const Status ok = CheckFloatingOrHalfInputs(spec, {{true, "float16", {2, 8}}, {true, "float16", {2, 8}}});
  EXPECT_TRUE(ok.ok()) << ok.message();
  const Status status =
      CheckFloatingOrHalfInputs(spec, {{true, "float32", {2, 8}}, {true, "bfloat16", {2, 8}}});
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("argument 'up' must have the dtype of gate (float32), got bfloat16"),
            std::string::npos)
      << status.message();
}

// The float32/float64 check and the per-column vector check name it too.
TEST(Checks, OtherMessagesNameTheOpsFirstInput) {
  const OpSpec spec = OpSpec::Builder("swiglu", "SwiGlu")
                          .Inputs({Input("gate"), Input("up")})
                          .Outputs({"y"})
                          .Forward(LaunchStub);
  const Status dtype = CheckFloatingInputs(spec, {{true, "float64", {2, 8}}, {true, "float32", {2, 8}}});
  ASSERT_FALSE(dtype.ok());
  EXPECT_NE(dtype.message().find("argument 'up' must have the dtype of gate (float64), got float32"),
            std::string::npos)
      << dtype.message();
  const Status vector = CheckVectorOfLastDim(spec, "up", {4}, {2, 8});
  ASSERT_FALSE(vector.ok());
  EXPECT_NE(vector.message().find("must be 1-D with 8 elements (the last dimension of gate), got shape [4]"),
            std::string::npos)
      << vector.message();
}

}  // namespace
}  // namespace opbridge
