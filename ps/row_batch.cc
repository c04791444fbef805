#include "ps/row_batch.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
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
  // Distinct rows in order of first occurrence: the position of that occurrence and how often
  // the row occurs. distinct_of[i] is position i's distinct row.
  std::vector<uint32_t> first;
  std::vector<uint32_t> count;
  std::vector<uint32_t> distinct_of(n);
  first.reserve(n);
  count.reserve(n);
  // Open addressing with linear probing, at most half full; an entry is 1 + a distinct row's
  // index, 0 when empty. Fibonacci hashing spreads sequential ids too.
  const int bits = std::max(4, static_cast<int>(std::bit_width(2 * n - (n > 0 ? 1 : 0))));
  const size_t mask = (size_t{1} << bits) - 1;
  std::vector<uint32_t> table(mask + 1, 0);
  size_t duplicated = 0;  // distinct rows that occur more than once
  for (size_t i = 0; i < n; ++i) {
    const int64_t row = rows[i];
    size_t h = static_cast<size_t>((static_cast<uint64_t>(row) * 0x9E3779B97F4A7C15ULL) >> (64 - bits));
    for (;;) {
      const uint32_t entry = table[h];
      if (entry == 0) {
        table[h] = static_cast<uint32_t>(first.size() + 1);
        distinct_of[i] = static_cast<uint32_t>(first.size());
        first.push_back(static_cast<uint32_t>(i));
        count.push_back(1);
        break;
      }
      if (rows[first[entry - 1]] == row) {
        distinct_of[i] = entry - 1;
        duplicated += ++count[entry - 1] == 2 ? 1 : 0;
        break;
      }
      h = (h + 1) & mask;
    }
  }

  // Each distinct row's gradient: the request's row, or its duplicates summed in request order
  // (the first copied, the others added, as TF's sparse apply sums them).
  const size_t distinct = first.size();
  std::vector<const float*> grad_of(distinct);
  for (size_t d = 0; d < distinct; ++d) grad_of[d] = grads + static_cast<int64_t>(first[d]) * width;
  if (duplicated > 0) {
    sums_.resize(duplicated * static_cast<size_t>(width));
    // Where each duplicated row's sum lives in sums_, assigned at its first occurrence.
    std::vector<float*> sum_of(distinct, nullptr);
    size_t next_sum = 0;
    for (size_t i = 0; i < n; ++i) {
      const uint32_t d = distinct_of[i];
      if (count[d] == 1) continue;
      const float* src = grads + static_cast<int64_t>(i) * width;
      if (first[d] == i) {
        sum_of[d] = sums_.data() + next_sum++ * static_cast<size_t>(width);
        std::memcpy(sum_of[d], src, static_cast<size_t>(width) * sizeof(float));
        grad_of[d] = sum_of[d];
      } else {
        AddRow(sum_of[d], src, width);
      }
    }
  }

  // Grouped by stripe (a counting sort of the distinct rows).
  for (size_t d = 0; d < distinct; ++d) ++begin_[StripeOf(rows[first[d]]) + 1];
  for (int s = 0; s < kRowStripes; ++s) begin_[s + 1] += begin_[s];
  std::array<uint32_t, kRowStripes> next;
  std::copy_n(begin_.begin(), kRowStripes, next.begin());
  rows_.resize(distinct);
  grads_.resize(distinct);
  for (size_t d = 0; d < distinct; ++d) {
    const int64_t row = rows[first[d]];
    const uint32_t at = next[StripeOf(row)]++;
    rows_[at] = row;
    grads_[at] = grad_of[d];
  }
}

}  // namespace asyncps::ps
