// Opt-in validation inside the adapters, switched on by OPBRIDGE_CHECK=1.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "opbridge/checks.h"
#include "opbridge/dtype.h"
#include "opbridge/spec.h"
#include "opbridge/status.h"

namespace opbridge {

// Whether OPBRIDGE_CHECK=1 was set when the library was loaded. Read once,
// so the default path costs one predictable branch per call.
bool RuntimeChecksEnabled();

// Checks one tensor argument: a buffer of its shape (non-null unless empty,
// no negative dimension) and, for float32, float64, float16 and bfloat16,
// no NaN or Inf. Other dtypes (uint8, ...) are only checked for the buffer.
// The message names the op, the argument and the first offending element.
// Framework-free, for any argument a kernel receives: the forward's inputs
// (through ValidateKernelArgs) and a backward's arguments (grad_y, saved
// tensors), which an adapter checks one by one.
Status CheckFiniteTensor(const OpSpec& spec, const char* argument, const TensorInfo& info, const void* data);

// Checks one attribute value: no NaN in a float attribute or in any element
// of a float list (an infinite value passes: an infinite clamp bound is
// meaningful). Int, bool and string attributes always pass. `argument` is
// the attribute's name, as in the spec or the backward's schema.
Status CheckAttributeValue(const OpSpec& spec, const char* argument, const AttrValue& value);

// Checks what a kernel is about to receive: there are as many outputs as the
// spec has, every present input passes CheckFiniteTensor, every attribute
// (in spec order) passes CheckAttributeValue, and every output has a buffer
// of its shape.
Status ValidateKernelArgs(const OpSpec& spec, const KernelArgs& args);

// ---------------------------------------------------------------------------
// Output guards: a kernel's output placed between guard bytes, the output's
// own bytes and the guards set to a known pattern before the kernel runs and
// compared after. A changed guard byte is a write outside the output, an
// unchanged end of the output a write that stopped short: a shape rule that
// disagrees with its kernel, reported by CheckOutputGuards instead of
// corrupting memory. The buffer: kOutputHeadGuard bytes, the output, then a
// tail guard of OutputTailGuard(inputs) bytes.

// Keeps the output 64-byte aligned.
constexpr int64_t kOutputHeadGuard = 64;

// One float64 per element of the kernel's inputs, at least 4 KiB (a multiple
// of 64): a kernel that sizes its writes by its inputs, whatever dtype it
// writes, stays inside it.
int64_t OutputTailGuard(const std::vector<TensorInfo>& inputs);

// Writes the pattern into buffer[0, size).
void FillGuardPattern(unsigned char* buffer, int64_t size);

// Checks a guarded buffer (as above) of output `output` of `info` after the
// kernel. `op` names the operator in the message; `input_names` / `inputs`
// are the kernel's inputs, named in the message when one of them has the
// size the kernel wrote. The error ends with " (output guards)".
Status CheckOutputGuards(const std::string& op, const char* output, const TensorInfo& info,
                         const unsigned char* buffer, int64_t tail_guard,
                         const std::vector<const char*>& input_names, const std::vector<TensorInfo>& inputs);

// Guarded outputs in host memory, for an adapter whose kernel writes into
// buffers it then copies out (ONNX Runtime's CPU kernels under OPBRIDGE_CHECK).
class HostOutputGuards {
 public:
  HostOutputGuards(std::string op, std::vector<const char*> input_names, std::vector<TensorInfo> inputs);

  // A guarded buffer for output `name` of `info`: the pointer the kernel gets.
  void* Add(const char* name, const TensorInfo& info);
  // CheckOutputGuards for every output added, in order.
  Status Check() const;
  // Output k's bytes (after Check), to copy to where the runtime wants them.
  const void* Data(size_t k) const { return outputs_[k].bytes.data() + kOutputHeadGuard; }
  int64_t Size(size_t k) const { return outputs_[k].size; }

 private:
  struct Output {
    const char* name;
    TensorInfo info;
    int64_t size;
    std::vector<unsigned char> bytes;
  };
  std::string op_;
  std::vector<const char*> input_names_;
  std::vector<TensorInfo> inputs_;
  int64_t tail_;
  std::vector<Output> outputs_;
};

// A CPU kernel's call in an adapter whose outputs are the runtime's host
// buffers (ONNX Runtime, OpenVINO, ExecuTorch), `args` complete with them.
// Under OPBRIDGE_CHECK: ValidateKernelArgs, then the kernel writing into
// HostOutputGuards' buffers in place of args.outputs, the guards checked
// (`op` names the operator in their messages) and the outputs copied to
// args.outputs; otherwise launch(args) alone. `label()` gives `op`, built
// only under OPBRIDGE_CHECK.
Status LaunchCheckedOnHost(const OpSpec& spec, const std::string& op, const KernelArgs& args,
                           const std::function<Status(const KernelArgs&)>& launch);

template <typename Launch, typename Label>
Status LaunchOnHost(const OpSpec& spec, const KernelArgs& args, Launch&& launch, Label&& label) {
  if (!RuntimeChecksEnabled()) return LaunchChecked(spec, launch, args);
  return LaunchCheckedOnHost(spec, label(), args, launch);
}

// A string of the user's (a node name, an attribute's text) in single quotes,
// safe inside a message: a quote or backslash is escaped with a backslash and
// every byte outside printable ASCII is written \xNN, so that no byte of it
// (a NUL above all, which a C API would end the message at) can cut or garble
// the message around it.
std::string QuotedForMessage(const std::string& text);

// `message` with every control byte (below 0x20, and 0x7F) written \xNN: a
// last guard for a message that embeds user text unescaped before it goes
// through a C string.
std::string WithoutControlBytes(const std::string& message);

}  // namespace opbridge
