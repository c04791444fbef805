#ifndef ASYNCPS_CHECKPOINT_SAFETENSORS_H_
#define ASYNCPS_CHECKPOINT_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/tensor.h"

namespace asyncps::ps {

// The safetensors format (Hugging Face): an 8-byte little-endian header length N, N bytes of
// JSON {"<tensor>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"<key>": "<value>"}} padded with spaces so the data starts 8-byte aligned,
// then the data: every tensor's bytes, little-endian and row-major, tiling the data section
// with no holes and no overlaps (offsets are relative to the start of the data).
//
// Only the dtypes asyncps has are read and written: F32, F64, I32, I64, U8, BOOL.

// One tensor of a safetensors file: where its bytes are, relative to the data section.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

// A validated header.
struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;  // in data order
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + header length
  uint64_t file_size = 0;

  // Null when there is no tensor `name`.
  const SafetensorsEntry* Find(absl::string_view name) const;
};

// The header bytes (length prefix + padded JSON) for `tensors` laid out in the given order;
// fills each entry's begin/end. InvalidArgument on a duplicate or empty name, or the reserved
// name "__metadata__".
absl::StatusOr<std::string> EncodeSafetensorsHeader(
    std::vector<SafetensorsEntry>* tensors, const std::map<std::string, std::string>& metadata);

// The header length a file starts with, checked against the file size: DataLoss when the file
// is shorter than 8 bytes or than the header it announces, or the header is over 100 MiB.
// `file` names the file in errors.
absl::StatusOr<uint64_t> SafetensorsHeaderLength(absl::string_view first8, uint64_t file_size,
                                                 absl::string_view file);

// Parses and validates a header. `json` is the header's N bytes (after the length prefix).
// Checks: JSON syntax; a top-level object without duplicate keys; "__metadata__" (optional) an
// object of strings; every entry an object with exactly dtype (a known name), shape (array of
// non-negative integers) and data_offsets (two integers, begin <= end); end - begin equals
// elements x dtype size; every range inside the data section; the ranges tiling the data
// section exactly (no overlap, no hole, nothing after the last). Every error is DataLoss
// naming `file` and the tensor or field at fault.
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(absl::string_view json, uint64_t file_size,
                                                         absl::string_view file);

// What a written file looks like from outside.
struct FileDigest {
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};

// Writes `tensors` (in order) and `metadata` to `path` durably (temporary name, fsync, rename,
// directory fsync; see DurableFileWriter).
absl::StatusOr<FileDigest> WriteSafetensorsFile(
    const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
    const std::map<std::string, std::string>& metadata);

// A whole safetensors file read into memory and validated.
//
// Immutable after Open; thread-safe.
class SafetensorsFile {
 public:
  // Reads `path`. With `expected`, the size and CRC-32 must match it (DataLoss naming the file
  // otherwise); the header is always validated (see ParseSafetensorsHeader).
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path,
                                              const FileDigest* expected = nullptr);

  const SafetensorsHeader& header() const { return header_; }
  const std::string& path() const { return path_; }
  uint32_t crc32() const { return crc32_; }

  // The tensor `name`, viewing the file's bytes in place when they are aligned for its dtype
  // (a copy otherwise). NotFound names the file and the tensor.
  absl::StatusOr<Tensor> Get(absl::string_view name) const;

 private:
  std::string path_;
  SafetensorsHeader header_;
  std::shared_ptr<void> block_;
  uint32_t crc32_ = 0;
};

}  // namespace asyncps::ps

#endif  // ASYNCPS_CHECKPOINT_SAFETENSORS_H_
