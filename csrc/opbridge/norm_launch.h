// The launch glue of a normalization over the last dimension (rms_norm,
// add_rms_norm, layer_norm, add_layer_norm, and a user's norm of the same
// shape), written once for every norm and both devices: each operator's
// kernel.cpp and kernel.cu state only which norm it is and whether a
// residual is added first.
//
// KernelArgs to typed tensors (CPU and CUDA). A norm's tensors sit in
// KernelArgs in one of two layouts, chosen by NormResidual:
//
//   forward   kNone:  inputs (x, weight, bias)            outputs (y)
//             kAdded: inputs (x, residual, weight, bias)  outputs (y, sum)
//   backward  kNone:  inputs (grad_y, x, weight)
//             kAdded: inputs (grad_y, grad_sum, sum, weight)
//             both:   outputs (grad_x, grad_weight, grad_bias)
//
// where sum = x + residual (add_*_norm's residual_out), and the backward of
// an added norm normalizes the saved sum. DispatchNormForward and
// DispatchNormBackward read the shape ([rows, cols] over the last dimension),
// the dtype and eps (the first attribute), and call a generic body once with
// NormForwardTensors<T> / NormBackwardTensors<T> for the dtype's storage type
// T. The body is a template (a generic lambda), so the typed kernel it calls
// inlines as if it were called directly: no virtual calls, no type erasure.
// Every tensor is checked first (CheckTensorAccess: T, and [rows, cols] or
// [cols] elements): a shape rule that disagrees with the norm is an error
// naming the op and the tensor, on every call, before the kernel runs.
//
//   Status LaunchRmsNorm(const KernelArgs& args) {
//     return DispatchNormForward<NormResidual::kNone>(kRmsNormSpec, args, [&](const auto& t) {
//       RmsNormForward(t.x, t.weight, t.bias, t.y, t.rows, t.cols, RmsNormAttrs{t.eps}, args.parallel_for);
//     });
//   }
//
// A body returns void (CPU kernels cannot fail) or a Status (CUDA launches),
// which the dispatch returns. The built-in norms' CUDA kernels
// (csrc/ops/shared/cuda_norms.cuh) build their KernelArgs
// launches on the same dispatch.
//
// CPU drivers. NormComputeEps, NormStreamsOutput, NormForwardRowTensors,
// NormBackwardRowTensors and NormBackwardChunks are the parts of a CPU norm
// around its vectorized row kernels: the eps the compute type sees, the
// non-temporal store decision, the row kernels' tensors, and the
// deterministic chunked reduction of the weight and bias gradients. They are the row
// skeleton's host side (opbridge/toolkit/rows.h), whose per-target side
// (opbridge/toolkit/rows-inl.h) the built-in norms' row kernels are written
// on.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "opbridge/checks.h"
#include "opbridge/half.h"
#include "opbridge/parallel.h"
#include "opbridge/simd.h"
#include "opbridge/spec.h"
#include "opbridge/status.h"
#include "opbridge/toolkit/rows.h"

namespace opbridge {

// Whether a norm normalizes its input x (kNone) or x + residual (kAdded),
// which it also writes out: the KernelArgs layout above.
enum class NormResidual { kNone, kAdded };

// A forward's tensors as storage type T (float, double, Float16, BFloat16).
template <typename T>
struct NormForwardTensors {
  const T* x;
  const T* residual;  // null for NormResidual::kNone
  const T* weight;    // null when absent (an optional weight)
  const T* bias;      // null when absent
  T* y;
  T* sum;  // x + residual; null for NormResidual::kNone
  int64_t rows;
  int64_t cols;
  double eps;  // the first attribute
};

// A backward's tensors as storage type T.
template <typename T>
struct NormBackwardTensors {
  const T* grad_y;
  const T* grad_sum;  // the gradient of the sum output; null for NormResidual::kNone
  const T* x;         // what was normalized: x, or the saved sum for kAdded
  const T* weight;    // null when absent
  T* grad_x;          // for kAdded the gradient of both x and residual
  T* grad_weight;     // null when not needed
  T* grad_bias;       // null when not needed
  int64_t rows;
  int64_t cols;
  double eps;
};

namespace norm_launch_internal {

// rows x cols over the last dimension of `shape` (at least 1-d, as every
// norm's shape rule checks).
inline void RowsAndCols(const Shape& shape, int64_t* rows, int64_t* cols) {
  *cols = shape.back();
  *rows = *cols == 0 ? 0 : NumElements(shape) / *cols;
}

// A norm's tensors, checked as it reads and writes them (CheckTensorAccess):
// storage type T and a [rows, cols] or a [cols] size. The first error sticks.
class NormTensorReader {
 public:
  NormTensorReader(const OpSpec& spec, const KernelArgs& args, int64_t rows, int64_t cols)
      : spec_(spec), args_(args), rows_(rows), cols_(cols) {}

