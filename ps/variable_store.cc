#include "core/sync.h"
#include "ps/variable_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace asyncps::ps {

VariableStore::Reservation::Reservation(Reservation&& other) noexcept
    : store_(std::exchange(other.store_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

VariableStore::Reservation& VariableStore::Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    if (store_ != nullptr) store_->Release(bytes_);
    store_ = std::exchange(other.store_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

VariableStore::Reservation::~Reservation() {
  if (store_ != nullptr) store_->Release(bytes_);
}

VariableStore::VariableStore(VariableStore* budget)
    : budget_(budget), max_bytes_(budget->max_bytes()), apply_pool_(budget->apply_pool()) {}

VariableStore::~VariableStore() {
  if (budget_ != nullptr) budget_->Release(bytes_);
}

absl::StatusOr<VariableStore::Reservation> VariableStore::Reserve(const std::string& name, uint64_t bytes) {
  if (budget_ != nullptr) {
    // Charged to the shared budget (its cap and its message); held here as well so that the
    // bytes go back to it when released here or when this store goes.
    absl::StatusOr<Reservation> shared = budget_->Reserve(name, bytes);
    if (!shared.ok()) return shared.status();
    shared->store_ = nullptr;
    MutexLock lock(&mu_);
    bytes_ += bytes;
    return Reservation(this, bytes);
  }
  MutexLock lock(&mu_);
  if (bytes > max_bytes_ - bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat("variable '", name, "' needs ", bytes,
                                                     " bytes; this parameter server holds ", bytes_,
                                                     " of its cap of ", max_bytes_,
                                                     " variable bytes (--ps_max_variable_bytes)"));
  }
  bytes_ += bytes;
  return Reservation(this, bytes);
}

void VariableStore::Release(uint64_t bytes) {
  {
    MutexLock lock(&mu_);
    bytes_ -= bytes;
  }
  if (budget_ != nullptr) budget_->Release(bytes);
}

absl::StatusOr<bool> VariableStore::Insert(std::unique_ptr<Variable> variable) {
  auto reservation = Reserve(variable->name(), variable->charged_bytes());
  if (!reservation.ok()) return reservation.status();
  return Insert(std::move(variable), std::move(*reservation));
}

absl::StatusOr<bool> VariableStore::Insert(std::unique_ptr<Variable> variable, Reservation reservation) {
  // Declared before the lock so that, when the variable is not inserted, it is released
  // (taking mu_) after the lock is dropped.
  Reservation held = std::move(reservation);
  MutexLock lock(&mu_);
  auto it = variables_.find(variable->name());
  if (it != variables_.end()) {
    const Variable& existing = *it->second;
    if (existing.dtype() != variable->dtype() || existing.shape() != variable->shape()) {
      return absl::AlreadyExistsError(absl::StrCat(
          "variable '", variable->name(), "' exists as ", DTypeName(existing.dtype()),
          ShapeString(existing.shape()), ", not ", DTypeName(variable->dtype()),
          ShapeString(variable->shape())));
    }
    return false;
  }
  // The bytes now belong to the variable: variables are never removed, so they stay held.
  held.store_ = nullptr;
  const std::string name = variable->name();
  variables_.emplace(name, std::shared_ptr<Variable>(std::move(variable)));
  return true;
}

absl::StatusOr<std::shared_ptr<Variable>> VariableStore::Find(const std::string& name) const {
  MutexLock lock(&mu_);
  auto it = variables_.find(name);
  if (it == variables_.end()) return absl::NotFoundError(absl::StrCat("unknown variable '", name, "'"));
  return it->second;
}

std::vector<std::shared_ptr<Variable>> VariableStore::List() const {
  std::vector<std::shared_ptr<Variable>> out;
  {
    MutexLock lock(&mu_);
    for (const auto& [name, v] : variables_) out.push_back(v);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a->name() < b->name(); });
  return out;
}

uint64_t VariableStore::bytes() const {
  MutexLock lock(&mu_);
  return bytes_;
}

}  // namespace asyncps::ps
