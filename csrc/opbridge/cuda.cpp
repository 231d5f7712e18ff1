#include "opbridge/cuda.h"

#include <memory>
#include <utility>

namespace opbridge {
namespace {

struct Entry {
  const OpSpec* spec;
  CudaKernels kernels;
};

std::vector<std::unique_ptr<Entry>>& Entries() {
  static std::vector<std::unique_ptr<Entry>> entries;
  return entries;
}

std::vector<CudaListener>& Listeners() {
  static std::vector<CudaListener> listeners;
  return listeners;
}

}  // namespace

CudaRegistrar::CudaRegistrar(const OpSpec& spec, LaunchFn forward, LaunchFn backward) {
  Entries().push_back(std::make_unique<Entry>(Entry{&spec, CudaKernels{forward, backward}}));
  for (CudaListener listener : Listeners()) listener(spec, Entries().back()->kernels);
}

const CudaKernels* FindCudaKernels(const OpSpec& spec) {
  for (const auto& entry : Entries()) {
    if (entry->spec == &spec) return &entry->kernels;
  }
  return nullptr;
}

std::vector<const OpSpec*> CudaSpecs() {
  std::vector<const OpSpec*> specs;
  for (const auto& entry : Entries()) specs.push_back(entry->spec);
  return specs;
}

void OnEachCudaKernels(CudaListener listener) {
  Listeners().push_back(listener);
  for (const auto& entry : Entries()) listener(*entry->spec, entry->kernels);
}

}  // namespace opbridge
