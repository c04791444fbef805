#ifndef ASYNCPS_WORKER_LOCAL_PS_SERVICES_TESTING_H_
#define ASYNCPS_WORKER_LOCAL_PS_SERVICES_TESTING_H_

// Test helper (asyncps_worker_testutil): the PS side of PsClient and StepContext tests, in the
// test process.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/optimizer_config.h"
#include "core/tensor.h"
#include "partitioners/variable_placement.h"
#include "net/event_loop.h"
#include "net/method_table.h"
#include "net/rpc_client.h"
#include "net/rpc_server.h"
#include "ps/ps_service.h"
#include "ps/variable_store.h"
#include "worker/ps_client.h"
#include "worker/variable_directory.h"

namespace asyncps {

// An f32 variable `name` of `shape` in one shard (named as the variable) on PS `ps`.
VariablePlacement PlainPlacement(const std::string& name, const Shape& shape, int ps = 0);

// `num_ps` real PsServices (a VariableStore each, default options) on real RpcServers on
// 127.0.0.1 (one event loop), a worker-role RpcClient of each (another loop), and a PsClient over
// them that resolves names with directory().
//
// Thread-safety: Start and the destructor from the test thread; client() as PsClient is.
class LocalPsServices {
 public:
  // Called for each PS once its PsService registered its methods and before its server starts:
  // a test registers a method again there to count or fake what that PS answers
  // (MethodTable::Register replaces).
  using Customize = std::function<void(int ps, ps::PsService& service, net::MethodTable& methods)>;

  // Errors: a server that cannot start.
  static absl::StatusOr<std::unique_ptr<LocalPsServices>> Start(int num_ps, const std::string& token,
                                                                const Customize& customize = nullptr);
  // The PsClient and the RpcClients first, then the servers.
  ~LocalPsServices();

  PsClient& client() { return *client_; }
  VariableDirectory& directory() { return directory_; }

  // Creates every shard of `placement` (zeros) with `optimizer` and adds it to directory().
  absl::Status Create(const VariablePlacement& placement, const OptimizerConfig& optimizer);

 private:
  LocalPsServices() = default;

  net::EventLoop server_loop_;
  net::EventLoop client_loop_;
  std::vector<std::unique_ptr<ps::VariableStore>> stores_;
  std::vector<std::unique_ptr<ps::PsService>> services_;
  std::vector<std::unique_ptr<net::RpcServer>> servers_;
  std::vector<std::unique_ptr<net::RpcClient>> rpc_clients_;
  VariableDirectory directory_;
  std::unique_ptr<PsClient> client_;
};

}  // namespace asyncps

#endif  // ASYNCPS_WORKER_LOCAL_PS_SERVICES_TESTING_H_
