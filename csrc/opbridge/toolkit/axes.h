// Loops over a contiguous tensor split at one axis, [outer, size, inner]:
// a [..., H, D] layout with a parameter per head (size H, inner D), or
// [N, C, HW] with one per channel. No SIMD here: the per-element work is the
// kernel's own (simd-inl.h's loads and stores, trig-inl.h's angles).
//
//   AxisSplit::Of(shape, axis)
//       the split: outer = product of the dimensions before `axis`, size =
//       the axis's, inner = product of those after it.
//   ForOuterRanges(split, parallel_for, body)
//       body(begin, end) over ranges of the outer index, about 32K elements
//       each, handed out dynamically (DynamicFor): the broadcast. Within a
//       range, element (o, k, i) is at (o * size + k) * inner + i and takes
//       the parameter k.
//   ForOuterChunksWithAxisSums(split, {grad_gate, ...}, parallel_for, body)
//       the deterministic sums over every axis but `axis` (a per-head or
//       per-channel parameter's gradient): the outer index is cut into
//       chunks by shape alone, body(begin, end, sums) adds its chunk's terms
//       into sums[k][0 .. size) (double, zero at the chunk's start; null
//       where outputs[k] is null), and the chunks' partials are added in
//       chunk order into outputs[k]. The totals are the same for any number
//       of threads.
//
// examples/fused_norm/csrc/gated_rope/kernel.cpp uses both (a per-head gate
// on [B, S, H, D], and its gradient summed over B, S and D).
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <vector>

#include "opbridge/dynamic_for.h"
#include "opbridge/half.h"
#include "opbridge/parallel.h"
#include "opbridge/spec.h"

namespace opbridge {
namespace toolkit {

// Most sums ForOuterChunksWithAxisSums keeps at once.
constexpr int kMaxAxisSums = 4;

// A contiguous tensor as [outer, size, inner] around one axis.
struct AxisSplit {
  int64_t outer = 1;
  int64_t size = 1;
  int64_t inner = 1;

  int64_t elements() const { return outer * size * inner; }

  // The split of `shape` at `axis` (negative: from the end). The caller has
  // checked the axis against the rank (a rank check in the shape rule); an
  // axis outside it splits nothing off: size 1.
  static AxisSplit Of(const Shape& shape, int axis) {
    const int rank = static_cast<int>(shape.size());
    if (axis < 0) axis += rank;
    AxisSplit split;
    for (int k = 0; k < rank; ++k) {
      const int64_t n = shape[static_cast<size_t>(k)].Size();
      if (k < axis) {
        split.outer *= n;
      } else if (k == axis) {
        split.size = n;
      } else {
        split.inner *= n;
      }
    }
    return split;
  }
};

// body(begin, end) over ranges of [0, split.outer) of about 32K elements,
// handed out dynamically to the host's threads; nothing for an empty tensor.
template <typename Body>
void ForOuterRanges(const AxisSplit& split, const ParallelFor& parallel_for, const Body& body) {
  if (split.elements() <= 0) return;
  DynamicFor(parallel_for, split.outer, RowGrain(split.size * split.inner),
             [&](int64_t begin, int64_t end) { body(begin, end); });
}

// The outer index cut into chunks by shape alone; for each chunk, in
// parallel, body(begin, end, double* const* sums) adds its terms into
// sums[k][0 .. split.size) (null where outputs[k] is null); the partials are
// then added in chunk order, in double, into outputs[k] (split.size values
// each, rounded to T). An empty tensor zero-fills the wanted outputs.
template <typename T, typename Body>
void ForOuterChunksWithAxisSums(const AxisSplit& split, std::initializer_list<T*> outputs,
                                const ParallelFor& parallel_for, const Body& body) {
  static_assert(!std::is_const_v<T>, "axis-sum outputs are written");
  const int count = std::min(static_cast<int>(outputs.size()), kMaxAxisSums);
  T* const* out = outputs.begin();
  const int64_t size = std::max<int64_t>(split.size, 0);
  if (split.elements() <= 0) {
    for (int k = 0; k < count; ++k) {
      if (out[k] != nullptr) std::fill(out[k], out[k] + size, FromFloat<T>(0.0f));
    }
    return;
  }
  // About 32K elements a chunk, and at most 64 chunks' partials per sum
  // beyond that (a long outer axis makes longer chunks, not more memory).
  const int64_t chunk = std::max<int64_t>(RowGrain(split.size * split.inner), (split.outer + 63) / 64);
  const int64_t chunks = (split.outer + chunk - 1) / chunk;
  std::vector<double> partials(static_cast<size_t>(count * chunks * size), 0.0);
  DynamicFor(parallel_for, chunks, 1, [&](int64_t first, int64_t last) {
    for (int64_t c = first; c < last; ++c) {
      double* sums[kMaxAxisSums] = {};
      for (int k = 0; k < count; ++k) {
        if (out[k] != nullptr) sums[k] = partials.data() + (k * chunks + c) * size;
      }
      body(c * chunk, std::min(split.outer, (c + 1) * chunk), static_cast<double* const*>(sums));
    }
  });
  for (int k = 0; k < count; ++k) {
    if (out[k] == nullptr) continue;
    const double* base = partials.data() + k * chunks * size;
    for (int64_t j = 0; j < size; ++j) {
      double total = 0.0;
      for (int64_t c = 0; c < chunks; ++c) total += base[c * size + j];
      out[k][j] = FromDouble<T>(total);
    }
  }
}

}  // namespace toolkit
}  // namespace opbridge
