// Element-wise and structural transforms: Zip, Map, Filter, Take, Skip, Shard, Repeat.
//
// Every iterator holds a reference to its node (or input Dataset), so iterators outlive the
// Dataset handles they were made from.

#include <algorithm>
#include <exception>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "data/dataset_node.h"
#include "data/iterator_state.h"

namespace asyncps::data::internal {
namespace {

absl::Status EndOfData() { return absl::OutOfRangeError("end of data"); }

// ---- Zip ----

class ZipIterator : public Iterator {
 public:
  explicit ZipIterator(std::vector<std::unique_ptr<Iterator>> inputs)
      : inputs_(std::move(inputs)) {}
  absl::StatusOr<Element> Next() override {
    Element out;
    for (auto& in : inputs_) {
      ASSIGN_OR_RETURN(Element e, in->Next());
      for (Tensor& t : e) out.push_back(std::move(t));
    }
    return out;
  }
  absl::StatusOr<std::string> SaveState() const override {
    StateWriter w("Zip");
    w.Int(static_cast<int64_t>(inputs_.size()));
    for (const auto& in : inputs_) {
      ASSIGN_OR_RETURN(std::string s, in->SaveState());
      w.Bytes(s);
    }
    return std::move(w).Finish();
  }
  absl::Status RestoreState(absl::string_view state) override {
    ASSIGN_OR_RETURN(StateReader r, StateReader::Open(state, "Zip"));
    ASSIGN_OR_RETURN(int64_t n, r.Int());
    if (n != static_cast<int64_t>(inputs_.size())) {
      return absl::InvalidArgumentError("iterator state: Zip of another number of datasets");
    }
    for (auto& in : inputs_) {
      ASSIGN_OR_RETURN(std::string s, r.Bytes());
      RETURN_IF_ERROR(in->RestoreState(s));
    }
    return absl::OkStatus();
  }

 private:
  std::vector<std::unique_ptr<Iterator>> inputs_;
};

class ZipNode : public DatasetNode {
 public:
  explicit ZipNode(std::vector<Dataset> inputs) : inputs_(std::move(inputs)) {}
  absl::StatusOr<std::unique_ptr<Iterator>> MakeIterator(
      const IteratorContext& ctx) const override {
    if (inputs_.empty()) return absl::InvalidArgumentError("Zip: no datasets");
    std::vector<std::unique_ptr<Iterator>> its;
    for (const Dataset& d : inputs_) {
      ASSIGN_OR_RETURN(auto it, MakeIteratorOf(d, ctx));
      its.push_back(std::move(it));
    }
    return std::make_unique<ZipIterator>(std::move(its));
  }

 private:
  const std::vector<Dataset> inputs_;
};

// ---- Map / Filter ----

using MapFn = std::function<absl::StatusOr<Element>(Element)>;
using FilterFn = std::function<absl::StatusOr<bool>(const Element&)>;

class MapIterator : public Iterator {
 public:
  MapIterator(std::unique_ptr<Iterator> input, std::shared_ptr<const MapFn> fn)
      : input_(std::move(input)), fn_(std::move(fn)) {}
  absl::StatusOr<Element> Next() override {
    ASSIGN_OR_RETURN(Element e, input_->Next());
    return CallMapFn(*fn_, std::move(e));
  }
  absl::StatusOr<std::string> SaveState() const override {
    ASSIGN_OR_RETURN(std::string input, input_->SaveState());
    StateWriter w("Map");
    w.Bytes(input);
    return std::move(w).Finish();
  }
  absl::Status RestoreState(absl::string_view state) override {
    ASSIGN_OR_RETURN(StateReader r, StateReader::Open(state, "Map"));
    ASSIGN_OR_RETURN(std::string input, r.Bytes());
    return input_->RestoreState(input);
  }

 private:
  const std::unique_ptr<Iterator> input_;
  const std::shared_ptr<const MapFn> fn_;
};

class MapNode : public DatasetNode {
 public:
  MapNode(Dataset input, MapFn fn)
      : input_(std::move(input)), fn_(std::make_shared<const MapFn>(std::move(fn))) {}
  absl::StatusOr<std::unique_ptr<Iterator>> MakeIterator(
      const IteratorContext& ctx) const override {
    if (!*fn_) return absl::InvalidArgumentError("Map: empty function");
    ASSIGN_OR_RETURN(auto it, MakeIteratorOf(input_, ctx));
    return std::make_unique<MapIterator>(std::move(it), fn_);
  }

