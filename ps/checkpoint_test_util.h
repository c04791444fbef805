#ifndef ASYNCPS_PS_CHECKPOINT_TEST_UTIL_H_
#define ASYNCPS_PS_CHECKPOINT_TEST_UTIL_H_

// Test-only: parameter servers as in-process VariableStores, so checkpoint logic (manifest,
// planning, shard I/O) runs without processes. Used by checkpoint_*_test.cc.

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_manifest.h"
#include "checkpoint/checkpoint_reader.h"
#include "core/status_macros.h"
#include "core/test_temp_dir.h"
#include "gtest/gtest.h"
#include "ps/store_checkpoint.h"
#include "core/durable_file.h"
#include "ps/variable_store.h"

namespace asyncps::testutil {

struct FakeCluster {
  explicit FakeCluster(int num_ps) {
    for (int i = 0; i < num_ps; ++i) stores.push_back(std::make_unique<ps::VariableStore>());
  }

  // Adds `name` with `full` split into shards of `rows` rows each on PS `ps[i]` (named
  // name/part_i when there is more than one shard).
  void Add(const std::string& name, const Tensor& full, const std::vector<int64_t>& rows,
           const std::vector<int>& ps, const OptimizerConfig* optimizer) {
    VariablePlacement p{name, full.dtype(), full.shape(), {}};
    int64_t begin = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      const std::string shard = rows.size() == 1 ? name : absl::StrCat(name, "/part_", i);
      p.shards.push_back({shard, ps[i], begin, begin + rows[i]});
      Tensor value =
          full.shape().empty() ? full.Clone() : full.Slice(begin, begin + rows[i])->Clone();
      auto v = ps::Variable::Create(shard, std::move(value), optimizer);
      EXPECT_TRUE(v.ok()) << v.status();
      EXPECT_TRUE(stores[static_cast<size_t>(ps[i])]->Insert(std::move(*v)).ok());
      begin += rows[i];
    }
    placements.push_back(std::move(p));
  }

  std::shared_ptr<ps::Variable> Shard(const std::string& shard) const {
    for (const auto& s : stores) {
      if (auto v = s->Find(shard); v.ok()) return *v;
    }
    return nullptr;
  }

  // The whole variable (slot "" ) or one of its slots, shards concatenated.
  Tensor Logical(const std::string& name, const std::string& slot = "") const {
    for (const auto& p : placements) {
      if (p.name != name) continue;
      Tensor out(slot.empty() ? p.dtype : DType::kF32, p.shape);
      size_t offset = 0;
      for (const auto& s : p.shards) {
        auto v = Shard(s.name);
        auto state = v->CheckpointState();
        const Tensor* t = &state.value;
        const auto names = v->slot_names();
        for (size_t k = 0; k < names.size(); ++k) {
          if (names[k] == slot) t = &state.slots[k];
        }
        std::memcpy(static_cast<char*>(out.raw_data()) + offset, t->raw_data(), t->num_bytes());
        offset += t->num_bytes();
      }
      return out;
    }
    ADD_FAILURE() << "no variable " << name;
    return Tensor();
  }

  // What CheckpointManager::Save does, with the stores as parameter servers.
  absl::StatusOr<std::string> Save(const std::string& directory, int64_t step) const {
    const std::string dir = absl::StrCat(directory, "/ckpt-", step);
    std::filesystem::create_directories(dir);
    std::vector<ps::SavedFile> saved;
    for (size_t i = 0; i < stores.size(); ++i) {
      std::vector<std::string> names;
      for (const auto& p : placements) {
        for (const auto& s : p.shards) {
          if (s.ps == static_cast<int>(i)) names.push_back(s.name);
        }
      }
      if (names.empty()) continue;
      ASSIGN_OR_RETURN(ps::SavedFile f,
                       ps::SaveShards(*stores[i], dir,
                                      absl::StrCat("ps-", i, "-of-", stores.size(), ".safetensors"),
                                      names, step));
      saved.push_back(std::move(f));
    }
    ASSIGN_OR_RETURN(
        CheckpointManifest m,
        BuildManifest(step, 1.5e9, static_cast<int>(stores.size()), placements, saved));
    const std::string json = ManifestToJson(m);
    ASSIGN_OR_RETURN(auto w,
                     DurableFileWriter::Create(absl::StrCat(dir, "/", kManifestFileName)));
    RETURN_IF_ERROR(w->Append(json.data(), json.size()));
    RETURN_IF_ERROR(w->Commit());
    return dir;
  }

  // What CheckpointManager::Restore does, into these stores and placements.
  absl::Status Restore(const std::string& checkpoint) {
    ASSIGN_OR_RETURN(CheckpointManifest m,
                     VerifyCheckpoint(checkpoint, CheckpointCheck::kChecksums));
    ASSIGN_OR_RETURN(auto plans, PlanRestore(m, checkpoint, placements));
    for (const auto& [ps, plan] : plans)
      RETURN_IF_ERROR(ps::RestoreShards(*stores[static_cast<size_t>(ps)], plan));
    return absl::OkStatus();
  }

  std::vector<std::unique_ptr<ps::VariableStore>> stores;
  std::vector<VariablePlacement> placements;
};

inline Tensor Iota(Shape shape, float start) {
  Tensor t(DType::kF32, std::move(shape));
  for (int64_t i = 0; i < t.num_elements(); ++i)
    t.data<float>()[i] = start + static_cast<float>(i) * 0.25f;
  return t;
}

inline OptimizerConfig AdamConfig() {
  OptimizerConfig c;
  c.kind = OptimizerKind::kAdam;
  c.learning_rate = 0.05f;
  return c;
}

}  // namespace asyncps::testutil

#endif  // ASYNCPS_PS_CHECKPOINT_TEST_UTIL_H_
