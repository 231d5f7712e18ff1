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

// Stand-ins with distinct addresses for the builder tests.
Status InferStub(const std::vector<TensorInfo>&, std::vector<TensorInfo>*) { return Status::Ok(); }
Status InferAttrsStub(const std::vector<TensorInfo>&, const std::vector<AttrValue>&,
                      std::vector<TensorInfo>*) {
  return Status::Ok();
}
Status InferBackwardStub(const std::vector<TensorInfo>&, const std::vector<AttrValue>&,
                         std::vector<TensorInfo>*) {
  return Status::Error("backward");
}
Status LaunchStub(const KernelArgs&) { return Status::Ok(); }
Status LaunchBackwardStub(const KernelArgs&) { return Status::Error("backward"); }

std::string Text(const char* text) { return text == nullptr ? "<null>" : text; }

// Every field of `a` and `b` is the same.
void ExpectSameSpec(const OpSpec& a, const OpSpec& b) {
  EXPECT_EQ(Text(a.name), Text(b.name));
  EXPECT_EQ(Text(a.onnx_type), Text(b.onnx_type));
  EXPECT_EQ(Text(a.doc), Text(b.doc));
  ASSERT_EQ(a.inputs.size(), b.inputs.size());
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    EXPECT_EQ(Text(a.inputs[i].name), Text(b.inputs[i].name)) << i;
    EXPECT_EQ(a.inputs[i].optional, b.inputs[i].optional) << i;
  }
  ASSERT_EQ(a.attrs.size(), b.attrs.size());
  for (size_t i = 0; i < a.attrs.size(); ++i) {
    EXPECT_EQ(Text(a.attrs[i].name), Text(b.attrs[i].name)) << i;
    EXPECT_EQ(a.attrs[i].type, b.attrs[i].type) << i;
    EXPECT_EQ(a.attrs[i].has_default, b.attrs[i].has_default) << i;
    EXPECT_EQ(a.attrs[i].default_value, b.attrs[i].default_value) << i;
    EXPECT_EQ(a.attrs[i].default_text == nullptr, b.attrs[i].default_text == nullptr) << i;
    if (a.attrs[i].default_text != nullptr && b.attrs[i].default_text != nullptr) {
      EXPECT_EQ(Text(a.attrs[i].default_text), Text(b.attrs[i].default_text)) << i;
    }
  }
  ASSERT_EQ(a.outputs.size(), b.outputs.size());
  for (size_t i = 0; i < a.outputs.size(); ++i) EXPECT_EQ(Text(a.outputs[i]), Text(b.outputs[i])) << i;
  EXPECT_EQ(a.infer, b.infer);
  EXPECT_EQ(a.forward, b.forward);
  EXPECT_EQ(a.infer_attrs, b.infer_attrs);
  ASSERT_EQ(a.backward.inputs.size(), b.backward.inputs.size());
  for (size_t i = 0; i < a.backward.inputs.size(); ++i) {
    EXPECT_EQ(Text(a.backward.inputs[i].name), Text(b.backward.inputs[i].name)) << i;
    EXPECT_EQ(a.backward.inputs[i].source, b.backward.inputs[i].source) << i;
    EXPECT_EQ(a.backward.inputs[i].index, b.backward.inputs[i].index) << i;
    EXPECT_EQ(a.backward.inputs[i].like, b.backward.inputs[i].like) << i;
  }
  ASSERT_EQ(a.backward.outputs.size(), b.backward.outputs.size());
  for (size_t i = 0; i < a.backward.outputs.size(); ++i) {
    EXPECT_EQ(Text(a.backward.outputs[i].name), Text(b.backward.outputs[i].name)) << i;
    EXPECT_EQ(a.backward.outputs[i].like, b.backward.outputs[i].like) << i;
    EXPECT_EQ(a.backward.outputs[i].optional, b.backward.outputs[i].optional) << i;
  }
  EXPECT_EQ(a.backward.input_grads, b.backward.input_grads);
  EXPECT_EQ(a.backward.launch, b.backward.launch);
  EXPECT_EQ(a.backward.infer, b.backward.infer);
  EXPECT_EQ(a.TorchSchema(), b.TorchSchema());
  EXPECT_EQ(a.TorchOutSchema(), b.TorchOutSchema());
  EXPECT_EQ(a.BackwardSchema(), b.BackwardSchema());
}

