#ifndef ASYNCPS_PS_READ_WIRE_TESTING_H_
#define ASYNCPS_PS_READ_WIRE_TESTING_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "net/message.h"
#include "ps/ps.capnp.h"

namespace asyncps::ps {

// The raw `ps.Read` exchange, for tests that talk to a PS below PsClient (unit tests of the
// service, hostile-client tests): the request for `names`, and the tensors of its answer
// (copied out of the frame, so they outlive it).
inline net::OutMessage ReadRequestFor(const std::vector<std::string>& names) {
  net::OutMessage req;
  auto list = req.InitRequestBody<wire::ReadRequest>().initNames(static_cast<unsigned>(names.size()));
  for (unsigned i = 0; i < names.size(); ++i) list.set(i, names[i]);
  return req;
}

inline absl::StatusOr<std::vector<Tensor>> ReadResponseTensors(const net::InMessage& response) {
  std::vector<Tensor> out;
  for (auto ref : response.ResponseBody<wire::ReadResponse>().getTensors()) {
    auto t = response.TensorAt(ref);
    if (!t.ok()) return t.status();
    out.push_back(t->Clone());
  }
  return out;
}

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_READ_WIRE_TESTING_H_
