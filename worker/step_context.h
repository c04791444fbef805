#ifndef ASYNCPS_WORKER_STEP_CONTEXT_H_
#define ASYNCPS_WORKER_STEP_CONTEXT_H_

#include <atomic>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/tensor.h"
#include "data/dataset.h"
#include "worker/program.h"
#include "worker/ps_client.h"

namespace asyncps {

// What a step function sees while it runs on a worker: its arguments (tensors, or this
// worker's own per-worker resources), and the variables on the parameter servers.
//
// Every variable operation goes to the PS that hold the variable's shards, one request per
// PS, all PS in parallel. A PS that cannot be reached makes the operation return
// Unavailable; the worker reports that to the coordinator as a PS failure, not as the
// function's own error.
//
// Used by one step function on one thread.
class StepContext {
 public:
  // A closure argument as bound on this worker: a tensor, or this worker's own instance of a
  // per-worker resource.
  using BoundArg = std::variant<Tensor, std::shared_ptr<Resource>>;

  StepContext(int worker_index, std::vector<BoundArg> args, PsClient& ps,
              std::shared_ptr<const std::atomic<bool>> cancelled)
      : worker_index_(worker_index), args_(std::move(args)), ps_(ps), cancelled_(std::move(cancelled)) {}

  int worker_index() const { return worker_index_; }
  size_t num_args() const { return args_.size(); }

  // Tensor argument `i`; InvalidArgument when out of range or a resource.
  absl::StatusOr<Tensor> arg(size_t i) const;

  // Per-worker resource argument `i` as a T; InvalidArgument when out of range, not a
  // resource, or not a T. The pointer stays valid for the whole step.
  template <typename T>
  absl::StatusOr<T*> resource(size_t i) const {
    if (i >= args_.size() || !std::holds_alternative<std::shared_ptr<Resource>>(args_[i])) {
      return absl::InvalidArgumentError(absl::StrCat("argument ", i, " is not a per-worker resource"));
    }
    T* r = dynamic_cast<T*>(std::get<std::shared_ptr<Resource>>(args_[i]).get());
    if (r == nullptr) return absl::InvalidArgumentError(absl::StrCat("argument ", i, " has another type"));
    return r;
  }

  // The next element of per-worker iterator argument `i` (an iterator from
  // PerWorkerDataset::MakeIterator): absl::OutOfRangeError at the end of the data
  // (data::IsEndOfData), InvalidArgument when argument `i` is not an iterator.
  absl::StatusOr<data::Element> Next(size_t i);

  absl::StatusOr<Tensor> Read(const std::string& name);
  // Several variables in one request per PS.
  absl::StatusOr<std::vector<Tensor>> ReadMany(const std::vector<std::string>& names);
  absl::Status Assign(const std::string& name, const Tensor& value);
  absl::Status AssignAdd(const std::string& name, const Tensor& value);
  absl::Status AssignSub(const std::string& name, const Tensor& value);
  // Several updates (any variables, dense or by row) in one request per PS.
  absl::Status Update(const std::vector<VariableUpdate>& updates);
  // Rows of a (sharded) variable by global id: an embedding lookup.
  absl::StatusOr<Tensor> Gather(const std::string& name, const Tensor& ids);
  absl::Status Scatter(ps::UpdateKind kind, const std::string& name, const Tensor& ids, const Tensor& values);
  // Gradients applied by each variable's optimizer on its PS; one request per PS.
  absl::Status PushGradients(const std::vector<GradientUpdate>& gradients);

  // True once the coordinator cancelled this closure: long functions should check it and
  // return early. Variable operations fail with Cancelled from then on.
  bool cancelled() const { return cancelled_->load(std::memory_order_relaxed); }

  // True when some variable operation failed because a PS was unreachable.
  bool ps_unreachable() const { return ps_unreachable_; }
  // True when some variable operation failed because a PS lost variables it held (it
  // restarted empty; see IsPsStateLost).
  bool ps_state_lost() const { return ps_state_lost_; }

 private:
  absl::Status Track(absl::Status status);
  template <typename T>
  absl::StatusOr<T> Track(absl::StatusOr<T> result) {
    if (!result.ok()) Track(result.status()).IgnoreError();
    return result;
  }
  absl::Status CheckCancelled() const;

  int worker_index_;
  std::vector<BoundArg> args_;
  PsClient& ps_;
  std::shared_ptr<const std::atomic<bool>> cancelled_;
  bool ps_unreachable_ = false;
  bool ps_state_lost_ = false;
};

}  // namespace asyncps

#endif  // ASYNCPS_WORKER_STEP_CONTEXT_H_
