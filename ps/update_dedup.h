#ifndef ASYNCPS_PS_UPDATE_DEDUP_H_
#define ASYNCPS_PS_UPDATE_DEDUP_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/sync.h"
#include "ps/ps_metrics.h"
#include "ps/update_tag.h"

namespace asyncps::ps {

// The parameter server's window of applied closure updates: what makes a closure's updates
// apply at most once, however many times the coordinator runs the closure.
//
// TensorFlow runs a closure *at least once*: when its worker dies, the closure runs again
// elsewhere, and the updates the first attempt had already made are applied a second time.
// Here every update request a closure sends carries an UpdateTag (closure id, the call's
// sequence number within the attempt), and the PS records, for each variable (shard) the
// request touches, the key (coordinator, closure, sequence, variable). A request whose key
// is recorded is answered "already applied" — success to the caller, nothing applied —
// so a deterministic re-run of the closure (same calls in the same order) changes the
// variables exactly once in all.
//
// Atomic with the update: Admit claims a key *before* the update is applied and Commit
// marks it applied after; a second attempt arriving meanwhile (a zombie racing its re-run)
// waits for the first to commit (then it is a repeat) or to give up (then it applies).
//
// Bounded: each coordinator sends, with every closure, a watermark — the lowest id of its
// closures not finished yet (finished: the result is recorded and the closure will never be
// dispatched again). Keys below the watermark are dropped, and a request from a closure
// below it — a zombie attempt of a finished closure, e.g. on a worker that was presumed
// dead — is refused as a repeat (counted apart as "below_watermark"). The watermark travels
// on the requests themselves (coordinator -> worker.Run -> update requests), so it reaches
// every PS that holds keys, exactly when new keys arrive, with no extra call. The window
// then holds the keys of closures that were unfinished when the latest request's closure
// was dispatched (plus those that finished out of order behind them), and at most
// `max_entries` keys in all: past that an admission is ResourceExhausted (counted as
// rejected{reason="dedup_window_full"}) — a closure that stays unfinished for very long
// holds the watermark back. At most `max_coordinators` coordinators are remembered: a new
// one evicts the one heard from least recently (a coordinator that restarted).
//
// Not deduplicated: requests without a tag — updates made outside a closure, e.g. by the
// chief itself (ParameterServerStrategy, ShardedVariable), or by a coordinator with
// ClusterCoordinator::Options::deduplicate_updates off. Reads are never affected.
//
// Variables are keyed by a 64-bit hash of their (shard) name and generation (VariableKey): two
// names of one request colliding would have probability about 2^-64. The hash is the same in
// every process: a window travels to another copy of its shard group in a state transfer, and
// the copy that receives it must find there the keys its own requests compute. The generation counts the
// variable's restores from a checkpoint (Variable::restores): a restore undoes the updates
// applied before it, so a closure re-run after the restore (automatic PS recovery re-runs
// the closures a PS failure interrupted) applies its update again, once.
//
// Thread-safe.
class UpdateDedup {
 public:
  static constexpr uint64_t kDefaultMaxEntries = uint64_t{1} << 20;
  static constexpr size_t kDefaultMaxCoordinators = 16;

  struct Options {
    uint64_t max_entries = kDefaultMaxEntries;
    size_t max_coordinators = kDefaultMaxCoordinators;
    PsMetrics* metrics = nullptr;  // optional; not owned; must outlive this object
  };

  // One variable (shard) a request updates.
  struct Target {
    absl::string_view name;
    uint64_t generation = 0;  // Variable::restores()
  };

  // Key of one (closure attempt's call, variable).
  struct Key {
    uint64_t closure = 0;
    uint64_t sequence = 0;
    uint64_t variable = 0;  // hash of the shard name and generation
    friend bool operator<(const Key& a, const Key& b) {
      if (a.closure != b.closure) return a.closure < b.closure;
      if (a.sequence != b.sequence) return a.sequence < b.sequence;
      return a.variable < b.variable;
    }
    friend bool operator==(const Key& a, const Key& b) {
      return a.closure == b.closure && a.sequence == b.sequence && a.variable == b.variable;
    }
  };

  // The decision for one request: which of its variables to apply. Move-only. Claims are
  // released by the destructor unless Commit was called (the update failed: a later attempt
  // may apply it). Must not outlive the UpdateDedup.
  class Admission {
   public:
    Admission() = default;
    Admission(Admission&& other) noexcept { *this = std::move(other); }
    Admission& operator=(Admission&& other) noexcept;
    ~Admission();

