// Interleave and FlatMap (FlatMap is Interleave with a cycle of one and blocks of one).
//
// The cycle follows tf.data's InterleaveDataset step for step: at slot `cycle_index_`, an open
// inner iterator gives the next element of the block (block_length of them, then the next slot);
// an inner iterator that ends is closed and the cycle moves on; an empty slot is filled with the
// next input element's dataset (and read at once); once the input has ended, empty slots are
// passed over. The parallel form runs the same cycle on the caller's thread, but takes elements
// from per-slot buffers that worker threads fill from the open inner iterators, so the order is
// the same. Inner iterators are opened (input Next, fn, MakeIterator) on the caller's thread:
// that keeps which input element lands in which slot exactly the sequential one.

#include <algorithm>
#include <deque>
#include <exception>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/sync.h"
#include "data/dataset_node.h"
#include "data/iterator_state.h"

namespace asyncps::data::internal {
namespace {

using DatasetFn = std::function<absl::StatusOr<Dataset>(Element)>;

absl::StatusOr<Dataset> CallDatasetFn(const DatasetFn& fn, Element element) {
  absl::StatusOr<Dataset> out;
  try {
    out = fn(std::move(element));
  } catch (const std::exception& ex) {
    return absl::InternalError(absl::StrCat("Interleave/FlatMap function threw: ", ex.what()));
  } catch (...) {
    return absl::InternalError("Interleave/FlatMap function threw a non-std::exception");
  }
  if (!out.ok() && IsEndOfData(out.status())) {
    return absl::InternalError(
        absl::StrCat("Interleave/FlatMap function returned OutOfRange: ", out.status().message()));
  }
  return out;
}

// The cycle; subclasses say how an open slot's next element is read and how slots are
// opened and closed.
class CycleIterator : public Iterator {
 public:
  CycleIterator(std::unique_ptr<Iterator> input, std::shared_ptr<const DatasetFn> fn,
                IteratorContext inner_ctx, int64_t cycle_length, int64_t block_length)
      : cycle_length_(cycle_length),
        block_length_(block_length),
        input_(std::move(input)),
        fn_(std::move(fn)),
        inner_ctx_(std::move(inner_ctx)),
        replay_("Interleave", input_->SaveState()) {}

  absl::StatusOr<Element> Next() override {
    replay_.CountCall();
    while (!input_ended_ || num_open_ > 0) {
      if (IsOpen(cycle_index_)) {
        absl::StatusOr<Element> e = NextOf(cycle_index_);
        if (e.ok()) {
          if (++block_index_ == block_length_) Advance();
          return e;
        }
        // An inner error is returned in place of nothing: the block does not move on.
        if (!IsEndOfData(e.status())) return e.status();
        Close(cycle_index_);
        --num_open_;
        Advance();
      } else if (!input_ended_) {
        absl::StatusOr<Element> in = input_->Next();
        if (!in.ok()) {
          if (!IsEndOfData(in.status())) return in.status();
          input_ended_ = true;
          continue;
        }
        ASSIGN_OR_RETURN(Dataset inner, CallDatasetFn(*fn_, *std::move(in)));
        IteratorContext ctx = inner_ctx_;
        ctx.epoch_key = MixSeed(inner_ctx_.epoch_key, static_cast<uint64_t>(opened_++));
        ASSIGN_OR_RETURN(std::unique_ptr<Iterator> it, MakeIteratorOf(inner, ctx));
        Open(cycle_index_, std::move(it));
        ++num_open_;
      } else {
        Advance();
      }
    }
    return absl::OutOfRangeError("end of data");
  }

  // The open inner iterators are not saved: the state is where the input started and the
  // number of calls, and restoring replays them.
  absl::StatusOr<std::string> SaveState() const override { return replay_.Save(); }
  absl::Status RestoreState(absl::string_view state) override { return replay_.Restore(state, *input_, *this); }

 protected:
  virtual bool IsOpen(int64_t slot) = 0;
  virtual absl::StatusOr<Element> NextOf(int64_t slot) = 0;
  virtual void Open(int64_t slot, std::unique_ptr<Iterator> it) = 0;
  virtual void Close(int64_t slot) = 0;

