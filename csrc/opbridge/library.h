// Who this operator library is: its PyTorch namespace, its ONNX domain and
// domain version, and its version. The build sets them for each library it
// makes (opbridge_add_operator_library in cmake/opbridge.cmake), so the same
// sources serve opbridge's own operators and a user's.
#pragma once

namespace opbridge {

struct LibraryInfo {
  const char* name;             // the library's name ("opbridge")
  const char* torch_namespace;  // torch.ops.<torch_namespace>.<op>
  const char* onnx_domain;      // the custom route's ONNX domain
  int domain_version;           // that domain's opset version (a released contract)
  const char* version;          // the library's own version, stamped into exported models
};

// The library these sources are compiled into.
const LibraryInfo& ThisLibrary();

}  // namespace opbridge
