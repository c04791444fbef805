#include "worker/variable_directory.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace asyncps {
namespace {

VariablePlacement Sharded(const std::string& name, int64_t rows, std::vector<int64_t> bounds) {
  VariablePlacement p;
  p.name = name;
  p.shape = {rows, 3};
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    p.shards.push_back({name + "/part_" + std::to_string(i), static_cast<int>(i), bounds[i],
                        bounds[i + 1]});
  }
  return p;
}

TEST(VariablePlacementTest, ShardOfRowAndShardShape) {
  const VariablePlacement p = Sharded("emb", 13, {0, 5, 9, 13});
  EXPECT_TRUE(p.sharded());
  EXPECT_EQ(p.ShardOfRow(0), 0);
  EXPECT_EQ(p.ShardOfRow(4), 0);
  EXPECT_EQ(p.ShardOfRow(5), 1);
  EXPECT_EQ(p.ShardOfRow(12), 2);
  EXPECT_EQ(p.ShardOfRow(13), -1);
  EXPECT_EQ(p.ShardOfRow(-1), -1);
  EXPECT_EQ(p.ShardShape(1), (Shape{4, 3}));
  EXPECT_EQ(p.ShardShape(2), (Shape{4, 3}));
}

TEST(VariablePlacementTest, PlainVariableIsNotSharded) {
  VariablePlacement p;
  p.name = "w";
  p.shape = {2, 2};
  p.shards.push_back({"w", 1, 0, 2});
  EXPECT_FALSE(p.sharded());
}

TEST(VariableDirectoryTest, AddFindAndVersion) {
  VariableDirectory dir;
  EXPECT_EQ(dir.version(), 0u);
  EXPECT_EQ(dir.Find("emb").status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(dir.Find("emb").status().message().find("emb"), std::string::npos);
  dir.Add(Sharded("emb", 13, {0, 7, 13}));
  EXPECT_EQ(dir.version(), 1u);
  auto found = dir.Find("emb");
  ASSERT_TRUE(found.ok());
  EXPECT_EQ((*found)->shards.size(), 2u);
  // Replacing bumps the version; a placement already handed out does not change under its
  // holder.
  dir.Add(Sharded("emb", 13, {0, 13}));
  EXPECT_EQ(dir.version(), 2u);
  EXPECT_EQ((*found)->shards.size(), 2u);
  EXPECT_EQ((*dir.Find("emb"))->shards.size(), 1u);
}

TEST(VariableDirectoryTest, ResetReplacesEverythingAtTheGivenVersion) {
  VariableDirectory dir;
  dir.Add(Sharded("a", 4, {0, 4}));
  dir.Reset({Sharded("b", 4, {0, 2, 4})}, 42);
  EXPECT_EQ(dir.version(), 42u);
  EXPECT_EQ(dir.Find("a").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(dir.Find("b").ok());
  ASSERT_EQ(dir.All().size(), 1u);
  EXPECT_EQ(dir.All()[0]->name, "b");
}

// Readers on other threads see either the old or the new placement, whole (TSan checks the
// locking).
TEST(VariableDirectoryTest, ConcurrentAddsAndFinds) {
  VariableDirectory dir;
  constexpr int kVariables = 200;
  std::thread writer([&] {
    for (int i = 0; i < kVariables; ++i) dir.Add(Sharded("v" + std::to_string(i), 4, {0, 2, 4}));
  });
  std::thread reader([&] {
    for (int i = 0; i < kVariables; ++i) {
      auto p = dir.Find("v" + std::to_string(i));
      if (p.ok()) {
        EXPECT_EQ((*p)->shards.size(), 2u);
      }
      for (const auto& q : dir.All()) EXPECT_EQ(q->shards.size(), 2u);
    }
  });
  writer.join();
  reader.join();
  EXPECT_EQ(dir.version(), static_cast<uint64_t>(kVariables));
  EXPECT_EQ(dir.All().size(), static_cast<size_t>(kVariables));
}

}  // namespace
}  // namespace asyncps
