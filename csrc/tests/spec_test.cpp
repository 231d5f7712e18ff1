#include "core/spec.h"

#include <gtest/gtest.h>

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

TEST(Spec, AllSpecsSortedAndQualified) {
  const auto specs = AllSpecs();
  ASSERT_GE(specs.size(), 2u);
  for (size_t i = 1; i < specs.size(); ++i) EXPECT_LT(std::string(specs[i - 1]->name), specs[i]->name);
  EXPECT_EQ(FindSpec("rms_norm")->QualifiedName(), "opbridge::RmsNorm");
}

}  // namespace
}  // namespace opbridge
