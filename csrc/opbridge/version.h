// The library version, stamped into every exported model as opbridge.version,
// and the ONNX Runtime releases its custom-op library supports.
#pragma once

#ifndef OPBRIDGE_VERSION
#error "OPBRIDGE_VERSION must be defined by the build"
#endif

namespace opbridge {
inline constexpr const char* kVersion = OPBRIDGE_VERSION;

// The oldest ONNX Runtime release the custom-op library runs on: 1.24, whose
// C API version is 24 (release 1.N has C API version N). Each older release
// lacks something every opbridge operator needs:
// - before 1.17 there is no custom-op type and shape inference
//   (OrtCustomOp::InferOutputShapeFn, OrtShapeInferContext, ReadOpAttr), no
//   intra-op pool for kernels (KernelContext_ParallelFor) and no domain
//   version range (GetStartVersion/GetEndVersion);
// - 1.17 to 1.21 refuse to register an op whose outputs are required and of
//   undefined type when it has more than one input of undefined type ("There
//   must be one (and only one) dynamic typed input"): every op but
//   scaled_clamp;
// - 1.17 to 1.23 crash (a null dereference in OrtShapeInferContext) loading a
//   node with an absent optional input, such as rms_norm without bias.
// The library asks for this API version, never the headers' newer one, so
// one build loads on every release from the floor up; RegisterCustomOps
// refuses an older runtime by name. Python reads both constants from the
// built module (opbridge._C.ORT_API_FLOOR / ORT_NEWEST_TESTED); the range
// check (scripts/check_ort_range.py, ort-range.txt) runs the floor, the
// newest, and the release below the floor.
inline constexpr int kOrtApiFloor = 24;
// The newest ONNX Runtime release the range check runs.
inline constexpr const char* kOrtNewestTested = "1.32.0";
}  // namespace opbridge
