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

// A spec with a backward maps every input to a gradient or declares it
// NoGradient; the error names the op and the input and says what to write.
TEST(Checks, EveryInputHasAGradientOrIsDeclaredWithout) {
  const auto spec = [](std::vector<int> grads, std::vector<const char*> none) {
    OpSpec::Builder builder("gated_rope", "GatedRope");
    builder.Inputs({Input("x"), Input("positions"), Input("gate")})
        .Outputs({"y"})
        .Forward(LaunchStub)
        .Backward(LaunchStub)
        .BackwardInputs({GradOfOutput("grad_y", 0)})
        .BackwardOutputs({Gradient("grad_x"), Gradient("grad_gate")})
        .InputGradients(std::move(grads));
    for (const char* name : none) builder.NoGradient(name);
    return OpSpec(builder);
  };
  EXPECT_TRUE(CheckGradients(spec({0, -1, 1}, {"positions"})).ok());
  const Status forgotten = CheckGradients(spec({0, -1}, {"positions"}));
  ASSERT_FALSE(forgotten.ok());
  EXPECT_NE(forgotten.message().find("input 'gate' gets no gradient"), std::string::npos)
      << forgotten.message();
  EXPECT_NE(forgotten.message().find(".NoGradient(\"gate\")"), std::string::npos) << forgotten.message();
  EXPECT_FALSE(CheckGradients(spec({0, -1, 1}, {})).ok());
  const Status both = CheckGradients(spec({0, -1, 1}, {"positions", "gate"}));
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.message().find("'gate' is declared NoGradient but"), std::string::npos) << both.message();
  const Status unknown = CheckGradients(spec({0, -1, 1}, {"positions", "gates"}));
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.message().find("NoGradient(\"gates\") names no input"), std::string::npos);
  // Without a backward there is nothing to map.
  EXPECT_TRUE(
      CheckGradients(OpSpec::Builder("f", "F").Inputs({Input("x")}).Outputs({"y"}).Forward(LaunchStub)).ok());
}

// A kernel that returns Ok without taking a wanted output's pointer is an
// error naming the output; a null (unwanted) or empty output is not.
TEST(Checks, AKernelMustTakeEveryWantedOutput) {
  const OpSpec spec =
      OpSpec::Builder("two", "Two").Inputs({Input("x")}).Outputs({"y", "z"}).Forward(LaunchStub);
  float x[2] = {1.0f, 2.0f}, y[2], z[2];
  KernelArgs args;
  args.inputs = {x};
  args.input_infos = {{true, "float32", {2}}};
  args.outputs.push_back(y);
  args.outputs.push_back(z);
  args.output_infos = {{true, "float32", {2}}, {true, "float32", {2}}};
  const auto takes_y = [](const KernelArgs& a) {
    static_cast<float*>(a.outputs[0])[0] = 1.0f;
    return Status::Ok();
  };
  const Status status = LaunchChecked(spec, takes_y, args);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("without writing output 'z'"), std::string::npos) << status.message();
  const auto takes_both = [](const KernelArgs& a) {
    for (size_t k = 0; k < a.outputs.size(); ++k) static_cast<float*>(a.outputs[k])[0] = 1.0f;
    return Status::Ok();
  };
  EXPECT_TRUE(LaunchChecked(spec, takes_both, args).ok());
  args.outputs[1] = nullptr;
  EXPECT_TRUE(LaunchChecked(spec, takes_y, args).ok());
  args.outputs[1] = z;
  args.output_infos[1].shape = {0};
  EXPECT_TRUE(LaunchChecked(spec, takes_y, args).ok());
}

// Dims: integer arithmetic when known; unknown dimensions (a runtime's shape
// inference) compare as -1, what is computed from one is unknown, and an
// output dimension that is an input's is traced back to it.
TEST(Checks, DimsComputeKnownSizesAndKeepUnknownOnesUnknown) {
  const Dim f = 5;
  EXPECT_EQ(static_cast<int64_t>(f * (f - 1) / 2), 10);
  EXPECT_TRUE(f > 2 && f == 5 && 5 == f && f != Dim(4));
  EXPECT_EQ(MinDim(f, 3).Size(), 3);
  EXPECT_EQ((7 % f).Size(), 2);
  UnknownDims unknown;
  const DimSymbolsScope scope(&unknown);
  const Dim n = unknown.Input(0, 1);
  EXPECT_TRUE(n.symbolic());
  EXPECT_TRUE(n < 0);
  EXPECT_FALSE(DimsDiffer(n, Dim(3)));
  const Dim pairs = n * (n - 1) / 2;
  EXPECT_TRUE(pairs.symbolic());
  size_t input = 9, dim = 9;
  EXPECT_FALSE(unknown.SourceOf(pairs, &input, &dim));
  EXPECT_TRUE(unknown.SourceOf(n, &input, &dim));
  EXPECT_EQ(input, 0u);
  EXPECT_EQ(dim, 1u);
  EXPECT_EQ(static_cast<int64_t>(pairs), -1);
  EXPECT_EQ(FormatShape({Dim(2), n}), "[2, ?]");
}

}  // namespace
}  // namespace opbridge
