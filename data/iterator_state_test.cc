// Saving and restoring an iterator's position: for every stage that supports it, and several
// cut points k, a restored iterator yields exactly elements k.. of an uninterrupted pass.

#include <string>

#include "absl/strings/str_cat.h"
#include "data/dataset.h"
#include "data/test_files.h"
#include "gtest/gtest.h"

namespace asyncps::data {
namespace iterator_state_test_internal {
namespace {

using testutil::Drain;
using testutil::DrainDataset;
using testutil::TempDir;

int64_t Value(const Element& e) { return *e[0].data<int64_t>(); }

absl::StatusOr<Element> Square(Element e) {
  return Element{Tensor::Scalar<int64_t>(Value(e) * Value(e))};
}
absl::StatusOr<Dataset> Upto(Element e) { return Dataset::Range(0, Value(e)); }

bool SameElements(const std::vector<Element>& a, const std::vector<Element>& b, size_t from) {
  if (a.size() - from != b.size()) return false;
  for (size_t i = 0; i < b.size(); ++i) {
    if (a[from + i].size() != b[i].size()) return false;
    for (size_t c = 0; c < b[i].size(); ++c) {
      if (!a[from + i][c].Equals(b[i][c])) return false;
    }
  }
  return true;
}

// Cuts a pass of `d` after k elements for several k, saves, restores into a new iterator and
// checks the rest; then cuts the restored iterator once more (a restored iterator saves too).
void ExpectResumes(const Dataset& d, const std::string& name) {
  SCOPED_TRACE(name);
  auto full = DrainDataset(d);
  ASSERT_TRUE(full.ok()) << full.status();
  const size_t n = full->size();
  ASSERT_GT(n, 2u);
  for (size_t k : {size_t{0}, size_t{1}, n / 3, n / 2, n - 1, n}) {
    SCOPED_TRACE(absl::StrCat("cut at ", k, " of ", n));
    auto it = d.MakeIterator();
    ASSERT_TRUE(it.ok());
    for (size_t i = 0; i < k; ++i) ASSERT_TRUE((*it)->Next().ok());
    absl::StatusOr<std::string> state = (*it)->SaveState();
    ASSERT_TRUE(state.ok()) << state.status();
    auto restored = d.RestoreIterator(*state);
    ASSERT_TRUE(restored.ok()) << restored.status();
    if (k < n) {
      // One element, then a second save and restore.
      ASSERT_TRUE((*restored)->Next().ok());
      absl::StatusOr<std::string> again = (*restored)->SaveState();
      ASSERT_TRUE(again.ok()) << again.status();
      restored = d.RestoreIterator(*again);
      ASSERT_TRUE(restored.ok()) << restored.status();
      auto rest = Drain(**restored);
      ASSERT_TRUE(rest.ok()) << rest.status();
      EXPECT_TRUE(SameElements(*full, *rest, k + 1));
    } else {
      EXPECT_TRUE(IsEndOfData((*restored)->Next().status()));
    }
    // The original iterator is unaffected by saving.
    auto original_rest = Drain(**it);
    ASSERT_TRUE(original_rest.ok());
    EXPECT_TRUE(SameElements(*full, *original_rest, k));
  }
}

TEST(IteratorStateTest, Sources) {
  ExpectResumes(Dataset::Range(0, 20), "Range");
  ExpectResumes(Dataset::Range(30, 0, -3), "Range down");
  ExpectResumes(Dataset::FromTensorSlices(
                    {Tensor::FromVector<float>({5, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9})}),
                "FromTensorSlices");
  ExpectResumes(Dataset::FromElements({{Tensor::Scalar<int64_t>(4)},
                                       {Tensor::Scalar<int64_t>(5)},
                                       {Tensor::Scalar<int64_t>(6)}}),
                "FromElements");
  TempDir dir;
  std::vector<std::string> paths;
  for (int f = 0; f < 3; ++f) {
    paths.push_back(dir.Path(absl::StrCat("lines", f)));
    testutil::WriteFile(paths.back(), absl::StrCat("a", f, "\nb", f, "\nc", f, "\n"));
  }
  testutil::WriteFile(dir.Path("empty"), "");
  paths.insert(paths.begin() + 1, dir.Path("empty"));
  ExpectResumes(Dataset::TextLines(paths), "TextLines");
  testutil::WriteFile(dir.Path("idx"), testutil::IdxBytes(0x08, {6, 2}, "abcdefghijkl"));
  ExpectResumes(Dataset::IdxFile(dir.Path("idx")), "IdxFile");
}

TEST(IteratorStateTest, ElementwiseAndStructuralTransforms) {
  const Dataset r = Dataset::Range(0, 25);
  ExpectResumes(r.Map(Square), "Map");
  ExpectResumes(
      r.Filter([](const Element& e) -> absl::StatusOr<bool> { return Value(e) % 3 != 0; }),
      "Filter");
  ExpectResumes(r.Batch(4), "Batch");
  ExpectResumes(r.Batch(4, /*drop_remainder=*/true), "Batch drop");
  ExpectResumes(r.Take(9), "Take");
  ExpectResumes(r.Skip(7), "Skip");
  ExpectResumes(r.Shard(3, 1), "Shard");
  ExpectResumes(Dataset::Range(0, 6).Repeat(3), "Repeat");
  ExpectResumes(Dataset::Zip({r, r.Map(Square)}), "Zip");
}

TEST(IteratorStateTest, BufferingAndParallelTransforms) {
  const Dataset r = Dataset::Range(0, 25);
  ExpectResumes(r.Shuffle(6, 11), "Shuffle");
  ExpectResumes(Dataset::Range(0, 8).Shuffle(4, 3).Repeat(3), "Shuffle in Repeat");
  ExpectResumes(r.Prefetch(3), "Prefetch");
  ExpectResumes(r.Map(Square, 3), "parallel Map");
  ExpectResumes(r.Map(Square, kAutotune), "autotuned Map");
  ExpectResumes(Dataset::Range(0, 8).Interleave(Upto, 3, 2), "Interleave");
  ExpectResumes(Dataset::Range(0, 8).Interleave(Upto, 3, 2, 2), "parallel Interleave");
  ExpectResumes(Dataset::Range(0, 6).FlatMap(Upto), "FlatMap");
  ExpectResumes(r.Batch(4).Unbatch(), "Unbatch");
  ExpectResumes(Dataset::Range(0, 9).FlatMap(Upto).Batch(3).Unbatch().Batch(2), "Unbatch x2");
  ExpectResumes(Dataset::Range(1, 9)
                    .Map([](Element e) -> absl::StatusOr<Element> {
                      return Element{Tensor(DType::kF32, {Value(e)})};
                    })
                    .PaddedBatch(3),
                "PaddedBatch");
  ExpectResumes(Dataset::Range(0, 30).Shuffle(8, 1).Repeat(2).Map(Square, 2).Batch(4).Prefetch(2),
                "a training pipeline");
}

TEST(IteratorStateTest, CacheSaysItCannot) {
  auto it = Dataset::Range(0, 5).Cache().Map(Square).MakeIterator();
  ASSERT_TRUE(it.ok());
  ASSERT_TRUE((*it)->Next().ok());
  absl::StatusOr<std::string> state = (*it)->SaveState();
  EXPECT_EQ(state.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(state.status().message().find("Cache"), absl::string_view::npos) << state.status();
}

// A started Prefetch or parallel Map has read ahead: restoring it in place is refused.
TEST(IteratorStateTest, RestoreIntoAStartedIteratorIsRefused) {
  for (const Dataset& d : {Dataset::Range(0, 9).Prefetch(2), Dataset::Range(0, 9).Map(Square, 2)}) {
    auto it = d.MakeIterator();
    ASSERT_TRUE(it.ok());
    absl::StatusOr<std::string> state = (*it)->SaveState();
    ASSERT_TRUE(state.ok());
    ASSERT_TRUE((*it)->Next().ok());
    EXPECT_EQ((*it)->RestoreState(*state).code(), absl::StatusCode::kFailedPrecondition);
  }
}

TEST(IteratorStateTest, ForeignOrCorruptStateIsInvalidArgument) {
  auto it = Dataset::Range(0, 5).Batch(2).MakeIterator();
  ASSERT_TRUE(it.ok());
  absl::StatusOr<std::string> state = (*it)->SaveState();
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(Dataset::Range(0, 5).Map(Square).RestoreIterator(*state).status().code(),
            absl::StatusCode::kInvalidArgument);
  for (size_t cut = 0; cut < state->size(); cut += 3) {
    EXPECT_EQ(Dataset::Range(0, 5).Batch(2).RestoreIterator(state->substr(0, cut)).status().code(),
              absl::StatusCode::kInvalidArgument)
        << cut;
  }
  EXPECT_EQ(Dataset::Range(0, 5).RestoreIterator("garbage").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace iterator_state_test_internal
}  // namespace asyncps::data
