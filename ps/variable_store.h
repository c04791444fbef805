#ifndef ASYNCPS_PS_VARIABLE_STORE_H_
#define ASYNCPS_PS_VARIABLE_STORE_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/sync.h"
#include "ps/variable.h"

namespace asyncps::ps {

// The variables one parameter server holds, by name, and the bytes they hold against a cap
// (Variable::ChargedBytes each). The map has its own lock, held only to find, reserve or
// insert; each Variable locks itself (see variable.h), so updates to different variables
// never contend.
//
// Thread-safe.
class VariableStore {
 public:
  // Bytes charged against the cap for a variable not built yet, so that the cap is checked
  // before its memory is allocated. Returned to the store when destroyed, unless handed to
  // Insert with a variable that was inserted. Move-only; the store must outlive it.
  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& other) noexcept;
    Reservation& operator=(Reservation&& other) noexcept;
    ~Reservation();

    uint64_t bytes() const { return bytes_; }

   private:
    friend class VariableStore;
    Reservation(VariableStore* store, uint64_t bytes) : store_(store), bytes_(bytes) {}
    VariableStore* store_ = nullptr;
    uint64_t bytes_ = 0;
  };

  // `apply_pool` (not owned; may be null) is the pool the variables created for this store
  // split their large applies and finiteness checks over (apply_pool()); it must outlive them.
  explicit VariableStore(uint64_t max_bytes = std::numeric_limits<uint64_t>::max(), ApplyPool* apply_pool = nullptr)
      : max_bytes_(max_bytes), apply_pool_(apply_pool) {}
  // A store whose bytes are also charged to `budget` (not owned; must outlive this store), so
  // that several stores of one process share budget's cap (the copies of the shard groups a
  // replicated PS holds: ps/replication). Its own cap is budget's; bytes() counts its own.
  // Destroying it returns its bytes to `budget`. Its apply pool is budget's.
  explicit VariableStore(VariableStore* budget);
  ~VariableStore();
  VariableStore(const VariableStore&) = delete;
  VariableStore& operator=(const VariableStore&) = delete;

  // Reserves `bytes` for variable `name`. ResourceExhausted, naming the variable, the bytes
  // asked, those held and the cap, when the total would exceed the cap.
  absl::StatusOr<Reservation> Reserve(const std::string& name, uint64_t bytes);

  // Inserts `variable` unless one with the same name exists. Creation is idempotent: an
  // existing variable with the same dtype and shape is kept (returns false); one with a
  // different dtype or shape is AlreadyExists. `reservation` (at least the variable's
  // charged_bytes) is kept when the variable is inserted and returned otherwise.
  absl::StatusOr<bool> Insert(std::unique_ptr<Variable> variable, Reservation reservation);
  // Same, reserving the variable's charged_bytes itself (ResourceExhausted past the cap).
  absl::StatusOr<bool> Insert(std::unique_ptr<Variable> variable);

  // NotFound names the variable.
  absl::StatusOr<std::shared_ptr<Variable>> Find(const std::string& name) const;

  // Every variable, sorted by name.
  std::vector<std::shared_ptr<Variable>> List() const;

  // Bytes held by the variables and by outstanding reservations.
  uint64_t bytes() const;
  uint64_t max_bytes() const { return max_bytes_; }
  // The pool given at construction, for Variable::Create and AllFinite of this store's
  // variables and gradients (null: one pass on the caller).
  ApplyPool* apply_pool() const { return apply_pool_; }

 private:
  void Release(uint64_t bytes);

  VariableStore* const budget_ = nullptr;
  const uint64_t max_bytes_;
  ApplyPool* const apply_pool_ = nullptr;  // not owned
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Variable>> variables_ ABSL_GUARDED_BY(mu_);
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_VARIABLE_STORE_H_
