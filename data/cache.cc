// Cache: the first complete pass over the input is kept in memory; iterators made after it
// (including later passes of an enclosing Repeat) replay it instead of reading the input.

#include <utility>

#include "core/status_macros.h"
#include "core/sync.h"
#include "data/dataset_node.h"

namespace asyncps::data::internal {
namespace {

using Elements = std::vector<Element>;

class CacheNode : public DatasetNode, public std::enable_shared_from_this<CacheNode> {
 public:
  explicit CacheNode(Dataset input) : input_(std::move(input)) {}

  absl::StatusOr<std::unique_ptr<Iterator>> MakeIterator(
      const IteratorContext& ctx) const override {
    // One split of dynamic sharding is read once; caching it would replay it for the next.
    if (ctx.single_pass) return MakeIteratorOf(input_, ctx);
    std::shared_ptr<const Elements> cached = Cached();
    if (cached != nullptr) return std::unique_ptr<Iterator>(new ReplayIterator(std::move(cached)));
    ASSIGN_OR_RETURN(auto input, MakeIteratorOf(input_, ctx));
    return std::unique_ptr<Iterator>(new FillingIterator(shared_from_this(), std::move(input)));
  }

 private:
  class ReplayIterator : public Iterator {
   public:
    explicit ReplayIterator(std::shared_ptr<const Elements> elements)
        : elements_(std::move(elements)) {}
    absl::StatusOr<Element> Next() override {
      if (next_ >= elements_->size()) return absl::OutOfRangeError("end of data");
      return (*elements_)[next_++];
    }
    absl::StatusOr<std::string> SaveState() const override { return Unsaveable(); }

   private:
    const std::shared_ptr<const Elements> elements_;
    size_t next_ = 0;
  };

  // Reads the input, keeping what it returns; publishes the cache only at a clean end, so a
  // partial or failed pass never leaves a truncated cache behind.
  class FillingIterator : public Iterator {
   public:
    FillingIterator(std::shared_ptr<const CacheNode> node, std::unique_ptr<Iterator> input)
        : node_(std::move(node)), input_(std::move(input)) {}
    absl::StatusOr<Element> Next() override {
      absl::StatusOr<Element> e = input_->Next();
      if (e.ok()) {
        if (!failed_) seen_.push_back(*e);
      } else if (IsEndOfData(e.status())) {
        if (!failed_ && !published_) {
          node_->Publish(std::make_shared<const Elements>(std::move(seen_)));
          published_ = true;
        }
      } else {
        failed_ = true;
        seen_.clear();
      }
      return e;
    }
    absl::StatusOr<std::string> SaveState() const override { return Unsaveable(); }

   private:
    const std::shared_ptr<const CacheNode> node_;
    const std::unique_ptr<Iterator> input_;
    Elements seen_;
    bool failed_ = false;
    bool published_ = false;
  };

  static absl::Status Unsaveable() {
    return absl::UnimplementedError(
        "Cache: an iterator's position cannot be saved (save before the Cache, or drop it)");
  }

  std::shared_ptr<const Elements> Cached() const {
    MutexLock lock(&mu_);
    return cache_;
  }
  // The first complete pass wins; later ones saw the same elements.
  void Publish(std::shared_ptr<const Elements> elements) const {
    MutexLock lock(&mu_);
    if (cache_ == nullptr) cache_ = std::move(elements);
  }

  const Dataset input_;
  // The cache is a memo of the input, not a change to what the dataset yields, so the node
  // stays logically immutable.
  mutable Mutex mu_;
  mutable std::shared_ptr<const Elements> cache_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::shared_ptr<const DatasetNode> MakeCacheNode(Dataset input) {
  return std::make_shared<CacheNode>(std::move(input));
}

}  // namespace asyncps::data::internal