  const int64_t cycle_length_;
  const int64_t block_length_;

 private:
  void Advance() {
    cycle_index_ = (cycle_index_ + 1) % cycle_length_;
    block_index_ = 0;
  }

  const std::unique_ptr<Iterator> input_;
  const std::shared_ptr<const DatasetFn> fn_;
  const IteratorContext inner_ctx_;
  int64_t cycle_index_ = 0;
  int64_t block_index_ = 0;
  int64_t num_open_ = 0;
  int64_t opened_ = 0;
  bool input_ended_ = false;
  SelfReplay replay_;
};

class SequentialInterleaveIterator : public CycleIterator {
 public:
  SequentialInterleaveIterator(std::unique_ptr<Iterator> input, std::shared_ptr<const DatasetFn> fn,
                               IteratorContext inner_ctx, int64_t cycle_length,
                               int64_t block_length)
      : CycleIterator(std::move(input), std::move(fn), std::move(inner_ctx), cycle_length,
                      block_length),
        slots_(static_cast<size_t>(cycle_length)) {}

 protected:
  bool IsOpen(int64_t slot) override { return slots_[slot] != nullptr; }
  absl::StatusOr<Element> NextOf(int64_t slot) override { return slots_[slot]->Next(); }
  void Open(int64_t slot, std::unique_ptr<Iterator> it) override { slots_[slot] = std::move(it); }
  void Close(int64_t slot) override { slots_[slot].reset(); }

 private:
  std::vector<std::unique_ptr<Iterator>> slots_;
};

// Worker threads fill each open slot's buffer (up to block_length elements) from its inner
// iterator, lowest slot first (every open slot below block_length is filled, so none starves). A
// slot's iterator is touched by one worker at a time (`busy`), and opened and closed by the caller
// only while no worker holds it.
class ParallelInterleaveIterator : public CycleIterator {
 public:
  ParallelInterleaveIterator(std::unique_ptr<Iterator> input, std::shared_ptr<const DatasetFn> fn,
                             IteratorContext inner_ctx, int64_t cycle_length, int64_t block_length,
                             int64_t num_threads)
      : CycleIterator(std::move(input), std::move(fn), std::move(inner_ctx), cycle_length,
                      block_length),
        slots_(static_cast<size_t>(cycle_length)) {
    for (int64_t i = 0; i < num_threads; ++i) threads_.emplace_back([this] { Work(); });
  }

  ~ParallelInterleaveIterator() override {
    {
      MutexLock lock(&mu_);
      cancelled_ = true;
    }
    for (std::thread& t : threads_) t.join();
  }

 protected:
  bool IsOpen(int64_t slot) override {
    MutexLock lock(&mu_);
    return slots_[slot].it != nullptr;
  }

  absl::StatusOr<Element> NextOf(int64_t slot) override {
    MutexLock lock(&mu_);
    Slot& s = slots_[slot];
    mu_.Await(absl::Condition(
        +[](Slot* s) { return !s->buffer.empty() || s->ended; }, &s));
    if (s.buffer.empty()) return absl::OutOfRangeError("end of data");
    Item item = std::move(s.buffer.front());
    s.buffer.pop_front();
    if (!item.status.ok()) return item.status;
    return std::move(item.element);
  }

  void Open(int64_t slot, std::unique_ptr<Iterator> it) override {
    MutexLock lock(&mu_);
    slots_[slot] = Slot{};
    slots_[slot].it = std::move(it);
  }

  void Close(int64_t slot) override {
    std::unique_ptr<Iterator> closed;
    {
      MutexLock lock(&mu_);
      // Only an ended slot is closed, and a worker marks it ended as it lets go of it.
      closed = std::move(slots_[slot].it);
      slots_[slot] = Slot{};
    }
    // Destroyed outside the lock: an inner Prefetch joins its thread.
  }

 private:
  struct Item {
    absl::Status status;
    Element element;
  };
  struct Slot {
    std::unique_ptr<Iterator> it;
    std::deque<Item> buffer;
    bool busy = false;
    bool ended = false;
  };

