#ifndef ASYNCPS_PS_ROW_BATCH_H_
#define ASYNCPS_PS_ROW_BATCH_H_

#include <array>
#include <cstddef>
#include <cstdint>
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
// Duplicates are found with one pass over the ids through an open-addressing table (no sort,
// no per-row allocation). `rows` must be checked ids; `grads` holds rows.size() x `width`
// floats and must outlive this object.
class SummedRowGradients {
 public:
  SummedRowGradients(absl::Span<const int64_t> rows, const float* grads, int64_t width);
  SummedRowGradients(const SummedRowGradients&) = delete;
  SummedRowGradients& operator=(const SummedRowGradients&) = delete;

  // Distinct rows of stripe `s` and, parallel to them, pointers to their `width` summed floats.
  absl::Span<const int64_t> rows(int s) const {
    return absl::MakeConstSpan(rows_.data() + begin_[s], begin_[s + 1] - begin_[s]);
  }
  absl::Span<const float* const> grads(int s) const {
    return absl::MakeConstSpan(grads_.data() + begin_[s], begin_[s + 1] - begin_[s]);
  }
  size_t num_distinct() const { return rows_.size(); }

 private:
  std::vector<int64_t> rows_;
  std::vector<const float*> grads_;
  std::array<uint32_t, kRowStripes + 1> begin_{};
  // Sums of the rows that occur more than once.
  std::vector<float> sums_;
};

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_ROW_BATCH_H_
