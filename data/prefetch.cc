// Prefetch: a producer thread runs the input ahead into a bounded buffer.
//
// Shutdown: the destructor raises `cancelled_` and joins. The producer checks it before each
// input Next() and while it waits for room, so a full buffer releases it at once; an input
// Next() already running (a slow source) is waited for, never abandoned, so nothing it
// touches is freed under it.

#include <deque>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/sync.h"
#include "data/dataset_node.h"
#include "data/iterator_state.h"

namespace asyncps::data::internal {
namespace {

class PrefetchIterator : public Iterator {
 public:
  PrefetchIterator(std::unique_ptr<Iterator> input, int64_t buffer_size, bool start_now)
      : input_(std::move(input)),
        capacity_(static_cast<size_t>(buffer_size)),
        base_(input_->SaveState()) {
    if (start_now) producer_ = std::thread([this] { Produce(); });
  }

  ~PrefetchIterator() override {
    {
      MutexLock lock(&mu_);
      cancelled_ = true;
    }
    if (producer_.joinable()) producer_.join();
  }

  absl::StatusOr<Element> Next() override {
    // Deferred to here for an iterator that is to be restored (IteratorContext::defer_threads).
    if (!producer_.joinable()) producer_ = std::thread([this] { Produce(); });
    MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](PrefetchIterator* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
          return !self->buffer_.empty() || self->input_ended_;
        },
        this));
    if (buffer_.empty()) return absl::OutOfRangeError("end of data");
    Slot slot = std::move(buffer_.front());
    buffer_.pop_front();
    ++consumed_;
    if (!slot.status.ok()) return slot.status;
    return std::move(slot.element);
  }

 private:
  void Produce() {
    while (true) {
      {
        MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](PrefetchIterator* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
              return self->cancelled_ || self->buffer_.size() < self->capacity_;
            },
            this));
        if (cancelled_) return;
      }
      // Only this thread touches input_ until the destructor has joined it.
      absl::StatusOr<Element> e = input_->Next();
      MutexLock lock(&mu_);
      if (!e.ok() && IsEndOfData(e.status())) {
        input_ended_ = true;
        return;
      }
      // Errors go through the buffer in order; the input decides whether more follow.
      if (e.ok()) {
        buffer_.push_back(Slot{absl::OkStatus(), *std::move(e)});
      } else {
        buffer_.push_back(Slot{e.status(), {}});
      }
    }
  }

 public:
  // One input call per element or error returned: the state is where the input started and
  // how many calls were returned; restoring repeats them on the input (not the buffer).
  absl::StatusOr<std::string> SaveState() const override {
    if (!base_.ok()) return base_.status();
    MutexLock lock(&mu_);
    return EncodeReplay("Prefetch", {*base_, consumed_});
  }
  absl::Status RestoreState(absl::string_view state) override {
    ASSIGN_OR_RETURN(ReplayState replay, DecodeReplay("Prefetch", state));
    if (producer_.joinable()) {
      return absl::FailedPreconditionError(
          "Prefetch: RestoreState on a started iterator (use Dataset::RestoreIterator)");
    }
    RETURN_IF_ERROR(input_->RestoreState(replay.base));
    SkipCalls(*input_, replay.calls);
    base_ = replay.base;
    MutexLock lock(&mu_);
    consumed_ = replay.calls;
    return absl::OkStatus();
  }

 private:
  // An element or an error. (A plain struct: g++ 12 misreports moves of a StatusOr<vector>
  // out of a deque as uninitialised reads.)
  struct Slot {
    absl::Status status;
    Element element;
  };

  const std::unique_ptr<Iterator> input_;
  const size_t capacity_;
  absl::StatusOr<std::string> base_;  // the input's state when this pass started
  mutable Mutex mu_;
  int64_t consumed_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Slot> buffer_ ABSL_GUARDED_BY(mu_);
  bool input_ended_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::thread producer_;  // last: started after every member it uses is constructed
};

class PrefetchNode : public DatasetNode {
 public:
  PrefetchNode(Dataset input, int64_t buffer_size)
      : input_(std::move(input)), buffer_size_(buffer_size) {}
  absl::StatusOr<std::unique_ptr<Iterator>> MakeIterator(
      const IteratorContext& ctx) const override {
    if (buffer_size_ < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("Prefetch: buffer_size must be >= 1, got ", buffer_size_));
    }
    ASSIGN_OR_RETURN(auto it, MakeIteratorOf(input_, ctx));
    return std::make_unique<PrefetchIterator>(std::move(it), buffer_size_, !ctx.defer_threads);
  }

 private:
  const Dataset input_;
  const int64_t buffer_size_;
};

}  // namespace

std::shared_ptr<const DatasetNode> MakePrefetchNode(Dataset input, int64_t buffer_size) {
  return std::make_shared<PrefetchNode>(std::move(input), buffer_size);
}

}  // namespace asyncps::data::internal
