#ifndef ASYNCPS_COORDINATOR_CLOSURE_ARG_H_
#define ASYNCPS_COORDINATOR_CLOSURE_ARG_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>

#include "coordinator/remote_value.h"
#include "core/tensor.h"

namespace asyncps {

// A resource that exists once per worker (an iterator, a counter), created from a factory in
// the Program by ClusterCoordinator::CreatePerWorkerResource and rebuilt on a worker that
// comes back after a failure. Passed to Schedule, it is replaced on the running worker by that
// worker's own instance.
class PerWorkerValues {
 public:
  PerWorkerValues(uint64_t id, std::string factory) : id_(id), factory_(std::move(factory)) {}
  uint64_t id() const { return id_; }
  const std::string& factory() const { return factory_; }

 private:
  uint64_t id_;
  std::string factory_;
};

// One argument of a scheduled closure: a tensor (sent with the closure) or per-worker values.
// A RemoteValue converts too, only so Schedule can reject it with a clear error: results stay
// where they are produced and are not fed back as inputs.
class ClosureArg {
 public:
  ClosureArg(Tensor tensor) : value_(std::move(tensor)) {}                 // NOLINT: implicit by design
  ClosureArg(PerWorkerValues per_worker) : value_(std::move(per_worker)) {}  // NOLINT
  ClosureArg(RemoteValue remote) : value_(std::move(remote)) {}  // NOLINT

  const std::variant<Tensor, PerWorkerValues, RemoteValue>& value() const { return value_; }

 private:
  std::variant<Tensor, PerWorkerValues, RemoteValue> value_;
};

}  // namespace asyncps

#endif  // ASYNCPS_COORDINATOR_CLOSURE_ARG_H_
