#include "opbridge/simd.h"

#include <cpuid.h>
#include <hwy/highway.h>
#include <hwy/targets.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>

namespace opbridge {

namespace {

// Compiled with the kernels' options, so HWY_TARGETS is the kernels' set.
int64_t UsableTargets() { return hwy::SupportedTargets() & HWY_TARGETS; }

// AMD family 19h (Zen 3, Zen 4) executes 512-bit vectors as two 256-bit
// halves; on these memory-bound kernels AVX3 measured about 20% slower than
// AVX2 there (benchmarks/README.md), so AVX2 is the default on those CPUs.
bool Prefers256BitVectors() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return false;
  char vendor[13] = {};
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  if (std::strcmp(vendor, "AuthenticAMD") != 0) return false;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  unsigned family = (eax >> 8) & 0xF;
  if (family == 0xF) family += (eax >> 20) & 0xFF;
  return family == 0x19;
#else
  return false;
#endif
}

int64_t DefaultTargets() {
  const int64_t usable = UsableTargets();
#if HWY_ARCH_X86
  const int64_t narrower = usable & ~(HWY_AVX3 | HWY_AVX3_DL);
  if (narrower != 0 && Prefers256BitVectors()) return narrower;
#endif
  return usable;
}

// The targets kernels may dispatch to (HWY_TARGETS format), or 0 before the
// first use. Kept here rather than in Highway's process-wide state, so other
// Highway users in the process are unaffected.
std::atomic<int64_t> g_targets{0};

std::string NameOf(int64_t targets) {
  return targets == 0 ? std::string("none") : std::string(hwy::TargetName(targets & -targets));
}

}  // namespace

std::vector<std::string> SimdTargets() {
  std::vector<std::string> names;
  for (int64_t targets = UsableTargets(); targets != 0; targets &= targets - 1) {
    names.emplace_back(hwy::TargetName(targets & -targets));
  }
  return names;
}

int64_t SimdDispatchTargets() {
  int64_t targets = g_targets.load(std::memory_order_relaxed);
  if (targets == 0) {
    targets = DefaultTargets();
    g_targets.store(targets, std::memory_order_relaxed);
  }
  return targets;
}

std::string SimdTarget() { return NameOf(SimdDispatchTargets()); }

std::string SimdDefaultTarget() { return NameOf(DefaultTargets()); }

Status SetSimdTarget(const std::string& name) {
  if (name.empty()) {
    g_targets.store(DefaultTargets());
    return Status::Ok();
  }
  std::string known;
  for (int64_t targets = UsableTargets(); targets != 0; targets &= targets - 1) {
    const int64_t target = targets & -targets;
    if (name == hwy::TargetName(target)) {
      g_targets.store(target);
      return Status::Ok();
    }
    known += (known.empty() ? "" : ", ") + std::string(hwy::TargetName(target));
  }
  return Status::Error("opbridge: unknown or unsupported SIMD target '" + name +
                       "'; this CPU and build have " + known);
}

int64_t StreamingStoreBytes() {
  static const int64_t bytes = [] {
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc <= 0) llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return llc > 0 ? static_cast<int64_t>(llc) : int64_t{32} << 20;
  }();
  return bytes;
}

}  // namespace opbridge
