// TFRecord: length-prefixed records with masked CRC32Cs of the length and of the data.

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "data/crc32c.h"
#include "data/dataset_node.h"
#include "data/file_list_iterator.h"

namespace asyncps::data::internal {
namespace {

// A length CRC can be right by luck on garbage once in 2^32; capping the length keeps such a
// record from asking for an absurd allocation before its data CRC can reject it.
constexpr uint64_t kMaxRecordBytes = uint64_t{1} << 31;

uint64_t LoadLe(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

class TFRecordIterator : public FileListIterator {
 public:
  using FileListIterator::FileListIterator;

 protected:
  absl::StatusOr<std::optional<Element>> ReadRecord(InputStream& in) override {
    const int64_t start = in.offset();
    auto corrupt = [&](absl::string_view what) {
      return absl::DataLossError(
          absl::StrCat(in.path(), ": corrupt TFRecord at byte offset ", start, ": ", what));
    };
    unsigned char header[12];
    ASSIGN_OR_RETURN(size_t got, in.Read(header, sizeof(header)));
    if (got == 0) return std::nullopt;
    if (got < sizeof(header)) {
      return corrupt(absl::StrCat("truncated header (", got, " of 12 bytes)"));
    }
    if (MaskCrc32c(Crc32c(header, 8)) != LoadLe(header + 8, 4)) {
      return corrupt("length CRC mismatch");
    }
    const uint64_t length = LoadLe(header, 8);
    if (length > kMaxRecordBytes) {
      return corrupt(absl::StrCat("record length ", length, " exceeds ", kMaxRecordBytes));
    }
    Tensor data(DType::kU8, {static_cast<int64_t>(length)});
    ASSIGN_OR_RETURN(got, in.Read(data.raw_data(), length));
    if (got < length) {
      return corrupt(absl::StrCat("truncated data (", got, " of ", length, " bytes)"));
    }
    unsigned char footer[4];
    ASSIGN_OR_RETURN(got, in.Read(footer, sizeof(footer)));
    if (got < sizeof(footer)) return corrupt("truncated data CRC");
    if (MaskCrc32c(Crc32c(data.raw_data(), length)) != LoadLe(footer, 4)) {
      return corrupt("data CRC mismatch");
    }
    return Element{std::move(data)};
  }
};

class TFRecordNode : public DatasetNode {
 public:
  explicit TFRecordNode(std::vector<std::string> paths) : paths_(std::move(paths)) {}
  bool is_source() const override { return true; }
  int64_t num_files() const override { return static_cast<int64_t>(paths_.size()); }
  absl::StatusOr<std::unique_ptr<Iterator>> MakeIterator(
      const IteratorContext& ctx) const override {
    auto it = std::make_unique<TFRecordIterator>(FilesOfShard(paths_, ctx));
    RETURN_IF_ERROR(it->Start());
    return it;
  }

 private:
  const std::vector<std::string> paths_;
};

}  // namespace

std::shared_ptr<const DatasetNode> MakeTFRecordNode(std::vector<std::string> paths) {
  return std::make_shared<TFRecordNode>(std::move(paths));
}

}  // namespace asyncps::data::internal
