// The host side of the row-wise reduce-then-map skeleton (the per-target
// side is opbridge/toolkit/rows-inl.h): the tensors a row kernel sees, the
// parallel loops over rows, and the dispatch of a row kernel compiled once
// per SIMD target.
//
// A row kernel handles a [rows, cols] contiguous problem row by row: it
// reduces each row to a few statistics (sum x^2; sum x and sum x^2; sums of
// gradient terms), then maps every element of the row given them. The
// kernel's rows are the unit of parallel work:
//
//   ForRowRanges(rows, cols, parallel_for, body)
//       body(RowRange) over ranges of rows, handed out dynamically
//       (DynamicFor) with about 32K elements each: the forward.
//   ForRowChunksWithColumnSums(rows, cols, {grad_weight, grad_bias}, parallel_for, body)
//       body(RowRange) over fixed chunks of rows (ChunkedColumnSums), each
//       chunk with its own double partial sums per column, added in chunk
//       order into the outputs afterwards: per-column gradients (weight,
//       bias) that are the same for any thread count.
//
// The per-target body (rows-inl.h) gets the tensors as RowTensors<T>; a
// kernel compiled per target is declared with OPBRIDGE_ROWS_ENTRY_POINTS
// (per target) and OPBRIDGE_ROWS_EXPORT (once), which give one function
// template Name<T>(const RowTensors<T>&, const RowRange&) that dispatches to
// the CPU's best target (opbridge/simd.h) for T = float, double, Float16 and
// BFloat16. opbridge/toolkit/rows-inl.h's header shows a whole kernel.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "opbridge/checks.h"
#include "opbridge/column_sums.h"
#include "opbridge/dynamic_for.h"
#include "opbridge/half.h"
#include "opbridge/parallel.h"
#include "opbridge/simd.h"
#include "opbridge/spec.h"
#include "opbridge/status.h"

