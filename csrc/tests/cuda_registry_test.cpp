// The CUDA kernel registry (opbridge/cuda.h): framework-free, so it is tested
// in every build; a CPU-only build registers no built-in CUDA kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "opbridge/cuda.h"

namespace opbridge {
namespace {

Status Forward(const KernelArgs&) { return Status::Ok(); }
Status Backward(const KernelArgs&) { return Status::Error("backward"); }

const OpSpec kEarlySpec{"cuda_registry_early", "CudaRegistryEarly", "", {}, {}, {"y"}, nullptr, Forward};
const OpSpec kLateSpec{"cuda_registry_late", "CudaRegistryLate", "", {}, {}, {"y"}, nullptr, Forward};
const OpSpec kAbsentSpec{"cuda_registry_absent", "CudaRegistryAbsent", "", {}, {}, {"y"}, nullptr, Forward};

OPBRIDGE_REGISTER_CUDA_KERNELS(kEarlySpec, Forward, Backward)

std::vector<const OpSpec*> g_seen;
void Record(const OpSpec& spec, const CudaKernels&) { g_seen.push_back(&spec); }

TEST(CudaRegistry, FindsRegisteredKernels) {
  const CudaKernels* kernels = FindCudaKernels(kEarlySpec);
  ASSERT_NE(kernels, nullptr);
  EXPECT_EQ(kernels->forward, &Forward);
  EXPECT_EQ(kernels->backward, &Backward);
  EXPECT_EQ(FindCudaKernels(kAbsentSpec), nullptr);
}

TEST(CudaRegistry, ListenersSeeEarlierAndLaterRegistrations) {
  OnEachCudaKernels(&Record);
  EXPECT_NE(std::find(g_seen.begin(), g_seen.end(), &kEarlySpec), g_seen.end());
  const CudaRegistrar late(kLateSpec, Forward, nullptr);
  EXPECT_EQ(g_seen.back(), &kLateSpec);
  ASSERT_NE(FindCudaKernels(kLateSpec), nullptr);
  EXPECT_EQ(FindCudaKernels(kLateSpec)->backward, nullptr);
  const std::vector<const OpSpec*> specs = CudaSpecs();
  EXPECT_NE(std::find(specs.begin(), specs.end(), &kLateSpec), specs.end());
}

#ifndef OPBRIDGE_WITH_CUDA
TEST(CudaRegistry, CpuBuildHasNoBuiltInCudaKernels) {
  for (const OpSpec* spec : AllSpecs()) EXPECT_EQ(FindCudaKernels(*spec), nullptr) << spec->name;
}
#endif

}  // namespace
}  // namespace opbridge
