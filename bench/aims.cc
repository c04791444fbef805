#include "bench/aims.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace asyncps::bench {

const char* AimStateText(AimState state) {
  switch (state) {
    case AimState::kMet:
      return "AIM MET";
    case AimState::kMissed:
      return "AIM MISSED";
    case AimState::kNotRun:
      break;
  }
  return "not run";
}

AimState Aims::Aim::state() const {
  if (cases == 0) return AimState::kNotRun;
  return missed == 0 ? AimState::kMet : AimState::kMissed;
}

std::string Aims::Aim::Condition() const {
  return absl::StrFormat("%s %.2f", bound == AimBound::kAtLeast ? ">=" : "<=", limit);
}

void Aims::Declare(const std::string& name, AimBound bound, double limit) {
  Aim* aim = Mutable(name);
  if (aim == nullptr) {
    aims_.push_back(Aim{name, bound, limit});
    return;
  }
  aim->bound = bound;
  aim->limit = limit;
}

bool Aims::Meets(const std::string& name, double ratio) const {
  const Aim* aim = Find(name);
  if (aim == nullptr) return false;
  return aim->bound == AimBound::kAtLeast ? ratio >= aim->limit : ratio <= aim->limit;
}

bool Aims::Judge(const std::string& name, double ratio) {
  Aim* aim = Mutable(name);
  bool met = false;  // an undeclared aim is missed whatever the ratio (see the header)
  if (aim == nullptr) {
    aims_.push_back(Aim{name, AimBound::kAtLeast, 0});
    aim = &aims_.back();
  } else {
    met = Meets(name, ratio);
  }
  ++aim->cases;
  if (!met) ++aim->missed;
  return met;
}

const Aims::Aim* Aims::Find(const std::string& name) const {
  for (const Aim& aim : aims_) {
    if (aim.name == name) return &aim;
  }
  return nullptr;
}

Aims::Aim* Aims::Mutable(const std::string& name) {
  for (Aim& aim : aims_) {
    if (aim.name == name) return &aim;
  }
  return nullptr;
}

AimState Aims::State(const std::string& name) const {
  const Aim* aim = Find(name);
  return aim == nullptr ? AimState::kNotRun : aim->state();
}

std::string Aims::Summary() const {
  std::string out = "aims:";
  int met = 0, missed = 0, not_run = 0;
  for (size_t i = 0; i < aims_.size(); ++i) {
    const Aim& aim = aims_[i];
    absl::StrAppend(&out, i == 0 ? " " : ", ", aim.name, " ", aim.Condition(), " ",
                    AimStateText(aim.state()));
    switch (aim.state()) {
      case AimState::kMet:
        ++met;
        break;
      case AimState::kMissed:
        ++missed;
        break;
      case AimState::kNotRun:
        ++not_run;
        break;
    }
    if (aim.cases > 0) {
      absl::StrAppend(&out, " (", aim.cases, aim.cases == 1 ? " case" : " cases",
                      aim.missed > 0 ? absl::StrCat(", ", aim.missed, " missed") : "", ")");
    }
  }
  if (aims_.empty()) absl::StrAppend(&out, " none");
  absl::StrAppend(&out, "; ", met, " of ", met + missed, " run met");
  if (not_run > 0) absl::StrAppend(&out, ", ", not_run, " not run");
  return out;
}

}  // namespace asyncps::bench
