// The SIMD instruction sets the kernels were compiled for, and which one they
// dispatch to. Kernels pick the widest target the CPU supports at run time
// (Highway's dynamic dispatch); tests and benchmarks can force a narrower one.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace opbridge {

// Targets compiled into this build that this CPU can run, best first
// (e.g. {"AVX3_DL", "AVX3", "AVX2", "SSE4", "SSSE3", "EMU128"}).
std::vector<std::string> SimdTargets();

// The target kernels dispatch to now.
std::string SimdTarget();

// Restricts dispatch to the named target (one of SimdTargets()); an empty
// name restores the default, the best target. Process-wide.
Status SetSimdTarget(const std::string& name);

}  // namespace opbridge
