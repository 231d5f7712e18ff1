// The host side of the elementwise map (opbridge/toolkit/map-inl.h): what a
// launch hands to the per-target code, and the launchers that read a
// KernelArgs, pick the dtype and the SIMD target, and split the work over
// the host's parallel-for. Nothing here depends on Highway's target.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>

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

constexpr int kMaxMapInputs = 4;
constexpr int kMaxMapOutputs = 2;
constexpr int kMaxMapParams = 8;

// Elements per task of a map with no broadcast input and no column sum.
constexpr int64_t kMapElementGrain = int64_t{1} << 15;

// Rows whose column-sum contributions are added in float32 lanes (float64
// for double) before they move to the chunk's double partial sums
// (ChunkedColumnSums).
constexpr int64_t kColumnSumFloatRows = 8;

// The functor's scalar parameters (an op's attributes, already checked and
// converted), in the order the launch lists them.
struct Params {
  Params() = default;
  Params(std::initializer_list<double> list) {
    for (double v : list) {
      if (count < kMaxMapParams) values[count++] = v;
    }
  }
  double operator[](int i) const { return values[i]; }

  double values[kMaxMapParams] = {};
  int count = 0;
};

// One argument of a map. An input is a full tensor (rows * cols elements) or
// a per-column vector of cols elements broadcast along the rows (a bias); an
// output is a full tensor, or a per-column vector receiving the functor's
// output summed over the rows (a bias gradient). A null output is skipped
// (an optional gradient nobody asked for).
struct MapArg {
  const void* data = nullptr;
  bool per_column = false;
};
inline MapArg Full(const void* data) { return {data, false}; }
inline MapArg PerColumn(const void* data) { return {data, true}; }
inline MapArg ColumnSum(void* data) { return {data, true}; }

// What the per-target code of one launch sees. Ranges are elements when no
// argument is per-column, rows when only inputs are, chunks of
// ChunkedColumnSums when an output is a column sum.
struct MapCall {
  const void* inputs[kMaxMapInputs] = {};
  bool input_per_column[kMaxMapInputs] = {};
  void* outputs[kMaxMapOutputs] = {};
  bool output_column_sum[kMaxMapOutputs] = {};
  int num_inputs = 0;
  int num_outputs = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  Params params;
  bool stream = false;  // full outputs past StreamingStoreBytes(): non-temporal stores
  ChunkedColumnSums* sums = nullptr;
  int sum_index[kMaxMapOutputs] = {};  // which of `sums` a column-sum output fills
};

using MapRangeFn = void (*)(const MapCall& call, int64_t begin, int64_t end);

enum class MapDtype { kFloat32 = 0, kFloat64 = 1, kFloat16 = 2, kBFloat16 = 3 };

template <typename T>
constexpr MapDtype MapDtypeOf() {
  if constexpr (std::is_same_v<T, double>) {
    return MapDtype::kFloat64;
  } else if constexpr (std::is_same_v<T, Float16>) {
    return MapDtype::kFloat16;
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return MapDtype::kBFloat16;
  } else {
    static_assert(std::is_same_v<T, float>, "a map runs on float, double, Float16 or BFloat16");
    return MapDtype::kFloat32;
  }
}

// A map kernel as OPBRIDGE_MAP_KERNEL (map-inl.h) defines it: per dtype, a
// function returning the range function of the SIMD target chosen now
// (opbridge/simd.h: the CPU's best, or the one a test forced).
struct MapKernel {
  const char* name;
  int num_inputs;
  int num_outputs;
  MapRangeFn (*resolve[4])();
};

