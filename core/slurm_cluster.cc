#include "core/slurm_cluster.h"

#include <cctype>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/status_macros.h"

namespace asyncps {
namespace {

// Quotes `value` for a message, cut short so a runaway variable cannot flood the log.
std::string Quote(absl::string_view value) {
  constexpr size_t kMax = 80;
  if (value.size() <= kMax) return absl::StrCat("'", value, "'");
  return absl::StrCat("'", value.substr(0, kMax), "...' (", value.size(), " characters)");
}

absl::Status Invalid(absl::string_view variable, absl::string_view value, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(variable, "=", Quote(value), ": ", why));
}

// A decimal number of at most 9 digits (so it fits an int with room to add to it).
bool ParseNumber(absl::string_view digits, int64_t* value) {
  if (digits.empty() || digits.size() > 9) return false;
  for (char c : digits) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return absl::SimpleAtoi(digits, value);
}

bool IsNodeNameChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
}

// Splits at the commas outside brackets; checks that brackets pair up and do not nest.
absl::StatusOr<std::vector<absl::string_view>> SplitTopLevel(absl::string_view list,
                                                             absl::string_view variable) {
  std::vector<absl::string_view> items;
  bool in_bracket = false;
  size_t start = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    const char c = list[i];
    if (c == '[') {
      if (in_bracket) return Invalid(variable, list, "'[' inside brackets");
      in_bracket = true;
    } else if (c == ']') {
      if (!in_bracket) return Invalid(variable, list, "']' without a matching '['");
      in_bracket = false;
    } else if (c == ',' && !in_bracket) {
      items.push_back(list.substr(start, i - start));
      start = i + 1;
    }
  }
  if (in_bracket) return Invalid(variable, list, "'[' without a matching ']'");
  items.push_back(list.substr(start));
  return items;
}

// Expands the inside of one bracket, "01-03,07", into its numbers as strings.
absl::Status ExpandBracket(absl::string_view list, absl::string_view inside, size_t budget,
                           absl::string_view variable, std::vector<std::string>* out) {
  for (absl::string_view part : absl::StrSplit(inside, ',')) {
    const size_t dash = part.find('-');
    const absl::string_view lo_text = part.substr(0, dash);
    const absl::string_view hi_text =
        dash == absl::string_view::npos ? lo_text : part.substr(dash + 1);
    int64_t lo = 0;
    int64_t hi = 0;
    if (!ParseNumber(lo_text, &lo) || !ParseNumber(hi_text, &hi)) {
      return Invalid(variable, list,
                     absl::StrCat("bad range '", part, "' in [", inside,
                                  "] (want N or LO-HI, numbers of at most 9 digits)"));
    }
    if (lo > hi) {
      return Invalid(variable, list, absl::StrCat("reversed range '", part, "'"));
    }
    if (static_cast<uint64_t>(hi - lo + 1) + out->size() > budget) {
      return Invalid(variable, list, absl::StrCat("names more than ", kMaxSlurmTasks, " nodes"));
    }
    // Slurm keeps the width of a zero-padded low end: "[08-10]" is 08 09 10.
    const size_t width = lo_text.size();
    for (int64_t n = lo; n <= hi; ++n) {
      std::string digits = absl::StrCat(n);
      if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
      out->push_back(std::move(digits));
    }
  }
  return absl::OkStatus();
}

// Expands one comma-free name such as "rack[1-2]-n[01-02]" onto the end of `hosts`.
constexpr size_t kMaxNodeNameLength = 253;

absl::Status ExpandName(absl::string_view list, absl::string_view name, absl::string_view variable,
                        std::vector<std::string>* hosts) {
  if (name.empty()) return Invalid(variable, list, "empty node name");
  // A host name is at most 253 characters (RFC 1035); a longer pattern would multiply its
  // length by every name a bracket expands to.
  if (name.size() > kMaxNodeNameLength) {
    return Invalid(variable, list, absl::StrCat("a node name pattern longer than ", kMaxNodeNameLength,
                                                " characters"));
  }
  std::vector<std::string> names = {""};
  size_t i = 0;
  while (i < name.size()) {
    if (name[i] == '[') {
      const size_t close = name.find(']', i);  // SplitTopLevel checked that there is one
      const absl::string_view inside = name.substr(i + 1, close - i - 1);
      if (inside.empty()) return Invalid(variable, list, "empty brackets '[]'");
      const size_t budget = (kMaxSlurmTasks - hosts->size()) / names.size();
      std::vector<std::string> numbers;
      RETURN_IF_ERROR(ExpandBracket(list, inside, budget, variable, &numbers));
      std::vector<std::string> product;
      product.reserve(names.size() * numbers.size());
      for (const std::string& prefix : names) {
        for (const std::string& n : numbers) product.push_back(absl::StrCat(prefix, n));
      }
      names = std::move(product);
      i = close + 1;
    } else {
      if (!IsNodeNameChar(name[i])) {
        return Invalid(variable, list,
                       absl::StrCat("character '", absl::CEscape(name.substr(i, 1)),
                                    "' cannot be in a node name"));
      }
      for (std::string& n : names) n.push_back(name[i]);
      ++i;
    }
  }
  if (hosts->size() + names.size() > kMaxSlurmTasks) {
    return Invalid(variable, list, absl::StrCat("names more than ", kMaxSlurmTasks, " nodes"));
  }
  for (std::string& n : names) hosts->push_back(std::move(n));
  return absl::OkStatus();
}

