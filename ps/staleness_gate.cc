#include "ps/staleness_gate.h"

#include <algorithm>
#include <functional>

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
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (!e.applies || !e.base_version.has_value()) continue;
    const int64_t staleness = e.variable->StalenessOf(*e.base_version);
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