  // The open slot to fill next; -1 when none needs it.
  int64_t PickLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (int64_t i = 0; i < cycle_length_; ++i) {
      const Slot& s = slots_[i];
      if (s.it != nullptr && !s.busy && !s.ended &&
          static_cast<int64_t>(s.buffer.size()) < block_length_) {
        return i;
      }
    }
    return -1;
  }

  bool HasWorkLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return cancelled_ || PickLocked() >= 0;
  }

  void Work() {
    while (true) {
      Iterator* it;
      int64_t slot;
      {
        MutexLock lock(&mu_);
        mu_.Await(absl::Condition(this, &ParallelInterleaveIterator::HasWorkLocked));
        if (cancelled_) return;
        slot = PickLocked();
        slots_[slot].busy = true;
        it = slots_[slot].it.get();
      }
      absl::StatusOr<Element> e = it->Next();
      MutexLock lock(&mu_);
      Slot& s = slots_[slot];
      s.busy = false;
      if (e.ok()) {
        s.buffer.push_back(Item{absl::OkStatus(), *std::move(e)});
      } else if (IsEndOfData(e.status())) {
        s.ended = true;
      } else {
        s.buffer.push_back(Item{e.status(), {}});
      }
    }
  }

  Mutex mu_;
  std::vector<Slot> slots_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // last: started after every member they use
};

class InterleaveNode : public DatasetNode {
 public:
  InterleaveNode(Dataset input, DatasetFn fn, int64_t cycle_length, int64_t block_length,
                 int64_t num_parallel_calls)
      : input_(std::move(input)),
        fn_(std::make_shared<const DatasetFn>(std::move(fn))),
        cycle_length_(cycle_length),
        block_length_(block_length),
        num_parallel_calls_(num_parallel_calls) {}

  absl::StatusOr<std::unique_ptr<Iterator>> MakeIterator(
      const IteratorContext& ctx) const override {
    if (!*fn_) return absl::InvalidArgumentError("Interleave/FlatMap: empty function");
    if (cycle_length_ < 1 && cycle_length_ != kAutotune) {
      return absl::InvalidArgumentError(
          absl::StrCat("Interleave: cycle_length must be >= 1 or kAutotune, got ", cycle_length_));
    }
    if (block_length_ < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("Interleave: block_length must be >= 1, got ", block_length_));
    }
    if (num_parallel_calls_ < 0 && num_parallel_calls_ != kAutotune) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Interleave: num_parallel_calls must be >= 0 or kAutotune, got ", num_parallel_calls_));
    }
    const int64_t cycle = cycle_length_ == kAutotune ? HardwareThreads() : cycle_length_;
    ASSIGN_OR_RETURN(auto in, MakeIteratorOf(input_, ctx));
    // The split (sharding) applied to the input; the inner datasets are read whole.
    IteratorContext inner;
    inner.epoch_key = ctx.epoch_key;
    if (num_parallel_calls_ == 0) {
      return std::make_unique<SequentialInterleaveIterator>(std::move(in), fn_, inner, cycle,
                                                            block_length_);
    }
    const int64_t threads =
        std::min(cycle, num_parallel_calls_ == kAutotune ? HardwareThreads() : num_parallel_calls_);
    return std::make_unique<ParallelInterleaveIterator>(std::move(in), fn_, inner, cycle,
                                                        block_length_, threads);
  }

 private:
  const Dataset input_;
  const std::shared_ptr<const DatasetFn> fn_;
  const int64_t cycle_length_;
  const int64_t block_length_;
  const int64_t num_parallel_calls_;
};

}  // namespace

std::shared_ptr<const DatasetNode> MakeInterleaveNode(Dataset input, DatasetFn fn,
                                                      int64_t cycle_length, int64_t block_length,
                                                      int64_t num_parallel_calls) {
  return std::make_shared<InterleaveNode>(std::move(input), std::move(fn), cycle_length,
                                          block_length, num_parallel_calls);
}

}  // namespace asyncps::data::internal
