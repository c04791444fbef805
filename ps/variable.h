#ifndef ASYNCPS_PS_VARIABLE_H_
#define ASYNCPS_PS_VARIABLE_H_

#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/sync.h"
#include "core/tensor.h"
#include "ps/parallel_apply.h"
#include "ps/row_batch.h"
#include "ps/update_rule.h"
#include "core/update_kind.h"

namespace asyncps::ps {

// One variable (or one shard of a sharded variable) held by a parameter server, with its
// optimizer and the optimizer's slots beside it.
//
// Locking (why it is safe for many workers at once, and still fast):
//   * whole-variable writes (dense assign/add, dense gradients) hold `mu_` exclusively;
//   * row writes (scatter, sparse gradients) hold `mu_` shared plus the stripe lock of the row
//     being written (row % kStripes), one stripe at a time (a request's rows grouped by stripe);
//   * whole-variable reads hold `mu_` shared plus every stripe shared; row reads (gather)
//     hold `mu_` shared plus the row's stripe shared.
// So dense readers run concurrently, sparse writers to different stripes run concurrently,
// no reader ever sees a torn row, and no update is lost. Lock order: mu_, then stripes in
// ascending index.
//
// Every mutating call validates its whole input first: an invalid update changes nothing.
//
// Thread-safe.
class Variable {
 public:
  // 32 keeps whole-variable reads (which hold every stripe) under ThreadSanitizer's limit
  // of 64 locks held at once, while still spreading sparse writers over many locks.
  static constexpr int kStripes = kRowStripes;

  // Takes `initial` as the value (its storage must not be shared). `optimizer` may be null
  // (the variable then rejects gradients). Slots are allocated at their initial values.
  // `apply_pool` (not owned; may be null, then every apply is one pass on the caller) splits
  // large applies (ApplyGradient, ApplyRowGradients) over its threads; it must outlive every
  // apply of this variable.
  static absl::StatusOr<std::unique_ptr<Variable>> Create(std::string name, Tensor initial,
                                                          const OptimizerConfig* optimizer,
                                                          ApplyPool* apply_pool = nullptr);

  // Fixed bytes each variable is charged beyond its arrays (its locks, map entry...), so that
  // not even empty variables can be created without bound.
  static constexpr uint64_t kOverheadBytes = 1024;

  // What a variable charges against its PS's byte cap: its value, one f32 array of its shape
  // per optimizer slot, its name, and kOverheadBytes. `shape` must be valid (ValidateShape).
  static uint64_t ChargedBytes(const std::string& name, DType dtype, const Shape& shape, size_t num_slots);
  uint64_t charged_bytes() const { return ChargedBytes(name_, dtype_, shape_, slots_.size()); }

