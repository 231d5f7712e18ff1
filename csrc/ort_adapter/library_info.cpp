// OpbridgeLibraryInfo and OpbridgeDomainVersion (library_info.h): what the
// library is, read from the same identity and specs that RegisterCustomOps
// registers, so a host can check a model against the library before it
// creates a session. Kept apart from op_library.cpp: nothing here touches
// ONNX Runtime.
#include "ort_adapter/library_info.h"

#include <cstdio>
#include <cstring>
#include <string>

#include "opbridge/cuda.h"
#include "opbridge/library.h"
#include "opbridge/spec.h"
#include "opbridge/version.h"

namespace opbridge {
namespace {

// A JSON string literal of `text` (names and versions are ASCII, but a
// user's domain is whatever the build was given).
std::string JsonString(const char* text) {
  std::string out = "\"";
  for (const char* c = text != nullptr ? text : ""; *c != '\0'; ++c) {
    const unsigned char byte = static_cast<unsigned char>(*c);
    if (byte == '"' || byte == '\\') {
      out += '\\';
      out += static_cast<char>(byte);
    } else if (byte < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\u%04x", byte);
      out += escaped;
    } else {
      out += static_cast<char>(byte);
    }
  }
  return out + "\"";
}

std::string BuildInfo() {
  const LibraryInfo& self = ThisLibrary();
  const std::string domain = JsonString(self.onnx_domain);
  std::string json = "{\"info_version\": 1, \"name\": " + JsonString(self.name) +
                     ", \"version\": " + JsonString(self.version) +
                     ", \"opbridge_version\": " + JsonString(kVersion) +
                     ", \"domains\": [{\"domain\": " + domain +
                     ", \"version\": " + std::to_string(self.domain_version) + "}], \"operators\": [";
  bool first = true;
  for (const OpSpec* spec : AllSpecs()) {
    json += first ? "" : ", ";
    first = false;
    json += "{\"name\": " + JsonString(spec->name) + ", \"domain\": " + domain +
            ", \"op_type\": " + JsonString(spec->onnx_type) +
            ", \"execution_providers\": [\"CPUExecutionProvider\"";
    // RegisterCustomOps adds the op for the CUDA execution provider too
    // when this build has its CUDA kernels.
    if (FindCudaKernels(*spec) != nullptr) json += ", \"CUDAExecutionProvider\"";
    json += "]}";
  }
  json += "], \"ort_api_floor\": " + std::to_string(kOrtApiFloor) +
          ", \"ort_newest_tested\": " + JsonString(kOrtNewestTested) + "}";
  return json;
}

}  // namespace
}  // namespace opbridge

extern "C" __attribute__((visibility("default"))) const char* OpbridgeLibraryInfo(void) {
  // Built on the first call. A failure to build it is answered with a fixed
  // text, never an exception across the C boundary (and the next call tries
  // again: a static whose initialisation threw is not initialised).
  static const char kFailed[] =
      "{\"info_version\": 1, \"error\": \"out of memory building the library info\"}";
  try {
    static const std::string info = opbridge::BuildInfo();
    return info.c_str();
  } catch (...) {
    return kFailed;
  }
}

extern "C" __attribute__((visibility("default"))) int64_t OpbridgeDomainVersion(const char* domain) {
  const opbridge::LibraryInfo& self = opbridge::ThisLibrary();
  if (domain == nullptr || std::strcmp(domain, self.onnx_domain) != 0) return -1;
  return self.domain_version;
}
