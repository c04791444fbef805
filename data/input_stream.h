#ifndef ASYNCPS_DATA_INPUT_STREAM_H_
#define ASYNCPS_DATA_INPUT_STREAM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace asyncps::data {

// A buffered, forward-only reader of one file, plain or gzip-compressed (detected by the gzip
// magic bytes, not the name; gzip is decompressed through zlib's gzread). It reads in chunks
// of `buffer_bytes`, so memory use does not depend on the file's size.
//
// Errors (I/O failure, a truncated or corrupt gzip stream) are DataLoss/Internal statuses that
// name the file and the offset in the uncompressed stream; the end of the file is not an
// error. Not thread-safe: one thread at a time.
class InputStream {
 public:
  static constexpr size_t kDefaultBufferBytes = size_t{256} << 10;

  // Opens `path`. NotFound / PermissionDenied / ... with the path and the OS error.
  static absl::StatusOr<std::unique_ptr<InputStream>> Open(
      const std::string& path, size_t buffer_bytes = kDefaultBufferBytes);

  // Backend that delivers raw (decompressed) bytes; defined in input_stream.cc.
  class Source;

  InputStream(std::string path, std::unique_ptr<Source> source, bool compressed,
              size_t buffer_bytes);
  ~InputStream();
  InputStream(const InputStream&) = delete;
  InputStream& operator=(const InputStream&) = delete;

  // Reads up to `n` bytes into `dst`. Returns the count read, which is less than `n` only at
  // the end of the file (0 once nothing is left).
  absl::StatusOr<size_t> Read(void* dst, size_t n);

  // Reads the next line into `*line`, without its '\n' (and without a '\r' before it).
  // Returns false, leaving `*line` empty, at the end of the file. A last line with no '\n'
  // is still returned.
  absl::StatusOr<bool> ReadLine(std::string* line);

  // Skips `n` bytes (reading through them). Returns the count skipped (< n only at the end).
  absl::StatusOr<size_t> Skip(size_t n);

  // Bytes delivered so far, as an offset in the (decompressed) stream.
  int64_t offset() const { return offset_; }
  const std::string& path() const { return path_; }
  bool compressed() const { return compressed_; }

 private:
  // Refills the buffer when it is empty; leaves it empty only at the end of the file.
  absl::Status Fill();

  const std::string path_;
  const std::unique_ptr<Source> source_;
  const bool compressed_;
  std::vector<char> buffer_;
  size_t begin_ = 0;  // unread bytes are buffer_[begin_, end_)
  size_t end_ = 0;
  int64_t offset_ = 0;
  bool eof_ = false;
};

}  // namespace asyncps::data

#endif  // ASYNCPS_DATA_INPUT_STREAM_H_
