#ifndef ASYNCPS_COORDINATOR_SPLIT_CURSOR_H_
#define ASYNCPS_COORDINATOR_SPLIT_CURSOR_H_

#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/sync.h"
#include "worker/split_binding.h"

namespace asyncps {

// Coordinator-state key prefix of a dataset's cursor in a checkpoint ("split_cursor/<dataset>").
inline constexpr char kSplitCursorStatePrefix[] = "split_cursor/";

// The coordinator's position in one epoch of a dynamically sharded dataset
// (ShardingPolicy::kDynamic). The source's records are cut into splits of `records_per_split`
// ([0, R), [R, 2R), ...); each closure that reads the dataset is bound, when dispatched, to
// one batch (split, batch index) and reads exactly that batch, on whichever worker runs it.
//
// Neither the number of records nor the number of batches per split is known in advance (the
// coordinator reads no data): workers report what they find. A batch past its split's end
// comes back as PastEnd (the split's length is then known) and its closure is bound again; a
// split that starts past the source's end marks the end of the data. Workers keep reading the
// split they have (their pipeline stays positioned); a worker with none opens the next split
// or, when none is left, shares one that still has batches.
//
// Guarantees, per epoch:
//   * Every batch of every split is bound exactly once, unless Release gives it back (it is
//     then bound again, to another closure) — so with closures that finish, every record is
//     read exactly once.
//   * Bind for a closure that already holds a binding (a re-run after its worker failed)
//     returns the same binding: the re-run reads the same records.
//
// The state (SaveState) holds the epoch, the next split, the splits being read with their next
// batch, and every batch handed out but not completed — recorded as not done, so a cursor
// restored from it binds them again. Save at a drained point (after Join) for the
// exactly-once guarantee across a coordinator restart, and across a checkpoint restore by
// automatic PS recovery (which rolls the running cursor back to the checkpoint's; see
// ClusterCoordinator::RestoreSplitCursors).
//
// Thread-safe.
class SplitCursor {
 public:
  SplitCursor(int64_t epoch, int64_t records_per_split);

  // Restores a cursor saved by SaveState. InvalidArgument for a malformed state.
  static absl::StatusOr<std::unique_ptr<SplitCursor>> FromState(const std::string& state);

  // The batch closure `closure_id` reads on `worker`: its earlier binding if it has one,
  // otherwise a batch no closure holds. OutOfRange once every batch of the epoch is bound
  // (a batch given back later by Release can be bound again afterwards).
  absl::StatusOr<SplitBinding> Bind(uint64_t closure_id, int worker);

  // The closure read its batch and finished. `last_in_split`: the worker saw that its split
  // has no further batch.
  void Complete(uint64_t closure_id, bool last_in_split);

  // The closure's batch lies past its split's end (it read nothing). `beyond_source`: the
  // whole split lies past the end of the data. The closure loses its binding: bind it again.
  void PastEnd(uint64_t closure_id, bool beyond_source);

  // The closure will not read its batch (it failed or was cancelled): the batch is bound
  // again to a later closure.
  void Release(uint64_t closure_id);

  // Worker `worker` left the job (elastic membership): the splits it was reading lose their
  // owner and are handed to other workers before any split nobody read yet, so that the
  // epoch does not end with them half read.
  void Disown(int worker);

  // True when every batch is bound and completed.
  bool Finished() const;

  int64_t epoch() const { return epoch_; }
  int64_t records_per_split() const { return records_per_split_; }
  int64_t batches_completed() const;
  size_t in_flight() const;

  // A JSON object; see the class comment.
  std::string SaveState() const;

 private:
  struct OpenSplit {
    int64_t next_batch = 0;
    int64_t num_batches = -1;  // -1 until a worker finds the split's end
    int owner = -1;            // the worker reading it (a hint, for locality); kDisowned: it left
  };
  static constexpr int kDisowned = -2;
  static bool HasMore(const OpenSplit& s) { return s.num_batches < 0 || s.next_batch < s.num_batches; }
  SplitBinding Take(int64_t split, OpenSplit& s, int worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  SplitBinding MakeBinding(int64_t split, int64_t batch) const;
  // Drops open splits that have nothing left to hand out.
  void Prune() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t epoch_;
  const int64_t records_per_split_;

  mutable Mutex mu_;
  int64_t next_split_ ABSL_GUARDED_BY(mu_) = 0;
  // Splits at or after this lie past the end of the data (unknown: max).
  int64_t num_splits_ ABSL_GUARDED_BY(mu_) = std::numeric_limits<int64_t>::max();
  std::map<int64_t, OpenSplit> open_ ABSL_GUARDED_BY(mu_);
  std::deque<SplitBinding> pending_ ABSL_GUARDED_BY(mu_);  // released, to bind again first
  absl::flat_hash_map<uint64_t, SplitBinding> in_flight_ ABSL_GUARDED_BY(mu_);
  int64_t completed_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace asyncps

#endif  // ASYNCPS_COORDINATOR_SPLIT_CURSOR_H_
