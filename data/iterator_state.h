#ifndef ASYNCPS_DATA_ITERATOR_STATE_H_
#define ASYNCPS_DATA_ITERATOR_STATE_H_

// Internal: the encoding of an iterator's saved position (Iterator::SaveState). A state is a
// record: the iterator's kind, then fields (integers, nested states) in the order its class
// writes them. Restoring checks the kind, so a state given to another pipeline is
// InvalidArgument rather than a wrong position.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/dataset.h"

namespace asyncps::data::internal {

class StateWriter {
 public:
  explicit StateWriter(absl::string_view kind) { Bytes(kind); }
  void Int(int64_t v);
  void Bytes(absl::string_view bytes);
  std::string Finish() && { return std::move(out_); }

 private:
  std::string out_;
};

class StateReader {
 public:
  // InvalidArgument unless `state` is a record of `kind`.
  static absl::StatusOr<StateReader> Open(absl::string_view state, absl::string_view kind);
  absl::StatusOr<int64_t> Int();
  absl::StatusOr<std::string> Bytes();

 private:
  explicit StateReader(absl::string_view in) : in_(in) {}
  absl::string_view in_;
};

// For iterators whose position is "the input at `base`, then `calls` of my Next()" (Shuffle,
// Interleave, Unbatch's current batch...) or "... then `calls` of the input's Next()" (1:1
// stages with threads: Prefetch, parallel Map).
struct ReplayState {
  std::string base;  // the input's state at the base point
  int64_t calls = 0;
};
std::string EncodeReplay(absl::string_view kind, const ReplayState& state);
absl::StatusOr<ReplayState> DecodeReplay(absl::string_view kind, absl::string_view state);

// Calls it.Next() `n` times, ignoring elements and errors (they were returned before the save);
// stops early at the end of the data.
void SkipCalls(Iterator& it, int64_t n);

// The position of an iterator that replays its own Next() calls (Shuffle, Interleave): the
// input's state when this pass started, and how many times the iterator's Next() was called
// since. The owner calls CountCall() at the top of each Next().
class SelfReplay {
 public:
  // `kind`: the state's record kind (a string literal). `base`: input.SaveState() at the start.
  SelfReplay(const char* kind, absl::StatusOr<std::string> base) : kind_(kind), base_(std::move(base)) {}

  void CountCall() { ++calls_; }

  // The input's error when its state could not be saved.
  absl::StatusOr<std::string> Save() const;
  // Restores `input` to the saved base, then replays the saved number of calls of
  // `self.Next()` (`self` owns `input` and this object; it starts from a fresh pass).
  absl::Status Restore(absl::string_view state, Iterator& input, Iterator& self);

 private:
  const char* const kind_;
  absl::StatusOr<std::string> base_;
  int64_t calls_ = 0;
};

}  // namespace asyncps::data::internal

#endif  // ASYNCPS_DATA_ITERATOR_STATE_H_