  template <typename T>
  const T* Rows(size_t index) {
    const T* data = nullptr;
    Keep(InputAs<T>(spec_, args_, index, rows_ * cols_, &data, kRows));
    return data;
  }
  template <typename T>
  const T* Columns(size_t index) {
    const T* data = nullptr;
    Keep(InputAs<T>(spec_, args_, index, cols_, &data, kColumns));
    return data;
  }
  template <typename T>
  T* RowsOut(size_t index) {
    T* data = nullptr;
    Keep(OutputAs<T>(spec_, args_, index, rows_ * cols_, &data, kRows));
    return data;
  }
  template <typename T>
  T* ColumnsOut(size_t index) {
    T* data = nullptr;
    Keep(OutputAs<T>(spec_, args_, index, cols_, &data, kColumns));
    return data;
  }
  const Status& status() const { return status_; }

 private:
  void Keep(Status status) {
    if (!status.ok() && status_.ok()) status_ = std::move(status);
  }
  static constexpr const char* kRows = "rows x cols of the normalized input";
  static constexpr const char* kColumns = "one per column";

  const OpSpec& spec_;
  const KernelArgs& args_;
  int64_t rows_;
  int64_t cols_;
  Status status_;
};

// Calls `body` on the dtype's storage type; its Status when it returns one.
template <typename Tensors, typename Body>
Status Run(Body& body, const Tensors& tensors) {
  if constexpr (std::is_void_v<std::invoke_result_t<Body&, const Tensors&>>) {
    body(tensors);
    return Status::Ok();
  } else {
    return body(tensors);
  }
}

// What both launchers share: rows x cols of input `k`, whose dtype picks the
// storage type T (float32, float64, float16 or bfloat16; else an error that
// names `dtype_argument`), the tensors make(read, T{}, rows, cols, eps) reads
// with a NormTensorReader, and body(tensors) once every read passed.
template <typename Make, typename Body>
Status DispatchNorm(const OpSpec& spec, const char* dtype_argument, const KernelArgs& args, size_t k,
                    Make&& make, Body& body) {
  int64_t rows = 0, cols = 0;
  RowsAndCols(args.input_infos[k].shape, &rows, &cols);
  const double eps = args.attrs[0].number;
  Status launched;
  const Status dispatched =
      DispatchFloatingOrHalf(spec, dtype_argument, args.input_infos[k].dtype, [&](auto tag) {
        NormTensorReader read(spec, args, rows, cols);
        const auto tensors = make(read, tag, rows, cols, eps);
        launched = read.status().ok() ? Run(body, tensors) : read.status();
      });
  return dispatched.ok() ? launched : dispatched;
}

}  // namespace norm_launch_internal

// body(NormForwardTensors<T>) with T the storage type of x (input 0), whose
// dtype must be float32, float64, float16 or bfloat16 (else the spec's dtype
// error, naming "x"). Returns the body's Status (Ok for a void body).
template <NormResidual kResidual, typename Body>
Status DispatchNormForward(const OpSpec& spec, const KernelArgs& args, Body&& body) {
  constexpr bool kAdded = kResidual == NormResidual::kAdded;
  constexpr size_t kWeight = kAdded ? 2 : 1;
  const auto make = [](auto& read, auto tag, int64_t rows, int64_t cols, double eps) {
    using T = decltype(tag);
    return NormForwardTensors<T>{read.template Rows<T>(0),
                                 kAdded ? read.template Rows<T>(1) : nullptr,
                                 read.template Columns<T>(kWeight),
                                 read.template Columns<T>(kWeight + 1),
                                 read.template RowsOut<T>(0),
                                 kAdded ? read.template RowsOut<T>(1) : nullptr,
                                 rows,
                                 cols,
                                 eps};
  };
  return norm_launch_internal::DispatchNorm(spec, "x", args, 0, make, body);
}

// body(NormBackwardTensors<T>) with T the storage type of the normalized
// input (x, or the saved sum for kAdded); a dtype error names
// `dtype_argument`. Returns the body's Status (Ok for a void body).
template <NormResidual kResidual, typename Body>
Status DispatchNormBackward(const OpSpec& spec, const char* dtype_argument, const KernelArgs& args,
                            Body&& body) {
  constexpr bool kAdded = kResidual == NormResidual::kAdded;
  constexpr size_t kX = kAdded ? 2 : 1;
  const auto make = [](auto& read, auto tag, int64_t rows, int64_t cols, double eps) {
    using T = decltype(tag);
    return NormBackwardTensors<T>{read.template Rows<T>(0),
                                  kAdded ? read.template Rows<T>(1) : nullptr,
                                  read.template Rows<T>(kX),
                                  read.template Columns<T>(kX + 1),
                                  read.template RowsOut<T>(0),
                                  read.template ColumnsOut<T>(1),
                                  read.template ColumnsOut<T>(2),
                                  rows,
                                  cols,
                                  eps};
  };
  return norm_launch_internal::DispatchNorm(spec, dtype_argument, args, kX, make, body);
}

// ---------------------------------------------------------------------------
// CPU drivers: the row skeleton's host side (opbridge/toolkit/rows.h) under
// the names norm kernels have used.

// eps as a norm over T sees it: rounded to ComputeType<T> (16-bit inputs
// compute in float32, so a float16 eps of 1e-6 is not 0).
template <typename T>
double NormComputeEps(double eps) {
  return toolkit::RowsComputeScalar<T>(eps);
}

// Whether outputs of `elements` values of T are written with non-temporal
// stores: when they do not fit in the last-level cache.
template <typename T>
bool NormStreamsOutput(int64_t elements) {
  return toolkit::RowsStreamOutput<T>(elements);
}

// A norm's tensors as its row kernels (opbridge/toolkit/rows-inl.h) see
// them, in the slots every norm on the row skeleton reads:
//   forward   in: x, residual (or null)   columns: weight, bias (or null)
//             out: y, sum (null without a residual)   params: eps
//   backward  in: grad_y, x, grad_sum (or null)   columns: weight (or null)
//             out: grad_x   params: eps
// with eps as the compute type sees it (NormComputeEps). The outputs are
// written with non-temporal stores when `streamed_outputs` [rows, cols]
// outputs (the forward's y, and its sum where that is streamed too) do not
// fit in the last-level cache; a backward decides on grad_x alone.
template <typename T>
toolkit::RowTensors<T> NormForwardRowTensors(const NormForwardTensors<T>& n, int64_t streamed_outputs = 1) {
  toolkit::RowTensors<T> t;
  t.in[0] = n.x;
  t.in[1] = n.residual;
  t.columns[0] = n.weight;
  t.columns[1] = n.bias;
  t.out[0] = n.y;
  t.out[1] = n.residual != nullptr ? n.sum : nullptr;
  t.cols = n.cols;
  t.params[0] = NormComputeEps<T>(n.eps);
  t.stream = NormStreamsOutput<T>(streamed_outputs * n.rows * n.cols);
  return t;
}

template <typename T>
toolkit::RowTensors<T> NormBackwardRowTensors(const NormBackwardTensors<T>& n) {
  toolkit::RowTensors<T> t;
  t.in[0] = n.grad_y;
  t.in[1] = n.x;
  t.in[2] = n.grad_sum;
  t.columns[0] = n.weight;
  t.out[0] = n.grad_x;
  t.cols = n.cols;
  t.params[0] = NormComputeEps<T>(n.eps);
  t.stream = NormStreamsOutput<T>(n.rows * n.cols);
  return t;
}

// The frame of a backward with deterministic weight and bias gradients
// (toolkit::ForRowChunksWithColumnSums). The rows are cut into chunks by
// shape alone (ChunkedColumnSums); for each chunk, in parallel,
// chunk_rows(pw, pb, row_begin, row_end) computes its rows' input gradients
// and adds their weight and bias gradient terms into the chunk's own double
// partials pw and pb (null where grad_weight or grad_bias is null: not
// wanted). The partials are then added in chunk order into grad_weight and
// grad_bias, so results do not depend on the thread count. No rows: the
// wanted gradients are zero-filled; no columns: nothing is done.
template <typename T, typename ChunkRows>
void NormBackwardChunks(int64_t rows, int64_t cols, T* grad_weight, T* grad_bias,
                        const ParallelFor& parallel_for, const ChunkRows& chunk_rows) {
  toolkit::ForRowChunksWithColumnSums<T>(
      rows, cols, {grad_weight, grad_bias}, parallel_for, [&](const toolkit::RowRange& range) {
        chunk_rows(range.column_sums[0], range.column_sums[1], range.begin, range.end);
      });
}

}  // namespace opbridge
