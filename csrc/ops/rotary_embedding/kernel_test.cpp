#include "ops/rotary_embedding/kernel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "ops/rotary_embedding/spec.h"
#include "tests/test_util.h"

namespace opbridge {
namespace {

using namespace testing;  // NOLINT(build/namespaces): the kernel tests' helpers

// Rotation written out per element, independent of the kernel's loops.
std::vector<double> Reference(const std::vector<double>& x, const std::vector<double>& c,
                              const std::vector<double>& s, const RotaryDims& d, bool interleaved) {
  std::vector<double> y = x;
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t p = 0; p < d.seq; ++p) {
      for (int64_t h = 0; h < d.heads; ++h) {
        const size_t base = static_cast<size_t>(((b * d.seq + p) * d.heads + h) * d.head_dim);
        for (int64_t i = 0; i < d.half; ++i) {
          const size_t ia = base + static_cast<size_t>(interleaved ? 2 * i : i);
          const size_t ib = base + static_cast<size_t>(interleaved ? 2 * i + 1 : i + d.half);
          // Table row: the position, within batch row b's table when per row.
          const int64_t t = d.table_batch == 1 ? p : b * d.seq + p;
          const double cv = c[static_cast<size_t>(t * d.half + i)],
                       sv = s[static_cast<size_t>(t * d.half + i)];
          y[ia] = x[ia] * cv - x[ib] * sv;
          y[ib] = x[ib] * cv + x[ia] * sv;
        }
      }
    }
  }
  return y;
}

TEST(RotaryEmbeddingKernel, ForwardMatchesReferenceBothLayoutsAndPartial) {
  for (bool interleaved : {false, true}) {
    for (int64_t half : {int64_t{4}, int64_t{2}}) {
      const RotaryDims d{2, 5, 3, 8, half};
      const int64_t n = d.batch * d.seq * d.heads * d.head_dim;
      const auto x = Random<double>(n, 1), c = Random<double>(d.seq * half, 2),
                 s = Random<double>(d.seq * half, 3);
      std::vector<double> y(x.size());
      RotaryEmbeddingForward<double>(x.data(), c.data(), s.data(), y.data(), d, RotaryAttrs{interleaved},
                                     testing::ReverseChunkedFor(1));
      testing::ExpectNear(y, Reference(x, c, s, d, interleaved), 1e-15, "rotary");
    }
  }
}

// <grad_y, J dx> == <J^T grad_y, dx> for the linear map in x, and the cos /
// sin gradients (shared or per-batch tables) match finite differences.
void ExpectBackwardMatchesFiniteDifferences(const RotaryDims& d, uint32_t seed) {
  const int64_t n = d.batch * d.seq * d.heads * d.head_dim, m = d.table_batch * d.seq * d.half;
  for (bool interleaved : {false, true}) {
    auto x = Random<double>(n, seed), c = Random<double>(m, seed + 1), s = Random<double>(m, seed + 2);
    const auto g = Random<double>(n, seed + 3);
    std::vector<double> gx(n), gc(m), gs(m);
    RotaryEmbeddingBackward<double>(g.data(), x.data(), c.data(), s.data(), gx.data(), gc.data(), gs.data(),
                                    d, RotaryAttrs{interleaved}, SerialFor);
    auto loss = [&]() {
      std::vector<double> y(n);
      RotaryEmbeddingForward<double>(x.data(), c.data(), s.data(), y.data(), d, RotaryAttrs{interleaved},
                                     SerialFor);
      long double total = 0.0L;
      for (int64_t i = 0; i < n; ++i) total += static_cast<long double>(g[i]) * y[i];
      return total;
    };
    const double h = 1e-6;
    ExpectGradient(gx, x, loss, h, 1e-7, "grad_x");
    ExpectGradient(gc, c, loss, h, 1e-7, "grad_cos");
    ExpectGradient(gs, s, loss, h, 1e-7, "grad_sin");
  }
}

TEST(RotaryEmbeddingKernel, BackwardIsTheAdjoint) {
  ExpectBackwardMatchesFiniteDifferences({2, 3, 2, 6, 2}, 4);
}

