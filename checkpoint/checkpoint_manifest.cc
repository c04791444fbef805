#include "checkpoint/checkpoint_manifest.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace asyncps {
namespace {

using nlohmann::json;

constexpr char kFormat[] = "asyncps-checkpoint";
constexpr int kVersion = 1;

json OptimizerToJson(const OptimizerConfig& c) {
  return {{"type", OptimizerKindName(c.kind)},
          {"learning_rate", c.learning_rate},
          {"momentum", c.momentum},
          {"nesterov", c.nesterov},
          {"beta_1", c.beta_1},
          {"beta_2", c.beta_2},
          {"epsilon", c.epsilon},
          {"initial_accumulator_value", c.initial_accumulator_value},
          {"learning_rate_power", c.learning_rate_power},
          {"l1", c.l1},
          {"l2", c.l2},
          {"l2_shrinkage", c.l2_shrinkage},
          {"beta", c.beta},
          {"decay_steps", c.decay_steps},
          {"decay_alpha", c.decay_alpha}};
}

// Field access with errors that say which field of what is wrong.
class Reader {
 public:
  Reader(absl::string_view source) : source_(source) {}

  absl::Status Error(const std::string& where, const std::string& what) const {
    return absl::DataLossError(absl::StrCat("checkpoint manifest ", source_, ": ", where, what));
  }
  absl::StatusOr<const json*> Field(const json& object, const char* key,
                                    const std::string& where) const {
    if (!object.is_object() || !object.contains(key))
      return Error(where, absl::StrCat("field '", key, "' missing"));
    return &object[key];
  }
  absl::StatusOr<std::string> String(const json& object, const char* key,
                                     const std::string& where) const {
    ASSIGN_OR_RETURN(const json* v, Field(object, key, where));
    if (!v->is_string()) return Error(where, absl::StrCat("field '", key, "' is not a string"));
    return v->get<std::string>();
  }
  absl::StatusOr<int64_t> Int(const json& object, const char* key, const std::string& where,
                              int64_t min) const {
    ASSIGN_OR_RETURN(const json* v, Field(object, key, where));
    if (!v->is_number_integer() || v->get<int64_t>() < min ||
        (v->is_number_unsigned() && v->get<uint64_t>() > (uint64_t{1} << 62))) {
      return Error(where, absl::StrCat("field '", key, "' is not an integer >= ", min));
    }
    return v->get<int64_t>();
  }
  absl::StatusOr<double> Number(const json& object, const char* key,
                                const std::string& where) const {
    ASSIGN_OR_RETURN(const json* v, Field(object, key, where));
    if (!v->is_number()) return Error(where, absl::StrCat("field '", key, "' is not a number"));
    return v->get<double>();
  }
  absl::StatusOr<const json*> Array(const json& object, const char* key,
                                    const std::string& where) const {
    ASSIGN_OR_RETURN(const json* v, Field(object, key, where));
    if (!v->is_array()) return Error(where, absl::StrCat("field '", key, "' is not an array"));
    return v;
  }

