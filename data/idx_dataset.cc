// IdxFile: the IDX format of MNIST and Fashion-MNIST, plain or gzipped, read one record at a
// time.
//
// Layout: two zero bytes, a type code, the rank r, then r big-endian u32 dims, then dim0
// records of dims[1..] big-endian values each.

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "data/dataset_node.h"
#include "data/iterator_state.h"
#include "data/input_stream.h"

namespace asyncps::data::internal {
namespace {

// Largest record accepted: a header claiming more is corrupt rather than a real dataset row.
constexpr uint64_t kMaxRecordBytes = uint64_t{1} << 32;

struct IdxType {
  DType dtype;     // what the tensor holds
  int file_bytes;  // bytes per value in the file
  bool is_signed;  // widened with sign extension (i8, i16 -> i32)
};

absl::StatusOr<IdxType> IdxTypeFromCode(uint8_t code) {
  switch (code) {
    case 0x08:
      return IdxType{DType::kU8, 1, false};
    case 0x09:
      return IdxType{DType::kI32, 1, true};
    case 0x0B:
      return IdxType{DType::kI32, 2, true};
    case 0x0C:
      return IdxType{DType::kI32, 4, true};
    case 0x0D:
      return IdxType{DType::kF32, 4, false};
    case 0x0E:
      return IdxType{DType::kF64, 8, false};
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown IDX type code 0x", absl::Hex(code, absl::kZeroPad2)));
  }
}

uint32_t LoadBe32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) << 24 | static_cast<uint32_t>(p[1]) << 16 |
         static_cast<uint32_t>(p[2]) << 8 | static_cast<uint32_t>(p[3]);
}

// Converts `count` big-endian values of `type` at `src` into host-order `dst` (the tensor's
// storage). `src` may equal `dst` when no widening is needed.
void DecodeValues(const IdxType& type, const unsigned char* src, void* dst, int64_t count) {
  switch (type.file_bytes) {
    case 1:
      if (type.is_signed) {
        auto* out = static_cast<int32_t*>(dst);
        for (int64_t i = 0; i < count; ++i) out[i] = static_cast<int8_t>(src[i]);
      } else if (src != dst) {
        std::memcpy(dst, src, static_cast<size_t>(count));
      }
      return;
    case 2: {
      auto* out = static_cast<int32_t*>(dst);
      for (int64_t i = 0; i < count; ++i) {
        out[i] = static_cast<int16_t>(static_cast<uint16_t>(src[2 * i] << 8 | src[2 * i + 1]));
      }
      return;
    }
    case 4: {
      auto* out = static_cast<uint32_t*>(dst);
      for (int64_t i = 0; i < count; ++i) out[i] = LoadBe32(src + 4 * i);
      return;
    }
    case 8: {
      auto* out = static_cast<uint64_t*>(dst);
      for (int64_t i = 0; i < count; ++i) {
        out[i] = uint64_t{LoadBe32(src + 8 * i)} << 32 | LoadBe32(src + 8 * i + 4);
      }
      return;
    }
  }
}

class IdxIterator : public Iterator {
 public:
  IdxIterator(std::unique_ptr<InputStream> in, IdxType type, Shape record_shape, int64_t records)
      : in_(std::move(in)),
        type_(type),
        record_shape_(std::move(record_shape)),
        record_values_(NumElements(record_shape_)),
        records_(records) {
    if (type_.file_bytes != static_cast<int>(DTypeSize(type_.dtype))) {
      scratch_.resize(static_cast<size_t>(record_values_ * type_.file_bytes));
    }
  }

  absl::StatusOr<Element> Next() override {
    if (!status_.ok()) return status_;
    if (next_ >= records_) {
      // A longer file than its header says is corrupt, not a bonus.
      char probe;
      absl::StatusOr<size_t> got = in_->Read(&probe, 1);
      if (!got.ok()) return status_ = got.status();
      if (*got != 0) {
        return status_ = absl::DataLossError(
                   absl::StrCat(in_->path(), ": trailing bytes at offset ", in_->offset() - 1,
                                " after the ", records_, " records the IDX header declares"));
      }
      return status_ = absl::OutOfRangeError("end of data");
    }
    Tensor t(type_.dtype, record_shape_);
    const size_t want = static_cast<size_t>(record_values_ * type_.file_bytes);
    void* raw = scratch_.empty() ? t.raw_data() : static_cast<void*>(scratch_.data());
    const int64_t at = in_->offset();
    absl::StatusOr<size_t> got = in_->Read(raw, want);
    if (!got.ok()) return status_ = got.status();
    if (*got != want) {
      return status_ = absl::DataLossError(
                 absl::StrCat(in_->path(), ": truncated IDX file: record ", next_, " of ", records_,
                              " starts at offset ", at, " and needs ", want,
                              " bytes, but the file ends at offset ", in_->offset()));
    }
    DecodeValues(type_, static_cast<const unsigned char*>(raw), t.raw_data(), record_values_);
    ++next_;
    return Element{std::move(t)};
  }

