/* What an opbridge ONNX Runtime custom-op library (lib<name>_ort.so) says
 * about itself, for a C or C++ host: exported beside RegisterCustomOps by
 * every library the SDK builds (opbridge's own and a user's).
 *
 * Neither function needs ONNX Runtime: a host may call them before it
 * registers the library, to check a model against it. Load the library by
 * path (dlopen, then dlsym with the names below) or link it (the
 * opbridge::ort_library target of find_package(opbridge)) and call them.
 */
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define OPBRIDGE_LIBRARY_INFO_SYMBOL "OpbridgeLibraryInfo"
#define OPBRIDGE_DOMAIN_VERSION_SYMBOL "OpbridgeDomainVersion"

/* The library as one JSON object, NUL-terminated, owned by the library and
 * valid while it is loaded; the same text on every call:
 *   {"info_version": 1, "name": "opbridge", "version": "0.9.0",
 *    "opbridge_version": "0.9.0",
 *    "domains": [{"domain": "opbridge", "version": 1}],
 *    "operators": [{"name": "rms_norm", "domain": "opbridge",
 *                   "op_type": "RmsNorm",
 *                   "execution_providers": ["CPUExecutionProvider"]}, ...],
 *    "ort_api_floor": 24, "ort_newest_tested": "1.32.0"}
 * "version" of a domain is the newest opset version of it the library
 * implements (its operators serve versions 1 to that one). Never NULL; an
 * allocation failure gives {"info_version": 1, "error": "..."}. Fields may
 * be added; "info_version" grows only if one changes meaning. */
typedef const char* (*OpbridgeLibraryInfoFn)(void);
const char* OpbridgeLibraryInfo(void);

/* The newest opset version of ONNX domain `domain` the library implements,
 * or -1 when it implements no such domain (or `domain` is NULL). A model
 * whose opset import of the domain, or whose "opbridge.domain_version.<domain>"
 * metadata, is newer than this needs a newer library. */
typedef int64_t (*OpbridgeDomainVersionFn)(const char* domain);
int64_t OpbridgeDomainVersion(const char* domain);

#ifdef __cplusplus
}
#endif
