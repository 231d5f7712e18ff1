// Operators whose shape rules disagree with their kernels, for the tests of
// the output guards (tests/sdk/test_faulty_ops.py). Each one is a bug a user
// could write; none is an example to follow.
#include <cstdint>
#include <cstring>
#include <vector>

#include "opbridge/checks.h"
#include "opbridge/spec.h"

namespace faulty {

using opbridge::KernelArgs;
using opbridge::Status;
using opbridge::TensorInfo;

namespace {

// Copies x into the first output as the kernel believes it is: x's dtype and
// x's element count, whatever the shape rule declared.
Status CopyX(const KernelArgs& args) {
  const TensorInfo& x = args.input_infos[0];
  const size_t size = x.dtype == "float64" ? 8 : 4;
  std::memcpy(args.outputs[0], args.inputs[0], static_cast<size_t>(opbridge::NumElements(x.shape)) * size);
  return Status::Ok();
}

// y: x's shape with the last dimension 1 (the kernel writes all of x).
Status InferShortShape(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs) {
  TensorInfo y = inputs[0];
  if (!y.shape.empty()) y.shape.back() = 1;
  *outputs = {y};
  return Status::Ok();
}

// y: always float32 (the kernel writes x's dtype).
Status InferFloat32(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs) {
  TensorInfo y = inputs[0];
  y.dtype = "float32";
  *outputs = {y};
  return Status::Ok();
}

// y: always float64 (the kernel writes x's dtype: half of a float32 x's).
Status InferFloat64(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs) {
  TensorInfo y = inputs[0];
  y.dtype = "float64";
  *outputs = {y};
  return Status::Ok();
}

Status InferSame(const std::vector<TensorInfo>& inputs, std::vector<TensorInfo>* outputs) {
  *outputs = {inputs[0]};
  return Status::Ok();
}

// The backward's grad_x: one element (the kernel writes one per element of x).
Status InferShortGradient(const std::vector<TensorInfo>& inputs, const std::vector<opbridge::AttrValue>&,
                          std::vector<TensorInfo>* outputs) {
  TensorInfo grad = inputs[1];
  grad.shape = {1};
  *outputs = {grad};
  return Status::Ok();
}

// Backward inputs: grad_y, x; writes grad_y (x's size) into grad_x.
Status CopyGradY(const KernelArgs& args) {
  const TensorInfo& x = args.input_infos[1];
  const size_t size = x.dtype == "float64" ? 8 : 4;
  std::memcpy(args.outputs[0], args.inputs[0], static_cast<size_t>(opbridge::NumElements(x.shape)) * size);
  return Status::Ok();
}

// Backward inputs: grad_y, x, gate; writes grad_x and never takes grad_gate.
Status ForgetsGate(const KernelArgs& args) {
  const TensorInfo& x = args.input_infos[1];
  const size_t size = x.dtype == "float64" ? 8 : 4;
  std::memcpy(args.outputs[0], args.inputs[0], static_cast<size_t>(opbridge::NumElements(x.shape)) * size);
  return Status::Ok();
}

}  // namespace

const opbridge::OpSpec kForgottenGradientSpec =
    opbridge::OpSpec::Builder("forgotten_gradient", "ForgottenGradient")
        .Doc("y = x; a backward kernel that never writes the gate's gradient.")
        .Inputs({opbridge::Input("x"), opbridge::Input("gate")})
        .Outputs({"y"})
        .Infer(InferSame)
        .Forward(CopyX)
        .Backward(ForgetsGate)
        .BackwardInputs({opbridge::GradOfOutput("grad_y", 0).Like(1), opbridge::SavedInput("x", 0),
                         opbridge::SavedInput("gate", 1)})
        .BackwardOutputs({opbridge::Gradient("grad_x").Like(1), opbridge::Gradient("grad_gate").Like(2)})
        .InputGradients({0, 1});

const opbridge::OpSpec kShortShapeSpec = opbridge::OpSpec::Builder("short_shape", "ShortShape")
                                             .Doc("A shape rule smaller than what the kernel writes.")
                                             .Inputs({opbridge::Input("x")})
                                             .Outputs({"y"})
                                             .Infer(InferShortShape)
                                             .Forward(CopyX);

const opbridge::OpSpec kNarrowDtypeSpec = opbridge::OpSpec::Builder("narrow_dtype", "NarrowDtype")
                                              .Doc("A shape rule giving float32 whatever the kernel writes.")
                                              .Inputs({opbridge::Input("x")})
                                              .Outputs({"y"})
                                              .Infer(InferFloat32)
                                              .Forward(CopyX);

const opbridge::OpSpec kWideDtypeSpec = opbridge::OpSpec::Builder("wide_dtype", "WideDtype")
                                            .Doc("A shape rule giving float64 whatever the kernel writes.")
                                            .Inputs({opbridge::Input("x")})
                                            .Outputs({"y"})
                                            .Infer(InferFloat64)
                                            .Forward(CopyX);

const opbridge::OpSpec kShortGradientSpec =
    opbridge::OpSpec::Builder("short_gradient", "ShortGradient")
        .Doc("A correct forward whose backward shape rule is smaller than what its kernel writes.")
        .Inputs({opbridge::Input("x")})
        .Outputs({"y"})
        .Infer(InferSame)
        .Forward(CopyX)
        .Backward(CopyGradY)
        .BackwardInputs({opbridge::GradOfOutput("grad_y", 0).Like(1), opbridge::SavedInput("x", 0)})
        .BackwardOutputs({opbridge::Gradient("grad_x")})
        .InferBackward(InferShortGradient)
        .InputGradients({0});

}  // namespace faulty

OPBRIDGE_REGISTER_SPEC(faulty::kShortShapeSpec)
OPBRIDGE_REGISTER_SPEC(faulty::kNarrowDtypeSpec)
OPBRIDGE_REGISTER_SPEC(faulty::kWideDtypeSpec)
OPBRIDGE_REGISTER_SPEC(faulty::kShortGradientSpec)
OPBRIDGE_REGISTER_SPEC(faulty::kForgottenGradientSpec)
