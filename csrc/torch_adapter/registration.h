// What the PyTorch library's entry points (torch_library.cpp: the C call for
// C++ hosts, the table for the extension module) ask of the PyTorch adapter,
// with no torch types: registering the library's operators (for Python, when
// opbridge.load_library has checked that nothing of them is taken), and the
// output guards.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace opbridge::torch_adapter {

// Registers every spec of this library with PyTorch (the op, its out= form
// and its backward, with their kernels; CUDA kernels in a CUDA build).
// Nothing happens when the library is loaded: opbridge.load_library calls
// this after its checks, a C++ host through opbridge_register_torch_operators. All or nothing: when PyTorch
// refuses one registration (an op of the same name exists), every registration made so far is undone and the
// error is raised. A second call does nothing.
void RegisterOperators();
bool OperatorsRegistered();

// The operators (and overloads: "ns::op.out") this library would register
// that PyTorch already knows; empty once this library has registered them.
std::vector<std::string> OperatorsTakenElsewhere();

// Output guards: every kernel output of this library (forward, out= form and
// backward) is allocated between guard bytes that are checked after the
// kernel, and the kernel call fails naming the op and the output when the
// kernel wrote outside the output or left its end unwritten (a shape rule
// that disagrees with the kernel). On under OPBRIDGE_CHECK=1, and while
// switched on here (opbridge.sdk.testing does, for its checks).
void SetOutputGuards(bool enabled);
bool OutputGuardsEnabled();

// The all-or-nothing registration of RegisterOperators, over an adapter's
// registration object (torch::Library; the stable ABI's StableLibrary),
// whose destructor undoes what it registered.
template <typename Library>
class Registrations {
 public:
  // Runs register_all(), which makes its registration objects with New,
  // unless a call has succeeded before. When it throws, the objects it made
  // are destroyed (undoing their registrations) and the exception goes on;
  // when it returns, they are kept as long as the library is loaded.
  template <typename RegisterAll>
  void RegisterOnce(RegisterAll&& register_all) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (registered_) return;
    std::vector<std::unique_ptr<Library>> made;
    making_ = &made;
    try {
      register_all();
    } catch (...) {
      // `made` unregisters what was registered on the way out.
      making_ = nullptr;
      throw;
    }
    making_ = nullptr;
    for (auto& library : made) kept_.push_back(std::move(library));
    registered_ = true;
  }

  // A new registration object, made from `args` and kept with the others of
  // the running RegisterOnce; nullptr (and nothing made) outside it.
  template <typename... Args>
  Library* New(Args&&... args) {
    if (making_ == nullptr) return nullptr;
    making_->push_back(std::make_unique<Library>(std::forward<Args>(args)...));
    return making_->back().get();
  }

  bool Registered() {
    const std::lock_guard<std::mutex> lock(mutex_);
    return registered_;
  }

  // Runs f() under RegisterOnce's lock unless a RegisterOnce has succeeded.
  template <typename F>
  void UnlessRegistered(F&& f) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!registered_) f();
  }

 private:
  std::mutex mutex_;
  std::vector<std::unique_ptr<Library>>* making_ = nullptr;
  std::vector<std::unique_ptr<Library>> kept_;
  bool registered_ = false;
};

}  // namespace opbridge::torch_adapter