// The value of the first of `names` that is set (set but empty counts: it is then malformed),
// and which one it was; nullptr when none is.
const std::string* FindFirst(const EnvMap& env, std::initializer_list<absl::string_view> names,
                             absl::string_view* found) {
  for (absl::string_view name : names) {
    if (auto it = env.find(name); it != env.end()) {
      *found = name;
      return &it->second;
    }
  }
  return nullptr;
}

absl::Status CheckLayout(const SlurmLayout& layout) {
  if (layout.chief != 0 && layout.chief != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--slurm_chief must be 0 or 1, got ", layout.chief));
  }
  if (layout.evaluator != 0 && layout.evaluator != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--slurm_evaluator must be 0 or 1, got ", layout.evaluator));
  }
  if (layout.ps < 1 || layout.ps > kMaxSlurmTasks) {
    return absl::InvalidArgumentError(
        absl::StrCat("--slurm_ps must be in 1..", kMaxSlurmTasks, ", got ", layout.ps));
  }
  if (layout.workers != -1 && (layout.workers < 1 || layout.workers > kMaxSlurmTasks)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--slurm_workers must be in 1..", kMaxSlurmTasks, ", got ", layout.workers));
  }
  if (layout.port_base < 1 || layout.port_base > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--slurm_port_base must be in 1..65535, got ", layout.port_base));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandSlurmNodeList(absl::string_view list,
                                                             absl::string_view variable) {
  if (list.empty()) return Invalid(variable, list, "the node list is empty");
  ASSIGN_OR_RETURN(std::vector<absl::string_view> names, SplitTopLevel(list, variable));
  std::vector<std::string> hosts;
  for (absl::string_view name : names) RETURN_IF_ERROR(ExpandName(list, name, variable, &hosts));
  return hosts;
}

absl::StatusOr<std::vector<int>> ExpandSlurmTasksPerNode(absl::string_view list,
                                                         absl::string_view variable) {
  if (list.empty()) return Invalid(variable, list, "the tasks-per-node list is empty");
  std::vector<int> counts;
  int64_t total = 0;
  for (absl::string_view part : absl::StrSplit(list, ',')) {
    // "N" or "N(xR)": N tasks on each of R nodes.
    const size_t paren = part.find('(');
    int64_t tasks = 0;
    int64_t repeat = 1;
    bool ok = ParseNumber(part.substr(0, paren), &tasks);
    if (ok && paren != absl::string_view::npos) {
      absl::string_view rest = part.substr(paren);
      ok = absl::ConsumePrefix(&rest, "(x") && absl::ConsumeSuffix(&rest, ")") &&
           ParseNumber(rest, &repeat);
    }
    if (!ok) {
      return Invalid(variable, list, absl::StrCat("bad entry '", part, "' (want N or N(xR))"));
    }
    if (tasks < 1 || repeat < 1) {
      return Invalid(variable, list, absl::StrCat("entry '", part, "' counts zero tasks or nodes"));
    }
    total += tasks * repeat;
    if (total > kMaxSlurmTasks) {
      return Invalid(variable, list,
                     absl::StrCat("adds up to more than ", kMaxSlurmTasks, " tasks"));
    }
    counts.insert(counts.end(), static_cast<size_t>(repeat), static_cast<int>(tasks));
  }
  return counts;
}

absl::StatusOr<SlurmCluster> ResolveSlurmCluster(const EnvMap& env, const SlurmLayout& layout) {
  RETURN_IF_ERROR(CheckLayout(layout));
  constexpr absl::string_view kHint = " (start every process with srun inside the allocation)";

  absl::string_view rank_var = "SLURM_PROCID";
  const std::string* rank_text = FindFirst(env, {"SLURM_PROCID"}, &rank_var);
  if (rank_text == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("SLURM_PROCID is not set", kHint));
  }
  int64_t rank = 0;
  if (!ParseNumber(*rank_text, &rank)) return Invalid(rank_var, *rank_text, "not a task rank");

  absl::string_view nodes_var;
  const std::string* nodes_text =
      FindFirst(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"}, &nodes_var);
  if (nodes_text == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set", kHint));
  }
  ASSIGN_OR_RETURN(std::vector<std::string> nodes, ExpandSlurmNodeList(*nodes_text, nodes_var));

  absl::string_view tasks_var;
  const std::string* tasks_text =
      FindFirst(env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}, &tasks_var);
  if (tasks_text == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("neither SLURM_STEP_TASKS_PER_NODE nor SLURM_TASKS_PER_NODE is set", kHint));
  }
  ASSIGN_OR_RETURN(std::vector<int> tasks_per_node,
                   ExpandSlurmTasksPerNode(*tasks_text, tasks_var));
  if (tasks_per_node.size() != nodes.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(tasks_var, "=", Quote(*tasks_text), " covers ", tasks_per_node.size(),
                     " nodes but ", nodes_var, "=", Quote(*nodes_text), " lists ", nodes.size()));
  }

  // Every task's address, in rank order (Slurm's default block distribution).
  std::vector<std::string> addresses;
  std::vector<std::pair<size_t, int>> placement;  // rank -> (node, local rank)
  for (size_t n = 0; n < nodes.size(); ++n) {
    if (layout.port_base + tasks_per_node[n] - 1 > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("--slurm_port_base ", layout.port_base,
                                                     " with ", tasks_per_node[n], " tasks on ",
                                                     nodes[n], " runs past port 65535"));
    }
    for (int local = 0; local < tasks_per_node[n]; ++local) {
      addresses.push_back(absl::StrCat(nodes[n], ":", layout.port_base + local));
      placement.emplace_back(n, local);
    }
  }
  const int total = static_cast<int>(addresses.size());

  absl::string_view count_var;
  if (const std::string* count_text =
          FindFirst(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"}, &count_var)) {
    int64_t count = 0;
    if (!ParseNumber(*count_text, &count)) return Invalid(count_var, *count_text, "not a count");
    if (count != total) {
      return Invalid(
          count_var, *count_text,
          absl::StrCat("disagrees with ", tasks_var, ", which adds up to ", total, " tasks"));
    }
  }
  if (rank >= total) {
    return Invalid(rank_var, *rank_text, absl::StrCat("the step has only ", total, " tasks"));
  }

  // This task must be where block distribution puts its rank, or the cluster would name
  // the wrong node for it.
  const auto [node, local] = placement[static_cast<size_t>(rank)];
  if (auto it = env.find("SLURMD_NODENAME"); it != env.end() && it->second != nodes[node]) {
    return Invalid("SLURMD_NODENAME", it->second,
                   absl::StrCat("rank ", rank, " belongs on ", nodes[node],
                                " in block order; start the tasks with srun --distribution=block"));
  }
  if (auto it = env.find("SLURM_LOCALID"); it != env.end() && it->second != absl::StrCat(local)) {
    return Invalid("SLURM_LOCALID", it->second,
                   absl::StrCat("rank ", rank, " is task ", local, " of its node in block order;",
                                " start the tasks with srun --distribution=block"));
  }

  const int fixed = layout.chief + layout.evaluator + layout.ps;
  const int workers = layout.workers == -1 ? total - fixed : layout.workers;
  if (workers < 1 || fixed + workers != total) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the layout (", layout.chief, " chief + ", layout.evaluator, " evaluator + ", layout.ps,
        " ps + ", layout.workers == -1 ? "the rest as" : absl::StrCat(workers), " workers) does ",
        "not fit the step's ", total, " tasks (", tasks_var, "=", Quote(*tasks_text),
        "); change --slurm_ps / --slurm_workers or srun --ntasks"));
  }

  // Roles take ranks in TensorFlow's job order: chief, evaluator, ps, worker.
  SlurmCluster cluster;
  const std::pair<TaskType, int> roles[] = {{TaskType::kChief, layout.chief},
                                            {TaskType::kEvaluator, layout.evaluator},
                                            {TaskType::kPs, layout.ps},
                                            {TaskType::kWorker, workers}};
  int first = 0;
  for (const auto& [type, count] : roles) {
    if (count == 0) continue;
    cluster.jobs[type].assign(addresses.begin() + first, addresses.begin() + first + count);
    if (rank >= first && rank < first + count) {
      cluster.task_type = type;
      cluster.task_index = static_cast<int>(rank) - first;
    }
    first += count;
  }
  return cluster;
}

}  // namespace asyncps
