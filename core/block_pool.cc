#include "core/block_pool.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "core/sync.h"
#include "core/tensor.h"

namespace asyncps {
namespace {

constexpr size_t kAlignment = 64;  // as AllocateAlignedUninitialized's

}  // namespace

class BlockPool::Shelf {
 public:
  // A member type, not one of this file's anonymous namespace: the unity build includes this
  // file into another, where a field of an anonymous-namespace type is an error.
  struct IdleBlock {
    std::shared_ptr<void> block;  // from AllocateAlignedUninitialized
    size_t capacity;              // usable bytes
  };

  explicit Shelf(Options options) : options_(options) {}

  const Options& options() const { return options_; }

  // An idle block of `bytes` to 1/8 more, or an empty one.
  IdleBlock Take(size_t bytes) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    for (size_t i = idle_.size(); i-- > 0;) {  // most recently freed first: warm in cache
      if (idle_[i].capacity >= bytes && idle_[i].capacity - bytes <= bytes / 8) {
        IdleBlock b = std::move(idle_[i]);
        idle_.erase(idle_.begin() + static_cast<ptrdiff_t>(i));
        idle_bytes_ -= b.capacity;
        return b;
      }
    }
    return {nullptr, 0};
  }

  // Keeps `b` idle (freeing the oldest past the bounds), or frees it once the pool is gone.
  void Give(IdleBlock b) ABSL_LOCKS_EXCLUDED(mu_) {
    std::vector<IdleBlock> evicted;  // freed (munmap) outside the lock
    {
      MutexLock lock(&mu_);
      if (closed_) {
        evicted.push_back(std::move(b));
      } else {
        idle_bytes_ += b.capacity;
        idle_.push_back(std::move(b));
        while (idle_bytes_ > options_.max_idle_bytes || idle_.size() > options_.max_idle_blocks) {
          idle_bytes_ -= idle_.front().capacity;
          evicted.push_back(std::move(idle_.front()));
          idle_.erase(idle_.begin());
        }
      }
    }
  }

  void Close() ABSL_LOCKS_EXCLUDED(mu_) {
    std::vector<IdleBlock> idle;  // declared first: freed after the lock is released
    MutexLock lock(&mu_);
    closed_ = true;
    idle.swap(idle_);
    idle_bytes_ = 0;
  }

  size_t idle_blocks() const ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    return idle_.size();
  }

 private:
  const Options options_;
  mutable Mutex mu_;
  std::vector<IdleBlock> idle_ ABSL_GUARDED_BY(mu_);
  size_t idle_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

BlockPool::BlockPool() : BlockPool(Options()) {}

BlockPool::BlockPool(Options options) : shelf_(std::make_shared<Shelf>(options)) {}

BlockPool::~BlockPool() { shelf_->Close(); }

std::shared_ptr<void> BlockPool::AllocateUninitialized(size_t bytes) {
  const size_t rounded = std::max(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  if (rounded < shelf_->options().min_block_bytes) return AllocateAlignedUninitialized(bytes);
  Shelf::IdleBlock b = shelf_->Take(rounded);
  if (b.block == nullptr) b = {AllocateAlignedUninitialized(rounded), rounded};
  void* data = b.block.get();
  // The returned pointer's deleter gives the block back to the shelf (which the block keeps
  // alive, so a block released after the pool is gone is simply freed).
  return std::shared_ptr<void>(
      data, [shelf = shelf_, b = std::move(b)](void*) mutable { shelf->Give(std::move(b)); });
}

size_t BlockPool::idle_blocks() const { return shelf_->idle_blocks(); }

}  // namespace asyncps