 private:
  const Dataset input_;
  const std::shared_ptr<const MapFn> fn_;
};

class FilterIterator : public Iterator {
 public:
  FilterIterator(std::unique_ptr<Iterator> input, std::shared_ptr<const FilterFn> pred)
      : input_(std::move(input)), pred_(std::move(pred)) {}
  absl::StatusOr<Element> Next() override {
    while (true) {
      ASSIGN_OR_RETURN(Element e, input_->Next());
      absl::StatusOr<bool> keep;
      try {
        keep = (*pred_)(e);
      } catch (const std::exception& ex) {
        return absl::InternalError(absl::StrCat("Filter predicate threw: ", ex.what()));
      }
      if (!keep.ok()) {
        if (IsEndOfData(keep.status())) {
          return absl::InternalError(
              absl::StrCat("Filter predicate returned OutOfRange: ", keep.status().message()));
        }
        return keep.status();
      }
      if (*keep) return e;
    }
  }
  absl::StatusOr<std::string> SaveState() const override {
    ASSIGN_OR_RETURN(std::string input, input_->SaveState());
    StateWriter w("Filter");
    w.Bytes(input);
    return std::move(w).Finish();
  }
  absl::Status RestoreState(absl::string_view state) override {
    ASSIGN_OR_RETURN(StateReader r, StateReader::Open(state, "Filter"));
    ASSIGN_OR_RETURN(std::string input, r.Bytes());
    return input_->RestoreState(input);
  }

 private:
  const std::unique_ptr<Iterator> input_;
  const std::shared_ptr<const FilterFn> pred_;
};

class FilterNode : public DatasetNode {
 public:
  FilterNode(Dataset input, FilterFn pred)
      : input_(std::move(input)), pred_(std::make_shared<const FilterFn>(std::move(pred))) {}
  absl::StatusOr<std::unique_ptr<Iterator>> MakeIterator(
      const IteratorContext& ctx) const override {
    if (!*pred_) return absl::InvalidArgumentError("Filter: empty predicate");
    ASSIGN_OR_RETURN(auto it, MakeIteratorOf(input_, ctx));
    return std::make_unique<FilterIterator>(std::move(it), pred_);
  }

 private:
  const Dataset input_;
  const std::shared_ptr<const FilterFn> pred_;
};

// ---- Take / Skip / Shard ----

class TakeIterator : public Iterator {
 public:
  TakeIterator(std::unique_ptr<Iterator> input, int64_t n) : input_(std::move(input)), left_(n) {}
  absl::StatusOr<Element> Next() override {
    if (left_ == 0) return EndOfData();
    ASSIGN_OR_RETURN(Element e, input_->Next());
    if (left_ > 0) --left_;
    return e;
  }
  absl::StatusOr<std::string> SaveState() const override {
    ASSIGN_OR_RETURN(std::string input, input_->SaveState());
    StateWriter w("Take");
    w.Bytes(input);
    w.Int(left_);
    return std::move(w).Finish();
  }
  absl::Status RestoreState(absl::string_view state) override {
    ASSIGN_OR_RETURN(StateReader r, StateReader::Open(state, "Take"));
    ASSIGN_OR_RETURN(std::string input, r.Bytes());
    ASSIGN_OR_RETURN(left_, r.Int());
    return input_->RestoreState(input);
  }

 private:
  const std::unique_ptr<Iterator> input_;
  int64_t left_;  // negative: unlimited
};

// Skip and Shard both drop elements between the ones they return: before the first,
// `first_gap` elements; after each returned one, `gap` (negative: all of the rest).
class StrideIterator : public Iterator {
 public:
  StrideIterator(std::unique_ptr<Iterator> input, int64_t first_gap, int64_t gap)
      : input_(std::move(input)), to_drop_(first_gap), gap_(gap) {}
  absl::StatusOr<Element> Next() override {
    if (to_drop_ < 0) return EndOfData();
    while (to_drop_ > 0) {
      ASSIGN_OR_RETURN(Element dropped, input_->Next());
      --to_drop_;
    }
    ASSIGN_OR_RETURN(Element e, input_->Next());
    to_drop_ = gap_;
    return e;
  }
  absl::StatusOr<std::string> SaveState() const override {
    ASSIGN_OR_RETURN(std::string input, input_->SaveState());
    StateWriter w("SkipOrShard");
    w.Bytes(input);
    w.Int(to_drop_);
    return std::move(w).Finish();
  }
  absl::Status RestoreState(absl::string_view state) override {
    ASSIGN_OR_RETURN(StateReader r, StateReader::Open(state, "SkipOrShard"));
    ASSIGN_OR_RETURN(std::string input, r.Bytes());
    ASSIGN_OR_RETURN(to_drop_, r.Int());
    return input_->RestoreState(input);
  }

