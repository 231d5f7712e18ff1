// The SIMD instruction sets the kernels were compiled for, and which one they
// dispatch to. Kernels pick the widest target the CPU supports at run time
// (Highway's dynamic dispatch); tests and benchmarks can force a narrower one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "opbridge/status.h"

namespace opbridge {

// Targets compiled into this build that this CPU can run, widest first
// (e.g. {"AVX3_DL", "AVX3", "AVX2", "SSE4", "SSSE3", "EMU128"}).
std::vector<std::string> SimdTargets();

// The target kernels dispatch to now.
std::string SimdTarget();

// The target chosen when none is forced: the best one, except that AMD Zen 3
// and Zen 4 (which split 512-bit vectors in two) get AVX2.
std::string SimdDefaultTarget();

// The targets kernels may dispatch to, as a Highway HWY_TARGETS-style mask;
// kernels turn it into a dispatch-table index (OPBRIDGE_DYNAMIC_DISPATCH).
int64_t SimdDispatchTargets();

// Restricts dispatch to the named target (one of SimdTargets()); an empty
// name restores the default. Applies to the kernels of the library it is
// called in (opbridge._C and libopbridge_ort.so each hold their own copy);
// Highway's own process-wide target state is left alone.
Status SetSimdTarget(const std::string& name);

// Outputs larger than this many bytes are written with non-temporal stores
// (they would only evict the inputs from cache): the last-level cache size.
int64_t StreamingStoreBytes();

}  // namespace opbridge
