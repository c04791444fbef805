#ifndef ASYNCPS_BENCH_REPORT_H_
#define ASYNCPS_BENCH_REPORT_H_

// A benchmark's figures in machine-readable form. Every bench in bench/ takes --json=PATH and,
// when given, writes there at the end of its run (its human-readable output is unchanged):
//
//   {"schema": 1, "bench": "ps_bench", "args": ["--quick"], "complete": true,
//    "started_at": "2026-11-25T13:20:00Z", "wall_seconds": 41.2,
//    "load_average": {"start": [2.31, 1.55, 0.72], "end": [...]},
//    "figures": [{"name": "ps=1 dense pull 4MiB", "value": 1.9, "unit": "GB/s",
//                 "reference": {"name": "raw TCP", "value": 2.4},      (or null)
//                 "ratio": 0.79,                                        (or null)
//                 "aim": {"name": "dense pull", "condition": ">= 0.90", "met": false},  (or null)
//                 "note": "..."}],
//    "aims": [{"name": "dense pull", "condition": ">= 0.90", "state": "missed",
//              "cases": 4, "missed": 2}, {"name": "sparse", ..., "state": "not run", "cases": 0}]}
//
// The reference is measured in the same run and has the figure's unit; the ratio is value /
// reference unless the bench says otherwise (e.g. a median of paired ratios). An aim in "aims"
// that no case was judged against is "not run" (bench/aims.h). "complete" is false when the
// bench failed part way: the figures are those measured before it stopped.
// scripts/bench_report.py turns these files into docs/benchmarks.md.

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bench/aims.h"

namespace asyncps::bench {

// Built with designated initializers ({.name = ..., .value = ..., .unit = ...}); every member
// has a default member initializer so any of them may be left out.
struct Figure {
  std::string name = {};  // unique within a run: "ps=1 dense pull 4MiB"
  double value = 0;
  std::string unit = {};  // "GB/s", "req/s", "us", ...
  // What the value is compared against (same unit, same run); empty when nothing.
  std::string reference = {};
  double reference_value = 0;
  // Defaults to value / reference_value when there is a reference.
  std::optional<double> ratio = {};
  // The aim (declared in the report's Aims) judged on the ratio, or on the value when there is
  // no ratio; empty when none.
  std::string aim = {};
  std::string note = {};  // anything a reader needs to read the figure right; may be empty
};

// Parses "--json=PATH": true, with `path` set, when `arg` is that flag (PATH must not be empty).
bool ParseJsonFlag(const char* arg, std::string* path);

// One run's figures and aims. Not thread-safe: the bench's main thread adds and writes.
class Report {
 public:
  // The bench's name is argv[0]'s base name; its arguments argv[1..] but --json. Reads the
  // load average and the start time now.
  Report(int argc, char** argv);

  Aims& aims() { return aims_; }
  const Aims& aims() const { return aims_; }

  // Records `figure`; when it names an aim, judges it there. Returns whether the aim was met
  // (true when the figure has no aim).
  bool Add(Figure figure);

  const std::vector<Figure>& figures() const { return figures_; }

  // The JSON text above. Reads the load average again (the "end" of the run).
  std::string Json(bool complete) const;

  // Writes Json(complete) to `path` (replacing it); nothing when `path` is empty.
  absl::Status Write(const std::string& path, bool complete) const;

  // The end of a bench's main: writes to `path` (complete when `exit_code` is 0) and returns
  // `exit_code`, or 1 (after printing why to stderr) when the file cannot be written.
  int Finish(const std::string& path, int exit_code) const;

 private:
  std::string bench_;
  std::vector<std::string> args_;
  std::vector<double> load_start_;
  double started_unix_seconds_ = 0;
  double started_steady_seconds_ = 0;
  Aims aims_;
  std::vector<Figure> figures_;
  std::vector<bool> met_;  // per figure: the verdict Add returned
};

// The 1-, 5- and 15-minute load averages from /proc/loadavg; empty when unreadable.
std::vector<double> LoadAverages();

}  // namespace asyncps::bench

#endif  // ASYNCPS_BENCH_REPORT_H_
