#ifndef ASYNCPS_CORE_TENSOR_H_
#define ASYNCPS_CORE_TENSOR_H_

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/dtype.h"

namespace asyncps {

using Shape = std::vector<int64_t>;

// Product of the dimensions (1 for a scalar). Dimensions must be non-negative.
int64_t NumElements(const Shape& shape);

// "[3, 4]" — for messages.
std::string ShapeString(const Shape& shape);

// Validates a shape that came from outside: rank <= 8, non-negative dims, and the product of
// the non-zero dims (checked for overflow at every step) at most `max_bytes` of `dtype`. So
// for a valid shape the element count, the rows and the elements per row all fit, even when a
// zero dim makes the tensor empty.
absl::Status ValidateShape(const Shape& shape, DType dtype, uint64_t max_bytes = uint64_t{1} << 40);

// A dense, row-major, contiguous n-dimensional array.
//
// A Tensor is a handle: copying it is cheap and the copy shares the same bytes (like a
// TensorFlow tensor). Slices along axis 0 share bytes too. Use Clone() for an independent
// copy. Freshly allocated buffers are 64-byte aligned and zero-filled.
//
// Thread-safety: the handle itself is a value type; concurrent writes to shared bytes must be
// synchronised by the owner of those bytes (e.g. the PS variable lock).
class Tensor {
 public:
  // An empty f32 tensor of shape [0] with no storage.
  Tensor();
  // Allocates zero-filled storage for `shape` elements of `dtype`.
  Tensor(DType dtype, Shape shape);

  // A tensor viewing `data`, which `owner` keeps alive. No copy is made. Used to view
  // received network payloads in place.
  static Tensor View(DType dtype, Shape shape, std::shared_ptr<const void> owner, void* data);

  template <typename T>
  static Tensor Scalar(T value) {
    Tensor t(DTypeOf<T>::value, {});
    *t.data<T>() = value;
    return t;
  }

  // Copies `values` into a new tensor of `shape`. InvalidArgument, naming both counts, when
  // the number of values is not the shape's element count (or the shape is invalid). For
  // values known only at run time.
  template <typename T>
  static absl::StatusOr<Tensor> FromSpan(Shape shape, absl::Span<const T> values) {
    if (absl::Status s = CheckElementCount(shape, values.size()); !s.ok()) return s;
    Tensor t(DTypeOf<T>::value, std::move(shape));
    if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
    return t;
  }
  // A tensor of `shape` holding the literal `values`. A count that differs from the shape is a
  // bug in the calling code, not a run-time condition, so it aborts the process with a message
  // naming both counts: never a silently zero-filled tensor. Use FromSpan for values whose
  // count comes from input (a file, the network, the user).
  template <typename T>
  static Tensor FromVector(Shape shape, std::initializer_list<T> values) {
    return FromVector<T>(std::move(shape), absl::Span<const T>(values.begin(), values.size()));
  }
  // The same for values the calling code sized itself (a mismatch is its bug, and aborts).
  template <typename T>
  static Tensor FromVector(Shape shape, absl::Span<const T> values) {
    absl::StatusOr<Tensor> t = FromSpan<T>(std::move(shape), values);
    if (!t.ok()) DieOnCountMismatch(t.status());
    return *std::move(t);
  }
  // 1-D tensor holding `values` (its shape comes from them, so it cannot mismatch).
  template <typename T>
  static Tensor FromVector(const std::vector<T>& values) {
    Tensor t(DTypeOf<T>::value, {static_cast<int64_t>(values.size())});
    if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
    return t;
  }

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t num_elements() const { return num_elements_; }
  size_t num_bytes() const { return static_cast<size_t>(num_elements_) * DTypeSize(dtype_); }
  // Elements in one row along axis 0 (1 for scalars and vectors).
  int64_t row_elements() const;

  void* raw_data() { return data_; }
  const void* raw_data() const { return data_; }
  template <typename T>
  T* data() {
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* data() const {
    return static_cast<const T*>(data_);
  }
  template <typename T>
  absl::Span<T> flat() {
    return absl::Span<T>(data<T>(), static_cast<size_t>(num_elements_));
  }
  template <typename T>
  absl::Span<const T> flat() const {
    return absl::Span<const T>(data<T>(), static_cast<size_t>(num_elements_));
  }
  // The first element converted to double (for scalars in logs and tests).
  double ScalarAsDouble() const;

  // Rows [begin, end) along axis 0, sharing storage. Requires rank >= 1 and
  // 0 <= begin <= end <= dim(0); out-of-range arguments give InvalidArgument.
  absl::StatusOr<Tensor> Slice(int64_t begin, int64_t end) const;

  // Same bytes, new shape with the same element count (InvalidArgument otherwise).
  absl::StatusOr<Tensor> Reshape(Shape shape) const;

  // An independent deep copy with freshly allocated, aligned storage.
  Tensor Clone() const;

  // True when both tensors view the same storage block.
  bool SharesStorageWith(const Tensor& other) const { return owner_ == other.owner_; }

  // Exact equality of dtype, shape and bytes.
  bool Equals(const Tensor& other) const;

  // "f32[2, 3]{0.1, 0.2, ...}" showing at most `max_elements` values.
  std::string DebugString(int max_elements = 8) const;

 private:
  // OK when `shape` is valid and holds exactly `count` elements.
  static absl::Status CheckElementCount(const Shape& shape, size_t count);
  [[noreturn]] static void DieOnCountMismatch(const absl::Status& status);

  DType dtype_ = DType::kF32;
  Shape shape_;
  int64_t num_elements_ = 0;
  std::shared_ptr<const void> owner_;
  void* data_ = nullptr;
};

// True when dtypes and shapes match and every element satisfies
// |a - b| <= atol + rtol * |b| (booleans and integers compare exactly when atol < 1).
bool AllClose(const Tensor& a, const Tensor& b, double atol = 1e-5, double rtol = 1e-5);

// Allocates `bytes` zero-filled bytes aligned to 64, owned by the returned pointer.
std::shared_ptr<void> AllocateAligned(size_t bytes);

// Like AllocateAligned but leaves the bytes uninitialised, for callers that overwrite all of
// them at once (e.g. a network read of 16 MiB, where zero-filling first would double the
// memory traffic). The caller must not let unwritten bytes escape.
std::shared_ptr<void> AllocateAlignedUninitialized(size_t bytes);

// Concatenates tensors along axis 0. All must share dtype and trailing dims.
absl::StatusOr<Tensor> Concat(const std::vector<Tensor>& parts);

// The tensors a step function returns and a RemoteValue holds, in order.
using Values = std::vector<Tensor>;

}  // namespace asyncps

#endif  // ASYNCPS_CORE_TENSOR_H_