 private:
  const std::unique_ptr<Iterator> input_;
  int64_t to_drop_;
  const int64_t gap_;
};

class TakeNode : public DatasetNode {
 public:
  TakeNode(Dataset input, int64_t n) : input_(std::move(input)), n_(n) {}
  absl::StatusOr<std::unique_ptr<Iterator>> MakeIterator(
      const IteratorContext& ctx) const override {
    ASSIGN_OR_RETURN(auto it, MakeIteratorOf(input_, ctx));
    return std::make_unique<TakeIterator>(std::move(it), n_);
  }

 private:
  const Dataset input_;
  const int64_t n_;
};

class StrideNode : public DatasetNode {
 public:
  StrideNode(Dataset input, int64_t first_gap, int64_t gap, absl::Status invalid)
      : input_(std::move(input)), first_gap_(first_gap), gap_(gap), invalid_(std::move(invalid)) {}
  absl::StatusOr<std::unique_ptr<Iterator>> MakeIterator(
      const IteratorContext& ctx) const override {
    RETURN_IF_ERROR(invalid_);
    ASSIGN_OR_RETURN(auto it, MakeIteratorOf(input_, ctx));
    return std::make_unique<StrideIterator>(std::move(it), first_gap_, gap_);
  }

 private:
  const Dataset input_;
  const int64_t first_gap_, gap_;
  const absl::Status invalid_;  // argument error, reported when iterating
};

// ---- Repeat ----

class RepeatIterator : public Iterator {
 public:
  RepeatIterator(Dataset input, int64_t count, IteratorContext ctx)
      : input_(std::move(input)), count_(count), ctx_(ctx) {}

  // Makes the first pass's iterator now, so that MakeIterator() reports what the input's
  // does (a missing file, a bad argument) instead of the first Next().
  absl::Status Start() {
    if (count_ == 0) return absl::OkStatus();
    ASSIGN_OR_RETURN(current_, MakePass());
    return absl::OkStatus();
  }

  absl::StatusOr<Element> Next() override {
    while (true) {
      if (current_ == nullptr) {
        if (ended_ || (count_ >= 0 && epoch_ >= count_)) return EndOfData();
        ASSIGN_OR_RETURN(current_, MakePass());
      }
      absl::StatusOr<Element> e = current_->Next();
      if (e.ok()) {
        produced_this_pass_ = true;
        return e;
      }
      if (!IsEndOfData(e.status())) return e;
      current_.reset();
      ++epoch_;
      // An empty pass ends the repetition: Repeat() of an empty input would spin forever.
      if (!produced_this_pass_) ended_ = true;
    }
  }

