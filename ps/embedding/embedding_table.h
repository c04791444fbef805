#ifndef ASYNCPS_PS_EMBEDDING_EMBEDDING_TABLE_H_
#define ASYNCPS_PS_EMBEDDING_EMBEDDING_TABLE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/sync.h"
#include "core/tensor.h"
#include "ps/embedding/admission_sketch.h"
#include "ps/embedding/embedding_config.h"
#include "ps/update_rule.h"

namespace asyncps::ps {

// What a table holds and has done (ps.EmbeddingStats, metrics).
struct EmbeddingTableStats {
  uint64_t rows = 0;
  int64_t step = 0;
  uint64_t admitted = 0;     // rows created, re-creations after eviction included
  uint64_t evicted_ttl = 0;  // rows not updated for ttl_steps
  uint64_t evicted_cap = 0;  // rows least recently updated, to stay under the memory cap
  uint64_t dropped_gradients = 0;  // pushed keys not admitted (their gradients changed nothing)
  uint64_t memory_bytes = 0;       // everything the table allocated: rows, slots, index, sketch
};

// A table's rows as a checkpoint holds them: every live row, in no particular order.
struct EmbeddingTableState {
  int64_t step = 0;
  Tensor keys;                // i64 [rows]
  Tensor last_update;         // i64 [rows]: the step of each row's last update
  Tensor values;              // f32 [rows, dim]
  std::vector<Tensor> slots;  // f32 [rows, dim] each, in UpdateRule::slots() order
  Tensor sketch;              // i32 [depth, width], or an empty tensor when the table has none
};

// One PS's part of a hash-keyed embedding table: rows of `dim` floats keyed by int64, created
// on their first admitted push, each with its optimizer slots.
//
// Semantics:
//   * Lookup never inserts. A key without a row reads as its initial value
//     (EmbeddingInitialValue: the same on every PS and after re-creation), so evaluation sees
//     the trained row of every key that has one and the initial value of every other key.
//     A `train` lookup counts its keys without a row in the admission sketch.
//   * Push applies one optimizer step (the table's step, counting pushes applied, is Adam's t
//     for every row of the push, as TF's sparse apply ops) to the rows of the pushed keys. A
//     key without a row gets one, from its initial value, when it is admitted
//     (AdmissionSketch::Admitted); otherwise its gradient is dropped (counted).
//   * Eviction: a row not updated for more than ttl_steps steps is evicted (every stripe is
//     swept by the push whose step is due, every max(1, ttl_steps / 8) steps); with a memory cap,
//     inserting into a full stripe first evicts its 1/16 least recently updated rows (the
//     rows of the push itself are never evicted by it; ties at the oldest step go by key, so
//     the choice never depends on where rows sit in memory). A push whose keys of one stripe are
//     more than the stripe can hold under the cap is refused (ResourceExhausted) whole.
//   * An update for a key evicted meanwhile re-creates the row from its initial value (if the
//     key is still admitted, which a key once admitted by count stays: the sketch only grows)
//     and applies the gradient to it. Why not drop it: the row then behaves exactly like a
//     row that was never created and is pushed now — the same as a lookup of the key after
//     the eviction returned — so eviction is a pure memory decision that never makes a
//     hot key untrainable; and a closure re-run after a restore does the same.
//
// Layout: kStripes stripes chosen by key hash, each with its own lock, an open-addressing
// index (linear probing, 12-byte slots, load <= 1/2, deletion by backward shift) and rows in
// blocks growing from 64 to 4096 rows (transparent huge pages asked for); a row's value and its slots are contiguous
// ([value | slot 0 | slot 1], dim floats each) beside its key and last-update step.
//
// Thread-safety: every method may be called from any thread. Lookups of one stripe share its
// lock; pushes take it exclusively, stripe by stripe (a push is not atomic across stripes).
class EmbeddingTable {
 public:
  static constexpr int kStripes = 16;

  // Validates `config` (ValidateEmbeddingTableConfig, UpdateRule::Create) and that a memory
  // cap leaves every stripe room for at least kMinRowsPerStripe rows (InvalidArgument naming
  // the smallest cap that does). Allocates only the sketch.
  static absl::StatusOr<std::unique_ptr<EmbeddingTable>> Create(const EmbeddingTableConfig& config);
  static constexpr uint32_t kMinRowsPerStripe = 64;

  ~EmbeddingTable();
  EmbeddingTable(const EmbeddingTable&) = delete;
  EmbeddingTable& operator=(const EmbeddingTable&) = delete;

  const EmbeddingTableConfig& config() const { return config_; }
  const std::string& name() const { return config_.name; }
  int64_t dim() const { return config_.dim; }
  const UpdateRule& rule() const { return *rule_; }
  int num_slots() const { return num_slots_; }

  // Writes the rows of `keys` (or their initial values) to `out` (keys.size() * dim floats).
  // Returns how many keys had no row. `train`: those keys are counted towards admission.
  uint64_t Lookup(absl::Span<const int64_t> keys, bool train, float* out);

