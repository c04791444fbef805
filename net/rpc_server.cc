#include "net/rpc_server.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/incarnation.h"
#include "core/sync.h"
#include "net/asio.h"
#include "net/connection.h"
#include "net/handshake.h"

namespace asyncps::net {
namespace {

constexpr absl::Duration kMinAcceptBackoff = absl::Milliseconds(10);
constexpr absl::Duration kMaxAcceptBackoff = absl::Seconds(1);

asio::steady_timer::duration ToAsio(absl::Duration d) {
  return std::chrono::duration_cast<asio::steady_timer::duration>(absl::ToChronoNanoseconds(d));
}

// A session's frames go to and from its socket.
class ConnectionTransport : public SessionTransport {
 public:
  explicit ConnectionTransport(std::shared_ptr<Connection> connection) : connection_(std::move(connection)) {}
  void Send(OutMessage message) override { connection_->Send(std::move(message)); }
  void Close(const absl::Status& reason) override { connection_->Close(reason); }
  void SetLimits(const FrameLimits& limits) override { connection_->SetLimits(limits); }

 private:
  const std::shared_ptr<Connection> connection_;
};

}  // namespace

// Loop-thread state. Shared with in-flight async operations so it outlives them.
struct RpcServer::Impl : std::enable_shared_from_this<RpcServer::Impl> {
  Impl(RpcServer* s, EventLoop& loop)
      : server(s), acceptor(loop.context()), accept_retry(loop.context()), sweep_timer(loop.context()) {}

  void AcceptLoop();
  void AcceptFailed(const boost::system::error_code& ec);
  void Accept(tcp::socket socket);
  // Closes connections past their handshake deadline or idle timeout; re-arms itself.
  void Sweep();
  void ArmSweep();

  RpcServer* const server;
  tcp::acceptor acceptor;
  asio::steady_timer accept_retry;
  absl::Duration accept_backoff = kMinAcceptBackoff;
  absl::Time next_accept_error_log = absl::InfinitePast();
  asio::steady_timer sweep_timer;
  absl::Duration sweep_period = absl::Seconds(1);
  absl::flat_hash_set<std::shared_ptr<ServerSession>> sessions;
  bool stopped = false;
};

RpcServer::RpcServer(EventLoop& loop, Options options)
    : loop_(loop), options_(std::move(options)), impl_(std::make_shared<Impl>(this, loop)) {
  session_config_.role = options_.role;
  session_config_.task_index = options_.task_index;
  session_config_.incarnation = ProcessIncarnation();
  session_config_.token = options_.token;
  session_config_.handshake_limits = options_.handshake_limits;
  session_config_.limits = options_.limits;
  session_config_.metrics = options_.metrics;
  session_config_.pool_load = &pool_load_;
}

RpcServer::~RpcServer() { Shutdown(); }

absl::Status RpcServer::Start() {
  absl::Status status;
  Notification bound;
  loop_.Post([&] {
    boost::system::error_code ec;
    auto address = asio::ip::make_address(options_.host, ec);
    if (ec) {
      status = absl::InvalidArgumentError(absl::StrCat("bad listen host '", options_.host, "'"));
      bound.Notify();
      return;
    }
    if (options_.token.empty() && !address.is_loopback()) {
      status = absl::InvalidArgumentError(
          absl::StrCat("refusing to listen on ", options_.host,
                       " without a cluster token (an empty token is allowed on loopback only)"));
      bound.Notify();
      return;
    }
    tcp::endpoint endpoint(address, static_cast<uint16_t>(options_.port));
    auto& acceptor = impl_->acceptor;
    acceptor.open(endpoint.protocol(), ec);
    if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor.bind(endpoint, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      status = absl::UnavailableError(absl::StrCat("cannot listen on ", options_.host, ":",
                                                   options_.port, ": ", ec.message()));
    } else {
      port_ = acceptor.local_endpoint().port();
    }
    bound.Notify();
  });
  bound.WaitForNotification();
  if (!status.ok()) return status;
  pool_ = std::make_unique<ThreadPool>(options_.handler_threads);

  // Deadlines are checked a few times per the shortest timeout (at most once a second).
  absl::Duration shortest = std::min(options_.handshake_timeout, options_.idle_timeout);
  impl_->sweep_period = std::clamp(shortest / 4, absl::Milliseconds(5), absl::Seconds(1));
  // The accept loop and everything it starts run on the loop thread.
  loop_.Post([impl = impl_] {
    impl->AcceptLoop();
    impl->ArmSweep();
  });
  spdlog::info("rpc server ({}) listening on {}:{}", options_.role, options_.host, port_);
  return absl::OkStatus();
}

void RpcServer::Impl::AcceptLoop() {
  acceptor.async_accept([self = shared_from_this()](const boost::system::error_code& ec,
                                                    tcp::socket socket) {
    if (self->stopped) return;
    if (ec) return self->AcceptFailed(ec);
    self->accept_backoff = kMinAcceptBackoff;
    self->Accept(std::move(socket));
    self->AcceptLoop();
  });
}

void RpcServer::Impl::AcceptFailed(const boost::system::error_code& ec) {
  // The pending connection stays in the backlog, so an immediate retry fails again at once
  // (EMFILE would spin the loop at 100% CPU): wait, doubling the wait up to a second.
  const Options& options = server->options_;
  if (options.metrics != nullptr) options.metrics->RecordRejected("accept_error");
  const absl::Time now = absl::Now();
  if (now >= next_accept_error_log) {
    spdlog::warn("{} server: accept failed: {}; retrying in {}", options.role, ec.message(),
                 absl::FormatDuration(accept_backoff));
    next_accept_error_log = now + absl::Seconds(10);  // one line per 10 s while it lasts
  }
  accept_retry.expires_after(ToAsio(accept_backoff));
  accept_backoff = std::min(accept_backoff * 2, kMaxAcceptBackoff);
  accept_retry.async_wait([self = shared_from_this()](const boost::system::error_code& wait_ec) {
    if (wait_ec || self->stopped) return;
    self->AcceptLoop();
  });
}

void RpcServer::Impl::Accept(tcp::socket socket) {
  const Options& options = server->options_;
  auto connection = std::make_shared<Connection>(std::move(socket), options.limits, options.metrics);
  if (static_cast<int>(sessions.size()) >= options.max_connections) {
    spdlog::warn("{} server: refusing connection from {}: {} connections open (--rpc_max_connections)",
                 options.role, connection->peer_address(), sessions.size());
    if (options.metrics != nullptr) options.metrics->RecordRejected("connection_cap");
    connection->Close(absl::ResourceExhaustedError("too many connections"));
    return;
  }
  ThreadPool* pool = server->pool_.get();
  auto session = std::make_shared<ServerSession>(
      &server->session_config_, &server->methods_, [pool](std::function<void()> fn) { pool->Submit(std::move(fn)); },
      std::make_unique<ConnectionTransport>(connection), connection->peer_address(), MakeNonce());
  sessions.insert(session);
  std::weak_ptr<ServerSession> weak = session;
  connection->Start(
      [weak](InMessage frame) {
        if (auto s = weak.lock()) s->OnFrame(std::move(frame));
      },
      [impl = shared_from_this(), weak](const absl::Status& reason) {
        auto s = weak.lock();
        if (s == nullptr) return;
        const Options& options = impl->server->options_;
        if (!s->rejected() && reason.code() == absl::StatusCode::kInvalidArgument) {
          // The connection refused a frame itself (garbage, a size over the limits).
          spdlog::warn("{} server closing connection from {}: {}", options.role, s->peer().address,
                       reason.ToString());
          if (options.metrics != nullptr) options.metrics->RecordRejected("bad_frame");
        } else if (s->authenticated() && !impl->stopped) {
          spdlog::debug("{} connection from {}:{} ({}) closed: {}", options.role, s->peer().role,
                        s->peer().task_index, s->peer().address, reason.ToString());
        }
        impl->sessions.erase(s);
      });
  session->Start();
}

void RpcServer::Impl::ArmSweep() {
  sweep_timer.expires_after(ToAsio(sweep_period));
  sweep_timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (ec || self->stopped) return;
    self->Sweep();
    self->ArmSweep();
  });
}

