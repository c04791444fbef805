#ifndef ASYNCPS_PS_EMBEDDING_ADMISSION_SKETCH_H_
#define ASYNCPS_PS_EMBEDDING_ADMISSION_SKETCH_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "ps/embedding/embedding_config.h"

namespace asyncps::ps {

// Which keys of an embedding table have earned a row: a count-min sketch (kDepth rows of
// `width` saturating 16-bit counters) of the keys' training lookups, so keys that are seen
// rarely cost no memory of their own — the sketch's memory is fixed, whatever the number of
// distinct keys. Counts only grow (no decay): a key once admitted by count stays admitted, so
// a row evicted and pushed again is re-created (see EmbeddingTable).
//
// Admitted(key), with c = Estimate(key) (never below the true count, above it by collisions):
//   * min_count > 1 and c < min_count: no;
//   * probability > 0: yes with probability `probability`, decided by a hash of (key, seed, c)
//     (deterministic: the same on every PS and after a restore; each further counted lookup
//     draws again);
//   * otherwise yes.
//
// Thread-safe and lock-free (relaxed atomics: a count racing an admission decision may or may
// not be seen by it, either is a valid order).
class AdmissionSketch {
 public:
  static constexpr int kDepth = 4;

  // Whether `admission` needs a sketch at all (min_count > 1 or probability > 0).
  static bool Needed(const EmbeddingAdmission& admission);

  // width: admission.sketch_width rounded up to a power of two (default when 0).
  AdmissionSketch(const EmbeddingAdmission& admission, uint64_t seed);

  void Count(int64_t key);
  uint32_t Estimate(int64_t key) const;
  bool Admitted(int64_t key) const;

  uint32_t width() const { return width_; }
  uint64_t bytes() const { return uint64_t{kDepth} * width_ * sizeof(uint16_t); }

  // Checkpoints: the counters as kDepth * width int32 values, row-major.
  void ExportTo(int32_t* out) const;
  // Adds kDepth * width values (saturating) to the counters (restores sum the sketches of the
  // PS that held the keys: the count-min sketch of the union of their streams).
  void AddFrom(const int32_t* in);
  void Clear();

 private:
  uint32_t Index(uint64_t h1, uint64_t h2, int row) const {
    return static_cast<uint32_t>((h1 + static_cast<uint64_t>(row) * h2) & (width_ - 1));
  }
  void Hashes(int64_t key, uint64_t* h1, uint64_t* h2) const;

  const EmbeddingAdmission admission_;
  const uint64_t seed_;
  const uint32_t width_;
  std::unique_ptr<std::atomic<uint16_t>[]> counters_;
};

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_EMBEDDING_ADMISSION_SKETCH_H_
