#include "checkpoint/checkpoint_reader.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/durable_file.h"

namespace asyncps {
namespace {

absl::Status CheckTensor(const ps::SafetensorsHeader& header, const std::string& path,
                         const std::string& tensor, DType dtype, const Shape& shape,
                         const std::string& what) {
  const ps::SafetensorsEntry* e = header.Find(tensor);
  if (e == nullptr) {
    return absl::DataLossError(
        absl::StrCat("checkpoint file ", path, " lacks tensor '", tensor, "' (", what, ")"));
  }
  if (e->dtype != dtype || e->shape != shape) {
    return absl::DataLossError(absl::StrCat("checkpoint file ", path, ": tensor '", tensor, "' (",
                                            what, ") is ", DTypeSafetensorsName(e->dtype),
                                            ShapeString(e->shape), ", the manifest says ",
                                            DTypeSafetensorsName(dtype), ShapeString(shape)));
  }
  return absl::OkStatus();
}

// The step of a directory named "ckpt-<step>", or -1.
int64_t StepOf(const std::string& name) {
  const std::string kPrefix = "ckpt-";
  if (name.rfind(kPrefix, 0) != 0) return -1;
  const std::string digits = name.substr(kPrefix.size());
  if (digits.empty() || digits.size() > 18 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return -1;
  }
  int64_t step = -1;
  return absl::SimpleAtoi(digits, &step) ? step : -1;
}

}  // namespace

std::vector<CheckpointDir> ScanCheckpoints(const std::string& directory) {
  namespace fs = std::filesystem;
  std::vector<CheckpointDir> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(directory, ec)) {
    if (!entry.is_directory(ec)) continue;
    const int64_t step = StepOf(entry.path().filename().string());
    if (step < 0) continue;
    const bool committed = fs::exists(entry.path() / kManifestFileName, ec);
    out.push_back({step, entry.path().string(), committed});
  }
  std::sort(out.begin(), out.end(),
            [](const CheckpointDir& a, const CheckpointDir& b) { return a.step < b.step; });
  return out;
}

absl::StatusOr<std::string> LatestCheckpoint(const std::string& directory, CheckpointCheck check) {
  std::vector<CheckpointDir> found = ScanCheckpoints(directory);
  for (auto it = found.rbegin(); it != found.rend(); ++it) {
    if (!it->committed) continue;
    auto verified = VerifyCheckpoint(it->path, check);
    if (verified.ok()) return it->path;
    spdlog::warn("skipping checkpoint {}: {}", it->path, verified.status().ToString());
  }
  return absl::NotFoundError(absl::StrCat("no valid checkpoint in ", directory));
}

absl::StatusOr<CheckpointManifest> ReadManifest(const std::string& checkpoint_dir) {
  const std::string path = absl::StrCat(checkpoint_dir, "/", kManifestFileName);
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, uint64_t{256} << 20));
  return ManifestFromJson(text, path);
}

absl::StatusOr<CheckpointManifest> VerifyCheckpoint(const std::string& checkpoint_dir,
                                                    CheckpointCheck level) {
  ASSIGN_OR_RETURN(CheckpointManifest manifest, ReadManifest(checkpoint_dir));
  std::map<std::string, ps::SafetensorsHeader> headers;
  for (const ManifestFile& f : manifest.files) {
    const std::string path = absl::StrCat(checkpoint_dir, "/", f.name);
    auto size = FileSize(path);
    if (!size.ok())
      return absl::DataLossError(
          absl::StrCat("checkpoint file ", path, ": ", size.status().message()));
    if (*size != f.digest.bytes) {
      return absl::DataLossError(absl::StrCat("checkpoint file ", path, ": size is ", *size,
                                              " bytes, the manifest says ", f.digest.bytes));
    }
    std::string first8(8, '\0');
    RETURN_IF_ERROR(ReadAt(path, 0, first8.data(), std::min<uint64_t>(8, *size)));
    ASSIGN_OR_RETURN(uint64_t n, ps::SafetensorsHeaderLength(first8, *size, path));
    std::string json(n, '\0');
    RETURN_IF_ERROR(ReadAt(path, 8, json.data(), n));
    ASSIGN_OR_RETURN(headers[f.name], ps::ParseSafetensorsHeader(json, *size, path));
  }
  if (level == CheckpointCheck::kChecksums) {
    // One thread per file: the files were written in parallel, one per PS, and reading them
    // in parallel keeps the disk (and the CRC) busy the same way.
    std::vector<absl::Status> results(manifest.files.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < manifest.files.size(); ++i) {
      threads.emplace_back([&, i] {
        const ManifestFile& f = manifest.files[i];
        const std::string path = absl::StrCat(checkpoint_dir, "/", f.name);
        auto digest = DigestFile(path);
        if (!digest.ok()) {
          results[i] = digest.status();
        } else if (digest->second != f.digest.crc32 || digest->first != f.digest.bytes) {
          results[i] = absl::DataLossError(
              absl::StrCat("checkpoint file ", path, ": checksum mismatch: CRC-32 is ",
                           absl::Hex(digest->second, absl::kZeroPad8), ", the manifest says ",
                           absl::Hex(f.digest.crc32, absl::kZeroPad8)));
        }
      });
    }
    for (std::thread& t : threads) t.join();
    for (const absl::Status& s : results) RETURN_IF_ERROR(s);
  }
  for (const ManifestVariable& v : manifest.variables) {
    for (const ManifestShard& s : v.shards) {
      const std::string path = absl::StrCat(checkpoint_dir, "/", s.file);
      const Shape shape = v.ShardShape(s);
      RETURN_IF_ERROR(CheckTensor(headers[s.file], path, s.tensor, v.dtype, shape,
                                  absl::StrCat("shard '", s.name, "' of '", v.name, "'")));
      for (const auto& [slot, tensor] : s.slots) {
        RETURN_IF_ERROR(CheckTensor(headers[s.file], path, tensor, DType::kF32, shape,
                                    absl::StrCat("slot '", slot, "' of shard '", s.name, "'")));
      }
    }
  }
  return manifest;
}

