// Parallel Map: worker threads take input elements in turn, each tagged with its position, run
// the function outside the lock and file the result under that position; Next() returns the
// positions in order, so the output is the sequential Map's.
//
// One worker at a time reads the input (`reading_`), outside the lock: input iterators are
// used by one thread at a time. At most `target_` elements are taken and not yet returned, so
// memory stays bounded however slow the consumer.
//
// kAutotune: parallelism is raised by one (up to the machine's threads) each time Next() finds
// its element not ready while the function's mean cost is at least kMinParallelCost. The
// stall says the map is the bottleneck; the cost floor keeps a cheap function, for which the
// hand-off between threads costs more than it saves, on one thread.
//
// Shutdown: the destructor raises `cancelled_` and joins; workers check it before taking an
// element, and a call in flight (input Next or the function) is waited for, never abandoned.

#include <map>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/status_macros.h"
#include "core/sync.h"
#include "data/dataset_node.h"
#include "data/iterator_state.h"

namespace asyncps::data::internal {
namespace {

using MapFn = std::function<absl::StatusOr<Element>(Element)>;

constexpr absl::Duration kMinParallelCost = absl::Microseconds(50);

class ParallelMapIterator : public Iterator {
 public:
  ParallelMapIterator(std::unique_ptr<Iterator> input, std::shared_ptr<const MapFn> fn,
                      int64_t parallelism, bool autotune, bool start_now)
      : input_(std::move(input)),
        fn_(std::move(fn)),
        autotune_(autotune),
        max_parallelism_(autotune ? HardwareThreads() : parallelism),
        base_(input_->SaveState()) {
    MutexLock lock(&mu_);
    target_ = parallelism;
    if (start_now) GrowPoolLocked();
  }

  ~ParallelMapIterator() override {
    {
      MutexLock lock(&mu_);
      cancelled_ = true;
    }
    for (std::thread& t : threads_) t.join();
  }

  absl::StatusOr<Element> Next() override {
    MutexLock lock(&mu_);
    // Deferred to here for an iterator that is to be restored (IteratorContext::defer_threads).
    if (threads_.empty()) GrowPoolLocked();
    if (!ReadyLocked()) {
      // The consumer waits on the map: with autotuning and a costly function, add a thread.
      if (autotune_ && target_ < max_parallelism_ && calls_ > 0 &&
          total_cost_ / calls_ >= kMinParallelCost) {
        ++target_;
        GrowPoolLocked();
      }
      mu_.Await(absl::Condition(this, &ParallelMapIterator::ReadyLocked));
    }
    auto it = results_.find(next_out_);
    if (it == results_.end()) return absl::OutOfRangeError("end of data");  // next_out_ == end
    Slot slot = std::move(it->second);
    results_.erase(it);
    ++next_out_;
    if (!slot.status.ok()) return slot.status;
    return std::move(slot.element);
  }

  // A 1:1 stage: the state is where the input started and how many positions were returned;
  // restoring repeats those calls on the input, without the function.
  absl::StatusOr<std::string> SaveState() const override {
    if (!base_.ok()) return base_.status();
    MutexLock lock(&mu_);
    return EncodeReplay("ParallelMap", {*base_, next_out_});
  }
  absl::Status RestoreState(absl::string_view state) override {
    ASSIGN_OR_RETURN(ReplayState replay, DecodeReplay("ParallelMap", state));
    {
      MutexLock lock(&mu_);
      if (!threads_.empty()) {
        return absl::FailedPreconditionError(
            "Map: RestoreState on a started iterator (use Dataset::RestoreIterator)");
      }
    }
    RETURN_IF_ERROR(input_->RestoreState(replay.base));
    SkipCalls(*input_, replay.calls);
    base_ = replay.base;
    MutexLock lock(&mu_);
    next_in_ = next_out_ = replay.calls;
    return absl::OkStatus();
  }

 private:
  // An element or an error (a plain struct: see prefetch.cc).
  struct Slot {
    absl::Status status;
    Element element;
  };

  bool ReadyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return results_.count(next_out_) > 0 || (input_ended_ && next_out_ >= end_);
  }

  bool CanTakeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return cancelled_ || input_ended_ || (!reading_ && next_in_ - next_out_ < target_);
  }

