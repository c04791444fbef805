#include "tests/fuzz/server_fuzz_entry.h"

#include <spdlog/spdlog.h>

#include <memory>

#include "absl/types/span.h"
#include "coordinator/membership_service.h"
#include "core/tensor.h"
#include "net/frame_codec.h"
#include "net/handshake.h"
#include "net/in_memory_transport.h"
#include "net/method_table.h"
#include "net/server_session.h"
#include "ps/ps_service.h"
#include "ps/variable_store.h"
#include "worker/program.h"
#include "worker/ps_client.h"
#include "worker/step_context.h"
#include "worker/variable_directory.h"
#include "worker/worker_service.h"

namespace asyncps::fuzz {
namespace {

class Counter : public Resource {};

// A user program with a function that reads its arguments and one resource type, so
// worker.Run and worker.CreateResource get past their lookups.
const Program& FuzzProgram() {
  static const Program* program = [] {
    auto* p = new Program();
    p->AddFunction("sum_args", [](StepContext& ctx) -> absl::StatusOr<Values> {
      Values out;
      for (size_t i = 0; i < ctx.num_args(); ++i) {
        absl::StatusOr<Tensor> t = ctx.arg(i);
        if (t.ok()) out.push_back(*t);
      }
      return out;
    });
    p->AddResource("counter", [](const ResourceContext&) -> absl::StatusOr<std::unique_ptr<Resource>> {
      return std::make_unique<Counter>();
    });
    return p;
  }();
  return *program;
}

// The chief's membership methods over a stand-in for the coordinator: worker 0 (and ps 0) is a
// member; any other index joins; only a member leaves.
class FuzzMembers : public MembershipService::Members {
 public:
  absl::StatusOr<Joined> Join(int index, const std::string&) override { return Joined{2, index == 0}; }
  absl::StatusOr<int> Leave(int index, absl::Duration) override {
    if (index != 0) return absl::NotFoundError("not a member");
    return 0;
  }
  // Elastic PS likewise: ps 0 is a member.
  absl::StatusOr<Joined> JoinPs(int index, const std::string&) override { return Joined{2, index == 0}; }
  absl::StatusOr<int> LeavePs(int index, absl::Duration) override {
    if (index != 0) return absl::NotFoundError("not a member");
    return 1;
  }
};

}  // namespace

std::string FuzzServerNonce() { return std::string(net::kNonceBytes, 'F'); }

int FuzzServerInput(const uint8_t* data, size_t size) {
  RunServerSession(data, size);
  return 0;
}

SessionOutcome RunServerSession(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    spdlog::set_level(spdlog::level::off);  // every input is hostile; logging each is noise
    return true;
  }();
  (void)quiet;
  net::SessionConfig config;
  config.role = "ps";
  config.incarnation = 1;
  config.token = kFuzzToken;
  config.handshake_limits = net::HandshakeFrameLimits();
  // Smaller than a real server's so that inputs stay cheap; the checks are the same code.
  config.limits.max_header_bytes = 1 << 20;
  config.limits.max_payload_bytes = 1 << 20;

  // Small caps keep each input cheap; the refusal paths are the real server's. The fuzzer found
  // 8 GiB..1 TiB creates and per-row initializer loops before the PS had these limits
  // (tests/fuzz/regressions/{crash,oom,timeout}-*).
  ps::VariableStore store(/*max_bytes=*/16 << 20);
  ps::PsService::Options ps_options;
  ps_options.max_response_bytes = 16 << 20;
  ps::PsService ps_service(store, ps_options);
  VariableDirectory directory;
  PsClient ps_client({}, directory);
  WorkerService worker_service(FuzzProgram(), /*worker_index=*/0, /*num_workers=*/1, ps_client, directory);
  net::MethodTable methods;
  ps_service.RegisterWith(methods);
  worker_service.RegisterWith(methods);
  FuzzMembers members;
  MembershipService::Register(methods, members);

  auto owned = std::make_unique<net::InMemoryTransport>();
  net::InMemoryTransport& transport = *owned;
  auto session = std::make_shared<net::ServerSession>(
      &config, &methods, [](std::function<void()> fn) { fn(); }, std::move(owned), "fuzz", FuzzServerNonce());
  session->Start();
  net::DeliverBytes(absl::MakeConstSpan(data, size), transport, *session);

  SessionOutcome outcome;
  outcome.authenticated = session->authenticated();
  outcome.closed = transport.closed();
  for (const std::string& frame : transport.sent()) {
    auto message = net::FrameDecoder::DecodeAll(
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(frame.data()), frame.size()), net::FrameLimits(), nullptr);
    if (message.ok() && message->envelope().which() == wire::Envelope::RESPONSE) {
      outcome.response_codes.push_back(message->envelope().getResponse().getCode());
    }
  }
  return outcome;
}

}  // namespace asyncps::fuzz