void RpcServer::Impl::Sweep() {
  const Options& options = server->options_;
  const absl::Time now = absl::Now();
  std::vector<std::shared_ptr<ServerSession>> expired_handshake;
  std::vector<std::shared_ptr<ServerSession>> idle;
  for (const auto& s : sessions) {
    if (!s->authenticated()) {
      if (now - s->started() > options.handshake_timeout) expired_handshake.push_back(s);
    } else if (s->in_flight() == 0 && now - s->last_activity() > options.idle_timeout) {
      idle.push_back(s);
    }
  }
  for (auto& s : expired_handshake) {
    s->Reject("handshake_timeout",
              absl::DeadlineExceededError(absl::StrCat("no handshake within ",
                                                       absl::FormatDuration(options.handshake_timeout))));
  }
  for (auto& s : idle) {
    s->Reject("idle_timeout", absl::DeadlineExceededError(absl::StrCat(
                                  "idle for ", absl::FormatDuration(options.idle_timeout))));
  }
}

int RpcServer::num_connections() {
  int n = 0;
  Notification done;
  loop_.Post([&] {
    n = static_cast<int>(impl_->sessions.size());
    done.Notify();
  });
  done.WaitForNotification();
  return n;
}

void RpcServer::Shutdown() {
  if (pool_ == nullptr) return;
  Notification done;
  auto impl = impl_;
  loop_.Post([impl, &done] {
    impl->stopped = true;
    boost::system::error_code ignored;
    impl->acceptor.close(ignored);
    impl->accept_retry.cancel();
    impl->sweep_timer.cancel();
    auto sessions = std::move(impl->sessions);
    impl->sessions.clear();
    for (auto& s : sessions) s->Close(absl::UnavailableError("server shutting down"));
    done.Notify();
  });
  done.WaitForNotification();
  pool_.reset();  // runs what was queued; their responses go to closed connections
}

}  // namespace asyncps::net
