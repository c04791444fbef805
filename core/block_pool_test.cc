#include "core/block_pool.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>

#include "gtest/gtest.h"

namespace asyncps {
namespace block_pool_test_internal {

constexpr size_t kMiB = size_t{1} << 20;

bool IsAligned64(const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; }

BlockPool::Options Small() {
  BlockPool::Options o;
  o.min_block_bytes = kMiB;
  o.max_idle_bytes = 8 * kMiB;
  o.max_idle_blocks = 2;
  return o;
}

TEST(BlockPoolTest, AReleasedBlockServesTheNextAllocationOfAboutItsSize) {
  BlockPool pool(Small());
  void* first;
  {
    std::shared_ptr<void> block = pool.AllocateUninitialized(2 * kMiB);
    ASSERT_NE(block, nullptr);
    EXPECT_TRUE(IsAligned64(block.get()));
    std::memset(block.get(), 7, 2 * kMiB);  // every byte writable
    first = block.get();
    EXPECT_EQ(pool.idle_blocks(), 0u);
  }
  EXPECT_EQ(pool.idle_blocks(), 1u);
  std::shared_ptr<void> again = pool.AllocateUninitialized(2 * kMiB - 100);  // within 1/8
  EXPECT_EQ(again.get(), first);
  EXPECT_EQ(pool.idle_blocks(), 0u);
}

TEST(BlockPoolTest, ABlockMuchLargerThanAskedIsNotHandedOut) {
  BlockPool pool(Small());
  void* large = pool.AllocateUninitialized(4 * kMiB).get();  // released at once
  ASSERT_EQ(pool.idle_blocks(), 1u);
  std::shared_ptr<void> small = pool.AllocateUninitialized(2 * kMiB);
  EXPECT_NE(small.get(), large);
  EXPECT_EQ(pool.idle_blocks(), 1u) << "the 4 MiB block stays idle";
}

TEST(BlockPoolTest, SmallBlocksAreNotKept) {
  BlockPool pool(Small());
  {
    std::shared_ptr<void> block = pool.AllocateUninitialized(kMiB / 2);
    ASSERT_NE(block, nullptr);
  }
  EXPECT_EQ(pool.idle_blocks(), 0u);
}

TEST(BlockPoolTest, IdleBlocksAreBoundedOldestFreedFirst) {
  BlockPool pool(Small());
  std::shared_ptr<void> a = pool.AllocateUninitialized(2 * kMiB);
  std::shared_ptr<void> b = pool.AllocateUninitialized(2 * kMiB);
  std::shared_ptr<void> c = pool.AllocateUninitialized(2 * kMiB);
  void* newest = c.get();
  a.reset();
  b.reset();
  c.reset();
  EXPECT_EQ(pool.idle_blocks(), 2u) << "max_idle_blocks";
  EXPECT_EQ(pool.AllocateUninitialized(2 * kMiB).get(), newest) << "most recently freed first";
  std::shared_ptr<void> big1 = pool.AllocateUninitialized(5 * kMiB);
  std::shared_ptr<void> big2 = pool.AllocateUninitialized(5 * kMiB);
  big1.reset();
  big2.reset();
  EXPECT_EQ(pool.idle_blocks(), 1u) << "max_idle_bytes: 10 MiB over 8 MiB";
}

TEST(BlockPoolTest, ABlockMayOutliveItsPoolAndBeReleasedOnAnotherThread) {
  std::shared_ptr<void> block;
  {
    BlockPool pool(Small());
    block = pool.AllocateUninitialized(2 * kMiB);
    std::memset(block.get(), 1, 2 * kMiB);
  }
  std::thread([b = std::move(block)]() mutable {
    b.reset();
  }).join();  // freed, not kept (ASan/TSan check)
}

}  // namespace block_pool_test_internal
}  // namespace asyncps
