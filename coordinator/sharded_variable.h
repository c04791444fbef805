#ifndef ASYNCPS_COORDINATOR_SHARDED_VARIABLE_H_
#define ASYNCPS_COORDINATOR_SHARDED_VARIABLE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "worker/ps_client.h"
#include "worker/variable_directory.h"

namespace asyncps {

// A handle to a variable created by ParameterServerStrategy: one shard (a plain variable) or
// several ("name/part_i", rows split on axis 0), each on its own PS. Operations address the
// whole variable and are split per shard and sent to all PS at once; row ids are global.
//
// Cheap to copy. Thread-safe. Valid while the ChiefProcess of the strategy that created it lives.
class ShardedVariable {
 public:
  ShardedVariable(std::shared_ptr<const VariablePlacement> placement, PsClient* ps)
      : placement_(std::move(placement)), ps_(ps) {}

  const std::string& name() const { return placement_->name; }
  DType dtype() const { return placement_->dtype; }
  const Shape& shape() const { return placement_->shape; }
  size_t num_shards() const { return placement_->shards.size(); }
  const std::vector<ShardPlacement>& shards() const { return placement_->shards; }
  const VariablePlacement& placement() const { return *placement_; }

  // The whole value (shards concatenated).
  absl::StatusOr<Tensor> Read() const;
  absl::Status Assign(const Tensor& value) const;
  absl::Status AssignAdd(const Tensor& value) const;
  absl::Status AssignSub(const Tensor& value) const;

  // Embedding lookup: rows `ids` (global, duplicates allowed) in id order; one request per
  // shard touched, all in parallel. Out-of-range ids are an error that reads nothing.
  absl::StatusOr<Tensor> Gather(const Tensor& ids) const;

  // Row updates by global id; an out-of-range id is an error that changes nothing.
  absl::Status ScatterUpdate(const Tensor& ids, const Tensor& values) const;
  absl::Status ScatterAdd(const Tensor& ids, const Tensor& values) const;
  absl::Status ScatterSub(const Tensor& ids, const Tensor& values) const;
  absl::Status ScatterMin(const Tensor& ids, const Tensor& values) const;
  absl::Status ScatterMax(const Tensor& ids, const Tensor& values) const;
  absl::Status ScatterMul(const Tensor& ids, const Tensor& values) const;
  absl::Status ScatterDiv(const Tensor& ids, const Tensor& values) const;

 private:
  absl::Status Apply(UpdateKind kind, const Tensor& value, const Tensor* ids) const;

  std::shared_ptr<const VariablePlacement> placement_;
  PsClient* ps_;
};

}  // namespace asyncps

#endif  // ASYNCPS_COORDINATOR_SHARDED_VARIABLE_H_
