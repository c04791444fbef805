#ifndef ASYNCPS_COORDINATOR_RESOURCE_SPEC_H_
#define ASYNCPS_COORDINATOR_RESOURCE_SPEC_H_

#include <cstdint>
#include <map>
#include <string>

namespace asyncps {

// A per-worker resource the coordinator keeps alive on every worker: the factory named in the
// Program and its arguments, under the id closures refer to it by. Plain data.
struct ResourceSpec {
  uint64_t id = 0;
  std::string factory;
  std::map<std::string, std::string> args;
};

}  // namespace asyncps

#endif  // ASYNCPS_COORDINATOR_RESOURCE_SPEC_H_
