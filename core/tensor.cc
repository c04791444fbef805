#include "core/tensor.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace asyncps {
namespace {

constexpr size_t kAlignment = 64;

template <typename T>
double ElementAsDouble(const void* data, int64_t i) {
  return static_cast<double>(static_cast<const T*>(data)[i]);
}

double ElementAt(DType dtype, const void* data, int64_t i) {
  switch (dtype) {
    case DType::kF32:
      return ElementAsDouble<float>(data, i);
    case DType::kF64:
      return ElementAsDouble<double>(data, i);
    case DType::kI32:
      return ElementAsDouble<int32_t>(data, i);
    case DType::kI64:
      return ElementAsDouble<int64_t>(data, i);
    case DType::kU8:
      return ElementAsDouble<uint8_t>(data, i);
    case DType::kBool:
      return static_cast<const uint8_t*>(data)[i] != 0 ? 1.0 : 0.0;
  }
  return 0;
}

}  // namespace

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeString(const Shape& shape) { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }

absl::Status ValidateShape(const Shape& shape, DType dtype, uint64_t max_bytes) {
  if (DTypeSize(dtype) == 0) return absl::InvalidArgumentError("invalid dtype");
  if (shape.size() > 8) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", shape.size(), " exceeds 8"));
  }
  // The product of the non-zero dimensions bounds every partial product (rows, row elements,
  // any suffix), so a zero dimension cannot hide huge ones behind it: [0, 2^40, 2^40] has no
  // elements, but its row size would overflow and loops over its 2^40-per-row structure would
  // never end.
  const uint64_t max_elements = max_bytes / DTypeSize(dtype);
  uint64_t product = 1;
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat("negative dimension in shape ", ShapeString(shape)));
    if (d == 0) continue;
    if (product > max_elements / static_cast<uint64_t>(d)) {
      return absl::InvalidArgumentError(absl::StrCat("shape ", ShapeString(shape), " is too large (at most ",
                                                     max_elements, " ", DTypeName(dtype), " elements)"));
    }
    product *= static_cast<uint64_t>(d);
  }
  return absl::OkStatus();
}

absl::Status Tensor::CheckElementCount(const Shape& shape, size_t count) {
  // Overflow-safe product: a dimension that would push it past `count` already mismatches.
  uint64_t elements = 1;
  bool zero = false;
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat("negative dimension in shape ", ShapeString(shape)));
    if (d == 0) zero = true;
  }
  bool too_many = false;
  if (!zero) {
    for (int64_t d : shape) {
      if (elements > count / static_cast<uint64_t>(d)) too_many = true;
      if (too_many) break;
      elements *= static_cast<uint64_t>(d);
    }
  } else {
    elements = 0;
  }
  if (too_many || elements != count) {
    return absl::InvalidArgumentError(absl::StrCat(count, " value(s) given for shape ", ShapeString(shape),
                                                   too_many ? "" : absl::StrCat(" of ", elements, " element(s)")));
  }
  return absl::OkStatus();
}

void Tensor::DieOnCountMismatch(const absl::Status& status) {
  std::fprintf(stderr, "asyncps: Tensor::FromVector with values that do not fit the shape: %s\n",
               status.ToString().c_str());
  std::abort();
}

namespace {

void* AlignUp(void* raw) {
  return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(raw) + kAlignment - 1) & ~uintptr_t{kAlignment - 1});
}

}  // namespace

std::shared_ptr<void> AllocateAlignedUninitialized(size_t bytes) {
  const size_t rounded = std::max(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  // malloc and align by hand rather than aligned_alloc: glibc serves aligned_alloc of a large
  // block on a non-main thread with fresh pages each time (~1 page fault per 4 KiB on every
  // allocation), while a freed malloc block is reused. It also lets small blocks come from
  // the per-thread cache.
  void* raw = std::malloc(rounded + kAlignment - 1);
  if (raw == nullptr) throw std::bad_alloc();
  // A large block often comes fresh from mmap (glibc maps blocks over its mmap threshold, which
  // rises to 32 MiB at most, and unmaps them when freed), so first touch costs a fault per 4 KiB
  // page, slower than loopback TCP fills them. Asking for transparent huge pages makes that one
  // fault per 2 MiB. Advice only: ignored if THP is off. (core/block_pool.h keeps blocks of a
  // repeated size for their owner instead.)
  constexpr size_t kHugePage = size_t{2} << 20;
  if (rounded >= 4 * kHugePage) {
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(raw) + kHugePage - 1) & ~uintptr_t{kHugePage - 1};
    const uintptr_t end = (reinterpret_cast<uintptr_t>(raw) + rounded) & ~uintptr_t{kHugePage - 1};
    if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  }
  return std::shared_ptr<void>(AlignUp(raw), [raw](void*) { std::free(raw); });
}

std::shared_ptr<void> AllocateAligned(size_t bytes) {
  std::shared_ptr<void> block = AllocateAlignedUninitialized(bytes);
  std::memset(block.get(), 0, std::max(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment));
  return block;
}

Tensor::Tensor() : shape_{0} {}