TEST(RotaryEmbeddingKernel, ForwardPerBatchTablesBothLayoutsAndPartial) {
  for (bool interleaved : {false, true}) {
    for (int64_t half : {int64_t{4}, int64_t{3}}) {
      const RotaryDims d{3, 5, 2, 8, half, 3};
      const int64_t n = d.batch * d.seq * d.heads * d.head_dim, m = d.batch * d.seq * half;
      const auto x = Random<double>(n, 11), c = Random<double>(m, 12), s = Random<double>(m, 13);
      std::vector<double> y(x.size());
      RotaryEmbeddingForward<double>(x.data(), c.data(), s.data(), y.data(), d, RotaryAttrs{interleaved},
                                     testing::ReverseChunkedFor(2));
      testing::ExpectNear(y, Reference(x, c, s, d, interleaved), 1e-15, "rotary per batch");
      // Each batch row equals the shared-table call on that row alone.
      const int64_t row = d.seq * d.heads * d.head_dim, table = d.seq * half;
      for (int64_t b = 0; b < d.batch; ++b) {
        const RotaryDims one{1, d.seq, d.heads, d.head_dim, half};
        std::vector<double> yb(static_cast<size_t>(row));
        RotaryEmbeddingForward<double>(x.data() + b * row, c.data() + b * table, s.data() + b * table,
                                       yb.data(), one, RotaryAttrs{interleaved}, SerialFor);
        for (int64_t i = 0; i < row; ++i) EXPECT_EQ(yb[i], y[b * row + i]) << "batch " << b << " at " << i;
      }
    }
  }
}

TEST(RotaryEmbeddingKernel, BackwardPerBatchTablesMatchesFiniteDifferences) {
  ExpectBackwardMatchesFiniteDifferences({2, 3, 2, 6, 2, 2}, 14);
}

TEST(RotaryEmbeddingKernel, BackwardDoesNotDependOnTheParallelism) {
  // Shared and per-row tables: bit-identical gradients for any chunking.
  for (int64_t table_batch : {int64_t{1}, int64_t{4}}) {
    const RotaryDims d{4, 7, 3, 8, 4, table_batch};
    const int64_t n = d.batch * d.seq * d.heads * d.head_dim, m = table_batch * d.seq * d.half;
    const auto x = Random<float>(n, 18), c = Random<float>(m, 19), s = Random<float>(m, 20);
    const auto g = Random<float>(n, 21);
    std::vector<float> gx0(n), gc0(m), gs0(m);
    RotaryEmbeddingBackward<float>(g.data(), x.data(), c.data(), s.data(), gx0.data(), gc0.data(), gs0.data(),
                                   d, RotaryAttrs{false}, SerialFor);
    for (int64_t chunk : {int64_t{1}, int64_t{3}, int64_t{5}}) {
      std::vector<float> gx(n), gc(m), gs(m);
      RotaryEmbeddingBackward<float>(g.data(), x.data(), c.data(), s.data(), gx.data(), gc.data(), gs.data(),
                                     d, RotaryAttrs{false}, testing::ReverseChunkedFor(chunk));
      EXPECT_EQ(gx, gx0) << "table_batch " << table_batch << ", chunk " << chunk;
      EXPECT_EQ(gc, gc0) << "table_batch " << table_batch << ", chunk " << chunk;
      EXPECT_EQ(gs, gs0) << "table_batch " << table_batch << ", chunk " << chunk;
    }
  }
}

TEST(RotaryEmbeddingInfer, AcceptsSharedAndPerBatchTables) {
  const std::vector<std::vector<TensorInfo>> cases = {
      {Info("float32", {2, 5, 3, 8}), Info("float32", {5, 4}), Info("float32", {5, 4})},
      {Info("float32", {2, 5, 3, 8}), Info("float32", {2, 5, 4}), Info("float32", {2, 5, 4})},
      {Info("float32", {2, 5, 3, 8}), Info("float32", {1, 5, 2}), Info("float32", {1, 5, 2})},
      // Unknown dims match anything.
      {Info("float32", {-1, -1, 3, 8}), Info("float32", {2, 5, 4}), Info("float32", {2, 5, 4})},
      {Info("float32", {2, 5, 3, 8}), Info("float32", {-1, -1, 4}), Info("float32", {-1, -1, 4})},
  };
  for (const auto& inputs : cases) {
    std::vector<TensorInfo> outputs;
    const Status status = InferRotaryEmbedding(inputs, &outputs);
    ASSERT_TRUE(status.ok()) << status.message();
    ASSERT_EQ(outputs.size(), 1u);
    EXPECT_EQ(outputs[0].shape, inputs[0].shape);
  }
  EXPECT_EQ(RotaryDimsOf({2, 5, 3, 8}, {2, 5, 4}).table_batch, 2);
  EXPECT_EQ(RotaryDimsOf({2, 5, 3, 8}, {1, 5, 4}).table_batch, 1);
  EXPECT_EQ(RotaryDimsOf({2, 5, 3, 8}, {5, 4}).table_batch, 1);
  EXPECT_EQ(RotaryDimsOf({2, 5, 3, 8}, {5, 4}).half, 4);
}

