// The toolkit's loops around one axis (opbridge/toolkit/axes.h) and its
// gather of rows by integer index (opbridge/toolkit/gather.h): the split of
// a shape, the broadcast covering every outer index once, sums over every
// axis but one that are the same bits for any split of the work, the
// indices checked with a message naming the op and the argument, and the
// rows gathered by int64 and int32 indices.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "opbridge/toolkit/axes.h"
#include "opbridge/toolkit/gather.h"
#include "tests/test_util.h"

namespace opbridge {
namespace {

using testing::ExpectNear;
using testing::ReverseChunkedFor;
using toolkit::AxisSplit;

TEST(ToolkitAxes, SplitsAShapeAroundOneAxis) {
  const AxisSplit heads = AxisSplit::Of({2, 5, 3, 8}, 2);
  EXPECT_EQ(heads.outer, 10);
  EXPECT_EQ(heads.size, 3);
  EXPECT_EQ(heads.inner, 8);
  const AxisSplit last = AxisSplit::Of({2, 5, 3, 8}, -1);
  EXPECT_EQ(last.outer, 30);
  EXPECT_EQ(last.size, 8);
  EXPECT_EQ(last.inner, 1);
  const AxisSplit first = AxisSplit::Of({4, 6}, 0);
  EXPECT_EQ(first.outer, 1);
  EXPECT_EQ(first.size, 4);
  EXPECT_EQ(first.inner, 6);
}

TEST(ToolkitAxes, OuterRangesCoverEveryOuterIndexOnce) {
  const AxisSplit split = AxisSplit::Of({7000, 4, 16}, 1);
  std::vector<int> seen(static_cast<size_t>(split.outer), 0);
  toolkit::ForOuterRanges(split, ReverseChunkedFor(3), [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) ++seen[static_cast<size_t>(o)];
  });
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), split.outer);
  int calls = 0;
  toolkit::ForOuterRanges(AxisSplit::Of({0, 4, 16}, 1), SerialFor, [&](int64_t, int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

// sum over o and i of v[o, k, i], for each k, with v of many magnitudes (the
// order of additions shows in the last bits).
std::vector<float> AxisSums(const AxisSplit& split, const std::vector<float>& v, const ParallelFor& pf) {
  std::vector<float> out(static_cast<size_t>(split.size), -1.0f);
  toolkit::ForOuterChunksWithAxisSums(
      split, {out.data()}, pf, [&](int64_t begin, int64_t end, double* const* s) {
        for (int64_t o = begin; o < end; ++o) {
          for (int64_t k = 0; k < split.size; ++k) {
            float row = 0.0f;  // float per row, as a SIMD kernel sums a row
            for (int64_t i = 0; i < split.inner; ++i)
              row += v[static_cast<size_t>((o * split.size + k) * split.inner + i)];
            s[0][k] += row;
          }
        }
      });
  return out;
}

TEST(ToolkitAxes, SumsOverEveryAxisButOneAreTheSameForAnySplitOfTheWork) {
  const AxisSplit split = AxisSplit::Of({3000, 5, 24}, 1);
  std::vector<float> v(static_cast<size_t>(split.elements()));
  for (size_t n = 0; n < v.size(); ++n)
    v[n] = static_cast<float>((n * 2654435761u) % 1000003) * (n % 7 == 0 ? 1e3f : 1e-3f);
  const std::vector<float> serial = AxisSums(split, v, SerialFor);
  for (int64_t chunk : {1, 2, 7, 64}) {
    EXPECT_EQ(AxisSums(split, v, ReverseChunkedFor(chunk)), serial) << "chunks of " << chunk;
  }
  std::vector<double> want(static_cast<size_t>(split.size), 0.0);
  for (size_t n = 0; n < v.size(); ++n)
    want[(n / static_cast<size_t>(split.inner)) % static_cast<size_t>(split.size)] += v[n];
  ExpectNear(serial, want, 1e-6, "axis sums");
}

TEST(ToolkitAxes, EmptyTensorsGiveZeroSumsAndUnwantedOnesAreLeftAlone) {
  std::vector<float> wanted(3, 5.0f);
  float* unwanted = nullptr;
  int calls = 0;
  toolkit::ForOuterChunksWithAxisSums(AxisSplit::Of({0, 3, 4}, 1), {wanted.data(), unwanted}, SerialFor,
                                      [&](int64_t, int64_t, double* const*) { ++calls; });
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(wanted, std::vector<float>(3, 0.0f));
  toolkit::ForOuterChunksWithAxisSums(AxisSplit::Of({2, 3, 4}, 1), {unwanted, wanted.data()}, SerialFor,
                                      [&](int64_t, int64_t, double* const* s) {
                                        EXPECT_EQ(s[0], nullptr);
                                        for (int k = 0; k < 3; ++k) s[1][k] += 1.0;
                                      });
  EXPECT_EQ(wanted, std::vector<float>(3, 1.0f));
}

const OpSpec kLookupSpec =
    OpSpec::Builder("lookup", "Lookup").Inputs({Input("table"), Input("ids")}).Outputs({"y"});

TEST(ToolkitGather, IndicesOutsideTheTableAreAnErrorNamingTheArgument) {
  const std::vector<int64_t> ids = {0, 3, 4, 1};
  EXPECT_TRUE(toolkit::CheckIndices(kLookupSpec, "ids", ids.data(), 4, 5).ok());
  const Status status = toolkit::CheckIndices(kLookupSpec, "ids", ids.data(), 4, 4);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("lookup"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("'ids' holds 4 at flat position 2, outside [0, 4)"), std::string::npos)
      << status.message();
  const std::vector<int32_t> negative = {1, -1};
  EXPECT_FALSE(toolkit::CheckIndices(kLookupSpec, "ids", negative.data(), 2, 4).ok());
}

TEST(ToolkitGather, GathersRowsByInt64AndInt32Indices) {
  std::vector<double> table(5 * 3);
  std::iota(table.begin(), table.end(), 0.0);
  const std::vector<int64_t> ids64 = {4, 0, 4, 2};
  const std::vector<int32_t> ids32 = {4, 0, 4, 2};
  std::vector<double> got64(12), got32(12);
  toolkit::GatherRows(table.data(), 3, ids64.data(), 4, got64.data(), ReverseChunkedFor(1));
  toolkit::GatherRows(table.data(), 3, ids32.data(), 4, got32.data(), SerialFor);
  const std::vector<double> want = {12, 13, 14, 0, 1, 2, 12, 13, 14, 6, 7, 8};
  EXPECT_EQ(got64, want);
  EXPECT_EQ(got32, want);
}

}  // namespace
}  // namespace opbridge
