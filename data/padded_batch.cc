// PaddedBatch (batching elements whose shapes differ) and Unbatch (its inverse, without the
// padding).

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "data/dataset_node.h"
#include "data/iterator_state.h"

namespace asyncps::data::internal {
namespace {

// ---- Unbatch ----

class UnbatchIterator : public Iterator {
 public:
  explicit UnbatchIterator(std::unique_ptr<Iterator> input) : input_(std::move(input)) {}

  absl::StatusOr<Element> Next() override {
    while (row_ >= rows_) {
      // Where the input stood before this batch: a saved position inside it is that and a row.
      before_current_ = input_->SaveState();
      ASSIGN_OR_RETURN(Element e, input_->Next());
      if (e.empty()) return absl::InvalidArgumentError("Unbatch: an element with no components");
      for (size_t c = 0; c < e.size(); ++c) {
        if (e[c].rank() < 1) {
          return absl::InvalidArgumentError(
              absl::StrCat("Unbatch: component ", c, " is a scalar (needs rank >= 1)"));
        }
        if (e[c].dim(0) != e[0].dim(0)) {
          return absl::InvalidArgumentError(absl::StrCat("Unbatch: component ", c, " has ",
                                                         e[c].dim(0), " rows but component 0 has ",
                                                         e[0].dim(0)));
        }
      }
      current_ = std::move(e);
      rows_ = current_[0].dim(0);
      row_ = 0;
    }
    Element out;
    out.reserve(current_.size());
    for (const Tensor& c : current_) {
      ASSIGN_OR_RETURN(Tensor slice, c.Slice(row_, row_ + 1));
      ASSIGN_OR_RETURN(Tensor row, slice.Reshape(Shape(c.shape().begin() + 1, c.shape().end())));
      out.push_back(std::move(row));
    }
    ++row_;
    return out;
  }

  absl::StatusOr<std::string> SaveState() const override {
    StateWriter w("Unbatch");
    if (row_ < rows_) {
      if (!before_current_.ok()) return before_current_.status();
      w.Bytes(*before_current_);
      w.Int(row_);
    } else {
      ASSIGN_OR_RETURN(std::string input, input_->SaveState());
      w.Bytes(input);
      w.Int(0);
    }
    return std::move(w).Finish();
  }
  absl::Status RestoreState(absl::string_view state) override {
    ASSIGN_OR_RETURN(StateReader r, StateReader::Open(state, "Unbatch"));
    ASSIGN_OR_RETURN(std::string input, r.Bytes());
    ASSIGN_OR_RETURN(int64_t row, r.Int());
    RETURN_IF_ERROR(input_->RestoreState(input));
    if (row <= 0) return absl::OkStatus();
    // Read the batch again and stand at the row.
    before_current_ = input;
    ASSIGN_OR_RETURN(Element e, input_->Next());
    if (e.empty() || e[0].rank() < 1 || e[0].dim(0) <= row) {
      return absl::InvalidArgumentError("iterator state: Unbatch row past its batch");
    }
    current_ = std::move(e);
    rows_ = current_[0].dim(0);
    row_ = row;
    return absl::OkStatus();
  }

 private:
  const std::unique_ptr<Iterator> input_;
  absl::StatusOr<std::string> before_current_;
  Element current_;
  int64_t rows_ = 0;
  int64_t row_ = 0;
};

class UnbatchNode : public DatasetNode {
 public:
  explicit UnbatchNode(Dataset input) : input_(std::move(input)) {}
  absl::StatusOr<std::unique_ptr<Iterator>> MakeIterator(
      const IteratorContext& ctx) const override {
    ASSIGN_OR_RETURN(auto it, MakeIteratorOf(input_, ctx));
    return std::make_unique<UnbatchIterator>(std::move(it));
  }