  // The position is the number of records read; restoring skips that many (reading them).
  absl::StatusOr<std::string> SaveState() const override {
    if (!status_.ok() && !IsEndOfData(status_)) return status_;
    StateWriter w("IdxFile");
    w.Int(IsEndOfData(status_) ? records_ + 1 : next_);
    return std::move(w).Finish();
  }
  absl::Status RestoreState(absl::string_view state) override {
    ASSIGN_OR_RETURN(StateReader r, StateReader::Open(state, "IdxFile"));
    ASSIGN_OR_RETURN(int64_t n, r.Int());
    if (n < 0 || n > records_ + 1) {
      return absl::InvalidArgumentError(absl::StrCat("iterator state: record ", n, " of ", records_));
    }
    for (int64_t i = 0; i < n; ++i) {
      absl::StatusOr<Element> skipped = Next();
      if (!skipped.ok() && !IsEndOfData(skipped.status())) return skipped.status();
    }
    return absl::OkStatus();
  }

 private:
  const std::unique_ptr<InputStream> in_;
  const IdxType type_;
  const Shape record_shape_;
  const int64_t record_values_;
  const int64_t records_;
  std::vector<unsigned char> scratch_;  // file bytes when they widen into the tensor
  int64_t next_ = 0;
  absl::Status status_;  // sticky end or error
};

class IdxFileNode : public DatasetNode {
 public:
  explicit IdxFileNode(std::string path) : path_(std::move(path)) {}

  bool is_source() const override { return true; }
  int64_t num_files() const override { return 1; }  // FILE sharding admits one worker only
  absl::StatusOr<std::unique_ptr<Iterator>> MakeIterator(const IteratorContext&) const override {
    ASSIGN_OR_RETURN(std::unique_ptr<InputStream> in, InputStream::Open(path_));
    auto corrupt = [&](int64_t offset, absl::string_view what) {
      return absl::DataLossError(
          absl::StrCat(path_, ": bad IDX header at offset ", offset, ": ", what));
    };
    unsigned char magic[4];
    ASSIGN_OR_RETURN(size_t got, in->Read(magic, 4));
    if (got != 4) return corrupt(got, "file ends inside the 4-byte magic number");
    if (magic[0] != 0 || magic[1] != 0) {
      return corrupt(0, absl::StrCat("magic number starts 0x", absl::Hex(magic[0], absl::kZeroPad2),
                                     absl::Hex(magic[1], absl::kZeroPad2),
                                     ", expected 0x0000 (not an IDX file?)"));
    }
    absl::StatusOr<IdxType> type = IdxTypeFromCode(magic[2]);
    if (!type.ok()) return corrupt(2, type.status().message());
    const int rank = magic[3];
    if (rank < 1) return corrupt(3, "rank 0: an IDX file needs a record dimension");
    std::vector<unsigned char> dims_bytes(static_cast<size_t>(4 * rank));
    ASSIGN_OR_RETURN(got, in->Read(dims_bytes.data(), dims_bytes.size()));
    if (got != dims_bytes.size()) {
      return corrupt(4 + static_cast<int64_t>(got),
                     absl::StrCat("file ends inside the ", rank, " dimensions"));
    }
    const int64_t records = LoadBe32(dims_bytes.data());
    Shape record_shape;
    uint64_t record_bytes = static_cast<uint64_t>(type->file_bytes);
    for (int i = 1; i < rank; ++i) {
      const int64_t d = LoadBe32(dims_bytes.data() + 4 * i);
      record_shape.push_back(d);
      // Each dim is < 2^32, so checking after every multiply keeps the product < 2^64.
      record_bytes *= static_cast<uint64_t>(d);
      if (record_bytes > kMaxRecordBytes) {
        return corrupt(4 + 4 * i, absl::StrCat("record shape ", ShapeString(record_shape),
                                               "... exceeds ", kMaxRecordBytes, " bytes"));
      }
    }
    return std::make_unique<IdxIterator>(std::move(in), *type, std::move(record_shape), records);
  }

 private:
  const std::string path_;
};

}  // namespace

std::shared_ptr<const DatasetNode> MakeIdxFileNode(std::string path) {
  return std::make_shared<IdxFileNode>(std::move(path));
}

}  // namespace asyncps::data::internal
