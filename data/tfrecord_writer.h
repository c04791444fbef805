#ifndef ASYNCPS_DATA_TFRECORD_WRITER_H_
#define ASYNCPS_DATA_TFRECORD_WRITER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/durable_file.h"

namespace asyncps::data {

// Writes a TFRecord file: per record, u64 little-endian length, masked CRC32C of those 8
// bytes, the data, masked CRC32C of the data (TensorFlow's framing, uncompressed).
//
// The records go through a DurableFileWriter (core/durable_file.h): Close() fsyncs and renames
// the temporary file onto `path`, so a reader never sees a half-written file; a writer
// destroyed without Close() removes its temporary file.
// Not thread-safe.
class TFRecordWriter {
 public:
  static absl::StatusOr<std::unique_ptr<TFRecordWriter>> Open(std::string path);
  ~TFRecordWriter();
  TFRecordWriter(const TFRecordWriter&) = delete;
  TFRecordWriter& operator=(const TFRecordWriter&) = delete;

  absl::Status Write(absl::string_view record);
  // Flushes, syncs and renames into place. Further writes fail.
  absl::Status Close();

  // The framed bytes of one record (for tests and in-memory use).
  static std::string Frame(absl::string_view record);

 private:
  explicit TFRecordWriter(std::unique_ptr<DurableFileWriter> file) : file_(std::move(file)) {}

  static constexpr size_t kFlushBytes = size_t{1} << 20;

  std::unique_ptr<DurableFileWriter> file_;  // null once closed
  std::string pending_;                       // framed records not yet written
};

}  // namespace asyncps::data

#endif  // ASYNCPS_DATA_TFRECORD_WRITER_H_
