#ifndef ASYNCPS_DATA_TEST_FILES_H_
#define ASYNCPS_DATA_TEST_FILES_H_

// Helpers for data/ tests: a temporary directory, file writers (plain, gzip, IDX) and draining
// an iterator.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/dataset.h"

namespace asyncps::data::testutil {

// A fresh directory under $TMPDIR (or /tmp), removed with its files on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // The path of `name` inside the directory.
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

 private:
  std::string dir_;
};

// Writes `bytes` to `path` (aborts the test binary on failure: a broken fixture).
void WriteFile(const std::string& path, const std::string& bytes);
// Writes `bytes` gzip-compressed to `path`.
void WriteGzipFile(const std::string& path, const std::string& bytes);
// The gzip compression of `bytes`, in memory.
std::string Gzip(const std::string& bytes);

// An IDX file image: header (type code, dims) followed by `payload` (already big-endian).
std::string IdxBytes(uint8_t type_code, const std::vector<uint32_t>& dims,
                     const std::string& payload);

// Every element until the end; the first error stops and is returned.
absl::StatusOr<std::vector<Element>> Drain(Iterator& it);
absl::StatusOr<std::vector<Element>> DrainDataset(const Dataset& dataset);

// Scalar i64 elements (as produced by Range) as plain integers.
std::vector<int64_t> Int64s(const std::vector<Element>& elements);

}  // namespace asyncps::data::testutil

#endif  // ASYNCPS_DATA_TEST_FILES_H_
