#include "core/simd.h"

#include <hwy/highway.h>
#include <hwy/targets.h>

#include <atomic>
#include <cstdint>

namespace opbridge {

namespace {

// Same compile options as the kernels, so HWY_TARGETS is the kernels' set.
int64_t UsableTargets() { return hwy::SupportedTargets() & HWY_TARGETS; }

// The target forced by SetSimdTarget, or 0.
std::atomic<int64_t> g_forced{0};

}  // namespace

std::vector<std::string> SimdTargets() {
  std::vector<std::string> names;
  // The real CPU, not a target forced by SetSimdTarget.
  hwy::SetSupportedTargetsForTest(0);
  const int64_t all = UsableTargets();
  hwy::SetSupportedTargetsForTest(g_forced.load());
  for (int64_t targets = all; targets != 0; targets &= targets - 1) {
    names.emplace_back(hwy::TargetName(targets & -targets));
  }
  return names;
}

std::string SimdTarget() {
  const int64_t usable = UsableTargets();
  return usable == 0 ? std::string("none") : std::string(hwy::TargetName(usable & -usable));
}

Status SetSimdTarget(const std::string& name) {
  g_forced = 0;
  hwy::SetSupportedTargetsForTest(0);
  if (name.empty()) return Status::Ok();
  std::string known;
  for (int64_t targets = UsableTargets(); targets != 0; targets &= targets - 1) {
    const int64_t target = targets & -targets;
    if (name == hwy::TargetName(target)) {
      g_forced = target;
      hwy::SetSupportedTargetsForTest(target);
      return Status::Ok();
    }
    known += (known.empty() ? "" : ", ") + std::string(hwy::TargetName(target));
  }
  return Status::Error("opbridge: unknown or unsupported SIMD target '" + name +
                       "'; this CPU and build have " + known);
}

}  // namespace opbridge
