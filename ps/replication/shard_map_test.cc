#include "ps/replication/shard_map.h"

#include <capnp/message.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace asyncps::ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ShardMapTest, InitialIsTheRing) {
  auto map = ShardMap::Initial(3, 2);
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(map->generation, 1u);
  EXPECT_EQ(map->replicas, 2u);
  ASSERT_EQ(map->groups.size(), 3u);
  EXPECT_EQ(map->groups[0].primary, 0);
  EXPECT_THAT(map->groups[0].backups, ElementsAre(1));
  EXPECT_THAT(map->groups[2].backups, ElementsAre(0));
  auto three = ShardMap::Initial(3, 3);
  ASSERT_TRUE(three.ok());
  EXPECT_THAT(three->groups[1].backups, ElementsAre(2, 0));
  EXPECT_TRUE(three->Validate(3).ok());
  auto one = ShardMap::Initial(2, 1);
  ASSERT_TRUE(one.ok());
  EXPECT_TRUE(one->groups[1].backups.empty());
}

TEST(ShardMapTest, InitialRefusesMoreReplicasThanPs) {
  auto map = ShardMap::Initial(2, 3);
  EXPECT_EQ(map.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(map.status().message(), HasSubstr("only 2 parameter servers"));
  EXPECT_FALSE(ShardMap::Initial(4, 0).ok());
  EXPECT_FALSE(ShardMap::Initial(4, 4).ok());
  EXPECT_FALSE(ShardMap::Initial(0, 1).ok());
}

TEST(ShardMapTest, WireRoundTrip) {
  ShardMap map = *ShardMap::Initial(3, 2);
  map.groups[1].generation = 4;
  map.groups[1].primary = 2;
  map.groups[1].backups = {};
  map.groups[1].rebuilding = {1};
  map.generation = 4;
  ASSERT_TRUE(map.Validate(3).ok());
  capnp::MallocMessageBuilder builder;
  ShardMapToWire(map, builder.initRoot<wire::ShardMap>());
  auto back = ShardMapFromWire(builder.getRoot<wire::ShardMap>().asReader(), 3);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, map);
  EXPECT_THAT(back->DebugString(), HasSubstr("g1 gen 4: 2 | - rebuilding 1"));
}

TEST(ShardMapTest, EmptyWireMapIsNoMap) {
  capnp::MallocMessageBuilder builder;
  auto back = ShardMapFromWire(builder.initRoot<wire::ShardMap>().asReader(), 2);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->generation, 0u);
  EXPECT_TRUE(back->groups.empty());
}

TEST(ShardMapTest, ValidateRefusesMalformedMaps) {
  const ShardMap good = *ShardMap::Initial(3, 2);
  ShardMap m = good;
  m.groups[0].backups = {0};
  EXPECT_THAT(m.Validate(3).message(), HasSubstr("names ps 0 twice"));
  m = good;
  m.groups[2].primary = 3;
  EXPECT_THAT(m.Validate(3).message(), HasSubstr("not a PS index"));
  m = good;
  m.groups[1].group = 0;
  EXPECT_THAT(m.Validate(3).message(), HasSubstr("twice"));
  m = good;
  m.generation = 2;
  EXPECT_THAT(m.Validate(3).message(), HasSubstr("not the highest"));
  m = good;
  m.groups[0].generation = 0;
  EXPECT_FALSE(m.Validate(3).ok());
  m = good;
  GroupEntry extra;
  extra.group = 5;
  extra.generation = 1;
  extra.primary = 0;
  m.groups.push_back(extra);
  EXPECT_THAT(m.Validate(3).message(), HasSubstr("group 5"));
}

TEST(ShardMapTest, StaleShardMapErrorNamesEverything) {
  absl::Status s = StaleShardMapError(1, 3, 4, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "stale shard map: group 1 generation 3 sent, generation 4 held; primary is ps 2");
  EXPECT_TRUE(IsStaleShardMap(s));
  EXPECT_EQ(StaleShardMapError(0, 1, 1, -1).message(), "stale shard map: group 0 generation 1 sent, generation 1 held");
  EXPECT_FALSE(IsStaleShardMap(absl::FailedPreconditionError("something else")));
  // The PS holds an older map than the request was sent with: it lags the client.
  EXPECT_TRUE(IsStaleShardMapOfALaggingPs(StaleShardMapError(1, 5, 4, 2)));
  EXPECT_TRUE(IsStaleShardMapOfALaggingPs(StaleShardMapError(1, 12, 9, -1)));
  EXPECT_FALSE(IsStaleShardMapOfALaggingPs(StaleShardMapError(1, 3, 4, 2))) << "the client lags";
  EXPECT_FALSE(IsStaleShardMapOfALaggingPs(StaleShardMapError(1, 4, 4, 2))) << "not this PS's group";
  EXPECT_FALSE(IsStaleShardMapOfALaggingPs(absl::FailedPreconditionError("stale shard map: garbled")));
  EXPECT_FALSE(IsStaleShardMapOfALaggingPs(absl::UnavailableError("generation 5 sent, generation 4 held")));
  EXPECT_FALSE(IsStaleShardMap(absl::UnavailableError("stale shard map")));
}

}  // namespace
}  // namespace asyncps::ps