  const std::string& name() const { return name_; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t rows() const { return shape_.empty() ? 1 : shape_[0]; }
  bool has_optimizer() const { return optimizer_ != nullptr; }
  // The pool given at creation (null: applies run in one pass on the caller).
  ApplyPool* apply_pool() const { return apply_pool_; }
  const OptimizerConfig* optimizer_config() const;
  // Number of gradient pushes applied so far.
  int64_t iterations() const { return iterations_.load(std::memory_order_relaxed); }

  // The variable's version: how many updates (gradient pushes, dense or row updates) have been
  // applied to it, so equal to iterations() for a variable changed only by its optimizer. A
  // restore sets it to the restored step counter. Reads report it (ReadVersioned,
  // GatherVersioned) and a gradient push may name the version it was computed from, whose
  // staleness is then version() - that version (StalenessOf). Never decreases but by a restore.
  int64_t version() const { return version_.load(std::memory_order_acquire); }
  // version() - base_version, or 0 when base_version is not below version() (a version from
  // before a restore, or from another incarnation of this PS, cannot be judged: it is not
  // taken for stale).
  int64_t StalenessOf(int64_t base_version) const;
  // The bound on staleness of this variable's optimizer (kUnboundedStaleness without optimizer
  // or bound).
  int64_t max_staleness() const;
  bool bounds_staleness() const { return max_staleness() >= 0; }

  // Serialises the writes to a variable whose optimizer bounds staleness: the PS holds it from
  // a push's staleness check to the end of its apply, and around every other write of such a
  // variable, so no update can slip in between and make an admitted push staler than its bound
  // (ps/staleness_gate.h). Taken before any of the locks above.
  Mutex& write_order_mu() const ABSL_LOCK_RETURNED(write_order_mu_) { return write_order_mu_; }

  // A consistent snapshot of the whole value, whose bytes never change afterwards; the caller
  // must not write into it. A value of kSharedReadBytes or more is not copied: the snapshot
  // shares the variable's storage, and the next write while any such snapshot is alive moves
  // the variable to new storage first (copy-on-write), so a PS answers a large read straight
  // from the variable's memory. (A small value is copied, taking every row stripe in a loop,
  // which clang's thread-safety analysis cannot follow; the loop pairs each lock with its
  // unlock.)
  Tensor Read() const ABSL_NO_THREAD_SAFETY_ANALYSIS;
  // Read, and the version of the snapshot: it holds every update that version counts, except
  // that a row push (ApplyRowGradients, UpdateRows) running at the same moment as the read of
  // a small value may be counted while only partly copied. `version` must not be null.
  Tensor ReadVersioned(int64_t* version) const ABSL_NO_THREAD_SAFETY_ANALYSIS;
  // Values at least this large are read without a copy (see Read). Below it, the copy costs
  // less than the bookkeeping and the writers' occasional copy-on-write.
  static constexpr size_t kSharedReadBytes = size_t{256} << 10;

  // Dense update of the whole value: `value` must have this variable's dtype and shape.
  //
  // Arithmetic is TensorFlow's: floats follow IEEE 754; integers (i32, i64, u8) wrap in two's
  // complement on add, sub and mul overflow, and MIN / -1 wraps to MIN; integer division by
  // zero is InvalidArgument (nothing applied). bool allows only assign, of bytes 0 and 1.
  absl::Status Update(UpdateKind kind, const Tensor& value);

  // Row update: `ids` is a 1-D i32/i64 tensor of rows in [0, rows()), `values` has shape
  // [len(ids), row dims...]. Duplicate ids are applied in order. Arithmetic as for Update.
  absl::Status UpdateRows(UpdateKind kind, const Tensor& ids, const Tensor& values);

  // Rows `ids` (duplicates allowed) as a [len(ids), row dims...] tensor.
  absl::StatusOr<Tensor> Gather(const Tensor& ids) const;
  // Gather, with the version of the rows as for ReadVersioned. `version` must not be null.
  absl::StatusOr<Tensor> GatherVersioned(const Tensor& ids, int64_t* version) const;

  // Applies a dense gradient through the optimizer (f32 only), its learning rate multiplied by
  // `lr_scale` (UpdateRule::LearningRateScale; 1 for the configured rate) and by the config's
  // decay at the version it is applied at (UpdateRule::DecayScale; 1 without decay). A large
  // one is applied in parts on the apply pool's threads, to the very bits one pass gives.
  absl::Status ApplyGradient(const Tensor& gradient, float lr_scale = 1.0f);

  // Applies row gradients through the optimizer: duplicate ids are summed first; only the
  // touched rows and their slots change. `lr_scale` as for ApplyGradient.
  absl::Status ApplyRowGradients(const Tensor& ids, const Tensor& gradients, float lr_scale = 1.0f);

  // Checks a row gradient push as CheckGradient does and makes it ready to apply: duplicates
  // summed, and every float checked for NaN and infinity (the batch's all_finite(), which the
  // caller judges), in one pass over the request. The batch shares the bytes of `ids` and
  // `gradients`. Nothing is changed.
  absl::StatusOr<std::unique_ptr<const RowGradientBatch>> PrepareRowGradients(const Tensor& ids,
                                                                              const Tensor& gradients) const;
  // Applies a batch that PrepareRowGradients of this variable returned, as ApplyRowGradients
  // (which is Prepare then this), without checking it again.
  void ApplyRowGradients(const RowGradientBatch& batch, float lr_scale = 1.0f);

  // Validation only (used to check a whole batch before applying any of it).
  absl::Status CheckDense(const Tensor& value) const;
  absl::Status CheckRows(const Tensor& ids, const Tensor& values) const;
  // Everything Update (ids == nullptr) or UpdateRows checks, including the value-dependent
  // checks (integer division by zero, bool bytes).
  absl::Status CheckUpdate(UpdateKind kind, const Tensor* ids, const Tensor& value) const;
  absl::Status CheckGradient(const Tensor* ids, const Tensor& gradient) const;

  // Consistent copies of the value and every slot ("name/slot"), for checkpoints.
  std::vector<std::pair<std::string, Tensor>> Snapshot() const ABSL_NO_THREAD_SAFETY_ANALYSIS;

  // Everything a checkpoint keeps of this variable: the value, each optimizer slot (in
  // slot_names() order) and the step counter.
  struct State {
    Tensor value;
    std::vector<Tensor> slots;
    int64_t iterations = 0;
  };

  // The largest step counter a State may carry (CreateFromState, RestoreState, and restore
  // plans, checked before anything is restored): the checkpoint manifest's bound. From there the
  // int64 counters cannot overflow in practice (2^62 more updates); a wrapped, negative version
  // would make every base version look fresh, so max_staleness would stop holding unseen.
  static constexpr int64_t kMaxIterations = int64_t{1} << 62;
  // InvalidArgument naming `name` unless 0 <= iterations <= kMaxIterations.
  static absl::Status CheckIterations(const std::string& name, int64_t iterations);

  // A variable whose storage is a state received whole (a replica's state transfer): takes
  // `state.value` (its dtype and shape are the variable's) and `state.slots` (one f32 tensor of
  // that shape per slot of `optimizer`, in slot_names() order; none when it is null) as its
  // arrays, without the zero-filled arrays and the copy that Create then RestoreState cost.
  // Their storage must not be shared. The step counter and version() are state.iterations;
  // restores() is 0 (set_restores). `apply_pool` as for Create.
  static absl::StatusOr<std::unique_ptr<Variable>> CreateFromState(std::string name, State state,
                                                                   const OptimizerConfig* optimizer,
                                                                   ApplyPool* apply_pool = nullptr);

  // The slot names of this variable's optimizer, in its order (empty without an optimizer).
  std::vector<std::string> slot_names() const;

  // A copy of value, slots and step counter taken under the exclusive lock, so the copy holds
  // every update either entirely or not at all: a value and its slots (and the counter Adam's
  // bias correction reads) always come from the same set of applied updates.
  State CheckpointState() const;

  // CheckpointState, except that a value (and each slot) of kSharedReadBytes or more is not
  // copied: it shares the variable's storage as Read's snapshot does (the next write of it
  // moves the variable to new storage first), so a state transfer to another replica copies no
  // large array under the lock.
  State SharedState() const;

  // Like CheckpointState, but copies into caller memory (no allocation under the lock, and the
  // caller picks the memory: checkpoint writers reuse one plain buffer, because fresh large
  // tensors ask for huge pages, whose faults can stall on compaction while the page cache is
  // full of dirty checkpoint data). `value` receives value bytes, `slots[i]` slot i's; each
  // must hold as many bytes as the value. Returns the step counter.
  int64_t CopyCheckpointState(void* value, absl::Span<void* const> slots) const;

  // Replaces value, slots (parallel to slot_names()) and step counter under the exclusive
  // lock. Everything is validated first (dtype, shape, slot count): on error nothing changes.
  absl::Status RestoreState(const State& state);
  // How many times RestoreState succeeded. A restore undoes the updates applied before it, so
  // the PS's record of applied closure updates (UpdateDedup) keys on it.
  uint64_t restores() const { return restores_.load(std::memory_order_relaxed); }
  // Sets the count, for a copy of this variable made on another replica (ps/replication/
  // state transfer), so that both key the same updates alike.
  void set_restores(uint64_t restores) { restores_.store(restores, std::memory_order_relaxed); }

 private:
  Variable() = default;
  // UpdateRule::DecayScale of the optimizer's config at `version`; 1 without decay.
  float DecayScaleAt(int64_t version) const;
  absl::Status CheckIds(const Tensor& ids) const;
  // The first byte of row `row` of the current storage. Call with mu_ held (either mode).
  char* row_ptr(int64_t row) const;
  size_t row_bytes() const;
  // Bytes of the value (from dtype and shape, which never change).
  size_t value_bytes() const { return static_cast<size_t>(NumElements(shape_)) * DTypeSize(dtype_); }

  // Live snapshots sharing value_'s storage (Read of a large value). Each snapshot's owner
  // decrements `count` when the last view of it is gone.
  struct SharedReads {
    std::atomic<int64_t> count{0};
  };
  // A snapshot sharing value_'s storage, counted in shared_reads_ (a large Read).
  Tensor SharedValueLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A snapshot sharing slots_[i]'s storage, counted in shared_slots_ (SharedState).
  Tensor SharedSlotLocked(size_t i) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a snapshot shares any slot's storage (as ValueShared, for the slots).
  bool SlotsShared() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Moves every slot to storage of its own when a snapshot shares them (as UnshareValueLocked).
  void UnshareSlotsLocked(bool keep_bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a snapshot shares value_'s storage. Snapshots are taken only under mu_ held
  // exclusively, so while mu_ is held in either mode a false answer stays false.
  bool ValueShared() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Moves value_ to storage of its own when a snapshot shares it, copying the bytes unless
  // `keep_bytes` is false (the caller overwrites every byte).
  void UnshareValueLocked(bool keep_bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs `write` with mu_ held shared and value_'s storage (and the slots' too, with
  // `slots_too`) not shared with any snapshot (for row writers, which take their stripes inside).
  template <typename Write>
  void WithUnsharedValueShared(bool slots_too, Write&& write);

  std::string name_;
  DType dtype_ = DType::kF32;
  Shape shape_;
  std::unique_ptr<UpdateRule> optimizer_;
  ApplyPool* apply_pool_ = nullptr;  // not owned; may be null
  mutable Mutex mu_;
  mutable std::array<Mutex, kStripes> stripes_;
  // The bytes of value_ and slots_ are guarded by mu_ and stripes_ as described above. Their
  // handles (and slot_data_) change (to new storage, under mu_ held exclusively) when a write
  // finds a snapshot sharing them, so they are read under mu_.
  Tensor value_;
  std::shared_ptr<SharedReads> shared_reads_ ABSL_GUARDED_BY(mu_) = std::make_shared<SharedReads>();
  // Live state snapshots sharing the slots' storage (SharedState), as shared_reads_.
  std::shared_ptr<SharedReads> shared_slots_ ABSL_GUARDED_BY(mu_) = std::make_shared<SharedReads>();
  std::vector<Tensor> slots_;
  // slots_[i]'s floats, for the optimizer.
  std::vector<float*> slot_data_;
  std::atomic<int64_t> iterations_{0};
  std::atomic<int64_t> version_{0};
  std::atomic<uint64_t> restores_{0};
  mutable Mutex write_order_mu_;
};

// False when a float tensor holds a NaN or an infinity; true for other dtypes. A large tensor
// is checked in parts on `pool`'s threads (null: one pass on the caller).
bool AllFinite(const Tensor& t, ApplyPool* pool = nullptr);

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_VARIABLE_H_
