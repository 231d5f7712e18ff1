// Dynamic scheduling on top of a host's parallel-for.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "opbridge/parallel.h"

namespace opbridge {

// Calls body(begin, end) over disjoint ranges of about `grain` covering
// [0, n), handed out one at a time from a shared counter to whichever thread
// of the host's parallel-for asks next. Host pools split statically (OpenMP
// in PyTorch) or in large batches; on a loaded machine a thread that loses
// its core then holds up the whole call. Here it simply takes fewer ranges.
// Which rows a range holds depends only on n and grain, never on threads.
inline void DynamicFor(const ParallelFor& parallel_for, int64_t n, int64_t grain, const RangeBody& body) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t tasks = (n + grain - 1) / grain;
  if (tasks == 1) {
    // Nothing to balance: the host may still split it finer if it wants.
    parallel_for(n, grain, body);
    return;
  }
  std::atomic<int64_t> next{0};
  // More workers than any host has threads; each drains the shared queue.
  const int64_t workers = std::min<int64_t>(tasks, 256);
  parallel_for(workers, 1, [&](int64_t, int64_t) {
    for (int64_t task = next.fetch_add(1); task < tasks; task = next.fetch_add(1)) {
      body(task * grain, std::min(n, (task + 1) * grain));
    }
  });
}

}  // namespace opbridge