 private:
  const Dataset input_;
};

// ---- PaddedBatch ----

// One element of `dtype` holding `value`, as bytes.
std::vector<char> PadBytes(DType dtype, double value) {
  std::vector<char> bytes(DTypeSize(dtype));
  auto put = [&bytes](auto v) { std::memcpy(bytes.data(), &v, sizeof(v)); };
  switch (dtype) {
    case DType::kF32:
      put(static_cast<float>(value));
      break;
    case DType::kF64:
      put(value);
      break;
    case DType::kI32:
      put(static_cast<int32_t>(value));
      break;
    case DType::kI64:
      put(static_cast<int64_t>(value));
      break;
    case DType::kU8:
      put(static_cast<uint8_t>(value));
      break;
    case DType::kBool:
      put(static_cast<uint8_t>(value != 0));
      break;
  }
  return bytes;
}

// Copies `src` (shape `in`) into the corner of `dst` (shape `out`, every dim at least in's);
// `dim` is the dimension being walked, strides in bytes.
void CopyPadded(const char* src, char* dst, const Shape& in, const Shape& out, size_t dim,
                size_t elem_bytes) {
  if (in.empty()) {  // a scalar
    std::memcpy(dst, src, elem_bytes);
    return;
  }
  if (dim + 1 == in.size()) {
    std::memcpy(dst, src, static_cast<size_t>(in.back()) * elem_bytes);
    return;
  }
  size_t in_stride = elem_bytes, out_stride = elem_bytes;
  for (size_t d = dim + 1; d < in.size(); ++d) {
    in_stride *= static_cast<size_t>(in[d]);
    out_stride *= static_cast<size_t>(out[d]);
  }
  for (int64_t i = 0; i < in[dim]; ++i) {
    CopyPadded(src + i * in_stride, dst + i * out_stride, in, out, dim + 1, elem_bytes);
  }
}

absl::StatusOr<Element> PadAndStack(const std::vector<Element>& rows,
                                    const PaddedBatchOptions& options) {
  const Element& first = rows.front();
  if (!options.padded_shapes.empty() && options.padded_shapes.size() != first.size()) {
    return absl::InvalidArgumentError(absl::StrCat("PaddedBatch: ", options.padded_shapes.size(),
                                                   " padded shapes for elements of ", first.size(),
                                                   " components"));
  }
  Element out;
  out.reserve(first.size());
  for (size_t c = 0; c < first.size(); ++c) {
    const Tensor& proto = first[c];
    Shape padded = proto.shape();
    for (size_t r = 0; r < rows.size(); ++r) {
      if (rows[r].size() != first.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("PaddedBatch: element ", r, " of the batch has ", rows[r].size(),
                         " components, element 0 has ", first.size()));
      }
      const Tensor& t = rows[r][c];
      if (t.dtype() != proto.dtype() || t.rank() != proto.rank()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "PaddedBatch: component ", c, " of element ", r, " is ", DTypeName(t.dtype()),
            ShapeString(t.shape()), " but element 0's is ", DTypeName(proto.dtype()),
            ShapeString(proto.shape()), " (dtypes and ranks must match)"));
      }
      for (int d = 0; d < t.rank(); ++d) padded[d] = std::max(padded[d], t.dim(d));
    }
    if (!options.padded_shapes.empty()) {
      const std::vector<int64_t>& want = options.padded_shapes[c];
      if (want.size() != padded.size()) {
        return absl::InvalidArgumentError(absl::StrCat("PaddedBatch: padded shape ",
                                                       ShapeString(want), " for component ", c,
                                                       " of rank ", padded.size()));
      }
      for (size_t d = 0; d < want.size(); ++d) {
        if (want[d] < -1) {
          return absl::InvalidArgumentError(absl::StrCat(
              "PaddedBatch: padded shape ", ShapeString(want), " has a dimension below -1"));
        }
        if (want[d] == -1) continue;
        if (want[d] < padded[d]) {
          return absl::InvalidArgumentError(absl::StrCat("PaddedBatch: component ", c,
                                                         " has dimension ", d, " of ", padded[d],
                                                         ", more than its padded size ", want[d]));
        }
        padded[d] = want[d];
      }
    }
    const double pad_value = c < options.padding_values.size() ? options.padding_values[c] : 0.0;
    Shape shape;
    shape.reserve(padded.size() + 1);
    shape.push_back(static_cast<int64_t>(rows.size()));
    shape.insert(shape.end(), padded.begin(), padded.end());
    RETURN_IF_ERROR(ValidateShape(shape, proto.dtype()));
    const size_t elem_bytes = DTypeSize(proto.dtype());
    const size_t row_bytes = static_cast<size_t>(NumElements(padded)) * elem_bytes;
    const size_t total = row_bytes * rows.size();
    auto storage = AllocateAlignedUninitialized(std::max<size_t>(total, 1));
    char* dst = static_cast<char*>(storage.get());
    const std::vector<char> pad = PadBytes(proto.dtype(), pad_value);
    for (size_t i = 0; i < total; i += elem_bytes) std::memcpy(dst + i, pad.data(), elem_bytes);
    for (const Element& row : rows) {
      const Tensor& t = row[c];
      if (t.num_elements() > 0) {
        CopyPadded(static_cast<const char*>(t.raw_data()), dst, t.shape(), padded, 0, elem_bytes);
      }
      dst += row_bytes;
    }
    void* data = storage.get();
    out.push_back(Tensor::View(proto.dtype(), std::move(shape), std::move(storage), data));
  }
  return out;
}

}  // namespace

std::shared_ptr<const DatasetNode> MakeUnbatchNode(Dataset input) {
  return std::make_shared<UnbatchNode>(std::move(input));
}
std::shared_ptr<const DatasetNode> MakePaddedBatchNode(Dataset input, int64_t batch_size,
                                                       PaddedBatchOptions options) {
  const bool drop_remainder = options.drop_remainder;
  auto shared = std::make_shared<const PaddedBatchOptions>(std::move(options));
  return MakeBatchingNode(std::move(input), batch_size, drop_remainder, "PaddedBatch",
                          [shared](const std::vector<Element>& rows) {
                            return PadAndStack(rows, *shared);
                          });
}

}  // namespace asyncps::data::internal
