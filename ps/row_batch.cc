#include "ps/row_batch.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>

#include "absl/strings/str_cat.h"

namespace asyncps::ps {
namespace {

size_t StripeOf(int64_t row) { return static_cast<size_t>(static_cast<uint64_t>(row) % kRowStripes); }

// True when some id lies outside [0, num_rows): an id u is inside exactly when neither u nor
// (num_rows - 1 - u) has its sign bit set, so OR-ing both over the batch and testing one bit
// checks it without a branch per id. Fixed-length inner chunks let GCC vectorise at -O2.
template <typename T>
bool AnyOutOfRange(const T* ids, int64_t n, int64_t num_rows) {
  using U = std::make_unsigned_t<T>;
  // num_rows >= 1 here; for i32 ids a row count past INT32_MAX cannot be exceeded at all.
  const U last = static_cast<U>(std::min<int64_t>(num_rows - 1, static_cast<int64_t>(std::numeric_limits<T>::max())));
  constexpr int64_t kChunk = 32;
  U acc = 0;
  int64_t i = 0;
  for (; i + kChunk <= n; i += kChunk) {
    for (int64_t j = 0; j < kChunk; ++j) {
      const U u = static_cast<U>(ids[i + j]);
      acc |= u | (last - u);
    }
  }
  for (; i < n; ++i) {
    const U u = static_cast<U>(ids[i]);
    acc |= u | (last - u);
  }
  return (acc >> (sizeof(U) * 8 - 1)) != 0;
}

// sum[k] += src[k] for k < n, in fixed-length chunks so that GCC vectorises it at -O2.
void AddRow(float* __restrict sum, const float* __restrict src, int64_t n) {
  constexpr int64_t kChunk = 16;
  int64_t k = 0;
  for (; k + kChunk <= n; k += kChunk) {
    for (int64_t j = 0; j < kChunk; ++j) sum[k + j] += src[k + j];
  }
  for (; k < n; ++k) sum[k] += src[k];
}

// How many of the n floats at `row` are NaN or infinite (exponent bits all set): a count
// without early exit, in fixed-length chunks that GCC vectorises at -O2.
uint32_t NonFiniteIn(const float* row, int64_t n) {
  constexpr uint32_t kExponent = 0x7f800000u;
  constexpr int64_t kChunk = 16;
  uint32_t bad = 0;
  int64_t k = 0;
  for (; k + kChunk <= n; k += kChunk) {
    for (int64_t j = 0; j < kChunk; ++j) bad += (std::bit_cast<uint32_t>(row[k + j]) & kExponent) == kExponent ? 1 : 0;
  }
  for (; k < n; ++k) bad += (std::bit_cast<uint32_t>(row[k]) & kExponent) == kExponent ? 1 : 0;
  return bad;
}

template <typename T>
absl::Status CheckRange(const T* ids, int64_t n, int64_t num_rows, const std::string& variable) {
  if (num_rows > 0 && !AnyOutOfRange(ids, n, num_rows)) return absl::OkStatus();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = ids[i];
    if (id < 0 || id >= num_rows) {
      return absl::OutOfRangeError(
          absl::StrCat("row id ", id, " out of range [0, ", num_rows, ") for '", variable, "'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckRowIds(const Tensor& ids, int64_t num_rows, const std::string& variable) {
  if (ids.rank() != 1 || (ids.dtype() != DType::kI64 && ids.dtype() != DType::kI32)) {
    return absl::InvalidArgumentError(absl::StrCat("row ids for '", variable, "' must be a 1-D i32/i64 tensor, got ",
                                                   DTypeName(ids.dtype()), ShapeString(ids.shape())));
  }
  return ids.dtype() == DType::kI64 ? CheckRange(ids.data<int64_t>(), ids.num_elements(), num_rows, variable)
                                    : CheckRange(ids.data<int32_t>(), ids.num_elements(), num_rows, variable);
}

RowIds::RowIds(const Tensor& ids) {
  if (ids.dtype() == DType::kI64) {
    view_ = absl::MakeConstSpan(ids.data<int64_t>(), static_cast<size_t>(ids.num_elements()));
    return;
  }
  const int32_t* narrow = ids.data<int32_t>();
  widened_.assign(narrow, narrow + ids.num_elements());
  view_ = widened_;
}

StripeGroups::StripeGroups(absl::Span<const int64_t> rows) {
  for (int64_t row : rows) ++begin[StripeOf(row) + 1];
  for (int s = 0; s < kRowStripes; ++s) begin[s + 1] += begin[s];
  std::array<uint32_t, kRowStripes> next;
  std::copy_n(begin.begin(), kRowStripes, next.begin());
  order.resize(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) order[next[StripeOf(rows[i])]++] = static_cast<uint32_t>(i);
}

SummedRowGradients::SummedRowGradients(absl::Span<const int64_t> rows, const float* grads, int64_t width) {
  const size_t n = rows.size();
  const size_t w = static_cast<size_t>(width);
  // Per distinct row d, in order of first occurrence: the row, the position of its first
  // occurrence, and where its sum lives in sums_ (kRowNotRepeated while it occurs once). Not
  // zero-filled: entries are written as distinct rows are found.
  constexpr uint32_t kRowNotRepeated = std::numeric_limits<uint32_t>::max();
  auto distinct_rows = std::make_unique_for_overwrite<int64_t[]>(n);
  auto first = std::make_unique_for_overwrite<uint32_t[]>(n);
  auto sum_of = std::make_unique_for_overwrite<uint32_t[]>(n);
  // Each later occurrence of a repeated row, in request order (only these are visited again).
  struct Repeat {
    uint32_t position;
    uint32_t distinct;
    bool first_repeat;  // the row's second occurrence: its sum starts from the first
  };
  std::vector<Repeat> repeats;
  // Open addressing with linear probing, at most half full; an entry is 1 + a distinct row's
  // index, 0 when empty. The key compared is distinct_rows[entry - 1], written in order, so a
  // probe costs one load beside the table's. Fibonacci hashing spreads sequential ids too.
  const int bits = std::max(4, static_cast<int>(std::bit_width(2 * n - (n > 0 ? 1 : 0))));
  const size_t mask = (size_t{1} << bits) - 1;
  auto table = std::make_unique<uint32_t[]>(mask + 1);  // zeroed
  uint32_t non_finite = 0;
  size_t distinct = 0;
  uint32_t num_sums = 0;
  for (size_t i = 0; i < n; ++i) {
    // The finiteness check rides along: the gradient is read once here instead of in a pass
    // of its own (the lookups below are latency-bound, the check is not).
    non_finite += NonFiniteIn(grads + i * w, width);
    const int64_t row = rows[i];
    size_t h = static_cast<size_t>((static_cast<uint64_t>(row) * 0x9E3779B97F4A7C15ULL) >> (64 - bits));
    for (;;) {
      const uint32_t entry = table[h];
      if (entry == 0) {
        table[h] = static_cast<uint32_t>(distinct + 1);
        distinct_rows[distinct] = row;
        first[distinct] = static_cast<uint32_t>(i);
        sum_of[distinct] = kRowNotRepeated;
        ++distinct;
        break;
      }
      const uint32_t d = entry - 1;
      if (distinct_rows[d] == row) {
        const bool first_repeat = sum_of[d] == kRowNotRepeated;
        if (first_repeat) sum_of[d] = num_sums++;
        repeats.push_back({static_cast<uint32_t>(i), d, first_repeat});
        break;
      }
      h = (h + 1) & mask;
    }
  }
  all_finite_ = non_finite == 0;

  // Each repeated row's gradient: its occurrences summed in request order (the first copied,
  // the others added, as TF's sparse apply sums them).
  if (num_sums > 0) {
    sums_ = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(num_sums) * w);
    for (const Repeat& r : repeats) {
      float* sum = sums_.get() + static_cast<size_t>(sum_of[r.distinct]) * w;
      if (r.first_repeat) std::memcpy(sum, grads + static_cast<size_t>(first[r.distinct]) * w, w * sizeof(float));
      AddRow(sum, grads + static_cast<size_t>(r.position) * w, width);
    }
  }

  // Grouped by stripe (a counting sort of the distinct rows).
  for (size_t d = 0; d < distinct; ++d) ++begin_[StripeOf(distinct_rows[d]) + 1];
  for (int s = 0; s < kRowStripes; ++s) begin_[s + 1] += begin_[s];
  std::array<uint32_t, kRowStripes> next;
  std::copy_n(begin_.begin(), kRowStripes, next.begin());
  rows_ = std::make_unique_for_overwrite<int64_t[]>(distinct);
  grads_ = std::make_unique_for_overwrite<const float*[]>(distinct);
  for (size_t d = 0; d < distinct; ++d) {
    const int64_t row = distinct_rows[d];
    const uint32_t at = next[StripeOf(row)]++;
    rows_[at] = row;
    grads_[at] = sum_of[d] == kRowNotRepeated ? grads + static_cast<size_t>(first[d]) * w
                                              : sums_.get() + static_cast<size_t>(sum_of[d]) * w;
  }
}

RowGradientBatch::RowGradientBatch(const Tensor& ids, const Tensor& gradients, int64_t width)
    : ids_(ids),
      gradients_(gradients),
      width_(width),
      row_ids_(ids_),
      summed_(row_ids_.span(), gradients_.data<float>(), width) {}

}  // namespace asyncps::ps
