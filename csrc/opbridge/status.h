// Framework-free error reporting shared by every kernel and every adapter.
#pragma once

#include <string>
#include <utility>

namespace opbridge {

// A kernel's outcome: ok, or a message that already names the operator, the
// argument, what was expected and what was given. Adapters turn it into
// TORCH_CHECK failures or Ort::Status; kernels never throw.
class Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(std::string message) { return Status(std::move(message)); }

  bool ok() const { return !failed_; }
  const std::string& message() const { return message_; }

 private:
  explicit Status(std::string message) : failed_(true), message_(std::move(message)) {}
  bool failed_ = false;
  std::string message_;
};

}  // namespace opbridge

#define OPBRIDGE_RETURN_IF_ERROR(expr)   \
  do {                                   \
    ::opbridge::Status _status = (expr); \
    if (!_status.ok()) return _status;   \
  } while (0)