 private:
  std::string source_;
};

absl::StatusOr<OptimizerConfig> OptimizerFromJson(const Reader& r, const json& j,
                                                      const std::string& where) {
  OptimizerConfig c;
  ASSIGN_OR_RETURN(std::string type, r.String(j, "type", where));
  absl::StatusOr<OptimizerKind> kind = ParseOptimizerKind(type);
  if (!kind.ok()) return r.Error(where, absl::StrCat("field 'type': ", kind.status().message()));
  c.kind = *kind;
  auto number = [&](const char* key, float* out) -> absl::Status {
    ASSIGN_OR_RETURN(double v, r.Number(j, key, where));
    // An f32 hyper-parameter: a value past f32's range would become Inf (and converting it is
    // undefined behaviour), which no optimizer takes; a damaged manifest says so here.
    if (!(std::fabs(v) <= std::numeric_limits<float>::max())) {
      return r.Error(where, absl::StrCat("field '", key, "' is not a number within f32's range"));
    }
    *out = static_cast<float>(v);
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(number("learning_rate", &c.learning_rate));
  RETURN_IF_ERROR(number("momentum", &c.momentum));
  ASSIGN_OR_RETURN(const json* nesterov, r.Field(j, "nesterov", where));
  if (!nesterov->is_boolean()) return r.Error(where, "field 'nesterov' is not a boolean");
  c.nesterov = nesterov->get<bool>();
  RETURN_IF_ERROR(number("beta_1", &c.beta_1));
  RETURN_IF_ERROR(number("beta_2", &c.beta_2));
  RETURN_IF_ERROR(number("epsilon", &c.epsilon));
  RETURN_IF_ERROR(number("initial_accumulator_value", &c.initial_accumulator_value));
  RETURN_IF_ERROR(number("learning_rate_power", &c.learning_rate_power));
  RETURN_IF_ERROR(number("l1", &c.l1));
  RETURN_IF_ERROR(number("l2", &c.l2));
  RETURN_IF_ERROR(number("l2_shrinkage", &c.l2_shrinkage));
  RETURN_IF_ERROR(number("beta", &c.beta));
  // The decay fields are absent from manifests written before the decay existed: no decay.
  if (j.contains("decay_steps")) {
    ASSIGN_OR_RETURN(c.decay_steps, r.Int(j, "decay_steps", where, 0));
  }
  if (j.contains("decay_alpha")) RETURN_IF_ERROR(number("decay_alpha", &c.decay_alpha));
  return c;
}

Shape RowsShape(const Shape& shape, int64_t rows) {
  if (shape.empty()) return shape;
  Shape out = shape;
  out[0] = rows;
  return out;
}

}  // namespace

Shape ManifestVariable::ShardShape(const ManifestShard& shard) const {
  return RowsShape(shape, shard.row_end - shard.row_begin);
}

const ManifestVariable* CheckpointManifest::FindVariable(absl::string_view name) const {
  for (const auto& v : variables) {
    if (v.name == name) return &v;
  }
  return nullptr;
}

const ManifestFile* CheckpointManifest::FindFile(absl::string_view name) const {
  for (const auto& f : files) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

const ManifestEmbeddingTable* CheckpointManifest::FindEmbeddingTable(absl::string_view name) const {
  for (const auto& t : embedding_tables) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::string ManifestToJson(const CheckpointManifest& m) {
  json root = {{"format", kFormat},
               {"version", kVersion},
               {"step", m.step},
               {"wall_time", m.wall_time},
               {"num_ps", m.num_ps}};
  json files = json::array();
  for (const auto& f : m.files)
    files.push_back({{"name", f.name}, {"bytes", f.digest.bytes}, {"crc32", f.digest.crc32}});
  root["files"] = std::move(files);
  json variables = json::array();
  for (const auto& v : m.variables) {
    json shards = json::array();
    for (const auto& s : v.shards) {
      json slots = json::object();
      for (const auto& [slot, tensor] : s.slots) slots[slot] = tensor;
      shards.push_back({{"name", s.name},
                        {"rows", {s.row_begin, s.row_end}},
                        {"file", s.file},
                        {"tensor", s.tensor},
                        {"slots", std::move(slots)},
                        {"iterations", s.iterations}});
    }
    variables.push_back({{"name", v.name},
                         {"dtype", std::string(DTypeSafetensorsName(v.dtype))},
                         {"shape", v.shape},
                         {"optimizer", v.optimizer ? OptimizerToJson(*v.optimizer) : json(nullptr)},
                         {"shards", std::move(shards)}});
  }
  root["variables"] = std::move(variables);
  if (!m.coordinator_state.empty()) root["coordinator_state"] = m.coordinator_state;
  if (!m.embedding_tables.empty()) {
    json tables = json::array();
    for (const auto& t : m.embedding_tables)
      tables.push_back({{"name", t.name}, {"dim", t.dim}, {"rows", t.rows}, {"files", t.files}});
    root["embedding_tables"] = {{"key_partition", m.embedding_key_partition},
                                {"tables", std::move(tables)}};
  }
  return root.dump(1) + "\n";
}

absl::StatusOr<CheckpointManifest> ManifestFromJson(absl::string_view text,
                                                    absl::string_view source) {
  const Reader r(source);
  json root;
  std::string duplicate;
  try {
    // One set of seen keys per open object (depth), so duplicates are caught at every level.
    std::vector<std::set<std::string>> seen;
    root = json::parse(
        text.begin(), text.end(), [&](int depth, json::parse_event_t event, json& parsed) {
          if (event == json::parse_event_t::object_start) {
            seen.resize(static_cast<size_t>(depth) + 1);
            seen[static_cast<size_t>(depth)].clear();
          } else if (event == json::parse_event_t::key && depth >= 1 &&
                     static_cast<size_t>(depth) <= seen.size()) {
            if (!seen[static_cast<size_t>(depth - 1)].insert(parsed.get<std::string>()).second &&
                duplicate.empty()) {
              duplicate = parsed.get<std::string>();
            }
          }
          return true;
        });
  } catch (const json::exception& e) {
    return r.Error("", absl::StrCat("not valid JSON: ", e.what()));
  }
  if (!duplicate.empty())
    return r.Error("", absl::StrCat("key '", duplicate, "' appears twice in one object"));
  if (!root.is_object()) return r.Error("", "not a JSON object");
  ASSIGN_OR_RETURN(std::string format, r.String(root, "format", ""));
  if (format != kFormat)
    return r.Error("", absl::StrCat("format is '", format, "', not '", kFormat, "'"));
  ASSIGN_OR_RETURN(int64_t version, r.Int(root, "version", "", 0));
  if (version != kVersion)
    return r.Error("",
                   absl::StrCat("version ", version, " is not supported (only ", kVersion, ")"));
  CheckpointManifest m;
  ASSIGN_OR_RETURN(m.step, r.Int(root, "step", "", 0));
  ASSIGN_OR_RETURN(m.wall_time, r.Number(root, "wall_time", ""));
  ASSIGN_OR_RETURN(int64_t num_ps, r.Int(root, "num_ps", "", 0));
  m.num_ps = static_cast<int>(std::min<int64_t>(num_ps, 1 << 20));

  ASSIGN_OR_RETURN(const json* files, r.Array(root, "files", ""));
  std::set<std::string> file_names;
  for (size_t i = 0; i < files->size(); ++i) {
    const std::string where = absl::StrCat("files[", i, "]: ");
    ManifestFile f;
    ASSIGN_OR_RETURN(f.name, r.String((*files)[i], "name", where));
    if (absl::Status s = ps::ValidateCheckpointFileName(f.name); !s.ok())
      return r.Error(where, std::string(s.message()));
    if (!file_names.insert(f.name).second)
      return r.Error(where, absl::StrCat("file '", f.name, "' listed twice"));
    ASSIGN_OR_RETURN(int64_t bytes, r.Int((*files)[i], "bytes", where, 0));
    ASSIGN_OR_RETURN(int64_t crc, r.Int((*files)[i], "crc32", where, 0));
    if (crc > 0xffffffffLL) return r.Error(where, "crc32 does not fit in 32 bits");
    f.digest = {static_cast<uint64_t>(bytes), static_cast<uint32_t>(crc)};
    m.files.push_back(std::move(f));
  }

  ASSIGN_OR_RETURN(const json* variables, r.Array(root, "variables", ""));
  std::set<std::string> variable_names;
  for (size_t i = 0; i < variables->size(); ++i) {
    const json& jv = (*variables)[i];
    ManifestVariable v;
    ASSIGN_OR_RETURN(v.name, r.String(jv, "name", absl::StrCat("variables[", i, "]: ")));
    const std::string where = absl::StrCat("variable '", v.name, "': ");
    if (!variable_names.insert(v.name).second) return r.Error(where, "listed twice");
    ASSIGN_OR_RETURN(std::string dtype, r.String(jv, "dtype", where));
    auto d = DTypeFromName(dtype);
    if (!d.ok() || DTypeSafetensorsName(*d) != dtype)
      return r.Error(where, absl::StrCat("unknown dtype '", dtype, "'"));
    v.dtype = *d;
    ASSIGN_OR_RETURN(const json* shape, r.Array(jv, "shape", where));
    for (const json& dim : *shape) {
      if (!dim.is_number_unsigned() || dim.get<uint64_t>() > (uint64_t{1} << 62)) {
        return r.Error(where, absl::StrCat("shape ", shape->dump(),
                                           " has a dimension that is not a non-negative integer"));
      }
      v.shape.push_back(static_cast<int64_t>(dim.get<uint64_t>()));
    }
    if (absl::Status s = ValidateShape(v.shape, v.dtype); !s.ok())
      return r.Error(where, std::string(s.message()));
    ASSIGN_OR_RETURN(const json* opt, r.Field(jv, "optimizer", where));
    if (!opt->is_null()) {
      ASSIGN_OR_RETURN(v.optimizer, OptimizerFromJson(r, *opt, where + "optimizer: "));
    }
    ASSIGN_OR_RETURN(const json* shards, r.Array(jv, "shards", where));
    int64_t next_row = 0;
    for (size_t k = 0; k < shards->size(); ++k) {
      const json& js = (*shards)[k];
      const std::string swhere = absl::StrCat(where, "shards[", k, "]: ");
      ManifestShard s;
      ASSIGN_OR_RETURN(s.name, r.String(js, "name", swhere));
      ASSIGN_OR_RETURN(const json* rows, r.Array(js, "rows", swhere));
      if (rows->size() != 2 || !(*rows)[0].is_number_integer() || !(*rows)[1].is_number_integer()) {
        return r.Error(swhere, "rows is not [begin, end]");
      }
      s.row_begin = (*rows)[0].get<int64_t>();
      s.row_end = (*rows)[1].get<int64_t>();
      if (s.row_begin != next_row || s.row_end < s.row_begin || s.row_end > v.rows()) {
        return r.Error(swhere, absl::StrCat("rows [", s.row_begin, ", ", s.row_end,
                                            ") do not continue from row ", next_row,
                                            " within the variable's ", v.rows(), " rows"));
      }
      next_row = s.row_end;
      ASSIGN_OR_RETURN(s.file, r.String(js, "file", swhere));
      if (!file_names.contains(s.file))
        return r.Error(swhere, absl::StrCat("file '", s.file, "' is not in \"files\""));
      ASSIGN_OR_RETURN(s.tensor, r.String(js, "tensor", swhere));
      ASSIGN_OR_RETURN(const json* slots, r.Field(js, "slots", swhere));
      if (!slots->is_object()) return r.Error(swhere, "slots is not an object");
      for (const auto& [slot, tensor] : slots->items()) {
        if (!tensor.is_string())
          return r.Error(swhere, absl::StrCat("slot '", slot, "' is not a tensor name"));
        s.slots[slot] = tensor.get<std::string>();
      }
      ASSIGN_OR_RETURN(s.iterations, r.Int(js, "iterations", swhere, 0));
      v.shards.push_back(std::move(s));
    }
    if (next_row != v.rows()) {
      return r.Error(where, absl::StrCat("shards cover rows [0, ", next_row, ") of ", v.rows()));
    }
    m.variables.push_back(std::move(v));
  }
  if (root.contains("coordinator_state")) {
    const json& state = root["coordinator_state"];
    if (!state.is_object()) return r.Error("", "coordinator_state is not an object");
    for (const auto& [key, value] : state.items()) {
      if (!value.is_string()) return r.Error("coordinator_state: ", absl::StrCat("'", key, "' is not a string"));
      m.coordinator_state[key] = value.get<std::string>();
    }
  }
  if (root.contains("embedding_tables")) {
    const json& section = root["embedding_tables"];
    const std::string where = "embedding_tables: ";
    ASSIGN_OR_RETURN(m.embedding_key_partition, r.String(section, "key_partition", where));
    ASSIGN_OR_RETURN(const json* tables, r.Array(section, "tables", where));
    std::set<std::string> table_names;
    std::set<std::string> table_files;
    for (size_t i = 0; i < tables->size(); ++i) {
      const json& jt = (*tables)[i];
      ManifestEmbeddingTable t;
      ASSIGN_OR_RETURN(t.name, r.String(jt, "name", absl::StrCat(where, "tables[", i, "]: ")));
      const std::string twhere = absl::StrCat("embedding table '", t.name, "': ");
      if (t.name.empty() || !table_names.insert(t.name).second)
        return r.Error(twhere, "empty or listed twice");
      ASSIGN_OR_RETURN(t.dim, r.Int(jt, "dim", twhere, 1));
      ASSIGN_OR_RETURN(int64_t rows, r.Int(jt, "rows", twhere, 0));
      t.rows = static_cast<uint64_t>(rows);
      ASSIGN_OR_RETURN(const json* files, r.Array(jt, "files", twhere));
      for (const json& f : *files) {
        if (!f.is_string()) return r.Error(twhere, "a file name is not a string");
        const std::string name = f.get<std::string>();
        if (!file_names.contains(name))
          return r.Error(twhere, absl::StrCat("file '", name, "' is not in \"files\""));
        if (!table_files.insert(name).second)
          return r.Error(twhere, absl::StrCat("file '", name, "' belongs to two tables"));
        t.files.push_back(name);
      }
      m.embedding_tables.push_back(std::move(t));
    }
  }
  return m;
}

absl::StatusOr<CheckpointManifest> BuildManifest(int64_t step, double wall_time, int num_ps,
                                                 const std::vector<VariablePlacement>& placements,
                                                 const std::vector<ps::SavedFile>& saved) {
  CheckpointManifest m;
  m.step = step;
  m.wall_time = wall_time;
  m.num_ps = num_ps;
  std::map<std::string, std::pair<const ps::SavedFile*, const ps::SavedShard*>> by_shard;
  for (const ps::SavedFile& f : saved) {
    m.files.push_back({f.file_name, f.digest});
    for (const ps::SavedShard& s : f.shards) by_shard[s.name] = {&f, &s};
  }
  std::vector<const VariablePlacement*> sorted;
  for (const auto& p : placements) sorted.push_back(&p);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->name < b->name; });
  for (const VariablePlacement* p : sorted) {
    ManifestVariable v;
    v.name = p->name;
    v.dtype = p->dtype;
    v.shape = p->shape;
    for (size_t i = 0; i < p->shards.size(); ++i) {
      const ShardPlacement& sp = p->shards[i];
      auto it = by_shard.find(sp.name);
      if (it == by_shard.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("no parameter server saved shard '", sp.name, "'"));
      }
      const auto& [file, shard] = it->second;
      const Shape expected = p->ShardShape(i);
      if (shard->dtype != p->dtype || shard->shape != expected) {
        return absl::InvalidArgumentError(absl::StrCat(
            "shard '", sp.name, "' was saved as ", DTypeName(shard->dtype),
            ShapeString(shard->shape), ", expected ", DTypeName(p->dtype), ShapeString(expected)));
      }
      ManifestShard s{sp.name,       sp.row_begin, sp.row_end,       file->file_name,
                      shard->tensor, {},           shard->iterations};
      for (size_t k = 0; k < shard->slot_names.size(); ++k)
        s.slots[shard->slot_names[k]] = shard->slot_tensors[k];
      // Every shard of a variable has the same optimizer; the first one speaks for it.
      if (i == 0) v.optimizer = shard->optimizer;
      v.shards.push_back(std::move(s));
    }
    m.variables.push_back(std::move(v));
  }
  return m;
}