Tensor::Tensor(DType dtype, Shape shape)
    : dtype_(dtype), shape_(std::move(shape)), num_elements_(NumElements(shape_)) {
  std::shared_ptr<void> block = AllocateAligned(num_bytes());
  data_ = block.get();
  owner_ = std::move(block);
}

Tensor Tensor::View(DType dtype, Shape shape, std::shared_ptr<const void> owner, void* data) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.num_elements_ = NumElements(t.shape_);
  t.owner_ = std::move(owner);
  t.data_ = data;
  return t;
}

int64_t Tensor::row_elements() const {
  int64_t n = 1;
  for (size_t i = 1; i < shape_.size(); ++i) n *= shape_[i];
  return n;
}

double Tensor::ScalarAsDouble() const {
  return num_elements_ == 0 ? 0.0 : ElementAt(dtype_, data_, 0);
}

absl::StatusOr<Tensor> Tensor::Slice(int64_t begin, int64_t end) const {
  if (shape_.empty()) return absl::InvalidArgumentError("cannot slice a scalar");
  if (begin < 0 || end < begin || end > shape_[0]) {
    return absl::InvalidArgumentError(
        absl::StrCat("slice [", begin, ", ", end, ") out of range for ", shape_[0], " rows"));
  }
  Tensor t = *this;
  t.shape_[0] = end - begin;
  t.num_elements_ = NumElements(t.shape_);
  t.data_ = static_cast<char*>(data_) + begin * row_elements() * DTypeSize(dtype_);
  return t;
}

absl::StatusOr<Tensor> Tensor::Reshape(Shape shape) const {
  if (NumElements(shape) != num_elements_) {
    return absl::InvalidArgumentError(absl::StrCat("cannot reshape ", ShapeString(shape_), " to ",
                                                   ShapeString(shape)));
  }
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::Clone() const {
  // Every byte is overwritten at once: zero-filling first doubled the memory traffic of a
  // PS read (a 4 MiB variable: a 4 MiB memset, and the page faults of fresh memory, before
  // the copy). Only the alignment padding past num_bytes() is left unwritten, and nothing
  // reads it (frames pad payloads from zeros of their own).
  std::shared_ptr<void> block = AllocateAlignedUninitialized(num_bytes());
  void* data = block.get();
  if (num_bytes() > 0) std::memcpy(data, data_, num_bytes());
  return View(dtype_, shape_, std::move(block), data);
}

bool Tensor::Equals(const Tensor& other) const {
  return dtype_ == other.dtype_ && shape_ == other.shape_ &&
         (num_bytes() == 0 || std::memcmp(data_, other.data_, num_bytes()) == 0);
}

std::string Tensor::DebugString(int max_elements) const {
  std::string out = absl::StrCat(DTypeName(dtype_), ShapeString(shape_), "{");
  for (int64_t i = 0; i < num_elements_ && i < max_elements; ++i) {
    absl::StrAppend(&out, i == 0 ? "" : ", ", ElementAt(dtype_, data_, i));
  }
  if (num_elements_ > max_elements) absl::StrAppend(&out, ", ...");
  return out + "}";
}

bool AllClose(const Tensor& a, const Tensor& b, double atol, double rtol) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const bool exact = a.dtype() != DType::kF32 && a.dtype() != DType::kF64 && atol < 1;
  if (exact) return a.Equals(b);
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    const double x = ElementAt(a.dtype(), a.raw_data(), i);
    const double y = ElementAt(b.dtype(), b.raw_data(), i);
    if (std::isnan(x) || std::isnan(y)) return false;
    if (std::fabs(x - y) > atol + rtol * std::fabs(y)) return false;
  }
  return true;
}

absl::StatusOr<Tensor> Concat(const std::vector<Tensor>& parts) {
  if (parts.empty()) return absl::InvalidArgumentError("nothing to concatenate");
  Shape shape = parts[0].shape();
  if (shape.empty()) return absl::InvalidArgumentError("cannot concatenate scalars");
  int64_t rows = 0;
  for (const Tensor& p : parts) {
    if (p.dtype() != parts[0].dtype() || p.rank() != parts[0].rank() ||
        !std::equal(p.shape().begin() + 1, p.shape().end(), shape.begin() + 1)) {
      return absl::InvalidArgumentError(absl::StrCat("cannot concatenate ", p.DebugString(0), " with ",
                                                     parts[0].DebugString(0)));
    }
    rows += p.dim(0);
  }
  shape[0] = rows;
  // Every byte is copied into at once: no zero fill first (for a PS client reassembling a
  // 64 MiB variable from its shards, that was another pass over 64 MiB).
  const size_t bytes = static_cast<size_t>(NumElements(shape)) * DTypeSize(parts[0].dtype());
  std::shared_ptr<void> block = AllocateAlignedUninitialized(bytes);
  void* data = block.get();
  Tensor out = Tensor::View(parts[0].dtype(), std::move(shape), std::move(block), data);
  char* dst = static_cast<char*>(out.raw_data());
  for (const Tensor& p : parts) {
    if (p.num_bytes() > 0) std::memcpy(dst, p.raw_data(), p.num_bytes());
    dst += p.num_bytes();
  }
  return out;
}

}  // namespace asyncps
