#include "data/tfrecord_writer.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "data/crc32c.h"

namespace asyncps::data {
namespace {

void AppendLe(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

absl::Status IoError(absl::string_view what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
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
  std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wbe");
  if (f == nullptr) return IoError("cannot create", tmp);
  return std::unique_ptr<TFRecordWriter>(new TFRecordWriter(std::move(path), std::move(tmp), f));
}

TFRecordWriter::TFRecordWriter(std::string path, std::string tmp_path, std::FILE* file)
    : path_(std::move(path)), tmp_path_(std::move(tmp_path)), file_(file) {}

TFRecordWriter::~TFRecordWriter() {
  if (file_ != nullptr) {
    std::fclose(file_);
    std::remove(tmp_path_.c_str());
  }
}

absl::Status TFRecordWriter::Write(absl::string_view record) {
  if (file_ == nullptr) return absl::FailedPreconditionError("TFRecordWriter is closed");
  const std::string framed = Frame(record);
  if (std::fwrite(framed.data(), 1, framed.size(), file_) != framed.size()) {
    return IoError("cannot write", tmp_path_);
  }
  return absl::OkStatus();
}

absl::Status TFRecordWriter::Close() {
  if (file_ == nullptr) return absl::FailedPreconditionError("TFRecordWriter is closed");
  std::FILE* f = file_;
  file_ = nullptr;
  bool ok = std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    absl::Status s = IoError("cannot write", tmp_path_);
    std::remove(tmp_path_.c_str());
    return s;
  }
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    absl::Status s = IoError("cannot rename onto", path_);
    std::remove(tmp_path_.c_str());
    return s;
  }
  return absl::OkStatus();
}

}  // namespace asyncps::data
