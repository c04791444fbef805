#include "checkpoint/safetensors.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/durable_file.h"

namespace asyncps::ps {
namespace {

constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;
constexpr char kMetadataKey[] = "__metadata__";

absl::Status Corrupt(absl::string_view file, absl::string_view what) {
  return absl::DataLossError(absl::StrCat("safetensors file ", file, ": ", what));
}

// The safetensors dtype name, strictly (the uppercase spelling only).
absl::StatusOr<DType> StrictDType(const std::string& name) {
  for (DType d : {DType::kF32, DType::kF64, DType::kI32, DType::kI64, DType::kU8, DType::kBool}) {
    if (name == DTypeSafetensorsName(d)) return d;
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported dtype '", name, "'"));
}

void PutU64Le(uint64_t v, char* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint64_t GetU64Le(absl::string_view in) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(in[static_cast<size_t>(i)]);
  return v;
}

// elements x size, or nullopt on overflow past 2^62.
std::optional<uint64_t> ByteLength(const Shape& shape, DType dtype) {
  unsigned __int128 n = DTypeSize(dtype);
  for (int64_t d : shape) {
    n *= static_cast<uint64_t>(d);
    if (n > (uint64_t{1} << 62)) return std::nullopt;
  }
  return static_cast<uint64_t>(n);
}

}  // namespace

const SafetensorsEntry* SafetensorsHeader::Find(absl::string_view name) const {
  for (const SafetensorsEntry& e : tensors) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

absl::StatusOr<std::string> EncodeSafetensorsHeader(
    std::vector<SafetensorsEntry>* tensors, const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json root = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    root[kMetadataKey] = std::move(meta);
  }
  uint64_t offset = 0;
  for (SafetensorsEntry& e : *tensors) {
    if (e.name.empty() || e.name == kMetadataKey) {
      return absl::InvalidArgumentError(absl::StrCat("invalid tensor name '", e.name, "'"));
    }
    if (root.contains(e.name))
      return absl::InvalidArgumentError(absl::StrCat("duplicate tensor name '", e.name, "'"));
    auto bytes = ByteLength(e.shape, e.dtype);
    if (!bytes)
      return absl::InvalidArgumentError(absl::StrCat("tensor '", e.name, "' is too large"));
    e.begin = offset;
    e.end = offset + *bytes;
    offset = e.end;
    root[e.name] = {{"dtype", std::string(DTypeSafetensorsName(e.dtype))},
                    {"shape", e.shape},
                    {"data_offsets", {e.begin, e.end}}};
  }
  std::string json = root.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  PutU64Le(json.size(), out.data());
  out += json;
  return out;
}

absl::StatusOr<uint64_t> SafetensorsHeaderLength(absl::string_view first8, uint64_t file_size,
                                                 absl::string_view file) {
  if (file_size < 8 || first8.size() < 8) {
    return Corrupt(file, absl::StrCat("truncated: ", file_size,
                                      " bytes, shorter than the 8-byte header length"));
  }
  const uint64_t n = GetU64Le(first8);
  if (n > kMaxHeaderBytes) {
    return Corrupt(file,
                   absl::StrCat("header length ", n, " is over the limit of ", kMaxHeaderBytes));
  }
  if (8 + n > file_size) {
    return Corrupt(file, absl::StrCat("truncated: header length ", n, " runs past the end of the ",
                                      file_size, "-byte file"));
  }
  return n;
}

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(absl::string_view text, uint64_t file_size,
                                                         absl::string_view file) {
  using nlohmann::json;
  std::string duplicate;
  json root;
  try {
    // Keys seen per open object (by depth): a plain parse would keep the last of two equal
    // keys silently, so a duplicate anywhere is an error.
    std::vector<std::set<std::string>> seen;
    root = json::parse(
        text.begin(), text.end(), [&](int depth, json::parse_event_t event, json& parsed) {
          const size_t d = static_cast<size_t>(depth);
          if (event == json::parse_event_t::object_start) {
            seen.resize(d + 1);
            seen[d].clear();
          } else if (event == json::parse_event_t::key && d >= 1 && d <= seen.size() &&
                     parsed.is_string()) {
            if (!seen[d - 1].insert(parsed.get<std::string>()).second && duplicate.empty()) {
              duplicate = parsed.get<std::string>();
            }
          }
          return true;
        });
  } catch (const json::exception& e) {
    return Corrupt(file, absl::StrCat("header is not valid JSON: ", e.what()));
  }
  if (!root.is_object()) return Corrupt(file, "header is not a JSON object");
  if (!duplicate.empty())
    return Corrupt(file, absl::StrCat("header has key '", duplicate, "' twice in one object"));

  SafetensorsHeader header;
  header.data_start = 8 + text.size();
  header.file_size = file_size;
  const uint64_t data_size = file_size - header.data_start;
  for (const auto& [key, value] : root.items()) {
    if (key == kMetadataKey) {
      if (!value.is_object()) return Corrupt(file, "__metadata__ is not an object");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string())
          return Corrupt(file, absl::StrCat("__metadata__ value of '", mk, "' is not a string"));
        header.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    const std::string where = absl::StrCat("tensor '", key, "': ");
    if (key.empty()) return Corrupt(file, "a tensor has an empty name");
    if (!value.is_object()) return Corrupt(file, where + "entry is not an object");
    for (const auto& [field, unused] : value.items()) {
      if (field != "dtype" && field != "shape" && field != "data_offsets") {
        return Corrupt(file, absl::StrCat(where, "unknown field '", field, "'"));
      }
    }
    SafetensorsEntry e;
    e.name = key;
    if (!value.contains("dtype") || !value["dtype"].is_string())
      return Corrupt(file, where + "dtype missing or not a string");
    auto dtype = StrictDType(value["dtype"].get<std::string>());
    if (!dtype.ok()) return Corrupt(file, where + std::string(dtype.status().message()));
    e.dtype = *dtype;
    if (!value.contains("shape") || !value["shape"].is_array())
      return Corrupt(file, where + "shape missing or not an array");
    for (const json& d : value["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 62)) {
        return Corrupt(file, absl::StrCat(where, "shape ", value["shape"].dump(),
                                          " has a dimension that is not a non-negative integer"));
      }
      e.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
    }
    const json* offsets = value.contains("data_offsets") ? &value["data_offsets"] : nullptr;
    if (offsets == nullptr || !offsets->is_array() || offsets->size() != 2 ||
        !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
      return Corrupt(file, where + "data_offsets missing or not two non-negative integers");
    }
    e.begin = (*offsets)[0].get<uint64_t>();
    e.end = (*offsets)[1].get<uint64_t>();
    if (e.begin > e.end)
      return Corrupt(
          file, absl::StrCat(where, "data_offsets [", e.begin, ", ", e.end, "] run backwards"));
    if (e.end > data_size) {
      return Corrupt(file, absl::StrCat(where, "data_offsets [", e.begin, ", ", e.end,
                                        "] run past the end of the ", data_size,
                                        "-byte data section (file truncated?)"));
    }
    const auto bytes = ByteLength(e.shape, e.dtype);
    if (!bytes || *bytes != e.end - e.begin) {
      return Corrupt(
          file, absl::StrCat(where, DTypeSafetensorsName(e.dtype), ShapeString(e.shape), " needs ",
                             bytes ? absl::StrCat(*bytes) : std::string("too many"),
                             " bytes but data_offsets [", e.begin, ", ", e.end, "] hold ",
                             e.end - e.begin));
    }
    header.tensors.push_back(std::move(e));
  }
  std::stable_sort(header.tensors.begin(), header.tensors.end(),
                   [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
                     return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
                   });
  uint64_t expected = 0;
  for (const SafetensorsEntry& e : header.tensors) {
    if (e.begin < expected) {
      return Corrupt(
          file, absl::StrCat("tensor '", e.name, "' at [", e.begin, ", ", e.end,
                             ") overlaps the tensor before it (which ends at ", expected, ")"));
    }
    if (e.begin > expected) {
      return Corrupt(file, absl::StrCat("hole in the data: bytes [", expected, ", ", e.begin,
                                        ") belong to no tensor"));
    }
    expected = e.end;
  }
  if (expected != data_size) {
    return Corrupt(file, absl::StrCat("the tensors end at data byte ", expected,
                                      " but the data section holds ", data_size, " bytes"));
  }
  return header;
}

absl::StatusOr<FileDigest> WriteSafetensorsFile(
    const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
    const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsEntry> entries;
  for (const auto& [name, t] : tensors) entries.push_back({name, t.dtype(), t.shape(), 0, 0});
  ASSIGN_OR_RETURN(std::string header, EncodeSafetensorsHeader(&entries, metadata));
  ASSIGN_OR_RETURN(auto writer, DurableFileWriter::Create(path));
  RETURN_IF_ERROR(writer->Append(header.data(), header.size()));
  for (const auto& [name, t] : tensors)
    RETURN_IF_ERROR(writer->Append(t.raw_data(), t.num_bytes()));
  RETURN_IF_ERROR(writer->Commit());
  return FileDigest{writer->bytes(), writer->crc32()};
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path,
                                                      const FileDigest* expected) {
  ASSIGN_OR_RETURN(uint64_t size, FileSize(path));
  if (expected != nullptr && size != expected->bytes) {
    return Corrupt(path,
                   absl::StrCat("size is ", size, " bytes, the manifest says ", expected->bytes));
  }
  SafetensorsFile f;
  f.path_ = path;
  // Plain malloc, aligned by hand: no huge-page advice (see Variable::CopyCheckpointState).
  void* raw = std::malloc(static_cast<size_t>(size) + 64);
  if (raw == nullptr)
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", size, " bytes for ", path));
  f.block_ = std::shared_ptr<void>(
      reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(raw) + 63) & ~uintptr_t{63}),
      [raw](void*) { std::free(raw); });
  char* bytes = static_cast<char*>(f.block_.get());
  RETURN_IF_ERROR(ReadAt(path, 0, bytes, size));
  f.crc32_ = Crc32(0, bytes, size);
  if (expected != nullptr && f.crc32_ != expected->crc32) {
    return Corrupt(
        path, absl::StrCat("checksum mismatch: CRC-32 is ", absl::Hex(f.crc32_, absl::kZeroPad8),
                           ", the manifest says ", absl::Hex(expected->crc32, absl::kZeroPad8)));
  }
  ASSIGN_OR_RETURN(
      uint64_t n,
      SafetensorsHeaderLength(absl::string_view(bytes, std::min<uint64_t>(size, 8)), size, path));
  ASSIGN_OR_RETURN(f.header_, ParseSafetensorsHeader(absl::string_view(bytes + 8, n), size, path));
  return f;
}

absl::StatusOr<Tensor> SafetensorsFile::Get(absl::string_view name) const {
  const SafetensorsEntry* e = header_.Find(name);
  if (e == nullptr)
    return absl::NotFoundError(
        absl::StrCat("safetensors file ", path_, " has no tensor '", name, "'"));
  char* p = static_cast<char*>(block_.get()) + header_.data_start + e->begin;
  if (reinterpret_cast<uintptr_t>(p) % DTypeSize(e->dtype) == 0) {
    return Tensor::View(e->dtype, e->shape, block_, p);
  }
  Tensor t(e->dtype, e->shape);
  std::memcpy(t.raw_data(), p, t.num_bytes());
  return t;
}

}  // namespace asyncps::ps