  // Checks, without changing anything, that a push of `keys` is acceptable: keys distinct
  // (InvalidArgument naming a repeated key) and, under a memory cap, no stripe receiving more
  // keys than it can hold (ResourceExhausted naming the cap).
  absl::Status CheckPush(absl::Span<const int64_t> keys) const;

  struct PushResult {
    uint64_t created = 0;  // rows created
    uint64_t dropped = 0;  // keys not admitted
    int64_t step = 0;      // this push's step
  };
  // Applies `gradients` (keys.size() * dim floats, row i for keys[i]) through the optimizer.
  // Runs CheckPush first (its errors, nothing applied). Finiteness is the caller's business.
  absl::StatusOr<PushResult> Push(absl::Span<const int64_t> keys, const float* gradients);

  EmbeddingTableStats Stats() const;
  // Whether `key` has a row now.
  bool HasRow(int64_t key) const;
  // How many times the table was restored (the generation UpdateDedup keys updates by).
  uint64_t restores() const { return restores_.load(std::memory_order_acquire); }
  // Whether training lookups change the table (they count keys in an admission sketch).
  bool counts_lookups() const { return sketch_ != nullptr; }
  // The step of the next TTL sweep (with restores(), what a replica needs beside Export() to
  // evolve exactly as this table does).
  int64_t next_sweep() const { return next_sweep_.load(std::memory_order_acquire); }
  // Sets restores() and next_sweep() to a primary's (a replica rebuilt by Import).
  void SetReplicaCounters(uint64_t restores, int64_t next_sweep);
  // Rows a stripe may hold under the memory cap (UINT32_MAX - 1 without a cap).
  uint32_t max_rows_per_stripe() const { return max_rows_per_stripe_; }

  // A consistent copy of the whole table (every stripe read-locked at once: pushes wait,
  // lookups go on). The copy costs about the table's memory again.
  EmbeddingTableState Export() const;

  // Replaces the table's content by the rows of `states` that `keep` accepts (a restore,
  // maybe from a checkpoint written by another number of PS: `keep` selects this PS's keys).
  // The step becomes the largest of the states', the sketch their saturating sum (count-min
  // of the union of the counted streams). Every state is checked first (shapes, dtypes, slot
  // count, a key in two states; InvalidArgument) and the table is unchanged on error. Rows
  // beyond a memory cap are evicted least recently updated first (counted as cap evictions).
  absl::Status Import(absl::Span<const EmbeddingTableState* const> states, const std::function<bool(int64_t)>& keep);
  // Import's checks alone (OK when Import would take `states`): a restore of several tables
  // checks every one before it replaces any.
  absl::Status CheckImport(absl::Span<const EmbeddingTableState* const> states,
                           const std::function<bool(int64_t)>& keep) const;

 private:
  // Rows [start, start + rows) of a stripe: their values and slots, keys and last updates.
  struct FreeDeleter {
    void operator()(float* p) const;
  };
  struct Block {
    std::unique_ptr<float[], FreeDeleter> data;  // rows * row_floats_
    std::unique_ptr<int64_t[]> keys;   // rows
    std::unique_ptr<int64_t[]> last;   // rows; a free row holds -2 - (next free row)
    uint32_t rows = 0;
  };
  // One open-addressing slot: 12 bytes (the key unaligned is free on the CPUs we run on).
  struct __attribute__((packed, aligned(4))) IndexSlot {
    int64_t key;
    uint32_t row;  // kNoRow: empty
  };
  struct Stripe {
    mutable Mutex mu;
    std::vector<Block> blocks ABSL_GUARDED_BY(mu);
    std::unique_ptr<IndexSlot[]> index ABSL_GUARDED_BY(mu);
    uint64_t index_capacity ABSL_GUARDED_BY(mu) = 0;  // a power of two, or 0
    uint32_t live ABSL_GUARDED_BY(mu) = 0;            // rows in the index
    uint32_t used ABSL_GUARDED_BY(mu) = 0;            // rows ever handed out of the blocks
    int64_t free_head ABSL_GUARDED_BY(mu) = -1;       // an evicted row to reuse, or -1
    int64_t bytes ABSL_GUARDED_BY(mu) = 0;            // blocks and index
  };
  struct RowRef {
    uint32_t block;
    uint32_t offset;
  };
  static constexpr uint32_t kNoRow = 0xffffffffu;

  EmbeddingTable(const EmbeddingTableConfig& config, std::unique_ptr<UpdateRule> rule, uint32_t max_rows_per_stripe);