namespace opbridge {
namespace toolkit {

// Capacities of RowTensors and RowRange.
constexpr int kMaxRowTensors = 4;
constexpr int kMaxColumnSums = 4;

// The tensors of a row kernel as storage type T (float, double, Float16,
// BFloat16). Row tensors are [rows, cols] contiguous: row r of input k starts
// at in[k] + r * cols. Column tensors are [cols] vectors shared by every row
// (weight, bias); null where absent. The meaning of each slot is the
// kernel's own.
template <typename T>
struct RowTensors {
  using Storage = T;                      // for a generic lambda: typename std::decay_t<decltype(t)>::Storage
  const T* in[kMaxRowTensors] = {};       // [rows, cols] inputs
  T* out[kMaxRowTensors] = {};            // [rows, cols] outputs
  const T* columns[kMaxRowTensors] = {};  // [cols] inputs
  const T* per_row_in[kMaxRowTensors] = {};  // [rows] inputs: one value per row (a saved statistic)
  T* per_row_out[kMaxRowTensors] = {};       // [rows] outputs: one value per row (a logsumexp)
  int64_t cols = 0;
  double params[kMaxRowTensors] = {};  // scalars (eps, ...)
  bool stream = false;                 // outputs written with non-temporal stores (RowsStreamOutput)
};

// Rows [begin, end) of a row kernel, and for ForRowChunksWithColumnSums the
// chunk's double partial sums per column: column_sums[k][j] for column j of
// sum k, zero at the start of the chunk, null where that sum is not wanted.
struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
  double* column_sums[kMaxColumnSums] = {};
};

// eps (or any scalar added in the compute type) as a kernel over T sees it:
// rounded to ComputeType<T> (16-bit inputs compute in float32, so a float16
// eps of 1e-6 is not 0).
template <typename T>
double RowsComputeScalar(double value) {
  return static_cast<double>(static_cast<ComputeType<T>>(value));
}

// Whether outputs of `elements` values of T in all are written with
// non-temporal stores: when they do not fit in the last-level cache, where
// they would only evict the inputs.
template <typename T>
bool RowsStreamOutput(int64_t elements) {
  return elements * static_cast<int64_t>(sizeof(T)) > StreamingStoreBytes();
}

// body(RowRange{begin, end}) over ranges covering [0, rows), of about 32K
// elements each, handed out dynamically to the host's threads. Nothing is
// done without rows; rows of no columns are one range, on the calling
// thread (their per-row outputs are still written: the logsumexp of no
// values is -inf).
template <typename Body>
void ForRowRanges(int64_t rows, int64_t cols, const ParallelFor& parallel_for, const Body& body) {
  if (rows <= 0) return;
  if (cols <= 0) {
    RowRange range;
    range.end = rows;
    body(range);
    return;
  }
  DynamicFor(parallel_for, rows, RowGrain(cols), [&](int64_t begin, int64_t end) {
    RowRange range;
    range.begin = begin;
    range.end = end;
    body(range);
  });
}

// The rows cut into chunks by shape alone (ChunkedColumnSums); for each
// chunk, in parallel, body(RowRange) handles its rows and adds per-column
// terms into range.column_sums[k] (null where outputs[k] is null: not
// wanted). The partials are then added in chunk order, in double, into
// outputs[k] (cols elements each, rounded to T), so results do not depend on
// the thread count. No rows: the wanted outputs are zero-filled; no
// columns: nothing is done.
template <typename T, typename Body>
void ForRowChunksWithColumnSums(int64_t rows, int64_t cols, std::initializer_list<T*> outputs,
                                const ParallelFor& parallel_for, const Body& body) {
  static_assert(!std::is_const_v<T>, "column-sum outputs are written");
  if (cols <= 0) return;
  const int count = static_cast<int>(outputs.size());
  T* const* out = outputs.begin();
  if (rows <= 0) {
    for (int k = 0; k < count; ++k) {
      if (out[k] != nullptr) std::fill(out[k], out[k] + cols, FromFloat<T>(0.0f));
    }
    return;
  }
  int slot[kMaxColumnSums] = {};
  int wanted = 0;
  for (int k = 0; k < count && k < kMaxColumnSums; ++k) slot[k] = out[k] != nullptr ? wanted++ : -1;
  ChunkedColumnSums sums(rows, cols, wanted);
  ChunkedColumnSums* partials = &sums;
  DynamicFor(parallel_for, sums.chunks(), 1, [&](int64_t chunk_begin, int64_t chunk_end) {
    for (int64_t chunk = chunk_begin; chunk < chunk_end; ++chunk) {
      RowRange range;
      range.begin = partials->RowBegin(chunk);
      range.end = partials->RowEnd(chunk);
      for (int k = 0; k < count && k < kMaxColumnSums; ++k) {
        range.column_sums[k] = slot[k] >= 0 ? partials->Partial(slot[k], chunk) : nullptr;
      }
      body(range);
    }
  });
  for (int k = 0; k < count && k < kMaxColumnSums; ++k) {
    if (slot[k] >= 0) sums.Total(slot[k], out[k], FromDouble<T>);
  }
}

// A row kernel's tensors taken from an op's KernelArgs, each checked as the
// kernel will read or write it (CheckTensorAccess: storage type T, and
// [rows, cols], [cols] or [rows] elements) before the kernel runs. The
// problem [rows, cols] is input `shape_input` over its last dimension. The
// first mismatch is kept (status()): a shape rule that gives an output
// another size or dtype than the kernel writes is an error naming the op and
// the tensor, on every call, never memory written past the output.
template <typename T>
class RowBinding {
 public:
  RowBinding(const OpSpec& spec, const KernelArgs& args, size_t shape_input) : spec_(spec), args_(args) {
    if (shape_input < args.input_infos.size()) {
      const Shape& shape = args.input_infos[shape_input].shape;
      cols_ = shape.empty() ? 1 : shape.back().Size();
      rows_ = 1;
      for (size_t k = 0; k + 1 < shape.size(); ++k) rows_ *= shape[k];
    }
    tensors_.cols = cols_;
  }

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }

  // Input `input` as row tensor `slot` ([rows, cols]).
  RowBinding& In(int slot, size_t input) {
    tensors_.in[slot] = Input(input, rows_ * cols_, "rows x cols");
    return *this;
  }
  // Input `input` as column tensor `slot` ([cols]; null when absent).
  RowBinding& Column(int slot, size_t input) {
    tensors_.columns[slot] = Input(input, cols_, "one per column");
    return *this;
  }
  // Input `input` as per-row tensor `slot` ([rows]: one value per row).
  RowBinding& PerRowIn(int slot, size_t input) {
    tensors_.per_row_in[slot] = Input(input, rows_, "one per row");
    return *this;
  }
  // Output `output` as row tensor `slot` ([rows, cols]).
  RowBinding& Out(int slot, size_t output) {
    tensors_.out[slot] = Output(output, rows_ * cols_, "rows x cols");
    if (tensors_.out[slot] != nullptr) ++full_outputs_;
    return *this;
  }
  // Output `output` as per-row tensor `slot` ([rows]: one value per row).
  RowBinding& PerRowOut(int slot, size_t output) {
    tensors_.per_row_out[slot] = Output(output, rows_, "one per row");
    return *this;
  }
  // Scalar `slot` (an attribute, already checked and converted).
  RowBinding& Param(int slot, double value) {
    tensors_.params[slot] = value;
    return *this;
  }

