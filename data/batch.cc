// Batch: stacks consecutive elements, component by component, on a new axis 0; and the
// batching node Batch and PaddedBatch share.

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "data/dataset_node.h"
#include "data/iterator_state.h"

namespace asyncps::data::internal {
namespace {

absl::StatusOr<Element> Stack(const std::vector<Element>& rows) {
  const Element& first = rows.front();
  Element out;
  out.reserve(first.size());
  for (size_t c = 0; c < first.size(); ++c) {
    const Tensor& proto = first[c];
    for (size_t r = 1; r < rows.size(); ++r) {
      if (rows[r].size() != first.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("Batch: element ", r, " of the batch has ", rows[r].size(),
                         " components, element 0 has ", first.size()));
      }
      const Tensor& t = rows[r][c];
      if (t.dtype() != proto.dtype() || t.shape() != proto.shape()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Batch: component ", c, " of element ", r, " of the batch is ", DTypeName(t.dtype()),
            ShapeString(t.shape()), " but element 0's is ", DTypeName(proto.dtype()),
            ShapeString(proto.shape()), " (elements of one batch must match)"));
      }
    }
    Shape shape;
    shape.reserve(proto.shape().size() + 1);
    shape.push_back(static_cast<int64_t>(rows.size()));
    shape.insert(shape.end(), proto.shape().begin(), proto.shape().end());
    const size_t row_bytes = proto.num_bytes();
    auto storage = AllocateAlignedUninitialized(std::max<size_t>(row_bytes * rows.size(), 1));
    char* dst = static_cast<char*>(storage.get());
    for (const Element& row : rows) {
      if (row_bytes > 0) std::memcpy(dst, row[c].raw_data(), row_bytes);
      dst += row_bytes;
    }
    void* data = storage.get();
    out.push_back(Tensor::View(proto.dtype(), std::move(shape), std::move(storage), data));
  }
  return out;
}

class BatchingIterator : public Iterator {
 public:
  BatchingIterator(std::unique_ptr<Iterator> input, int64_t batch_size, bool drop_remainder,
                   std::string name, StackFn stack)
      : input_(std::move(input)),
        batch_size_(static_cast<size_t>(batch_size)),
        drop_remainder_(drop_remainder),
        name_(std::move(name)),
        stack_(std::move(stack)) {}

  absl::StatusOr<Element> Next() override {
    std::vector<Element> rows;
    rows.reserve(std::min<size_t>(batch_size_, 4096));  // a huge batch_size is legal
    while (rows.size() < batch_size_) {
      absl::StatusOr<Element> e = input_->Next();
      if (!e.ok()) {
        if (!IsEndOfData(e.status())) return e.status();  // the partial batch is dropped
        break;
      }
      rows.push_back(*std::move(e));
    }
    if (rows.empty() || (drop_remainder_ && rows.size() < batch_size_)) {
      return absl::OutOfRangeError("end of data");
    }
    return stack_(rows);
  }
  absl::StatusOr<std::string> SaveState() const override {
    ASSIGN_OR_RETURN(std::string input, input_->SaveState());
    StateWriter w(name_);
    w.Bytes(input);
    return std::move(w).Finish();
  }
  absl::Status RestoreState(absl::string_view state) override {
    ASSIGN_OR_RETURN(StateReader r, StateReader::Open(state, name_));
    ASSIGN_OR_RETURN(std::string input, r.Bytes());
    return input_->RestoreState(input);
  }

 private:
  const std::unique_ptr<Iterator> input_;
  const size_t batch_size_;
  const bool drop_remainder_;
  const std::string name_;
  const StackFn stack_;
};

class BatchingNode : public DatasetNode {
 public:
  BatchingNode(Dataset input, int64_t batch_size, bool drop_remainder, std::string name,
               StackFn stack)
      : input_(std::move(input)),
        batch_size_(batch_size),
        drop_remainder_(drop_remainder),
        name_(std::move(name)),
        stack_(std::move(stack)) {}
  absl::StatusOr<std::unique_ptr<Iterator>> MakeIterator(
      const IteratorContext& ctx) const override {
    if (batch_size_ < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(name_, ": batch_size must be >= 1, got ", batch_size_));
    }
    ASSIGN_OR_RETURN(auto it, MakeIteratorOf(input_, ctx));
    return std::make_unique<BatchingIterator>(std::move(it), batch_size_, drop_remainder_, name_,
                                              stack_);
  }

 private:
  const Dataset input_;
  const int64_t batch_size_;
  const bool drop_remainder_;
  const std::string name_;
  const StackFn stack_;
};

}  // namespace

std::shared_ptr<const DatasetNode> MakeBatchingNode(Dataset input, int64_t batch_size,
                                                    bool drop_remainder, std::string name,
                                                    StackFn stack) {
  return std::make_shared<BatchingNode>(std::move(input), batch_size, drop_remainder,
                                        std::move(name), std::move(stack));
}

std::shared_ptr<const DatasetNode> MakeBatchNode(Dataset input, int64_t batch_size,
                                                 bool drop_remainder) {
  return MakeBatchingNode(std::move(input), batch_size, drop_remainder, "Batch", Stack);
}

}  // namespace asyncps::data::internal
