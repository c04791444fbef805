// Restricting a source to a split of its records (static and dynamic sharding).

#include <utility>

#include "core/status_macros.h"
#include "data/dataset_node.h"
#include "data/iterator_state.h"

namespace asyncps::data::internal {
namespace {

// Skips records rather than seeking: every source can do it, and positioning happens once per
// split and worker (the worker keeps its iterator between closures).
class SourceSplitIterator : public Iterator {
 public:
  SourceSplitIterator(std::unique_ptr<Iterator> source, const SourceSplit& split,
                      std::shared_ptr<std::atomic<bool>> beyond_source)
      : source_(std::move(source)), split_(split), beyond_source_(std::move(beyond_source)) {}

  absl::StatusOr<Element> Next() override {
    if (ended_) return absl::OutOfRangeError("end of split");
    // Records still to skip before the next one this split reads.
    const int64_t gap = started_ ? split_.stride - 1 : split_.begin;
    started_ = true;
    for (int64_t i = 0; i < gap; ++i) {
      absl::StatusOr<Element> skipped = source_->Next();
      if (!skipped.ok()) return End(skipped.status());
      ++position_;
    }
    if (position_ >= split_.end) {
      ended_ = true;  // the split ended, not the source
      return absl::OutOfRangeError("end of split");
    }
    absl::StatusOr<Element> e = source_->Next();
    if (!e.ok()) return End(e.status());
    ++position_;
    return e;
  }

  absl::StatusOr<std::string> SaveState() const override {
    ASSIGN_OR_RETURN(std::string source, source_->SaveState());
    StateWriter w("SourceSplit");
    w.Bytes(source);
    w.Int(position_);
    w.Int(started_ ? 1 : 0);
    w.Int(ended_ ? 1 : 0);
    return std::move(w).Finish();
  }
  absl::Status RestoreState(absl::string_view state) override {
    ASSIGN_OR_RETURN(StateReader r, StateReader::Open(state, "SourceSplit"));
    ASSIGN_OR_RETURN(std::string source, r.Bytes());
    ASSIGN_OR_RETURN(position_, r.Int());
    ASSIGN_OR_RETURN(int64_t started, r.Int());
    ASSIGN_OR_RETURN(int64_t ended, r.Int());
    started_ = started != 0;
    ended_ = ended != 0;
    return source_->RestoreState(source);
  }

 private:
  absl::Status End(absl::Status status) {
    if (!IsEndOfData(status)) return status;  // the source's error (sticky there)
    ended_ = true;
    if (position_ <= split_.begin && beyond_source_ != nullptr) beyond_source_->store(true);
    return status;
  }

  std::unique_ptr<Iterator> source_;
  const SourceSplit split_;
  const std::shared_ptr<std::atomic<bool>> beyond_source_;
  int64_t position_ = 0;  // records read from the source so far
  bool started_ = false;
  bool ended_ = false;
};

}  // namespace

std::unique_ptr<Iterator> MakeSourceSplitIterator(std::unique_ptr<Iterator> source, const SourceSplit& split,
                                                  std::shared_ptr<std::atomic<bool>> beyond_source) {
  return std::make_unique<SourceSplitIterator>(std::move(source), split, std::move(beyond_source));
}

}  // namespace asyncps::data::internal