namespace internal {

inline int64_t ElementSize(MapDtype dtype) {
  return dtype == MapDtype::kFloat64 ? 8 : dtype == MapDtype::kFloat32 ? 4 : 2;
}

template <typename T>
void Run(const MapKernel& kernel, MapCall call, const ParallelFor& parallel_for) {
  const int64_t rows = call.rows, cols = call.cols;
  if (rows < 0 || cols <= 0) return;
  bool any_per_column = false;
  int column_sums = 0;
  for (int k = 0; k < call.num_inputs; ++k) any_per_column |= call.input_per_column[k];
  int64_t full_outputs = 0;
  for (int k = 0; k < call.num_outputs; ++k) {
    if (call.outputs[k] == nullptr) continue;
    if (call.output_column_sum[k]) {
      call.sum_index[k] = column_sums++;
    } else {
      ++full_outputs;
    }
  }
  if (rows == 0) {
    // Column sums over no rows are zero.
    for (int k = 0; k < call.num_outputs; ++k) {
      if (call.outputs[k] != nullptr && call.output_column_sum[k]) {
        std::fill_n(static_cast<T*>(call.outputs[k]), cols, FromFloat<T>(0.0f));
      }
    }
    return;
  }
  call.stream = full_outputs > 0 && rows * cols * static_cast<int64_t>(sizeof(T)) > StreamingStoreBytes();
  const MapRangeFn range = kernel.resolve[static_cast<int>(MapDtypeOf<T>())]();
  if (column_sums > 0) {
    // Partial sums over a fixed, shape-determined split of the rows, added in
    // chunk order: the totals do not depend on the host's threads.
    ChunkedColumnSums sums(rows, cols, column_sums);
    call.sums = &sums;
    const MapCall* c = &call;
    DynamicFor(parallel_for, sums.chunks(), 1, [=](int64_t begin, int64_t end) { range(*c, begin, end); });
    for (int k = 0; k < call.num_outputs; ++k) {
      if (call.outputs[k] != nullptr && call.output_column_sum[k]) {
        sums.Total(call.sum_index[k], static_cast<T*>(call.outputs[k]), FromDouble<T>);
      }
    }
  } else if (any_per_column) {
    const MapCall* c = &call;
    DynamicFor(parallel_for, rows, RowGrain(cols),
               [=](int64_t begin, int64_t end) { range(*c, begin, end); });
  } else {
    const MapCall* c = &call;
    DynamicFor(parallel_for, rows * cols, kMapElementGrain,
               [=](int64_t begin, int64_t end) { range(*c, begin, end); });
  }
}

// Every tensor of a map launched on KernelArgs, as the map reads and writes
// it (CheckTensorAccess): T, and n elements (a full tensor) or cols (per
// column). Checked before any byte is touched: a shape rule that gives an
// output another size or dtype than the map writes is an error, not memory
// written past the output's end.
template <typename T>
Status CheckMapTensors(const OpSpec& spec, const KernelArgs& args, const MapCall& call, int64_t n) {
  for (int k = 0; k < call.num_inputs; ++k) {
    const bool column = call.input_per_column[k];
    OPBRIDGE_RETURN_IF_ERROR(
        CheckTensorAccess(spec, args, false, k, DtypeOf<T>(), column ? call.cols : n,
                          column ? "one per column" : "one per element of the largest input"));
  }
  for (int k = 0; k < call.num_outputs; ++k) {
    const bool column = call.output_column_sum[k];
    OPBRIDGE_RETURN_IF_ERROR(
        CheckTensorAccess(spec, args, true, k, DtypeOf<T>(), column ? call.cols : n,
                          column ? "one per column" : "one per element of the largest input"));
  }
  return Status::Ok();
}

}  // namespace internal

