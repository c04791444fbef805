#include "ps/store_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/durable_file.h"
#include "ps/update_rule.h"
#include "ps/variable_store.h"

namespace asyncps::ps {
namespace {

int64_t Rows(const Shape& shape) { return shape.empty() ? 1 : shape[0]; }

Shape RowShape(const Shape& shape) {
  return shape.empty() ? Shape{} : Shape(shape.begin() + 1, shape.end());
}

size_t RowBytes(DType dtype, const Shape& shape) {
  size_t n = DTypeSize(dtype);
  for (size_t i = 1; i < shape.size(); ++i) n *= static_cast<size_t>(shape[i]);
  return n;
}

// Copies rows [begin, end) of `src` to row `dst_row` of `dst` (same dtype and row shape).
void CopyRows(const Tensor& src, int64_t begin, int64_t end, Tensor& dst, int64_t dst_row) {
  const size_t row = RowBytes(src.dtype(), src.shape());
  std::memcpy(static_cast<char*>(dst.raw_data()) + static_cast<size_t>(dst_row) * row,
              static_cast<const char*>(src.raw_data()) + static_cast<size_t>(begin) * row,
              static_cast<size_t>(end - begin) * row);
}

// Checks that `t` (tensor `name` of `file`) can supply rows [begin, end) of a `dtype` variable
// shaped like `shape`.
absl::Status CheckSource(const Tensor& t, const std::string& file, const std::string& name,
                         DType dtype, const Shape& shape, int64_t begin, int64_t end) {
  if (t.dtype() != dtype) {
    return absl::DataLossError(absl::StrCat("checkpoint file ", file, ": tensor '", name, "' is ",
                                            DTypeName(t.dtype()), ", expected ", DTypeName(dtype)));
  }
  if (t.shape().empty() != shape.empty() || RowShape(t.shape()) != RowShape(shape)) {
    return absl::DataLossError(absl::StrCat("checkpoint file ", file, ": tensor '", name,
                                            "' has shape ", ShapeString(t.shape()), ", rows of ",
                                            ShapeString(RowShape(shape)), " expected"));
  }
  if (begin < 0 || begin > end || end > Rows(t.shape())) {
    return absl::DataLossError(absl::StrCat("checkpoint file ", file, ": rows [", begin, ", ", end,
                                            ") of tensor '", name, "' are out of its range [0, ",
                                            Rows(t.shape()), ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SavedFile> SaveShards(const VariableStore& store, const std::string& directory,
                                     const std::string& file_name,
                                     const std::vector<std::string>& names, int64_t step,
                                     const SaveHooks& hooks) {
  RETURN_IF_ERROR(ValidateCheckpointFileName(file_name));
  if (directory.empty() || directory[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint directory '", directory, "' is not absolute"));
  }
  std::vector<std::shared_ptr<Variable>> variables;
  for (const std::string& name : names) {
    ASSIGN_OR_RETURN(auto v, store.Find(name));
    variables.push_back(std::move(v));
  }
  SavedFile saved;
  saved.file_name = file_name;
  std::vector<SafetensorsEntry> entries;
  for (const auto& v : variables) {
    SavedShard shard;
    shard.name = v->name();
    shard.dtype = v->dtype();
    shard.shape = v->shape();
    shard.tensor = v->name();
    shard.slot_names = v->slot_names();
    if (v->optimizer_config() != nullptr) shard.optimizer = *v->optimizer_config();
    entries.push_back({shard.tensor, v->dtype(), v->shape(), 0, 0});
    for (const std::string& slot : shard.slot_names) {
      shard.slot_tensors.push_back(SlotTensorName(v->name(), slot));
      entries.push_back({shard.slot_tensors.back(), DType::kF32, v->shape(), 0, 0});
    }
    saved.shards.push_back(std::move(shard));
  }
  // Step counters are known only once each shard is copied, after the header is written, so
  // the header carries the checkpoint step; the counters travel in the manifest.
  std::map<std::string, std::string> metadata = {{"format", "asyncps-shard-1"},
                                                 {"step", absl::StrCat(step)}};
  ASSIGN_OR_RETURN(std::string header, EncodeSafetensorsHeader(&entries, metadata));
  const std::string path = absl::StrCat(directory, "/", file_name);
  ASSIGN_OR_RETURN(auto writer, DurableFileWriter::Create(path));
  RETURN_IF_ERROR(writer->Append(header.data(), header.size()));
  // One plain buffer, sized for the largest shard with its slots, reused for every shard.
  size_t scratch_bytes = 0;
  for (size_t i = 0; i < variables.size(); ++i) {
    const size_t value_bytes =
        static_cast<size_t>(NumElements(variables[i]->shape())) * DTypeSize(variables[i]->dtype());
    scratch_bytes = std::max(scratch_bytes, value_bytes * (1 + saved.shards[i].slot_names.size()));
  }
  std::unique_ptr<char[]> scratch(new char[std::max<size_t>(scratch_bytes, 1)]);
  for (size_t i = 0; i < variables.size(); ++i) {
    // The variable's shape cannot change after creation, so the header stays right.
    const size_t value_bytes =
        static_cast<size_t>(NumElements(variables[i]->shape())) * DTypeSize(variables[i]->dtype());
    std::vector<void*> slots;
    for (size_t k = 0; k < saved.shards[i].slot_names.size(); ++k)
      slots.push_back(scratch.get() + (k + 1) * value_bytes);
    saved.shards[i].iterations = variables[i]->CopyCheckpointState(scratch.get(), slots);
    RETURN_IF_ERROR(writer->Append(scratch.get(), value_bytes * (1 + slots.size())));
  }
  if (hooks.before_rename) hooks.before_rename(writer->temp_path());
  RETURN_IF_ERROR(writer->Commit());
  saved.digest = {writer->bytes(), writer->crc32()};
  return saved;
}

absl::Status RestoreShards(VariableStore& store, const RestorePlan& plan) {
  std::vector<SafetensorsFile> files;
  for (const RestoreFile& f : plan.files) {
    RETURN_IF_ERROR(ValidateCheckpointFileName(f.file_name));
    ASSIGN_OR_RETURN(
        SafetensorsFile file,
        SafetensorsFile::Open(absl::StrCat(plan.directory, "/", f.file_name), &f.digest));
    files.push_back(std::move(file));
  }
  struct Prepared {
    std::shared_ptr<Variable> existing;
    std::unique_ptr<Variable> created;
    Variable::State state;
  };
  std::vector<Prepared> prepared;
  for (const RestoreShard& shard : plan.shards) {
    RETURN_IF_ERROR(ValidateShape(shard.shape, shard.dtype));
    // Checked here, not only by RestoreState below: there a refusal would come after the
    // shards before it were restored.
    RETURN_IF_ERROR(Variable::CheckIterations(shard.name, shard.iterations));
    Prepared p;
    auto existing = store.Find(shard.name);
    if (existing.ok()) {
      p.existing = *existing;
      // The optimizer the plan names is not used for a variable that exists, but a plan that
      // could not have created it (a damaged decay, say) is refused all the same.
      if (shard.optimizer) {
        absl::Status rule = UpdateRule::Create(*shard.optimizer).status();
        if (!rule.ok()) {
          return absl::InvalidArgumentError(absl::StrCat("variable '", shard.name, "': ", rule.message()));
        }
      }
      if (p.existing->dtype() != shard.dtype || p.existing->shape() != shard.shape) {
        return absl::FailedPreconditionError(
            absl::StrCat("variable '", shard.name, "' is ", DTypeName(p.existing->dtype()),
                         ShapeString(p.existing->shape()), " here, the checkpoint restores ",
                         DTypeName(shard.dtype), ShapeString(shard.shape)));
      }
    } else {
      ASSIGN_OR_RETURN(p.created, Variable::Create(shard.name, Tensor(shard.dtype, shard.shape),
                                                   shard.optimizer ? &*shard.optimizer : nullptr,
                                                   store.apply_pool()));
    }
    Variable& target = p.existing ? *p.existing : *p.created;
    const std::vector<std::string> slot_names = target.slot_names();
    const int64_t rows = Rows(shard.shape);

    // The pieces must tile [0, rows).
    std::vector<const RestorePiece*> pieces;
    for (const RestorePiece& piece : shard.pieces) pieces.push_back(&piece);
    std::sort(pieces.begin(), pieces.end(), [](const RestorePiece* a, const RestorePiece* b) {
      return a->dst_row_begin < b->dst_row_begin;
    });
    int64_t next = 0;
    for (const RestorePiece* piece : pieces) {
      if (piece->dst_row_begin != next || piece->src_row_end < piece->src_row_begin) {
        return absl::InvalidArgumentError(absl::StrCat("restore pieces of '", shard.name,
                                                       "' do not tile its ", rows,
                                                       " rows (gap or overlap at row ", next, ")"));
      }
      next += piece->src_row_end - piece->src_row_begin;
    }
    if (next != rows) {
      return absl::InvalidArgumentError(absl::StrCat("restore pieces of '", shard.name, "' cover ",
                                                     next, " rows, the shard has ", rows));
    }

    // One piece covering a whole source tensor is used in place; otherwise rows are copied.
    const bool whole = pieces.size() == 1;
    if (!whole) {
      p.state.value = Tensor(shard.dtype, shard.shape);
      for (size_t s = 0; s < slot_names.size(); ++s)
        p.state.slots.emplace_back(DType::kF32, shard.shape);
    } else {
      p.state.slots.resize(slot_names.size());
    }
    for (const RestorePiece* piece : pieces) {
      if (piece->file >= files.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("restore piece of '", shard.name, "' names file #", piece->file));
      }
      const SafetensorsFile& file = files[piece->file];
      ASSIGN_OR_RETURN(Tensor src, file.Get(piece->tensor));
      RETURN_IF_ERROR(CheckSource(src, file.path(), piece->tensor, shard.dtype, shard.shape,
                                  piece->src_row_begin, piece->src_row_end));
      const bool in_place = whole && Rows(src.shape()) == rows && src.shape() == shard.shape;
      if (in_place) {
        p.state.value = src;
      } else {
        if (whole) {
          p.state.value = Tensor(shard.dtype, shard.shape);
          for (Tensor& slot : p.state.slots) slot = Tensor(DType::kF32, shard.shape);
        }
        CopyRows(src, piece->src_row_begin, piece->src_row_end, p.state.value,
                 piece->dst_row_begin);
      }
      if (piece->slot_names.size() != piece->slot_tensors.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("restore piece of '", shard.name, "' has unpaired slots"));
      }
      for (size_t s = 0; s < slot_names.size(); ++s) {
        auto it = std::find(piece->slot_names.begin(), piece->slot_names.end(), slot_names[s]);
        if (it == piece->slot_names.end()) {
          return absl::FailedPreconditionError(
              absl::StrCat("checkpoint has no optimizer slot '", slot_names[s], "' for '",
                           shard.name, "' (tensor '", piece->tensor, "' in ", file.path(),
                           "): was it saved with another optimizer?"));
        }
        const std::string& slot_tensor =
            piece->slot_tensors[static_cast<size_t>(it - piece->slot_names.begin())];
        ASSIGN_OR_RETURN(Tensor slot_src, file.Get(slot_tensor));
        RETURN_IF_ERROR(CheckSource(slot_src, file.path(), slot_tensor, DType::kF32, shard.shape,
                                    piece->src_row_begin, piece->src_row_end));
        if (slot_src.shape() != src.shape()) {
          return absl::DataLossError(absl::StrCat(
              "checkpoint file ", file.path(), ": slot tensor '", slot_tensor, "' has shape ",
              ShapeString(slot_src.shape()), ", its variable ", ShapeString(src.shape())));
        }
        if (in_place) {
          p.state.slots[s] = slot_src;
        } else {
          CopyRows(slot_src, piece->src_row_begin, piece->src_row_end, p.state.slots[s],
                   piece->dst_row_begin);
        }
      }
    }
    p.state.iterations = shard.iterations;
    prepared.push_back(std::move(p));
  }
  // Everything checked: apply. RestoreState re-validates what it is given, which cannot fail
  // now, and Insert keeps a variable another request created meanwhile (same dtype/shape).
  for (Prepared& p : prepared) {
    if (p.created != nullptr) {
      const std::string name = p.created->name();
      RETURN_IF_ERROR(p.created->RestoreState(p.state));
      ASSIGN_OR_RETURN(bool inserted, store.Insert(std::move(p.created)));
      if (!inserted) {
        ASSIGN_OR_RETURN(auto raced, store.Find(name));
        RETURN_IF_ERROR(raced->RestoreState(p.state));
      }
    } else {
      RETURN_IF_ERROR(p.existing->RestoreState(p.state));
    }
  }
  return absl::OkStatus();
}

}  // namespace asyncps::ps
