#ifndef ASYNCPS_PS_ROW_BATCH_H_
#define ASYNCPS_PS_ROW_BATCH_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/tensor.h"

namespace asyncps::ps {

// How the rows of one variable are spread over its row locks: row r is guarded by stripe
// r % kRowStripes (see Variable).
inline constexpr int kRowStripes = 32;

// OK when `ids` is a 1-D i32/i64 tensor of row ids in [0, num_rows); InvalidArgument for another
// dtype or rank, OutOfRange naming the first id outside (and `variable`). One branch-free pass
// the compiler vectorises, so checking a batch costs little beside applying it.
absl::Status CheckRowIds(const Tensor& ids, int64_t num_rows, const std::string& variable);

// The ids of a checked request as int64: i64 ids are viewed in place (`ids` must outlive this
// object), i32 ids are widened once.
class RowIds {
 public:
  explicit RowIds(const Tensor& ids);
  RowIds(const RowIds&) = delete;
  RowIds& operator=(const RowIds&) = delete;

  absl::Span<const int64_t> span() const { return view_; }

 private:
  std::vector<int64_t> widened_;
  absl::Span<const int64_t> view_;
};

// The positions 0..rows.size()-1 of `rows` grouped by stripe, so a request takes each stripe
// lock once instead of once per row. Stripe s's positions are
// order[begin[s], begin[s + 1]), in their original order: a counting sort, O(n) and stable
// (repeated ids stay in request order, which fixes the order row updates apply in).
struct StripeGroups {
  explicit StripeGroups(absl::Span<const int64_t> rows);

  std::vector<uint32_t> order;
  std::array<uint32_t, kRowStripes + 1> begin{};
};

// The distinct rows of a sparse gradient push, each with its gradient: the request's own row
// where the id occurs once (no copy), else the sum of the id's rows in request order (TF's
// sparse apply semantics: duplicates are summed, then the optimizer runs once per row). The
// rows come grouped by stripe, in no particular order within a stripe.
//
// One pass over the request finds the duplicates (an open-addressing table keyed on the row,
// no sort, no per-row allocation) and checks, in the same pass, that every gradient float is
// finite (all_finite), so a push reads its gradient once before the apply rather than twice.
// Only the duplicates are visited again (to sum them). `rows` must be checked ids; `grads`
// holds rows.size() x `width` floats and must outlive this object.
class SummedRowGradients {
 public:
  SummedRowGradients(absl::Span<const int64_t> rows, const float* grads, int64_t width);
  SummedRowGradients(const SummedRowGradients&) = delete;
  SummedRowGradients& operator=(const SummedRowGradients&) = delete;

  // Distinct rows of stripe `s` and, parallel to them, pointers to their `width` summed floats.
  absl::Span<const int64_t> rows(int s) const {
    return absl::MakeConstSpan(rows_.get() + begin_[s], begin_[s + 1] - begin_[s]);
  }
  absl::Span<const float* const> grads(int s) const {
    return absl::MakeConstSpan(grads_.get() + begin_[s], begin_[s + 1] - begin_[s]);
  }
  size_t num_distinct() const { return begin_[kRowStripes]; }
  // False when some gradient float (of any row, repeated or not) is a NaN or an infinity.
  bool all_finite() const { return all_finite_; }

 private:
  std::unique_ptr<int64_t[]> rows_;
  std::unique_ptr<const float*[]> grads_;
  std::array<uint32_t, kRowStripes + 1> begin_{};
  // Sums of the rows that occur more than once.
  std::unique_ptr<float[]> sums_;
  bool all_finite_ = true;
};

// A sparse gradient push made ready to apply to one variable: its ids checked and widened, its
// duplicates summed and its floats checked for NaN and infinity (SummedRowGradients), so the
// check before a push's apply and the apply itself share one pass over the request. Holds
// views of `ids` and `gradients` (their storage is shared, not copied). Built by
// Variable::PrepareRowGradients.
class RowGradientBatch {
 public:
  // `ids` must be checked against the variable's rows; `gradients` is [len(ids), width] f32.
  RowGradientBatch(const Tensor& ids, const Tensor& gradients, int64_t width);
  RowGradientBatch(const RowGradientBatch&) = delete;
  RowGradientBatch& operator=(const RowGradientBatch&) = delete;

  const SummedRowGradients& summed() const { return summed_; }
  bool all_finite() const { return summed_.all_finite(); }
  int64_t width() const { return width_; }

 private:
  const Tensor ids_;
  const Tensor gradients_;
  const int64_t width_;
  const RowIds row_ids_;
  const SummedRowGradients summed_;
};

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_ROW_BATCH_H_