// Runs `kernel` over a [rows, cols] iteration space of T elements: inputs
// and outputs in the functor's order (Full, PerColumn, ColumnSum above).
// Without per-column arguments, rows and cols only give the element count.
template <typename T>
void Map(const MapKernel& kernel, int64_t rows, int64_t cols, std::initializer_list<MapArg> inputs,
         std::initializer_list<MapArg> outputs, const Params& params, const ParallelFor& parallel_for) {
  MapCall call;
  for (const MapArg& a : inputs) {
    call.inputs[call.num_inputs] = a.data;
    call.input_per_column[call.num_inputs] = a.per_column;
    ++call.num_inputs;
  }
  for (const MapArg& a : outputs) {
    call.outputs[call.num_outputs] = const_cast<void*>(a.data);
    call.output_column_sum[call.num_outputs] = a.per_column;
    ++call.num_outputs;
  }
  call.rows = rows;
  call.cols = cols;
  call.params = params;
  internal::Run<T>(kernel, call, parallel_for);
}

// Runs `kernel` on an op's KernelArgs: every input and output in order, the
// dtype of the first input (float32, float64, float16 or bfloat16; any
// other is refused with DispatchFloatingOrHalf's message, naming the spec's
// first input). The largest input gives the iteration space [rows, cols]
// (cols its last dimension); an input or output of cols elements ending in a
// dimension of cols ([cols], [1, cols]) where that has more is per-column (an input broadcast along the rows,
// an output summed over them). Every input and output is checked against that before the kernel runs
// (CheckTensorAccess): T, and a full or per-column size; anything else is an error naming the op and the
// tensor.
inline Status Map(const MapKernel& kernel, const OpSpec& spec, const KernelArgs& args,
                  const Params& params = {}) {
  if (static_cast<int>(args.inputs.size()) != kernel.num_inputs ||
      static_cast<int>(args.outputs.size()) != kernel.num_outputs) {
    return Status::Error(spec.TorchName() + ": map kernel " + kernel.name + " takes " +
                         std::to_string(kernel.num_inputs) + " inputs and " +
                         std::to_string(kernel.num_outputs) + " outputs, the launch has " +
                         std::to_string(args.inputs.size()) + " and " + std::to_string(args.outputs.size()));
  }
  int64_t n = 0;
  int64_t cols = 1;
  for (const TensorInfo& info : args.input_infos) {
    const int64_t elements = NumElements(info.shape);
    if (elements > n) {
      n = elements;
      cols = info.shape.empty() ? 1 : info.shape.back().Size();
    }
  }
  if (n == 0) {
    // Only column sums can have elements to write (zeros): keep cols.
    for (const TensorInfo& info : args.input_infos) {
      if (!info.shape.empty() && info.shape.back() > 0) cols = std::max(cols, info.shape.back().Size());
    }
  }
  MapCall call;
  call.num_inputs = kernel.num_inputs;
  call.num_outputs = kernel.num_outputs;
  // Per column: cols elements that end in a dimension of cols ([cols],
  // [1, cols]), so that a [rows, 1] shape of as many elements is not taken
  // for one.
  const auto per_column = [n, cols](const Shape& shape) {
    return NumElements(shape) != n && NumElements(shape) == cols && !shape.empty() && shape.back() == cols;
  };
  for (int k = 0; k < kernel.num_inputs; ++k) {
    call.inputs[k] = args.inputs[k];
    call.input_per_column[k] = per_column(args.input_infos[k].shape);
  }
  for (int k = 0; k < kernel.num_outputs; ++k) {
    call.outputs[k] = args.outputs[k];
    if (k < static_cast<int>(args.output_infos.size())) {
      call.output_column_sum[k] = per_column(args.output_infos[k].shape);
    }
  }
  call.rows = cols == 0 ? 0 : n / cols;
  call.cols = cols;
  call.params = params;
  Status checked;
  const Status dispatched =
      DispatchFloatingOrHalf(spec, spec.inputs[0].name, args.input_infos[0].dtype, [&](auto tag) {
        using T = decltype(tag);
        checked = internal::CheckMapTensors<T>(spec, args, call, n);
        if (checked.ok()) internal::Run<T>(kernel, call, args.parallel_for);
      });
  return dispatched.ok() ? checked : dispatched;
}

}  // namespace toolkit
}  // namespace opbridge