  void GrowPoolLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (static_cast<int64_t>(threads_.size()) < target_) {
      threads_.emplace_back([this] { Work(); });
    }
  }

  void Work() {
    while (true) {
      int64_t position;
      {
        MutexLock lock(&mu_);
        mu_.Await(absl::Condition(this, &ParallelMapIterator::CanTakeLocked));
        if (cancelled_ || input_ended_) return;
        reading_ = true;
        position = next_in_++;
      }
      // Only the thread that set reading_ touches input_ until it clears it.
      absl::StatusOr<Element> in = input_->Next();
      if (!in.ok()) {
        MutexLock lock(&mu_);
        reading_ = false;
        if (IsEndOfData(in.status())) {
          input_ended_ = true;
          end_ = position;
          next_in_ = position;
          return;
        }
        // The input's error takes this position; the input decides whether more follow.
        results_[position] = Slot{in.status(), {}};
        continue;
      }
      {
        MutexLock lock(&mu_);
        reading_ = false;
      }
      const absl::Time start = absl::Now();
      absl::StatusOr<Element> out = CallMapFn(*fn_, *std::move(in));
      const absl::Duration cost = absl::Now() - start;
      MutexLock lock(&mu_);
      total_cost_ += cost;
      ++calls_;
      if (out.ok()) {
        results_[position] = Slot{absl::OkStatus(), *std::move(out)};
      } else {
        results_[position] = Slot{out.status(), {}};
      }
    }
  }

  const std::unique_ptr<Iterator> input_;
  const std::shared_ptr<const MapFn> fn_;
  const bool autotune_;
  const int64_t max_parallelism_;
  absl::StatusOr<std::string> base_;  // the input's state when this pass started
  mutable Mutex mu_;
  int64_t target_ ABSL_GUARDED_BY(mu_) = 1;    // threads allowed, and elements taken ahead
  int64_t next_in_ ABSL_GUARDED_BY(mu_) = 0;   // position of the next element taken
  int64_t next_out_ ABSL_GUARDED_BY(mu_) = 0;  // position Next() returns next
  int64_t end_ ABSL_GUARDED_BY(mu_) = 0;       // the input's length, once input_ended_
  bool reading_ ABSL_GUARDED_BY(mu_) = false;  // a worker is in input_->Next()
  bool input_ended_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::map<int64_t, Slot> results_ ABSL_GUARDED_BY(mu_);
  absl::Duration total_cost_ ABSL_GUARDED_BY(mu_);
  int64_t calls_ ABSL_GUARDED_BY(mu_) = 0;
  // Written only by the consumer's thread (constructor, Next) under mu_; joined by the
  // destructor once no Next() can run.
  std::vector<std::thread> threads_;
};

class ParallelMapNode : public DatasetNode {
 public:
  ParallelMapNode(Dataset input, MapFn fn, int64_t num_parallel_calls)
      : input_(std::move(input)),
        fn_(std::make_shared<const MapFn>(std::move(fn))),
        num_parallel_calls_(num_parallel_calls) {}

  absl::StatusOr<std::unique_ptr<Iterator>> MakeIterator(
      const IteratorContext& ctx) const override {
    if (!*fn_) return absl::InvalidArgumentError("Map: empty function");
    if (num_parallel_calls_ < 1 && num_parallel_calls_ != kAutotune) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Map: num_parallel_calls must be >= 1 or kAutotune, got ", num_parallel_calls_));
    }
    ASSIGN_OR_RETURN(auto in, MakeIteratorOf(input_, ctx));
    const bool autotune = num_parallel_calls_ == kAutotune;
    return std::make_unique<ParallelMapIterator>(
        std::move(in), fn_, autotune ? 1 : num_parallel_calls_, autotune, !ctx.defer_threads);
  }

 private:
  const Dataset input_;
  const std::shared_ptr<const MapFn> fn_;
  const int64_t num_parallel_calls_;
};

}  // namespace

std::shared_ptr<const DatasetNode> MakeParallelMapNode(Dataset input, MapFn fn,
                                                       int64_t num_parallel_calls) {
  return std::make_shared<ParallelMapNode>(std::move(input), std::move(fn), num_parallel_calls);
}

}  // namespace asyncps::data::internal
