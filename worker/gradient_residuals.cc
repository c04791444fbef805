#include "worker/gradient_residuals.h"

#include <utility>

namespace asyncps {

std::optional<std::vector<float>> GradientResiduals::Take(const std::string& shard, size_t n) {
  MutexLock lock(&mu_);
  auto it = residuals_.find(shard);
  if (it == residuals_.end()) return std::nullopt;
  std::vector<float> out = std::move(it->second);
  residuals_.erase(it);
  if (out.size() != n) return std::nullopt;
  return out;
}

void GradientResiduals::Give(const std::string& shard, std::vector<float> residual) {
  MutexLock lock(&mu_);
  auto [it, inserted] = residuals_.try_emplace(shard, std::move(residual));
  if (inserted) return;
  std::vector<float>& held = it->second;
  if (held.size() != residual.size()) {
    held = std::move(residual);  // the older one is of a shape the shard no longer has
    return;
  }
  for (size_t i = 0; i < held.size(); ++i) held[i] += residual[i];
  if (spare_.size() < kSpareBuffers) spare_.push_back(std::move(residual));
}

std::vector<float> GradientResiduals::Buffer(size_t n) {
  {
    MutexLock lock(&mu_);
    for (size_t i = 0; i < spare_.size(); ++i) {
      if (spare_[i].size() != n) continue;
      std::vector<float> out = std::move(spare_[i]);
      spare_[i] = std::move(spare_.back());
      spare_.pop_back();
      return out;
    }
  }
  return std::vector<float>(n);
}

void GradientResiduals::Recycle(std::vector<float> buffer) {
  if (buffer.empty()) return;
  MutexLock lock(&mu_);
  if (spare_.size() < kSpareBuffers) spare_.push_back(std::move(buffer));
}

std::vector<float> GradientResiduals::Peek(const std::string& shard) const {
  MutexLock lock(&mu_);
  auto it = residuals_.find(shard);
  return it == residuals_.end() ? std::vector<float>() : it->second;
}

size_t GradientResiduals::size() const {
  MutexLock lock(&mu_);
  return residuals_.size();
}

}  // namespace asyncps