TEST(RotaryEmbeddingInfer, RejectsBadShapes) {
  struct Case {
    std::vector<TensorInfo> inputs;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {{Info("float32", {2, 5, 8}), Info("float32", {5, 4}), Info("float32", {5, 4})},
       "argument 'x' must be 4-D [batch, seq, heads, head_dim], got 3-D shape [2, 5, 8]"},
      {{Info("float32", {2, 5, 3, 7}), Info("float32", {5, 3}), Info("float32", {5, 3})},
       "argument 'x' must have an even head_dim"},
      {{Info("float32", {2, 5, 3, 8}), Info("float32", {6, 4}), Info("float32", {6, 4})},
       "argument 'cos' must have seq = 5 rows"},
      {{Info("float32", {2, 5, 3, 8}), Info("float32", {5, 5}), Info("float32", {5, 5})},
       "argument 'cos' must have between 1 and head_dim / 2 = 4 columns"},
      {{Info("float32", {2, 5, 3, 8}), Info("float32", {5, 4}), Info("float32", {5, 3})},
       "argument 'sin' must have the shape of cos [5, 4], got shape [5, 3]"},
      {{Info("float32", {2, 5, 3, 8}), Info("float64", {5, 4}), Info("float32", {5, 4})},
       "argument 'cos' must have the dtype of x (float32), got float64"},
      {{Info("float32", {2, 5, 3, 8}), Info("float32", {3, 5, 4}), Info("float32", {3, 5, 4})},
       "argument 'cos' must have batch = 2 (dimension 0 of x [2, 5, 3, 8]) or 1 when 3-D [batch, seq, "
       "rotary_dim / 2], got shape [3, 5, 4]"},
      {{Info("float32", {2, 5, 3, 8}), Info("float32", {2, 6, 4}), Info("float32", {2, 6, 4})},
       "argument 'cos' must have seq = 5 rows (dimension 1 of x [2, 5, 3, 8]), got shape [2, 6, 4]"},
      {{Info("float32", {2, 5, 3, 8}), Info("float32", {2, 5, 5}), Info("float32", {2, 5, 5})},
       "argument 'cos' must have between 1 and head_dim / 2 = 4 columns"},
      {{Info("float32", {2, 5, 3, 8}), Info("float32", {4}), Info("float32", {4})},
       "argument 'cos' must be 2-D [seq, rotary_dim / 2] or 3-D [batch, seq, rotary_dim / 2], got 1-D"},
      {{Info("float32", {2, 5, 3, 8}), Info("float32", {1, 2, 5, 4}), Info("float32", {1, 2, 5, 4})},
       "argument 'cos' must be 2-D [seq, rotary_dim / 2] or 3-D [batch, seq, rotary_dim / 2], got 4-D"},
      // sin must have cos's rank and shape.
      {{Info("float32", {2, 5, 3, 8}), Info("float32", {2, 5, 4}), Info("float32", {5, 4})},
       "argument 'sin' must have the shape of cos [2, 5, 4], got shape [5, 4]"},
      {{Info("float32", {2, 5, 3, 8}), Info("float32", {5, 4}), Info("float32", {2, 5, 4})},
       "argument 'sin' must have the shape of cos [5, 4], got shape [2, 5, 4]"},
      {{Info("float32", {2, 5, 3, 8}), Info("float32", {2, 5, 4}), Info("float32", {1, 5, 4})},
       "argument 'sin' must have the shape of cos [2, 5, 4], got shape [1, 5, 4]"},
  };
  for (const Case& c : cases) {
    std::vector<TensorInfo> outputs;
    const Status status = InferRotaryEmbedding(c.inputs, &outputs);
    ASSERT_FALSE(status.ok()) << c.expected;
    EXPECT_TRUE(Contains(status.message(), c.expected)) << status.message();
  }
}

}  // namespace
}  // namespace opbridge
