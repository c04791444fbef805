#include "data/tfrecord_writer.h"

#include "core/status_macros.h"
#include "data/crc32c.h"

namespace asyncps::data {
namespace {

void AppendLe(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

}  // namespace

std::string TFRecordWriter::Frame(absl::string_view record) {
  std::string out;
  out.reserve(record.size() + 16);
  AppendLe(&out, record.size(), 8);
  AppendLe(&out, MaskCrc32c(Crc32c(out.data(), 8)), 4);
  out.append(record.data(), record.size());
  AppendLe(&out, MaskCrc32c(Crc32c(record.data(), record.size())), 4);
  return out;
}

absl::StatusOr<std::unique_ptr<TFRecordWriter>> TFRecordWriter::Open(std::string path) {
  ASSIGN_OR_RETURN(std::unique_ptr<DurableFileWriter> file, DurableFileWriter::Create(std::move(path)));
  return std::unique_ptr<TFRecordWriter>(new TFRecordWriter(std::move(file)));
}

TFRecordWriter::~TFRecordWriter() = default;

absl::Status TFRecordWriter::Write(absl::string_view record) {
  if (file_ == nullptr) return absl::FailedPreconditionError("TFRecordWriter is closed");
  // Records are small and many: batch them into few writes.
  pending_ += Frame(record);
  if (pending_.size() < kFlushBytes) return absl::OkStatus();
  absl::Status s = file_->Append(pending_.data(), pending_.size());
  pending_.clear();
  return s;
}

absl::Status TFRecordWriter::Close() {
  if (file_ == nullptr) return absl::FailedPreconditionError("TFRecordWriter is closed");
  std::unique_ptr<DurableFileWriter> file = std::move(file_);
  RETURN_IF_ERROR(file->Append(pending_.data(), pending_.size()));
  pending_.clear();
  return file->Commit();
}

}  // namespace asyncps::data
