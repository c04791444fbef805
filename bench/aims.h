#ifndef ASYNCPS_BENCH_AIMS_H_
#define ASYNCPS_BENCH_AIMS_H_

// The aims a benchmark's figures are judged against ("dense pull >= 0.9x raw TCP") and what a
// run can honestly say of each. An aim starts out *not run*, never met: it is met only when at
// least one case was judged against it and every such case met it, so a run that leaves cases
// out (--only, --windows) cannot report an aim for them.

#include <string>
#include <vector>

namespace asyncps::bench {

// Which side of the limit a case's ratio must fall on.
enum class AimBound {
  kAtLeast,  // ratio >= limit (throughput against a reference)
  kAtMost,   // ratio <= limit (latency or cost against a reference)
};

enum class AimState { kNotRun, kMet, kMissed };

// "AIM MET", "AIM MISSED" or "not run": the words a bench prints.
const char* AimStateText(AimState state);

// The text of one case's verdict.
inline const char* Verdict(bool met) { return met ? "AIM MET" : "AIM MISSED"; }

// The aims of one benchmark run and the cases judged against them, in declaration order.
// Not thread-safe: the bench's main thread declares, judges and summarises.
class Aims {
 public:
  struct Aim {
    std::string name;
    AimBound bound = AimBound::kAtLeast;
    double limit = 0;
    int cases = 0;   // cases judged against this aim
    int missed = 0;  // of which missed it

    AimState state() const;
    // ">= 0.90" or "<= 1.30".
    std::string Condition() const;
  };

  // Declares an aim (a second declaration of the same name replaces the bound and limit and
  // keeps the cases already judged).
  void Declare(const std::string& name, AimBound bound, double limit);

  // Judges one case's `ratio` against the aim `name` and records the verdict; returns whether
  // the case met it. An undeclared name is a programming error: the case counts as missed
  // against an aim of that name with limit 0, so the mistake shows in the summary.
  bool Judge(const std::string& name, double ratio);

  // Whether `ratio` meets the aim `name`, without recording a case (false when undeclared).
  bool Meets(const std::string& name, double ratio) const;

  // The aim `name`, or nullptr when undeclared. Valid until the next Declare or Judge.
  const Aim* Find(const std::string& name) const;

  AimState State(const std::string& name) const;

  // One line: "aims: dense pull >= 0.90 AIM MET (2 cases), sparse >= 0.50 not run; 1 of 1 run
  // met, 1 not run". An aim not run is named as such and counted neither met nor missed.
  std::string Summary() const;

  const std::vector<Aim>& all() const { return aims_; }

 private:
  Aim* Mutable(const std::string& name);

  std::vector<Aim> aims_;
};

}  // namespace asyncps::bench

#endif  // ASYNCPS_BENCH_AIMS_H_
