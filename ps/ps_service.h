#ifndef ASYNCPS_PS_PS_SERVICE_H_
#define ASYNCPS_PS_PS_SERVICE_H_

#include "net/method_table.h"
#include "ps/variable_store.h"

namespace asyncps::ps {

// The "ps.*" RPC methods over a VariableStore:
//   ps.CreateVariable  CreateVariableRequest -> CreateVariableResponse (idempotent by name)
//   ps.Read            ReadRequest -> ReadResponse (several variables, one consistent copy each)
//   ps.Update          UpdateRequest -> Empty (dense or by row; all validated before any applies)
//   ps.PushGradients   PushGradientsRequest -> Empty (through each variable's optimizer)
//   ps.Gather          GatherRequest -> GatherResponse (rows by id)
//   ps.ListVariables   Empty -> ListVariablesResponse
//   ps.Health          Empty -> Empty (answered on the I/O thread)
// A request that fails validation (unknown variable, wrong dtype or shape, out-of-range id)
// changes nothing and returns the error.
//
// `store` must outlive the server the service is registered with.
class PsService {
 public:
  explicit PsService(VariableStore& store) : store_(store) {}

  void RegisterWith(net::MethodTable& server);

 private:
  absl::Status CreateVariable(const net::InMessage& request, net::OutMessage* response);
  absl::Status Read(const net::InMessage& request, net::OutMessage* response);
  absl::Status Update(const net::InMessage& request, net::OutMessage* response);
  absl::Status PushGradients(const net::InMessage& request, net::OutMessage* response);
  absl::Status Gather(const net::InMessage& request, net::OutMessage* response);
  absl::Status ListVariables(const net::InMessage& request, net::OutMessage* response);

  VariableStore& store_;
};

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_PS_SERVICE_H_
