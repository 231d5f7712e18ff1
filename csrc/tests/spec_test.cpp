#include "opbridge/spec.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace opbridge {
namespace {

TEST(Spec, TorchSchemasComeFromTheSpec) {
  ASSERT_NE(FindSpec("rms_norm"), nullptr);
  EXPECT_EQ(FindSpec("rms_norm")->TorchSchema(),
            "rms_norm(Tensor x, Tensor weight, Tensor? bias=None, float eps=1e-06) -> Tensor");
  ASSERT_NE(FindSpec("ScaledClamp"), nullptr);
  EXPECT_EQ(FindSpec("ScaledClamp")->TorchSchema(),
            "scaled_clamp(Tensor x, float scale, float min_val=0.0, float max_val=6.0) -> Tensor");
}

TEST(Spec, OutSchemasComeFromTheSpec) {
  EXPECT_EQ(FindSpec("rms_norm")->TorchOutSchema(),
            "rms_norm.out(Tensor x, Tensor weight, Tensor? bias=None, float eps=1e-06, *, Tensor(a!) out) -> "
            "Tensor(a!)");
  // Several outputs: one out argument per output, named as in the spec.
  EXPECT_EQ(
      FindSpec("add_rms_norm")->TorchOutSchema(),
      "add_rms_norm.out(Tensor x, Tensor residual, Tensor weight, Tensor? bias=None, float eps=1e-06, *, "
      "Tensor(a!) out, Tensor(b!) residual_out) -> (Tensor(a!), Tensor(b!))");
}

TEST(Spec, BackwardSchemasComeFromTheSpec) {
  EXPECT_EQ(FindSpec("rms_norm")->BackwardSchema(),
            "rms_norm_backward(Tensor grad_y, Tensor x, Tensor weight, float eps, bool[3] output_mask) -> "
            "(Tensor, Tensor, Tensor)");
  // One output: no tuple; a string attribute is passed through.
  EXPECT_EQ(FindSpec("scaled_clamp")->BackwardSchema(),
            "scaled_clamp_backward(Tensor grad_y, Tensor x, float scale, float min_val, float max_val, "
            "bool[1] output_mask) -> Tensor");
  // Every spec names a gradient source for each forward input.
  for (const OpSpec* spec : AllSpecs()) {
    ASSERT_TRUE(spec->has_backward()) << spec->name;
    ASSERT_EQ(spec->backward.input_grads.size(), spec->inputs.size()) << spec->name;
    for (int grad : spec->backward.input_grads)
      EXPECT_LT(grad, static_cast<int>(spec->backward.outputs.size()));
  }
}

std::vector<std::string>& Seen() {
  static std::vector<std::string> seen;
  return seen;
}

TEST(Spec, ListenersSeeSpecsRegisteredBeforeThem) {
  Seen().clear();
  OnEachSpec([](const OpSpec& spec) { Seen().push_back(spec.name); });
  EXPECT_EQ(Seen().size(), AllSpecs().size());
}

TEST(Spec, AllSpecsSortedAndQualified) {
  const auto specs = AllSpecs();
  ASSERT_GE(specs.size(), 2u);
  for (size_t i = 1; i < specs.size(); ++i) EXPECT_LT(std::string(specs[i - 1]->name), specs[i]->name);
  EXPECT_EQ(FindSpec("rms_norm")->QualifiedName(), "opbridge::RmsNorm");
}

TEST(Spec, InferWithAttrsUsesTheAttributeRuleWhenAnOpHasOne) {
  const OpSpec* image = FindSpec("normalize_image");
  ASSERT_NE(image, nullptr);
  ASSERT_NE(image->infer_attrs, nullptr);
  const std::vector<TensorInfo> inputs = {TensorInfo{true, "uint8", {2, 8, 6, 3}}};
  std::vector<TensorInfo> outputs;
  const std::vector<AttrValue> attrs = {AttrValue(std::vector<double>{0.5, 0.5, 0.5}),
                                        AttrValue(std::vector<double>{0.2, 0.2, 0.2}), AttrValue(1.0)};
  ASSERT_TRUE(InferWithAttrs(*image, inputs, attrs, &outputs).ok());
  EXPECT_EQ(outputs[0].shape, (Shape{2, 3, 8, 6}));
  // An op without one falls back to its plain rule.
  const OpSpec* rms = FindSpec("rms_norm");
  ASSERT_EQ(rms->infer_attrs, nullptr);
  const std::vector<TensorInfo> rms_inputs = {TensorInfo{true, "float32", {2, 4}},
                                              TensorInfo{true, "float32", {4}}, TensorInfo{false, "", {}}};
  ASSERT_TRUE(InferWithAttrs(*rms, rms_inputs, {AttrValue(1e-6)}, &outputs).ok());
  EXPECT_EQ(outputs[0].shape, (Shape{2, 4}));
}

TEST(Spec, SchemasOfMultiOutputAndListAttributeOps) {
  EXPECT_EQ(FindSpec("add_rms_norm")->TorchSchema(),
            "add_rms_norm(Tensor x, Tensor residual, Tensor weight, Tensor? bias=None, float eps=1e-06) -> "
            "(Tensor, Tensor)");
  EXPECT_EQ(FindSpec("NormalizeImage")->TorchSchema(),
            "normalize_image(Tensor image, float[] mean, float[] std, bool channels_last_in=True) -> Tensor");
  EXPECT_EQ(FindSpec("bias_gelu")->TorchSchema(),
            "bias_gelu(Tensor x, Tensor bias, str approximate='none') -> Tensor");
}

}  // namespace
}  // namespace opbridge
