#include "ps/staleness_gate.h"

#include <algorithm>
#include <functional>

#include "absl/container/flat_hash_map.h"
#include "core/stale_gradient.h"
#include "ps/update_rule.h"

namespace asyncps::ps {

StalenessGate::~StalenessGate() { Release(); }

void StalenessGate::Release() {
  for (auto it = held_.rbegin(); it != held_.rend(); ++it) (*it)->Unlock();
  held_.clear();
}

absl::Status StalenessGate::Enter(absl::Span<const Entry> entries) {
  for (const Entry& e : entries) {
    if (e.applies && e.variable->bounds_staleness()) held_.push_back(&e.variable->write_order_mu());
  }
  std::sort(held_.begin(), held_.end(), std::less<Mutex*>());
  held_.erase(std::unique(held_.begin(), held_.end()), held_.end());
  for (Mutex* mu : held_) mu->Lock();

  staleness_.assign(entries.size(), -1);
  lr_scale_.assign(entries.size(), 1.0f);
  // Entries of one variable are applied in request order, each advancing its version by one:
  // an entry is applied after the earlier ones, so their count adds to its staleness. A short
  // request (every training push) is counted by a scan, so a push allocates nothing here; a long
  // one in a map, so that a request of many entries costs linear time, not quadratic.
  absl::flat_hash_map<const Variable*, int64_t> earlier;
  const bool scan = entries.size() <= kScannedEntries;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (!e.applies) continue;
    int64_t ahead = 0;
    if (scan) {
      for (size_t j = 0; j < i; ++j) ahead += entries[j].applies && entries[j].variable == e.variable ? 1 : 0;
    } else {
      ahead = earlier[e.variable]++;
    }
    if (!e.base_version.has_value()) continue;
    // base_version >= 0 and ahead <= entries.size(): no overflow.
    const int64_t staleness = e.variable->StalenessOf(*e.base_version - ahead);
    const int64_t bound = e.variable->max_staleness();
    if (bound >= 0 && staleness > bound) {
      Release();
      return StaleGradientError(e.variable->name(), staleness, bound);
    }
    staleness_[i] = staleness;
    if (const OptimizerConfig* config = e.variable->optimizer_config(); config != nullptr) {
      lr_scale_[i] = UpdateRule::LearningRateScale(*config, staleness);
    }
  }
  return absl::OkStatus();
}

}  // namespace asyncps::ps
