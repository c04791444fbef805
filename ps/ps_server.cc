#include "ps/ps_server.h"

#include <spdlog/spdlog.h>

#include "net/server_process.h"
#include "ps/ps_service.h"
#include "ps/variable_store.h"

namespace asyncps::ps {

int RunParameterServer(const ClusterSpec& cluster, const ProcessOptions& options) {
  auto process = net::ServerProcess::Create(cluster, options, /*handler_threads=*/4);
  if (!process.ok()) {
    spdlog::error("{}", process.status().ToString());
    return 1;
  }
  VariableStore store;
  PsService service(store);
  service.RegisterWith((*process)->server().methods());
  return (*process)->ServeUntilSignal();
}

}  // namespace asyncps::ps
