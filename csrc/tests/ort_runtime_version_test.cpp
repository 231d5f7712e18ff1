#include <gtest/gtest.h>

#include <string>

#include "opbridge/version.h"
#include "ort_adapter/runtime_version.h"

namespace opbridge {
namespace {

const std::string kFloor = "1." + std::to_string(kOrtApiFloor);

std::string Release(int minor, const char* patch = ".0") { return "1." + std::to_string(minor) + patch; }

TEST(OrtRuntimeVersion, ParsesMajorAndMinor) {
  OrtRelease release;
  ASSERT_TRUE(ParseOrtRelease("1.24.1", &release));
  EXPECT_EQ(release.major, 1);
  EXPECT_EQ(release.minor, 24);
  ASSERT_TRUE(ParseOrtRelease("1.32", &release));
  EXPECT_EQ(release.minor, 32);
  ASSERT_TRUE(ParseOrtRelease("2.0.0-dev", &release));
  EXPECT_EQ(release.major, 2);
  EXPECT_EQ(release.minor, 0);
  for (const char* unreadable : {"", "1", "1.", "x.24", "v1.24.0"}) {
    EXPECT_FALSE(ParseOrtRelease(unreadable, &release)) << unreadable;
  }
  EXPECT_FALSE(ParseOrtRelease(nullptr, &release));
}

TEST(OrtRuntimeVersion, AcceptsTheFloorAndNewer) {
  EXPECT_EQ(OrtRuntimeRefusal("opbridge 0.1.0", Release(kOrtApiFloor).c_str()), "");
  EXPECT_EQ(OrtRuntimeRefusal("opbridge 0.1.0", Release(kOrtApiFloor, ".4").c_str()), "");
  EXPECT_EQ(OrtRuntimeRefusal("opbridge 0.1.0", kOrtNewestTested), "");
  EXPECT_EQ(OrtRuntimeRefusal("opbridge 0.1.0", Release(kOrtApiFloor + 20).c_str()), "");
  EXPECT_EQ(OrtRuntimeRefusal("opbridge 0.1.0", "2.0.0"), "");
}

TEST(OrtRuntimeVersion, RefusesOlderReleasesNamingBothVersions) {
  for (const std::string& old : {Release(kOrtApiFloor - 1, ".2"), Release(kOrtApiFloor - 3),
                                 std::string("1.16.3"), std::string("0.9.0")}) {
    const std::string message = OrtRuntimeRefusal("opbridge 0.1.0", old.c_str());
    EXPECT_EQ(message, "opbridge 0.1.0 needs ONNX Runtime " + kFloor + " or newer (C API version " +
                           std::to_string(kOrtApiFloor) + "; tested from " + kFloor + " to " +
                           kOrtNewestTested + "), but this runtime is ONNX Runtime " + old +
                           "; install onnxruntime>=" + kFloor);
  }
}

TEST(OrtRuntimeVersion, LeavesAnUnreadableVersionToTheApiCheck) {
  // RegisterCustomOps then refuses when GetApi(kOrtApiFloor) gives nothing.
  EXPECT_EQ(OrtRuntimeRefusal("opbridge 0.1.0", "unknown"), "");
  EXPECT_EQ(OrtRuntimeRefusal("opbridge 0.1.0", nullptr), "");
  EXPECT_NE(OrtRefusalMessage("mylib 2.0 (opbridge 0.1.0)", "(unknown)")
                .find("mylib 2.0 (opbridge 0.1.0) needs ONNX Runtime " + kFloor + " or newer"),
            std::string::npos);
}

TEST(OrtRuntimeVersion, NewestTestedIsNotOlderThanTheFloor) {
  OrtRelease newest;
  ASSERT_TRUE(ParseOrtRelease(kOrtNewestTested, &newest));
  EXPECT_EQ(newest.major, 1);
  EXPECT_GE(newest.minor, kOrtApiFloor);
}

}  // namespace
}  // namespace opbridge
