#ifndef ASYNCPS_CORE_DURABLE_FILE_H_
#define ASYNCPS_CORE_DURABLE_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace asyncps {

// CRC-32 (zlib's, the one Python's zlib.crc32 computes) of `n` bytes, continuing from `crc`
// (start with 0).
uint32_t Crc32(uint32_t crc, const void* data, size_t n);

// Writes a file so that it is either absent or complete under its final name, even if the
// process dies or the machine loses power at any point: the bytes go to "<path>.tmp", which
// Commit() fsyncs, renames to `path` and makes durable by fsyncing the directory. A writer
// destroyed (or failing) before Commit() removes its temporary file. The CRC-32 and size of
// everything written are kept on the way.
//
// Errors name the file and the system call. Not thread-safe.
class DurableFileWriter {
 public:
  // Creates (truncating) the temporary file. `path`'s directory must exist.
  static absl::StatusOr<std::unique_ptr<DurableFileWriter>> Create(std::string path);
  ~DurableFileWriter();

  DurableFileWriter(const DurableFileWriter&) = delete;
  DurableFileWriter& operator=(const DurableFileWriter&) = delete;

  absl::Status Append(const void* data, size_t n);
  // fsync, rename into place, fsync the directory. Nothing may be appended afterwards.
  absl::Status Commit();

  uint64_t bytes() const { return bytes_; }
  uint32_t crc32() const { return crc_; }
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  DurableFileWriter(std::string path, int fd);
  void Abort();

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  uint64_t bytes_ = 0;
  uint32_t crc_ = 0;
};

// fsync of a directory, so that renames and unlinks inside it survive a crash.
absl::Status FsyncDirectory(const std::string& dir);

// The directory part of `path` ("." when there is none).
std::string DirectoryOf(const std::string& path);

// The whole of a file, refusing files over `max_bytes` (ResourceExhausted). NotFound when absent.
absl::StatusOr<std::string> ReadFileToString(const std::string& path, uint64_t max_bytes);

// The size of a file; NotFound when absent.
absl::StatusOr<uint64_t> FileSize(const std::string& path);

// Size and CRC-32 of a whole file, read in chunks (memory stays small whatever the size).
absl::StatusOr<std::pair<uint64_t, uint32_t>> DigestFile(const std::string& path);

// Reads `n` bytes at `offset` into `out`; OutOfRange when the file is shorter.
absl::Status ReadAt(const std::string& path, uint64_t offset, void* out, size_t n);

}  // namespace asyncps

#endif  // ASYNCPS_CORE_DURABLE_FILE_H_