TEST(SpecBuilder, NamesEveryField) {
  const OpSpec spec =
      OpSpec::Builder("soft_mix", "SoftMix")
          .Doc("A made-up op with one of everything.")
          .Inputs({Input("x"), Input("residual"), OptionalInput("bias")})
          .Attrs({Attr::Float("scale"), Attr::Float("eps", 1e-6), Attr::Int("axis", -1),
                  Attr::Bool("fast", true), Attr::String("mode", "none"), Attr::Floats("mean")})
          .Outputs({"y", "sum"})
          .Infer(InferStub)
          .InferAttrs(InferAttrsStub)
          .Forward(LaunchStub)
          .Backward(LaunchBackwardStub)
          .BackwardInputs({GradOfOutput("grad_y", 0).Like(3), GradOfOutput("grad_sum", 1),
                           SavedInput("bias", 2), SavedOutput("sum", 1)})
          .BackwardOutputs({Gradient("grad_x").Like(3), Gradient("grad_bias").Optional()})
          .InputGradients({0, 0, 1})
          .InferBackward(InferBackwardStub);
  EXPECT_STREQ(spec.name, "soft_mix");
  EXPECT_STREQ(spec.onnx_type, "SoftMix");
  EXPECT_STREQ(spec.doc, "A made-up op with one of everything.");
  ASSERT_EQ(spec.inputs.size(), 3u);
  EXPECT_FALSE(spec.inputs[0].optional);
  EXPECT_FALSE(spec.inputs[1].optional);
  EXPECT_TRUE(spec.inputs[2].optional);
  ASSERT_EQ(spec.attrs.size(), 6u);
  EXPECT_EQ(spec.attrs[0].type, AttrType::kFloat);
  EXPECT_FALSE(spec.attrs[0].has_default);
  EXPECT_TRUE(spec.attrs[1].has_default);
  EXPECT_EQ(spec.attrs[1].default_value, 1e-6);
  EXPECT_EQ(spec.attrs[2].type, AttrType::kInt);
  EXPECT_EQ(spec.attrs[2].default_value, -1.0);
  EXPECT_EQ(spec.attrs[3].type, AttrType::kBool);
  EXPECT_EQ(spec.attrs[3].default_value, 1.0);
  EXPECT_EQ(spec.attrs[4].type, AttrType::kString);
  EXPECT_STREQ(spec.attrs[4].default_text, "none");
  EXPECT_EQ(spec.attrs[5].type, AttrType::kFloats);
  EXPECT_FALSE(spec.attrs[5].has_default);
  EXPECT_EQ(spec.infer, &InferStub);
  EXPECT_EQ(spec.infer_attrs, &InferAttrsStub);
  EXPECT_EQ(spec.forward, &LaunchStub);
  ASSERT_TRUE(spec.has_backward());
  ASSERT_EQ(spec.backward.inputs.size(), 4u);
  EXPECT_EQ(spec.backward.inputs[0].source, TensorSource::kGradOutput);
  EXPECT_EQ(spec.backward.inputs[0].index, 0);
  EXPECT_EQ(spec.backward.inputs[0].like, 3);
  EXPECT_EQ(spec.backward.inputs[1].index, 1);
  EXPECT_EQ(spec.backward.inputs[1].like, -1);
  EXPECT_EQ(spec.backward.inputs[2].source, TensorSource::kInput);
  EXPECT_EQ(spec.backward.inputs[2].index, 2);
  EXPECT_EQ(spec.backward.inputs[3].source, TensorSource::kOutput);
  EXPECT_EQ(spec.backward.inputs[3].index, 1);
  ASSERT_EQ(spec.backward.outputs.size(), 2u);
  EXPECT_EQ(spec.backward.outputs[0].like, 3);
  EXPECT_FALSE(spec.backward.outputs[0].optional);
  EXPECT_EQ(spec.backward.outputs[1].like, -1);
  EXPECT_TRUE(spec.backward.outputs[1].optional);
  EXPECT_EQ(spec.backward.input_grads, (std::vector<int>{0, 0, 1}));
  EXPECT_EQ(spec.backward.infer, &InferBackwardStub);

  // The same spec in the positional (aggregate) form.
  const OpSpec positional{
      "soft_mix",
      "SoftMix",
      "A made-up op with one of everything.",
      {{"x", false}, {"residual", false}, {"bias", true}},
      {{"scale", AttrType::kFloat, false, 0.0},
       {"eps", AttrType::kFloat, true, 1e-6},
       {"axis", AttrType::kInt, true, -1.0},
       {"fast", AttrType::kBool, true, 1.0},
       {"mode", AttrType::kString, true, 0.0, "none"},
       {"mean", AttrType::kFloats, false, 0.0}},
      {"y", "sum"},
      InferStub,
      LaunchStub,
      InferAttrsStub,
      {{{"grad_y", TensorSource::kGradOutput, 0, 3},
        {"grad_sum", TensorSource::kGradOutput, 1},
        {"bias", TensorSource::kInput, 2},
        {"sum", TensorSource::kOutput, 1}},
       {{"grad_x", 3}, {"grad_bias", -1, true}},
       {0, 0, 1},
       LaunchBackwardStub,
       InferBackwardStub},
  };
  ExpectSameSpec(spec, positional);
  EXPECT_EQ(
      spec.TorchSchema(),
      "soft_mix(Tensor x, Tensor residual, Tensor? bias=None, float scale, float eps=1e-06, int axis=-1, "
      "bool fast=True, str mode='none', float[] mean) -> (Tensor, Tensor)");
}