  static uint64_t KeyHash(int64_t key);
  static int StripeOf(uint64_t hash) { return static_cast<int>(hash >> 60); }
  // The keys' hashes, and their indices ordered by stripe (counting sort): stripe s holds
  // order[starts[s] .. starts[s + 1]), so each stripe's lock is taken once per call.
  struct StripeGroups {
    std::vector<uint64_t> hashes;
    std::array<uint32_t, kStripes + 1> starts;
    std::vector<uint32_t> order;
  };
  static StripeGroups GroupByStripe(absl::Span<const int64_t> keys);
  // Blocks 0..5 hold 64, 128, ..., 2048 rows (a small table stays small), the rest 4096 each
  // (an optimizer call covers many rows of one block).
  static constexpr uint32_t kFirstBlockRows = 64;
  static constexpr uint32_t kGrowingBlocks = 6;
  static constexpr uint32_t kGrowingRows = kFirstBlockRows * ((1u << kGrowingBlocks) - 1);  // 4032
  static constexpr uint32_t kBlockRows = kFirstBlockRows << kGrowingBlocks;                  // 4096
  static RowRef Locate(uint32_t row) {
    if (row < kGrowingRows) {
      const uint32_t b = 31 - static_cast<uint32_t>(__builtin_clz(row / kFirstBlockRows + 1));
      return {b, row - kFirstBlockRows * ((1u << b) - 1)};
    }
    return {kGrowingBlocks + (row - kGrowingRows) / kBlockRows, (row - kGrowingRows) % kBlockRows};
  }
  static uint32_t BlockStart(uint32_t block) {
    return block < kGrowingBlocks ? kFirstBlockRows * ((1u << block) - 1)
                                  : kGrowingRows + (block - kGrowingBlocks) * kBlockRows;
  }
  static uint32_t BlockRows(uint32_t block) {
    return block < kGrowingBlocks ? kFirstBlockRows << block : kBlockRows;
  }

  // Helpers on one stripe.
  static constexpr uint32_t kPrefetchAhead = 8;
  void PrefetchSlot(const Stripe& s, uint64_t hash) const ABSL_SHARED_LOCKS_REQUIRED(s.mu);
  uint32_t Find(const Stripe& s, int64_t key, uint64_t hash) const ABSL_SHARED_LOCKS_REQUIRED(s.mu);
  // A new row for `key` (not in the stripe), last updated at `step`, from `src` (row_floats_
  // floats: value then slots) or, when null, from the initial value and slot values. A full
  // stripe first evicts its least recently updated rows, never those updated at `protect_step`.
  uint32_t Insert(Stripe& s, int64_t key, uint64_t hash, int64_t step, int64_t protect_step, const float* src)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  void Evict(Stripe& s, uint32_t row) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  void SweepTtl(Stripe& s, int64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  void EvictLeastRecent(Stripe& s, int64_t protect_step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  void GrowIndex(Stripe& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  void ClearStripe(Stripe& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  void AddBytes(Stripe& s, int64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Applies one step to rows (sorted by row), grads[i] for rows[i].
  void ApplySorted(Stripe& s, std::vector<std::pair<uint32_t, const float*>>& rows, int64_t step)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  float* RowData(const Stripe& s, uint32_t row) const ABSL_SHARED_LOCKS_REQUIRED(s.mu) {
    const RowRef r = Locate(row);
    return s.blocks[r.block].data.get() + static_cast<int64_t>(r.offset) * row_floats_;
  }
  int64_t& KeyAt(const Stripe& s, uint32_t row) const ABSL_SHARED_LOCKS_REQUIRED(s.mu) {
    const RowRef r = Locate(row);
    return s.blocks[r.block].keys[r.offset];
  }
  int64_t& LastAt(const Stripe& s, uint32_t row) const ABSL_SHARED_LOCKS_REQUIRED(s.mu) {
    const RowRef r = Locate(row);
    return s.blocks[r.block].last[r.offset];
  }

  const EmbeddingTableConfig config_;
  const std::unique_ptr<UpdateRule> rule_;
  const int num_slots_;
  const int64_t row_floats_;  // dim * (1 + slots)
  const uint32_t max_rows_per_stripe_;
  std::vector<float> initial_slot_values_;  // one per slot
  std::unique_ptr<AdmissionSketch> sketch_;  // null when every key is admitted at once
  std::unique_ptr<Stripe[]> stripes_;

  std::atomic<int64_t> step_{0};
  std::atomic<int64_t> next_sweep_{0};  // step of the next TTL sweep
  std::atomic<uint64_t> restores_{0};
  std::atomic<uint64_t> admitted_{0};
  std::atomic<uint64_t> evicted_ttl_{0};
  std::atomic<uint64_t> evicted_cap_{0};
  std::atomic<uint64_t> dropped_{0};
  std::atomic<int64_t> rows_{0};
  std::atomic<int64_t> bytes_{0};
};

// Bytes a table of `config` allocates per row at most in steady state (row, slots, key, step,
// index at its lowest load), for capacity planning and the cap arithmetic.
uint64_t EmbeddingBytesPerRowBound(const EmbeddingTableConfig& config, int num_slots);

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_EMBEDDING_EMBEDDING_TABLE_H_
