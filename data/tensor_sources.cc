// In-memory sources: Range, FromTensorSlices, FromElements.

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "data/dataset_node.h"
#include "data/iterator_state.h"

namespace asyncps::data::internal {
namespace {

absl::Status EndOfData() { return absl::OutOfRangeError("end of data"); }

class RangeIterator : public Iterator {
 public:
  RangeIterator(int64_t next, int64_t stop, int64_t step) : next_(next), stop_(stop), step_(step) {}
  absl::StatusOr<Element> Next() override {
    if (step_ > 0 ? next_ >= stop_ : next_ <= stop_) return EndOfData();
    int64_t value = next_;
    // Saturate instead of overflowing past INT64_MAX/MIN.
    if (__builtin_add_overflow(next_, step_, &next_)) next_ = stop_;
    return Element{Tensor::Scalar<int64_t>(value)};
  }
  absl::StatusOr<std::string> SaveState() const override {
    StateWriter w("Range");
    w.Int(next_);
    return std::move(w).Finish();
  }
  absl::Status RestoreState(absl::string_view state) override {
    ASSIGN_OR_RETURN(StateReader r, StateReader::Open(state, "Range"));
    ASSIGN_OR_RETURN(next_, r.Int());
    return absl::OkStatus();
  }

 private:
  int64_t next_;
  const int64_t stop_;
  const int64_t step_;
};

class RangeNode : public DatasetNode {
 public:
  RangeNode(int64_t start, int64_t stop, int64_t step) : start_(start), stop_(stop), step_(step) {}
  bool is_source() const override { return true; }
  absl::StatusOr<std::unique_ptr<Iterator>> MakeIterator(const IteratorContext&) const override {
    if (step_ == 0) return absl::InvalidArgumentError("Range: step must not be 0");
    return std::make_unique<RangeIterator>(start_, stop_, step_);
  }

 private:
  const int64_t start_, stop_, step_;
};

class TensorSlicesNode : public DatasetNode, public std::enable_shared_from_this<TensorSlicesNode> {
 public:
  explicit TensorSlicesNode(std::vector<Tensor> components) : components_(std::move(components)) {}

  bool is_source() const override { return true; }
  absl::StatusOr<std::unique_ptr<Iterator>> MakeIterator(const IteratorContext&) const override {
    if (components_.empty()) {
      return absl::InvalidArgumentError("FromTensorSlices: no components");
    }
    for (size_t i = 0; i < components_.size(); ++i) {
      const Tensor& c = components_[i];
      if (c.rank() < 1) {
        return absl::InvalidArgumentError(absl::StrCat("FromTensorSlices: component ", i,
                                                       " is a scalar (", c.DebugString(0),
                                                       "); slicing needs rank >= 1"));
      }
      if (c.dim(0) != components_[0].dim(0)) {
        return absl::InvalidArgumentError(
            absl::StrCat("FromTensorSlices: component ", i, " has ", c.dim(0), " rows (",
                         ShapeString(c.shape()), ") but component 0 has ", components_[0].dim(0)));
      }
    }
    return std::unique_ptr<Iterator>(new SliceIterator(shared_from_this()));
  }

 private:
  class SliceIterator : public Iterator {
   public:
    // Holding the node keeps the sliced tensors alive as long as the iterator.
    explicit SliceIterator(std::shared_ptr<const TensorSlicesNode> node) : node_(std::move(node)) {}

    absl::StatusOr<Element> Next() override {
      const std::vector<Tensor>& components = node_->components_;
      if (row_ >= components[0].dim(0)) return EndOfData();
      Element element;
      element.reserve(components.size());
      for (const Tensor& c : components) {
        ASSIGN_OR_RETURN(Tensor slice, c.Slice(row_, row_ + 1));
        ASSIGN_OR_RETURN(Tensor row, slice.Reshape(Shape(c.shape().begin() + 1, c.shape().end())));
        element.push_back(std::move(row));
      }
      ++row_;
      return element;
    }
    absl::StatusOr<std::string> SaveState() const override {
      StateWriter w("FromTensorSlices");
      w.Int(row_);
      return std::move(w).Finish();
    }
    absl::Status RestoreState(absl::string_view state) override {
      ASSIGN_OR_RETURN(StateReader r, StateReader::Open(state, "FromTensorSlices"));
      ASSIGN_OR_RETURN(row_, r.Int());
      return absl::OkStatus();
    }

   private:
    const std::shared_ptr<const TensorSlicesNode> node_;
    int64_t row_ = 0;
  };

  const std::vector<Tensor> components_;
};

class ElementsNode : public DatasetNode, public std::enable_shared_from_this<ElementsNode> {
 public:
  explicit ElementsNode(std::vector<Element> elements) : elements_(std::move(elements)) {}
  bool is_source() const override { return true; }
  absl::StatusOr<std::unique_ptr<Iterator>> MakeIterator(const IteratorContext&) const override {
    return std::unique_ptr<Iterator>(new ElementsIterator(shared_from_this()));
  }

 private:
  class ElementsIterator : public Iterator {
   public:
    explicit ElementsIterator(std::shared_ptr<const ElementsNode> node) : node_(std::move(node)) {}
    absl::StatusOr<Element> Next() override {
      if (next_ >= node_->elements_.size()) return EndOfData();
      return node_->elements_[next_++];
    }
    absl::StatusOr<std::string> SaveState() const override {
      StateWriter w("FromElements");
      w.Int(static_cast<int64_t>(next_));
      return std::move(w).Finish();
    }
    absl::Status RestoreState(absl::string_view state) override {
      ASSIGN_OR_RETURN(StateReader r, StateReader::Open(state, "FromElements"));
      ASSIGN_OR_RETURN(int64_t next, r.Int());
      next_ = static_cast<size_t>(next);
      return absl::OkStatus();
    }

   private:
    const std::shared_ptr<const ElementsNode> node_;
    size_t next_ = 0;
  };

  const std::vector<Element> elements_;
};

}  // namespace

std::shared_ptr<const DatasetNode> MakeRangeNode(int64_t start, int64_t stop, int64_t step) {
  return std::make_shared<RangeNode>(start, stop, step);
}
std::shared_ptr<const DatasetNode> MakeTensorSlicesNode(std::vector<Tensor> components) {
  return std::make_shared<TensorSlicesNode>(std::move(components));
}
std::shared_ptr<const DatasetNode> MakeElementsNode(std::vector<Element> elements) {
  return std::make_shared<ElementsNode>(std::move(elements));
}

}  // namespace asyncps::data::internal
