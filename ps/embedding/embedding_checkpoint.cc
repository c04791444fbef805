#include "ps/embedding/embedding_checkpoint.h"

#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_shard.h"
#include "checkpoint/safetensors.h"
#include "core/status_macros.h"
#include "ps/embedding/key_partition.h"

namespace asyncps::ps {
namespace {

constexpr char kFormat[] = "asyncps-embedding-1";
constexpr char kTablePrefix[] = "table/";

nlohmann::json ConfigToJson(const EmbeddingTableConfig& c, int64_t step) {
  const OptimizerConfig& o = c.optimizer;
  const EmbeddingInitializer& i = c.initializer;
  return nlohmann::json{
      {"dim", c.dim},
      {"dtype", std::string(DTypeName(c.dtype))},
      {"step", step},
      {"initializer",
       {{"kind", EmbeddingInitializerKindName(i.kind)}, {"value", i.value}, {"minval", i.minval},
        {"maxval", i.maxval}, {"mean", i.mean}, {"stddev", i.stddev}, {"seed", i.seed}}},
      {"optimizer",
       {{"kind", OptimizerKindName(o.kind)}, {"learning_rate", o.learning_rate}, {"momentum", o.momentum},
        {"nesterov", o.nesterov}, {"beta_1", o.beta_1}, {"beta_2", o.beta_2}, {"epsilon", o.epsilon},
        {"initial_accumulator_value", o.initial_accumulator_value}, {"learning_rate_power", o.learning_rate_power},
        {"l1", o.l1}, {"l2", o.l2}, {"l2_shrinkage", o.l2_shrinkage}, {"beta", o.beta},
        {"decay_steps", o.decay_steps}, {"decay_alpha", o.decay_alpha}}},
      {"admission",
       {{"min_count", c.admission.min_count},
        {"probability", c.admission.probability},
        {"sketch_width", c.admission.sketch_width}}},
      {"ttl_steps", c.ttl_steps},
      {"memory_cap_bytes", c.memory_cap_bytes},
  };
}

// Numbers of a recorded config, checked rather than converted: nlohmann's get<T>() converts any
// JSON number with a static_cast, so a damaged file's 2.5 became 2, -1 a uint32's 4294967295,
// and a number past T's range was undefined behaviour. DataLoss naming the table and field.
absl::Status BadField(const std::string& table, const char* key, const char* want) {
  return absl::DataLossError(
      absl::StrCat("embedding table '", table, "': recorded config: field '", key, "' is not ", want));
}

template <typename T>
absl::StatusOr<T> IntegerField(const nlohmann::json& object, const char* key, const std::string& table) {
  const nlohmann::json& v = object.at(key);
  const bool fits = v.is_number_unsigned() ? std::in_range<T>(v.get<uint64_t>())
                                           : v.is_number_integer() && std::in_range<T>(v.get<int64_t>());
  if (!fits) return BadField(table, key, "an integer in its type's range");
  return v.get<T>();
}

absl::StatusOr<float> FloatField(const nlohmann::json& object, const char* key, const std::string& table) {
  const nlohmann::json& v = object.at(key);
  if (!v.is_number() || !(std::fabs(v.get<double>()) <= std::numeric_limits<float>::max())) {
    return BadField(table, key, "a number within f32's range");
  }
  return static_cast<float>(v.get<double>());
}

absl::StatusOr<EmbeddingTableConfig> ConfigFromJson(const std::string& name, const std::string& text,
                                                    int64_t* step) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::DataLossError(absl::StrCat("embedding table '", name, "': its recorded config is not JSON"));
  }
  try {
    EmbeddingTableConfig c;
    c.name = name;
    ASSIGN_OR_RETURN(c.dim, IntegerField<int64_t>(j, "dim", name));
    ASSIGN_OR_RETURN(c.dtype, DTypeFromName(j.at("dtype").get<std::string>()));
    ASSIGN_OR_RETURN(*step, IntegerField<int64_t>(j, "step", name));
    const auto& i = j.at("initializer");
    RETURN_IF_ERROR(ParseEmbeddingInitializerKind(i.at("kind").get<std::string>(), &c.initializer.kind));
    c.initializer.value = i.at("value").get<double>();
    c.initializer.minval = i.at("minval").get<double>();
    c.initializer.maxval = i.at("maxval").get<double>();
    c.initializer.mean = i.at("mean").get<double>();
    c.initializer.stddev = i.at("stddev").get<double>();
    ASSIGN_OR_RETURN(c.initializer.seed, IntegerField<uint64_t>(i, "seed", name));
    const auto& o = j.at("optimizer");
    ASSIGN_OR_RETURN(c.optimizer.kind, ParseOptimizerKind(o.at("kind").get<std::string>()));
    ASSIGN_OR_RETURN(c.optimizer.learning_rate, FloatField(o, "learning_rate", name));
    ASSIGN_OR_RETURN(c.optimizer.momentum, FloatField(o, "momentum", name));
    c.optimizer.nesterov = o.at("nesterov").get<bool>();
    ASSIGN_OR_RETURN(c.optimizer.beta_1, FloatField(o, "beta_1", name));
    ASSIGN_OR_RETURN(c.optimizer.beta_2, FloatField(o, "beta_2", name));
    ASSIGN_OR_RETURN(c.optimizer.epsilon, FloatField(o, "epsilon", name));
    ASSIGN_OR_RETURN(c.optimizer.initial_accumulator_value, FloatField(o, "initial_accumulator_value", name));
    ASSIGN_OR_RETURN(c.optimizer.learning_rate_power, FloatField(o, "learning_rate_power", name));
    ASSIGN_OR_RETURN(c.optimizer.l1, FloatField(o, "l1", name));
    ASSIGN_OR_RETURN(c.optimizer.l2, FloatField(o, "l2", name));
    ASSIGN_OR_RETURN(c.optimizer.l2_shrinkage, FloatField(o, "l2_shrinkage", name));
    ASSIGN_OR_RETURN(c.optimizer.beta, FloatField(o, "beta", name));
    // Absent from checkpoints written before the decay existed: no decay.
    if (o.contains("decay_steps")) {
      ASSIGN_OR_RETURN(c.optimizer.decay_steps, IntegerField<int64_t>(o, "decay_steps", name));
    }
    if (o.contains("decay_alpha")) {
      ASSIGN_OR_RETURN(c.optimizer.decay_alpha, FloatField(o, "decay_alpha", name));
    }
    const auto& a = j.at("admission");
    ASSIGN_OR_RETURN(c.admission.min_count, IntegerField<uint32_t>(a, "min_count", name));
    ASSIGN_OR_RETURN(c.admission.probability, FloatField(a, "probability", name));
    ASSIGN_OR_RETURN(c.admission.sketch_width, IntegerField<uint32_t>(a, "sketch_width", name));
    ASSIGN_OR_RETURN(c.ttl_steps, IntegerField<int64_t>(j, "ttl_steps", name));
    ASSIGN_OR_RETURN(c.memory_cap_bytes, IntegerField<uint64_t>(j, "memory_cap_bytes", name));
    return c;
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat("embedding table '", name, "': recorded config: ", e.what()));
  }
}

