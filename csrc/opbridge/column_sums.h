// Deterministic per-column sums over the rows of a [rows, cols] matrix, as
// weight and bias gradients need.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "opbridge/parallel.h"

namespace opbridge {

// The rows are cut into chunks by shape alone (never by thread count); each
// chunk accumulates its own partial sums in double, and the partials are
// added in chunk order. The totals are therefore the same whatever the
// host's parallelism. `sums` is how many independent sums are kept (e.g.
// weight and bias gradients).
class ChunkedColumnSums {
 public:
  ChunkedColumnSums(int64_t rows, int64_t cols, int sums)
      : rows_(rows),
        cols_(cols),
        chunk_rows_(std::max<int64_t>(RowGrain(cols), (rows + 63) / 64)),
        chunks_(rows > 0 ? (rows + chunk_rows_ - 1) / chunk_rows_ : 0),
        partials_(static_cast<size_t>(sums * chunks_ * cols), 0.0) {}

  int64_t chunks() const { return chunks_; }
  int64_t RowBegin(int64_t chunk) const { return chunk * chunk_rows_; }
  int64_t RowEnd(int64_t chunk) const { return std::min(rows_, (chunk + 1) * chunk_rows_); }

  // The cols partial sums of sum `which` for `chunk`, zero at the start.
  // Distinct chunks may be filled from different threads.
  double* Partial(int which, int64_t chunk) { return partials_.data() + (which * chunks_ + chunk) * cols_; }

  // out[j] = convert(total of sum `which` over every chunk), j < cols.
  template <typename T, typename Convert>
  void Total(int which, T* out, Convert convert) const {
    const double* base = partials_.data() + which * chunks_ * cols_;
    for (int64_t j = 0; j < cols_; ++j) {
      double total = 0.0;
      for (int64_t chunk = 0; chunk < chunks_; ++chunk) total += base[chunk * cols_ + j];
      out[j] = convert(total);
    }
  }

 private:
  int64_t rows_;
  int64_t cols_;
  int64_t chunk_rows_;
  int64_t chunks_;
  std::vector<double> partials_;
};

}  // namespace opbridge
