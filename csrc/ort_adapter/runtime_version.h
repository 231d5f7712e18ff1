// Whether an ONNX Runtime release can host the custom-op library, decided from
// the version string it reports (OrtApiBase::GetVersionString). Kept free of
// ONNX Runtime's headers so that the C++ unit tests can check the decision
// and its message for releases that cannot be installed any more.
#pragma once

#include <cstdlib>
#include <string>

#include "opbridge/version.h"

namespace opbridge {

struct OrtRelease {
  long major = 0;
  long minor = 0;
};

// "1.17.3" -> {1, 17}; false for anything that does not start with
// "<major>.<minor>".
inline bool ParseOrtRelease(const char* text, OrtRelease* release) {
  if (text == nullptr) return false;
  char* end = nullptr;
  const long major = std::strtol(text, &end, 10);
  if (end == text || *end != '.') return false;
  const char* minor_text = end + 1;
  const long minor = std::strtol(minor_text, &end, 10);
  if (end == minor_text) return false;
  release->major = major;
  release->minor = minor;
  return true;
}

// The oldest supported release as users name it ("1.17").
inline std::string OrtFloorRelease() { return "1." + std::to_string(kOrtApiFloor); }

// opbridge's message refusing a runtime, naming it and the supported range.
inline std::string OrtRefusalMessage(const std::string& library, const std::string& runtime_version) {
  return library + " needs ONNX Runtime " + OrtFloorRelease() + " or newer (C API version " +
         std::to_string(kOrtApiFloor) + "; tested from " + OrtFloorRelease() + " to " + kOrtNewestTested +
         "), but this runtime is ONNX Runtime " + runtime_version +
         "; install onnxruntime>=" + OrtFloorRelease();
}

// The message refusing a runtime that reports this version, or "" when the
// version is the floor or newer. A version string that cannot be read is not
// refused here: RegisterCustomOps then relies on GetApi(kOrtApiFloor), which
// an older runtime answers with nullptr.
inline std::string OrtRuntimeRefusal(const std::string& library, const char* runtime_version) {
  OrtRelease release;
  if (!ParseOrtRelease(runtime_version, &release)) return "";
  if (release.major > 1 || (release.major == 1 && release.minor >= kOrtApiFloor)) return "";
  return OrtRefusalMessage(library, runtime_version);
}

}  // namespace opbridge
