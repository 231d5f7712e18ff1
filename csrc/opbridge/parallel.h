// The parallel-for a host runtime injects into a kernel.
#pragma once

#include <cstdint>
#include <functional>

namespace opbridge {

// Calls body(begin, end) over disjoint ranges covering [0, n). Ranges are at
// least `grain` long where possible. Kernels never start threads themselves:
// PyTorch hands in at::parallel_for, ONNX Runtime its session intra-op pool.
using RangeBody = std::function<void(int64_t begin, int64_t end)>;
using ParallelFor = std::function<void(int64_t n, int64_t grain, const RangeBody& body)>;

// Runs everything on the calling thread; used by the C++ tests.
inline void SerialFor(int64_t n, int64_t /*grain*/, const RangeBody& body) {
  if (n > 0) body(0, n);
}

// Rows per task so that each task touches roughly `target_elements`.
inline int64_t RowGrain(int64_t cols, int64_t target_elements = 32768) {
  if (cols <= 0) return 1;
  int64_t grain = target_elements / cols;
  return grain < 1 ? 1 : grain;
}

// A ParallelFor on a pool that runs numbered tasks (ONNX Runtime's and
// OpenVINO's): [0, n) in ceil(n / grain) ranges of `grain` elements (grain
// taken as at least 1), task k the range from k * grain. One range runs on
// the calling thread; otherwise run_tasks(tasks, task_body) runs
// task_body(k) for every k in [0, tasks) and returns whether it could (false:
// the ranges run serially on the calling thread instead).
template <typename RunTasks>
void ForGrainTasks(int64_t n, int64_t grain, const RangeBody& body, RunTasks&& run_tasks) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  const int64_t tasks = (n + grain - 1) / grain;
  const auto task_body = [&](int64_t task) {
    const int64_t begin = task * grain;
    body(begin, n - begin < grain ? n : begin + grain);
  };
  if (tasks == 1 || !run_tasks(tasks, task_body)) body(0, n);
}

}  // namespace opbridge