std::string TensorName(const std::string& table, const std::string& what) { return absl::StrCat(table, "/", what); }

}  // namespace

absl::StatusOr<SavedEmbeddingFile> SaveEmbeddingTables(const EmbeddingStore& store, const std::string& directory,
                                                       const std::string& file_name,
                                                       const std::vector<std::string>& tables, int64_t step,
                                                       int num_ps, int ps_index) {
  RETURN_IF_ERROR(ValidateCheckpointFileName(file_name));
  if (directory.empty() || directory[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint directory '", directory, "' is not absolute"));
  }
  std::vector<EmbeddingTable*> chosen;
  if (tables.empty()) {
    chosen = store.List();
  } else {
    for (const std::string& name : tables) {
      ASSIGN_OR_RETURN(EmbeddingTable * t, store.Find(name));
      chosen.push_back(t);
    }
  }
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, std::string> metadata = {{"format", kFormat},
                                                 {"key_partition", kKeyPartitionName},
                                                 {"num_ps", absl::StrCat(num_ps)},
                                                 {"ps_index", absl::StrCat(ps_index)},
                                                 {"step", absl::StrCat(step)}};
  SavedEmbeddingFile saved;
  for (EmbeddingTable* t : chosen) {
    EmbeddingTableState state = t->Export();
    saved.rows += static_cast<uint64_t>(state.keys.num_elements());
    metadata[absl::StrCat(kTablePrefix, t->name())] = ConfigToJson(t->config(), state.step).dump();
    tensors.emplace_back(TensorName(t->name(), "keys"), std::move(state.keys));
    tensors.emplace_back(TensorName(t->name(), "values"), std::move(state.values));
    for (size_t k = 0; k < state.slots.size(); ++k) {
      tensors.emplace_back(TensorName(t->name(), "slot/" + t->rule().slots()[k].name), std::move(state.slots[k]));
    }
    tensors.emplace_back(TensorName(t->name(), "last_update"), std::move(state.last_update));
    if (state.sketch.num_elements() > 0) tensors.emplace_back(TensorName(t->name(), "sketch"), std::move(state.sketch));
  }
  ASSIGN_OR_RETURN(FileDigest digest, WriteSafetensorsFile(absl::StrCat(directory, "/", file_name), tensors, metadata));
  saved.bytes = digest.bytes;
  saved.crc32 = digest.crc32;
  return saved;
}

absl::StatusOr<uint64_t> RestoreEmbeddingTables(EmbeddingStore& store, const std::string& directory,
                                                const std::vector<std::string>& files, int num_ps, int ps_index) {
  if (num_ps < 1 || ps_index < 0 || ps_index >= num_ps) {
    return absl::InvalidArgumentError(absl::StrCat("restore as PS ", ps_index, " of ", num_ps, " PS"));
  }
  std::vector<SafetensorsFile> opened;
  for (const std::string& f : files) {
    RETURN_IF_ERROR(ValidateCheckpointFileName(f));
    ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(absl::StrCat(directory, "/", f)));
    const auto& meta = file.header().metadata;
    auto get = [&](const char* key) -> std::string {
      auto it = meta.find(key);
      return it == meta.end() ? "" : it->second;
    };
    if (get("format") != kFormat) {
      return absl::InvalidArgumentError(absl::StrCat("'", f, "' is not an embedding checkpoint file (format '",
                                                     get("format"), "')"));
    }
    if (get("key_partition") != kKeyPartitionName) {
      return absl::InvalidArgumentError(absl::StrCat("'", f, "' spreads keys by '", get("key_partition"),
                                                     "'; this build knows '", kKeyPartitionName, "'"));
    }
    opened.push_back(std::move(file));
  }
  // Per table: its config (the same in every file) and each file's state of it.
  struct Restored {
    EmbeddingTableConfig config;
    std::vector<EmbeddingTableState> states;
  };
  std::map<std::string, Restored> restored;
  for (size_t fi = 0; fi < opened.size(); ++fi) {
    const SafetensorsFile& file = opened[fi];
    for (const auto& [key, value] : file.header().metadata) {
      if (!absl::StartsWith(key, kTablePrefix)) continue;
      const std::string name = key.substr(sizeof(kTablePrefix) - 1);
      EmbeddingTableState state;
      ASSIGN_OR_RETURN(EmbeddingTableConfig config, ConfigFromJson(name, value, &state.step));
      auto [it, inserted] = restored.try_emplace(name, Restored{config, {}});
      if (!inserted && ConfigToJson(it->second.config, 0) != ConfigToJson(config, 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat("embedding table '", name, "' has different configs in the checkpoint's files"));
      }
      auto opt_rule = UpdateRule::Create(config.optimizer);
      if (!opt_rule.ok()) return opt_rule.status();
      ASSIGN_OR_RETURN(state.keys, file.Get(TensorName(name, "keys")));
      ASSIGN_OR_RETURN(state.values, file.Get(TensorName(name, "values")));
      ASSIGN_OR_RETURN(state.last_update, file.Get(TensorName(name, "last_update")));
      for (const SlotSpec& slot : (*opt_rule)->slots()) {
        ASSIGN_OR_RETURN(Tensor t, file.Get(TensorName(name, "slot/" + slot.name)));
        state.slots.push_back(std::move(t));
      }
      if (file.header().Find(TensorName(name, "sketch")) != nullptr) {
        ASSIGN_OR_RETURN(state.sketch, file.Get(TensorName(name, "sketch")));
      }
      it->second.states.push_back(std::move(state));
    }
  }
  // Create (or check) every table before any changes.
  std::vector<std::pair<EmbeddingTable*, const Restored*>> targets;
  for (const auto& [name, r] : restored) {
    ASSIGN_OR_RETURN(auto table, store.Create(r.config));
    if (table.first->num_slots() != static_cast<int>(r.states.front().slots.size())) {
      return absl::InvalidArgumentError(absl::StrCat("embedding table '", name, "' has ",
                                                     table.first->num_slots(), " optimizer slots here, ",
                                                     r.states.front().slots.size(), " in the checkpoint"));
    }
    targets.emplace_back(table.first, &r);
  }
  const auto keep = [&](int64_t key) { return PsForKey(key, num_ps) == ps_index; };
  std::vector<std::vector<const EmbeddingTableState*>> states(targets.size());
  for (size_t t = 0; t < targets.size(); ++t) {
    for (const EmbeddingTableState& s : targets[t].second->states) states[t].push_back(&s);
    // Every table's states checked before any table is replaced: a refusal of the last one
    // must not come after the others were restored.
    RETURN_IF_ERROR(targets[t].first->CheckImport(states[t], keep));
  }
  uint64_t rows = 0;
  for (size_t t = 0; t < targets.size(); ++t) {
    RETURN_IF_ERROR(targets[t].first->Import(states[t], keep));
    rows += targets[t].first->Stats().rows;
  }
  return rows;
}

}  // namespace asyncps::ps
