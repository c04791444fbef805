#include "data/input_stream.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace asyncps::data {

class InputStream::Source {
 public:
  virtual ~Source() = default;
  // Reads up to n bytes; 0 only at the end of the file. `offset` is for error messages.
  virtual absl::StatusOr<size_t> ReadRaw(void* dst, size_t n, int64_t offset) = 0;
};

namespace {

absl::Status ErrnoStatus(int err, absl::string_view what) {
  std::string msg = absl::StrCat(what, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    case EISDIR:
      return absl::FailedPreconditionError(msg);
    default:
      return absl::InternalError(msg);
  }
}

class FileSource : public InputStream::Source {
 public:
  FileSource(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~FileSource() override { ::close(fd_); }

  absl::StatusOr<size_t> ReadRaw(void* dst, size_t n, int64_t offset) override {
    while (true) {
      ssize_t r = ::read(fd_, dst, n);
      if (r >= 0) return static_cast<size_t>(r);
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, absl::StrCat(path_, ": read at offset ", offset));
    }
  }

 private:
  const int fd_;
  const std::string path_;
};

class GzipSource : public InputStream::Source {
 public:
  GzipSource(gzFile file, std::string path) : file_(file), path_(std::move(path)) {}
  ~GzipSource() override { gzclose_r(file_); }

  absl::StatusOr<size_t> ReadRaw(void* dst, size_t n, int64_t offset) override {
    unsigned len = static_cast<unsigned>(std::min<size_t>(n, INT_MAX));
    int r = gzread(file_, dst, len);
    int err = Z_OK;
    const char* msg = gzerror(file_, &err);
    // zlib reports a stream cut short as Z_BUF_ERROR while returning what it decoded (or 0),
    // so the error is checked even when bytes came back.
    if (r < 0 || (err != Z_OK && err != Z_BUF_ERROR) || (r == 0 && err == Z_BUF_ERROR)) {
      if (err == Z_ERRNO) {
        return ErrnoStatus(errno, absl::StrCat(path_, ": read at offset ", offset));
      }
      return absl::DataLossError(absl::StrCat(path_,
                                              ": corrupt gzip stream near decompressed offset ",
                                              offset, ": ", msg ? msg : "unknown zlib error"));
    }
    return static_cast<size_t>(r);
  }

 private:
  const gzFile file_;
  const std::string path_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<InputStream>> InputStream::Open(const std::string& path,
                                                               size_t buffer_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("cannot open ", path));
  unsigned char magic[2] = {0, 0};
  ssize_t got;
  do {
    got = ::pread(fd, magic, sizeof(magic), 0);
  } while (got < 0 && errno == EINTR);
  if (got < 0) {
    int err = errno;
    ::close(fd);
    return ErrnoStatus(err, absl::StrCat("cannot read ", path));
  }
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  buffer_bytes = std::max<size_t>(buffer_bytes, 4096);
  if (got == 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
    gzFile file = gzdopen(fd, "rb");  // takes ownership of fd
    if (file == nullptr) {
      ::close(fd);
      return absl::ResourceExhaustedError(absl::StrCat("cannot open gzip stream of ", path));
    }
    gzbuffer(file, static_cast<unsigned>(std::min<size_t>(buffer_bytes, 1 << 20)));
    return std::make_unique<InputStream>(path, std::make_unique<GzipSource>(file, path),
                                         /*compressed=*/true, buffer_bytes);
  }
  return std::make_unique<InputStream>(path, std::make_unique<FileSource>(fd, path),
                                       /*compressed=*/false, buffer_bytes);
}

InputStream::InputStream(std::string path, std::unique_ptr<Source> source, bool compressed,
                         size_t buffer_bytes)
    : path_(std::move(path)),
      source_(std::move(source)),
      compressed_(compressed),
      buffer_(buffer_bytes) {}

InputStream::~InputStream() = default;

absl::Status InputStream::Fill() {
  if (begin_ < end_ || eof_) return absl::OkStatus();
  ASSIGN_OR_RETURN(size_t got, source_->ReadRaw(buffer_.data(), buffer_.size(), offset_));
  begin_ = 0;
  end_ = got;
  if (got == 0) eof_ = true;
  return absl::OkStatus();
}

absl::StatusOr<size_t> InputStream::Read(void* dst, size_t n) {
  char* out = static_cast<char*>(dst);
  size_t done = 0;
  while (done < n) {
    if (begin_ == end_ && !eof_ && n - done >= buffer_.size()) {
      // Large reads go straight to the caller's memory: no extra copy through the buffer.
      ASSIGN_OR_RETURN(size_t got, source_->ReadRaw(out + done, n - done, offset_));
      if (got == 0) {
        eof_ = true;
        break;
      }
      done += got;
      offset_ += static_cast<int64_t>(got);
      continue;
    }
    RETURN_IF_ERROR(Fill());
    if (begin_ == end_) break;
    size_t take = std::min(n - done, end_ - begin_);
    std::memcpy(out + done, buffer_.data() + begin_, take);
    begin_ += take;
    done += take;
    offset_ += static_cast<int64_t>(take);
  }
  return done;
}

absl::StatusOr<size_t> InputStream::Skip(size_t n) {
  size_t done = 0;
  while (done < n) {
    RETURN_IF_ERROR(Fill());
    if (begin_ == end_) break;
    size_t take = std::min(n - done, end_ - begin_);
    begin_ += take;
    done += take;
    offset_ += static_cast<int64_t>(take);
  }
  return done;
}

absl::StatusOr<bool> InputStream::ReadLine(std::string* line) {
  line->clear();
  bool any = false;
  while (true) {
    RETURN_IF_ERROR(Fill());
    if (begin_ == end_) break;
    any = true;
    const char* start = buffer_.data() + begin_;
    const char* nl = static_cast<const char*>(std::memchr(start, '\n', end_ - begin_));
    size_t take = nl ? static_cast<size_t>(nl - start) : end_ - begin_;
    line->append(start, take);
    begin_ += take;
    offset_ += static_cast<int64_t>(take);
    if (nl != nullptr) {
      ++begin_;
      ++offset_;
      break;
    }
  }
  if (!line->empty() && line->back() == '\r') line->pop_back();
  return any;
}

}  // namespace asyncps::data