    // Whether the request applies its updates of variables[i] (as passed to Admit).
    bool apply(size_t i) const { return apply_.empty() || apply_[i]; }
    // Variables of the request answered "already applied" (repeats and zombies).
    uint32_t already_applied() const { return already_applied_; }
    // The request came from a closure below the watermark: nothing of it applies.
    bool below_watermark() const { return below_watermark_; }

    // Records the claimed keys as applied. Call once the updates are applied.
    void Commit();

   private:
    friend class UpdateDedup;
    void Release();

    UpdateDedup* owner_ = nullptr;
    uint64_t coordinator_ = 0;
    std::vector<Key> claimed_;
    std::vector<bool> apply_;  // empty: apply everything (untagged)
    uint32_t already_applied_ = 0;
    bool below_watermark_ = false;
  };

  UpdateDedup() : UpdateDedup(Options()) {}
  explicit UpdateDedup(Options options);
  UpdateDedup(const UpdateDedup&) = delete;
  UpdateDedup& operator=(const UpdateDedup&) = delete;

  // Decides which of `variables` (the shards a request updates; a shard may repeat, its
  // updates are then one unit) the request tagged `tag` applies, advances the watermark of
  // tag.coordinator to tag.watermark (never back), drops keys below it, and claims the keys
  // the request will apply. An untagged tag admits everything and records nothing.
  // Blocks while another request holds a claim on one of the same keys.
  //   * InvalidArgument for a malformed tag (sequence 0, closure below coordinator, or a
  //     watermark above the closure's own id — its coordinator never sends one);
  //   * ResourceExhausted, claiming nothing, when the window would hold more than
  //     max_entries keys.
  absl::StatusOr<Admission> Admit(const UpdateTag& tag, absl::Span<const Target> variables);
  // Same, every variable at generation 0.
  absl::StatusOr<Admission> Admit(const UpdateTag& tag, absl::Span<const absl::string_view> variables);

  // The key of variable (shard) `name` at `generation` (Key::variable): a fixed function of
  // its arguments, equal in every process and build (a per-process seeded hash such as
  // absl::Hash made every key a state transfer moved a stranger to its new copy, so a repeat
  // of an update applied before the transfer was applied again after a failover).
  static uint64_t VariableKey(absl::string_view name, uint64_t generation);

  // The applied keys of one coordinator, for copying the window to another replica of the
  // shard group (ps/replication/).
  struct ExportedSpace {
    uint64_t coordinator = 0;
    uint64_t watermark = 0;
    std::vector<Key> keys;  // ascending
  };
  // The applied keys of every coordinator, least recently heard from first (keys still
  // claimed are left out: callers export while no update is applying, under their copy's
  // write lock).
  std::vector<ExportedSpace> Export() const;
  // Replaces the whole window with `spaces` (as Export returned them on another copy): the
  // same keys, watermarks and order of eviction.
  void Import(const std::vector<ExportedSpace>& spaces);

  // Advances the watermark of `coordinator` to `watermark` (never back) and drops its keys
  // below it, as a request carrying that watermark would: from then on the updates of its
  // closures below the watermark are refused as zombies. A restore from a checkpoint calls it
  // with the restoring coordinator's watermark, so that a zombie attempt of a closure finished
  // before the restore (on a worker presumed dead) cannot apply to the restored variables,
  // whose new generation no key of the window matches.
  void RaiseWatermark(uint64_t coordinator, uint64_t watermark);

  // Keys held now (claimed or applied), over all coordinators.
  uint64_t entries() const;
  // Coordinators remembered now.
  size_t coordinators() const;
  // The watermark of `coordinator` (0 when unknown).
  uint64_t watermark(uint64_t coordinator) const;

 private:
  enum class State : uint8_t { kClaimed, kApplied };
  struct Space {
    uint64_t watermark = 0;
    uint64_t last_used = 0;
    absl::btree_map<Key, State> keys;
  };

  Space& SpaceFor(uint64_t coordinator) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True when one of `keys` of `coordinator` is claimed by a request still applying.
  bool AnyClaimed(uint64_t coordinator, const std::vector<Key>& keys) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Commit(uint64_t coordinator, const std::vector<Key>& keys);
  void Release(uint64_t coordinator, const std::vector<Key>& keys);
  void PublishEntries() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable Mutex mu_;
  absl::flat_hash_map<uint64_t, Space> spaces_ ABSL_GUARDED_BY(mu_);
  uint64_t entries_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t clock_ ABSL_GUARDED_BY(mu_) = 0;  // orders spaces by last use
};

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_UPDATE_DEDUP_H_
