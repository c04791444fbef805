// Shuffle: a buffer of elements from which each Next() takes one at random and refills it
// from the input (tf.data's algorithm). The generator is seeded from the user's seed and the
// Repeat pass, so orders are reproducible and differ between passes.

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "data/dataset_node.h"
#include "data/iterator_state.h"

namespace asyncps::data::internal {
namespace {

// splitmix64: tiny, fast, and the same sequence on every platform (std::uniform_int_distribution
// is not specified bit for bit, which would break determinism across standard libraries).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n), n >= 1 (Lemire's multiply-shift; the bias is below 2^-40 for the
  // buffer sizes used here).
  uint64_t Below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * n) >> 64);
  }

 private:
  uint64_t state_;
};

class ShuffleIterator : public Iterator {
 public:
  ShuffleIterator(std::unique_ptr<Iterator> input, int64_t buffer_size, uint64_t seed)
      : input_(std::move(input)),
        capacity_(static_cast<size_t>(buffer_size)),
        rng_(seed),
        replay_("Shuffle", input_->SaveState()) {}

  absl::StatusOr<Element> Next() override {
    replay_.CountCall();
    while (!input_done_ && buffer_.size() < capacity_) {
      absl::StatusOr<Element> e = input_->Next();
      if (!e.ok()) {
        if (!IsEndOfData(e.status())) return e.status();
        input_done_ = true;
        break;
      }
      buffer_.push_back(*std::move(e));
    }
    if (buffer_.empty()) return absl::OutOfRangeError("end of data");
    size_t pick = static_cast<size_t>(rng_.Below(buffer_.size()));
    std::swap(buffer_[pick], buffer_.back());
    Element out = std::move(buffer_.back());
    buffer_.pop_back();
    return out;
  }

  // The buffer is not saved (it may hold thousands of images): the state is where the input
  // started and the number of calls, and restoring replays them.
  absl::StatusOr<std::string> SaveState() const override { return replay_.Save(); }
  absl::Status RestoreState(absl::string_view state) override { return replay_.Restore(state, *input_, *this); }

 private:
  const std::unique_ptr<Iterator> input_;
  const size_t capacity_;
  Rng rng_;
  std::vector<Element> buffer_;
  bool input_done_ = false;
  SelfReplay replay_;
};

class ShuffleNode : public DatasetNode {
 public:
  ShuffleNode(Dataset input, int64_t buffer_size, uint64_t seed)
      : input_(std::move(input)), buffer_size_(buffer_size), seed_(seed) {}
  absl::StatusOr<std::unique_ptr<Iterator>> MakeIterator(
      const IteratorContext& ctx) const override {
    if (buffer_size_ < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("Shuffle: buffer_size must be >= 1, got ", buffer_size_));
    }
    ASSIGN_OR_RETURN(auto it, MakeIteratorOf(input_, ctx));
    return std::make_unique<ShuffleIterator>(std::move(it), buffer_size_,
                                             MixSeed(seed_, ctx.epoch_key));
  }

 private:
  const Dataset input_;
  const int64_t buffer_size_;
  const uint64_t seed_;
};

}  // namespace

std::shared_ptr<const DatasetNode> MakeShuffleNode(Dataset input, int64_t buffer_size,
                                                   uint64_t seed) {
  return std::make_shared<ShuffleNode>(std::move(input), buffer_size, seed);
}

}  // namespace asyncps::data::internal
