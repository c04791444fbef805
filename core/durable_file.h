#ifndef ASYNCPS_CORE_DURABLE_FILE_H_
#define ASYNCPS_CORE_DURABLE_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/crc32.h"  // Crc32, which the files written here carry

namespace asyncps {

// Writes a file so that it is either absent or complete under its final name, even if the
// process dies or the machine loses power at any point: the bytes go to "<path>.tmp", which
// Commit() fsyncs, renames to `path` and makes durable by fsyncing the directory. A writer
// destroyed (or failing) before Commit() removes its temporary file. The CRC-32 and size of
// everything written are kept on the way.
//
// Write-behind: each time the file passes a multiple of kWriteBehindBytes, the writer asks the
// kernel to start writing out the interval just completed (sync_file_range SYNC_FILE_RANGE_WRITE, which does not wait), so the disk
// works while later bytes are still being produced and Commit()'s fsync finds little left to
// do. This changes when bytes reach the disk, never what is durable when: only Commit() (its
// fsyncs) makes anything durable, and a crash before it leaves no file under `path`.
//
// Errors name the file and the system call. Not thread-safe.
class DurableFileWriter {
 public:
  // Creates (truncating) the temporary file. `path`'s directory must exist.
  static absl::StatusOr<std::unique_ptr<DurableFileWriter>> Create(std::string path);
  ~DurableFileWriter();

  DurableFileWriter(const DurableFileWriter&) = delete;
  DurableFileWriter& operator=(const DurableFileWriter&) = delete;

  // The write-behind interval: pages are started on their way to disk per this many bytes.
  static constexpr uint64_t kWriteBehindBytes = uint64_t{8} << 20;

  absl::Status Append(const void* data, size_t n);
  // fsync, rename into place, fsync the directory. Nothing may be appended afterwards.
  absl::Status Commit();

  uint64_t bytes() const { return bytes_; }
  uint32_t crc32() const { return crc_; }
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }
  // How many write-behind requests were made: bytes() / kWriteBehindBytes, one per interval
  // completed (for tests). A request the file system refuses still counts; it only costs speed.
  int write_behind_requests() const { return write_behind_requests_; }

 private:
  DurableFileWriter(std::string path, int fd);
  void Abort();

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  uint64_t bytes_ = 0;
  uint64_t written_behind_ = 0;  // bytes before this offset were handed to write-behind
  int write_behind_requests_ = 0;
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
