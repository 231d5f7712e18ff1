#include "opbridge/library.h"

#if !defined(OPBRIDGE_LIBRARY_NAME) || !defined(OPBRIDGE_TORCH_NAMESPACE) || \
    !defined(OPBRIDGE_ONNX_DOMAIN) || !defined(OPBRIDGE_DOMAIN_VERSION) ||   \
    !defined(OPBRIDGE_LIBRARY_VERSION)
#error "the build defines the library's identity (opbridge_add_operator_library in cmake/opbridge.cmake)"
#endif

namespace opbridge {

const LibraryInfo& ThisLibrary() {
  static const LibraryInfo info{OPBRIDGE_LIBRARY_NAME, OPBRIDGE_TORCH_NAMESPACE, OPBRIDGE_ONNX_DOMAIN,
                                OPBRIDGE_DOMAIN_VERSION, OPBRIDGE_LIBRARY_VERSION};
  return info;
}

}  // namespace opbridge
