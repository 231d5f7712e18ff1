// Rows of a table gathered by integer index: an embedding lookup, a cos/sin
// cache read at token positions. No SIMD here: a row is a contiguous copy.
//
//   CheckIndices(spec, "positions", index, count, limit)
//       Ok when every index is in [0, limit); else an error naming the op,
//       the argument, the first index outside and where it is. Call it
//       before gathering: an index from a model's input is untrusted.
//   GatherRows(table, cols, index, count, out, parallel_for)
//       out[n, :] = table[index[n], :] for n < count, rows of cols values,
//       int64 or int32 indices, in ranges of about 32K elements.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "opbridge/checks.h"
#include "opbridge/parallel.h"
#include "opbridge/spec.h"
#include "opbridge/status.h"

namespace opbridge {
namespace toolkit {

template <typename Index>
Status CheckIndices(const OpSpec& spec, const char* argument, const Index* index, int64_t count,
                    int64_t limit) {
  for (int64_t n = 0; n < count; ++n) {
    const int64_t value = static_cast<int64_t>(index[n]);
    if (value < 0 || value >= limit) {
      return ArgError(spec, argument,
                      "holds " + std::to_string(value) + " at flat position " + std::to_string(n) +
                          ", outside [0, " + std::to_string(limit) + ")");
    }
  }
  return Status::Ok();
}

// Indices already checked (CheckIndices): an index outside the table reads
// outside it.
template <typename T, typename Index>
void GatherRows(const T* table, int64_t cols, const Index* index, int64_t count, T* out,
                const ParallelFor& parallel_for) {
  if (count <= 0 || cols <= 0) return;
  const size_t row_bytes = static_cast<size_t>(cols) * sizeof(T);
  parallel_for(count, RowGrain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      std::memcpy(out + n * cols, table + static_cast<int64_t>(index[n]) * cols, row_bytes);
    }
  });
}

}  // namespace toolkit
}  // namespace opbridge
