#include "bench/report.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace asyncps::bench {
namespace {

// Keys in the order written, for a reader of the file.
using JsonValue = nlohmann::ordered_json;

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// NaN and infinities (a ratio over a zero reference) have no JSON number: null.
JsonValue Number(double x) { return std::isfinite(x) ? JsonValue(x) : JsonValue(); }

const char* StateWord(AimState state) {
  switch (state) {
    case AimState::kMet:
      return "met";
    case AimState::kMissed:
      return "missed";
    case AimState::kNotRun:
      break;
  }
  return "not run";
}

}  // namespace

bool ParseJsonFlag(const char* arg, std::string* path) {
  constexpr char kFlag[] = "--json=";
  if (std::strncmp(arg, kFlag, sizeof(kFlag) - 1) != 0 || arg[sizeof(kFlag) - 1] == '\0') {
    return false;
  }
  *path = arg + sizeof(kFlag) - 1;
  return true;
}

std::vector<double> LoadAverages() {
  std::ifstream in("/proc/loadavg");
  std::vector<double> loads(3);
  if (!(in >> loads[0] >> loads[1] >> loads[2])) return {};
  return loads;
}

Report::Report(int argc, char** argv)
    : load_start_(LoadAverages()),
      started_unix_seconds_(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch())),
      started_steady_seconds_(SteadySeconds()) {
  bench_ = argc > 0 ? std::filesystem::path(argv[0]).filename().string() : "bench";
  // Where the JSON goes says nothing about the figures: left out.
  std::string ignored;
  for (int i = 1; i < argc; ++i) {
    if (!ParseJsonFlag(argv[i], &ignored)) args_.emplace_back(argv[i]);
  }
}

bool Report::Add(Figure figure) {
  if (!figure.ratio.has_value() && !figure.reference.empty()) {
    figure.ratio = figure.value / figure.reference_value;
  }
  bool met = true;
  if (!figure.aim.empty()) met = aims_.Judge(figure.aim, figure.ratio.value_or(figure.value));
  figures_.push_back(std::move(figure));
  met_.push_back(met);
  return met;
}

std::string Report::Json(bool complete) const {
  JsonValue out;
  out["schema"] = 1;
  out["bench"] = bench_;
  out["args"] = args_;
  out["complete"] = complete;
  out["started_at"] = absl::FormatTime("%Y-%m-%dT%H:%M:%SZ",
                                       absl::UnixEpoch() + absl::Seconds(started_unix_seconds_),
                                       absl::UTCTimeZone());
  out["wall_seconds"] = SteadySeconds() - started_steady_seconds_;
  out["load_average"] = {{"start", load_start_}, {"end", LoadAverages()}};
  JsonValue figures = JsonValue::array();
  for (size_t i = 0; i < figures_.size(); ++i) {
    const Figure& f = figures_[i];
    JsonValue j;
    j["name"] = f.name;
    j["value"] = Number(f.value);
    j["unit"] = f.unit;
    j["reference"] = f.reference.empty()
                         ? JsonValue()
                         : JsonValue{{"name", f.reference}, {"value", Number(f.reference_value)}};
    j["ratio"] = f.ratio.has_value() ? Number(*f.ratio) : JsonValue();
    j["aim"] = JsonValue();
    if (const Aims::Aim* aim = f.aim.empty() ? nullptr : aims_.Find(f.aim); aim != nullptr) {
      j["aim"] = {{"name", aim->name},
                  {"condition", aim->Condition()},
                  {"met", static_cast<bool>(met_[i])}};
    }
    j["note"] = f.note;
    figures.push_back(std::move(j));
  }
  out["figures"] = std::move(figures);
  JsonValue aims = JsonValue::array();
  for (const Aims::Aim& aim : aims_.all()) {
    aims.push_back({{"name", aim.name},
                    {"condition", aim.Condition()},
                    {"state", StateWord(aim.state())},
                    {"cases", aim.cases},
                    {"missed", aim.missed}});
  }
  out["aims"] = std::move(aims);
  return out.dump(2) + "\n";
}

absl::Status Report::Write(const std::string& path, bool complete) const {
  if (path.empty()) return absl::OkStatus();
  // Written beside the target and renamed, so a reader never sees half a file.
  const std::string tmp = absl::StrCat(path, ".tmp");
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << Json(complete);
    out.flush();
    if (!out) {
      std::error_code ignored;
      std::filesystem::remove(tmp, ignored);
      return absl::UnavailableError(absl::StrCat("cannot write ", tmp));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return absl::UnavailableError(absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

int Report::Finish(const std::string& path, int exit_code) const {
  if (absl::Status s = Write(path, exit_code == 0); !s.ok()) {
    std::fprintf(stderr, "%s: --json: %s\n", bench_.c_str(), s.ToString().c_str());
    return 1;
  }
  return exit_code;
}

}  // namespace asyncps::bench