TEST(SpecBuilder, UnsetFieldsKeepTheAggregateDefaults) {
  const OpSpec spec =
      OpSpec::Builder("plain", "Plain").Inputs({Input("x")}).Outputs({"y"}).Forward(LaunchStub);
  EXPECT_EQ(spec.doc, nullptr);
  EXPECT_EQ(spec.infer, nullptr);
  EXPECT_EQ(spec.infer_attrs, nullptr);
  EXPECT_FALSE(spec.has_backward());
  EXPECT_TRUE(spec.backward.inputs.empty());
  EXPECT_EQ(spec.BackwardSchema(), "");
  EXPECT_EQ(spec.TorchSchema(), "plain(Tensor x) -> Tensor");
}

// The built-in rms_norm spec, written with the builders, is the one its
// positional form describes.
TEST(SpecBuilder, RmsNormMatchesItsPositionalForm) {
  const OpSpec* rms = FindSpec("rms_norm");
  ASSERT_NE(rms, nullptr);
  const OpSpec positional{
      "rms_norm",
      "RmsNorm",
      "x * rsqrt(mean(x^2, -1) + eps) * weight (+ bias), over the last dimension of x.",
      {{"x", false}, {"weight", false}, {"bias", true}},
      {{"eps", AttrType::kFloat, true, 1e-6}},
      {"y"},
      rms->infer,
      rms->forward,
      nullptr,
      {{{"grad_y", TensorSource::kGradOutput, 0, 1},
        {"x", TensorSource::kInput, 0},
        {"weight", TensorSource::kInput, 1}},
       {{"grad_x", 1}, {"grad_weight", 2}, {"grad_bias", 2, true}},
       {0, 1, 2},
       rms->backward.launch},
  };
  ExpectSameSpec(*rms, positional);
}

}  // namespace
}  // namespace opbridge