absl::StatusOr<std::unique_ptr<CheckpointReader>> CheckpointReader::Open(
    const std::string& checkpoint_dir) {
  ASSIGN_OR_RETURN(CheckpointManifest manifest,
                   VerifyCheckpoint(checkpoint_dir, CheckpointCheck::kStructure));
  return std::unique_ptr<CheckpointReader>(
      new CheckpointReader(checkpoint_dir, std::move(manifest)));
}

absl::StatusOr<std::shared_ptr<const ps::SafetensorsFile>> CheckpointReader::File(
    const std::string& name) {
  {
    MutexLock lock(&mu_);
    auto it = files_.find(name);
    if (it != files_.end()) return it->second;
  }
  const ManifestFile* f = manifest_.FindFile(name);
  if (f == nullptr)
    return absl::DataLossError(absl::StrCat("checkpoint ", dir_, " does not list file ", name));
  ASSIGN_OR_RETURN(ps::SafetensorsFile file,
                   ps::SafetensorsFile::Open(absl::StrCat(dir_, "/", name), &f->digest));
  auto shared = std::make_shared<const ps::SafetensorsFile>(std::move(file));
  MutexLock lock(&mu_);
  files_.emplace(name, shared);
  return shared;
}

absl::StatusOr<Tensor> CheckpointReader::Read(const std::string& name, const std::string& slot) {
  const ManifestVariable* v = manifest_.FindVariable(name);
  if (v == nullptr)
    return absl::NotFoundError(absl::StrCat("checkpoint ", dir_, " has no variable '", name, "'"));
  const DType dtype = slot.empty() ? v->dtype : DType::kF32;
  Tensor out(dtype, v->shape);
  const size_t row_bytes = v->rows() == 0 ? 0 : out.num_bytes() / static_cast<size_t>(v->rows());
  for (const ManifestShard& s : v->shards) {
    std::string tensor = s.tensor;
    if (!slot.empty()) {
      auto it = s.slots.find(slot);
      if (it == s.slots.end()) {
        return absl::NotFoundError(absl::StrCat("checkpoint ", dir_, ": variable '", name,
                                                "' has no optimizer slot '", slot, "'"));
      }
      tensor = it->second;
    }
    ASSIGN_OR_RETURN(auto file, File(s.file));
    ASSIGN_OR_RETURN(Tensor part, file->Get(tensor));
    if (part.dtype() != dtype || part.shape() != v->ShardShape(s)) {
      return absl::DataLossError(absl::StrCat("checkpoint file ", file->path(), ": tensor '",
                                              tensor, "' is ", DTypeName(part.dtype()),
                                              ShapeString(part.shape()), ", expected ",
                                              DTypeName(dtype), ShapeString(v->ShardShape(s))));
    }
    std::memcpy(static_cast<char*>(out.raw_data()) + static_cast<size_t>(s.row_begin) * row_bytes,
                part.raw_data(), part.num_bytes());
  }
  return out;
}

absl::StatusOr<Tensor> ReadCheckpointVariable(const std::string& checkpoint_dir,
                                              const std::string& name, const std::string& slot) {
  ASSIGN_OR_RETURN(auto reader, CheckpointReader::Open(checkpoint_dir));
  return reader->Read(name, slot);
}

}  // namespace asyncps