  const Status& status() const { return status_; }
  // The tensors, with outputs streamed (non-temporal stores) when the
  // [rows, cols] outputs together do not fit in the last-level cache.
  const RowTensors<T>& tensors() {
    tensors_.stream = RowsStreamOutput<T>(full_outputs_ * rows_ * cols_);
    return tensors_;
  }

 private:
  const T* Input(size_t k, int64_t elements, const char* how) {
    const T* data = nullptr;
    Keep(InputAs<T>(spec_, args_, k, elements, &data, how));
    return data;
  }
  T* Output(size_t k, int64_t elements, const char* how) {
    T* data = nullptr;
    Keep(OutputAs<T>(spec_, args_, k, elements, &data, how));
    return data;
  }
  void Keep(Status status) {
    if (!status.ok() && status_.ok()) status_ = std::move(status);
  }

  const OpSpec& spec_;
  const KernelArgs& args_;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  int64_t full_outputs_ = 0;
  RowTensors<T> tensors_;
  Status status_;
};

// A row kernel on an op's KernelArgs: T is the storage type of input
// `shape_input` (float32, float64, float16 or bfloat16; another dtype is
// refused naming that input), bind(RowBinding<T>&) names the kernel's
// tensors, which are then checked, and run(const RowTensors<T>&, rows) runs
// it, only when every tensor is what the kernel takes:
//
//   return toolkit::LaunchRows(kSpec, args, 0,
//       [&](auto& b) { b.In(0, 0).Out(0, 0).PerRowOut(0, 1).Param(0, temperature); },
//       [&](const auto& t, int64_t rows) {  // t: RowTensors<T>
//         toolkit::ForRowRanges(rows, t.cols, args.parallel_for,
//                               [&](const toolkit::RowRange& r) { SoftmaxRows(t, r); });
//       });
template <typename Bind, typename Run>
Status LaunchRows(const OpSpec& spec, const KernelArgs& args, size_t shape_input, Bind&& bind, Run&& run) {
  if (shape_input >= args.input_infos.size()) {
    return Status::Error(spec.MessageName() + ": the row kernel's shape input " +
                         std::to_string(shape_input) + " is not among the call's " +
                         std::to_string(args.input_infos.size()) + " inputs");
  }
  const char* name = shape_input < spec.inputs.size() ? spec.inputs[shape_input].name : "x";
  Status launched;
  const Status dispatched =
      DispatchFloatingOrHalf(spec, name, args.input_infos[shape_input].dtype, [&](auto tag) {
        using T = decltype(tag);
        RowBinding<T> binding(spec, args, shape_input);
        bind(binding);
        launched = binding.status();
        if (launched.ok()) run(binding.tensors(), binding.rows());
      });
  return dispatched.ok() ? launched : dispatched;
}

}  // namespace toolkit
}  // namespace opbridge

// In the HWY_ONCE section of a kernel.cpp that declared the per-target
// functions with OPBRIDGE_ROWS_ENTRY_POINTS(NAME, FUNCTION): exports them and
// defines, in the enclosing namespace,
//   template <typename T> void NAME(const RowTensors<T>&, const RowRange&)
// which calls the best target's FUNCTION<T> (OPBRIDGE_DYNAMIC_DISPATCH).
#define OPBRIDGE_ROWS_EXPORT(NAME)                                                                           \
  HWY_EXPORT(NAME##F32);                                                                                     \
  HWY_EXPORT(NAME##F64);                                                                                     \
  HWY_EXPORT(NAME##F16);                                                                                     \
  HWY_EXPORT(NAME##BF16);                                                                                    \
  template <typename T>                                                                                      \
  void NAME(const ::opbridge::toolkit::RowTensors<T>& tensors, const ::opbridge::toolkit::RowRange& range) { \
    if constexpr (std::is_same_v<T, float>) {                                                                \
      OPBRIDGE_DYNAMIC_DISPATCH(NAME##F32)(tensors, range);                                                  \
    } else if constexpr (std::is_same_v<T, double>) {                                                        \
      OPBRIDGE_DYNAMIC_DISPATCH(NAME##F64)(tensors, range);                                                  \
    } else if constexpr (std::is_same_v<T, ::opbridge::Float16>) {                                           \
      OPBRIDGE_DYNAMIC_DISPATCH(NAME##F16)(tensors, range);                                                  \
    } else {                                                                                                 \
      static_assert(std::is_same_v<T, ::opbridge::BFloat16>, "float, double, Float16, BFloat16");            \
      OPBRIDGE_DYNAMIC_DISPATCH(NAME##BF16)(tensors, range);                                                 \
    }                                                                                                        \
  }                                                                                                          \
  static_assert(true, "")