  absl::StatusOr<std::string> SaveState() const override {
    StateWriter w("Repeat");
    w.Int(epoch_);
    w.Int(produced_this_pass_ ? 1 : 0);
    w.Int(ended_ ? 1 : 0);
    w.Int(current_ != nullptr ? 1 : 0);
    if (current_ != nullptr) {
      ASSIGN_OR_RETURN(std::string pass, current_->SaveState());
      w.Bytes(pass);
    }
    return std::move(w).Finish();
  }
  absl::Status RestoreState(absl::string_view state) override {
    ASSIGN_OR_RETURN(StateReader r, StateReader::Open(state, "Repeat"));
    ASSIGN_OR_RETURN(epoch_, r.Int());
    ASSIGN_OR_RETURN(int64_t produced, r.Int());
    ASSIGN_OR_RETURN(int64_t ended, r.Int());
    ASSIGN_OR_RETURN(int64_t has_pass, r.Int());
    ended_ = ended != 0;
    current_.reset();
    if (has_pass != 0) {
      ASSIGN_OR_RETURN(std::string pass, r.Bytes());
      // The pass of epoch_ (its Shuffle seeds depend on it), moved to where it stood.
      ASSIGN_OR_RETURN(current_, MakePass());
      RETURN_IF_ERROR(current_->RestoreState(pass));
    }
    produced_this_pass_ = produced != 0;
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<std::unique_ptr<Iterator>> MakePass() {
    produced_this_pass_ = false;
    IteratorContext pass = ctx_;
    pass.epoch_key = MixSeed(ctx_.epoch_key, static_cast<uint64_t>(epoch_));
    return MakeIteratorOf(input_, pass);
  }

  const Dataset input_;
  const int64_t count_;
  const IteratorContext ctx_;
  std::unique_ptr<Iterator> current_;
  int64_t epoch_ = 0;
  bool produced_this_pass_ = false;
  bool ended_ = false;
};

class RepeatNode : public DatasetNode {
 public:
  RepeatNode(Dataset input, int64_t count) : input_(std::move(input)), count_(count) {}
  absl::StatusOr<std::unique_ptr<Iterator>> MakeIterator(
      const IteratorContext& ctx) const override {
    if (ctx.single_pass) {
      return absl::InvalidArgumentError(
          "Repeat in a dynamically sharded pipeline: the coordinator makes the epochs (drop the Repeat)");
    }
    auto it = std::make_unique<RepeatIterator>(input_, count_, ctx);
    RETURN_IF_ERROR(it->Start());
    return it;
  }

 private:
  const Dataset input_;
  const int64_t count_;
};

}  // namespace

absl::StatusOr<Element> CallMapFn(const MapFn& fn, Element element) {
  absl::StatusOr<Element> out;
  // User code (LibTorch, say) may throw; on a Prefetch or Map thread that would terminate the
  // process, so an exception becomes this element's error.
  try {
    out = fn(std::move(element));
  } catch (const std::exception& ex) {
    return absl::InternalError(absl::StrCat("Map function threw: ", ex.what()));
  } catch (...) {
    return absl::InternalError("Map function threw a non-std::exception");
  }
  // A function's own OutOfRange would read as a silent end of data; it is its error.
  if (!out.ok() && IsEndOfData(out.status())) {
    return absl::InternalError(
        absl::StrCat("Map function returned OutOfRange: ", out.status().message()));
  }
  return out;
}

int64_t HardwareThreads() {
  return std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()));
}

std::shared_ptr<const DatasetNode> MakeZipNode(std::vector<Dataset> inputs) {
  return std::make_shared<ZipNode>(std::move(inputs));
}
std::shared_ptr<const DatasetNode> MakeMapNode(Dataset input, MapFn fn) {
  return std::make_shared<MapNode>(std::move(input), std::move(fn));
}
std::shared_ptr<const DatasetNode> MakeFilterNode(Dataset input, FilterFn pred) {
  return std::make_shared<FilterNode>(std::move(input), std::move(pred));
}
std::shared_ptr<const DatasetNode> MakeTakeNode(Dataset input, int64_t n) {
  return std::make_shared<TakeNode>(std::move(input), n);
}
std::shared_ptr<const DatasetNode> MakeSkipNode(Dataset input, int64_t n) {
  // Skip(n < 0) drops everything: a first gap of "all".
  return std::make_shared<StrideNode>(std::move(input), n < 0 ? -1 : n, 0, absl::OkStatus());
}
std::shared_ptr<const DatasetNode> MakeShardNode(Dataset input, int64_t num_shards, int64_t index) {
  absl::Status invalid;
  if (num_shards < 1 || index < 0 || index >= num_shards) {
    invalid = absl::InvalidArgumentError(absl::StrCat(
        "Shard: need num_shards >= 1 and 0 <= index < num_shards, got num_shards=", num_shards,
        " index=", index));
  }
  return std::make_shared<StrideNode>(std::move(input), index, num_shards - 1, std::move(invalid));
}
std::shared_ptr<const DatasetNode> MakeRepeatNode(Dataset input, int64_t count) {
  return std::make_shared<RepeatNode>(std::move(input), count < 0 ? -1 : count);
}

}  // namespace asyncps::data::internal