absl::StatusOr<std::map<int, ps::RestorePlan>> PlanRestore(
    const CheckpointManifest& manifest, const std::string& directory,
    const std::vector<VariablePlacement>& targets) {
  std::map<int, ps::RestorePlan> plans;
  // Each PS lists only the files it reads, once.
  std::map<int, std::map<std::string, size_t>> file_index;
  auto file_of = [&](int ps, const std::string& name) -> absl::StatusOr<size_t> {
    auto& index = file_index[ps];
    auto it = index.find(name);
    if (it != index.end()) return it->second;
    const ManifestFile* f = manifest.FindFile(name);
    if (f == nullptr)
      return absl::DataLossError(
          absl::StrCat("checkpoint ", directory, " does not list file ", name));
    ps::RestorePlan& plan = plans[ps];
    plan.files.push_back({f->name, f->digest});
    index[name] = plan.files.size() - 1;
    return plan.files.size() - 1;
  };
  for (const VariablePlacement& target : targets) {
    const ManifestVariable* v = manifest.FindVariable(target.name);
    if (v == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("checkpoint ", directory, " has no variable '", target.name, "'"));
    }
    if (v->dtype != target.dtype || v->shape != target.shape) {
      return absl::FailedPreconditionError(absl::StrCat(
          "variable '", target.name, "' is ", DTypeName(target.dtype), ShapeString(target.shape),
          " but checkpoint ", directory, " holds ", DTypeName(v->dtype), ShapeString(v->shape)));
    }
    for (size_t i = 0; i < target.shards.size(); ++i) {
      const ShardPlacement& t = target.shards[i];
      ps::RestoreShard shard;
      shard.name = t.name;
      shard.dtype = target.dtype;
      shard.shape = target.ShardShape(i);
      shard.optimizer = v->optimizer;
      for (const ManifestShard& s : v->shards) {
        const int64_t lo = std::max(s.row_begin, t.row_begin);
        const int64_t hi = std::min(s.row_end, t.row_end);
        // Empty overlaps are skipped, except for an empty target, which takes one empty piece.
        if (lo > hi || (lo == hi && !(t.row_begin == t.row_end && shard.pieces.empty()))) continue;
        ASSIGN_OR_RETURN(size_t file, file_of(t.ps, s.file));
        ps::RestorePiece piece;
        piece.file = file;
        piece.tensor = s.tensor;
        for (const auto& [slot, tensor] : s.slots) {
          piece.slot_names.push_back(slot);
          piece.slot_tensors.push_back(tensor);
        }
        piece.src_row_begin = lo - s.row_begin;
        piece.src_row_end = hi - s.row_begin;
        piece.dst_row_begin = lo - t.row_begin;
        shard.pieces.push_back(std::move(piece));
        shard.iterations = std::max(shard.iterations, s.iterations);
      }
      ps::RestorePlan& plan = plans[t.ps];
      plan.directory = directory;
      plan.shards.push_back(std::move(shard));
    }
  }
  return plans;
}

}  // namespace asyncps
