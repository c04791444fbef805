#include "net/rpc_client.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <optional>

#include <spdlog/spdlog.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/incarnation.h"
#include "core/one_shot_event.h"
#include "core/sync.h"
#include "net/asio.h"
#include "net/connection.h"
#include "net/handshake.h"
#include "net/peer_absent.h"
#include "net/wire_check.h"

namespace asyncps::net {
namespace {

asio::steady_timer::duration ToAsio(absl::Duration d) {
  return std::chrono::duration_cast<asio::steady_timer::duration>(absl::ToChronoNanoseconds(d));
}

absl::Status StatusFromResponse(const InMessage& message) {
  absl::Status status;
  absl::Status decode = CatchDecodeErrors([&] {
    auto envelope = message.envelope();
    if (envelope.which() != wire::Envelope::RESPONSE) {
      status = absl::InternalError("peer sent a frame that is not a response");
      return absl::OkStatus();
    }
    auto r = envelope.getResponse();
    const int code = r.getCode();
    if (code < 0 || code > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
      status = absl::InternalError(absl::StrCat("peer sent unknown status code ", code));
    } else if (code != 0) {
      status = absl::Status(static_cast<absl::StatusCode>(code), r.getMessage().cStr());
    }
    return absl::OkStatus();
  });
  return decode.ok() ? status : decode;
}

}  // namespace

// State of one client. The connection state machine, timers and the queue of calls waiting
// for a connection are loop-thread only. The calls in flight, request ids and the ready
// connection are shared under `mu`, so a caller can send on a ready connection from its own
// thread (no hop to the loop); their completions still run on the loop thread.
// Shared with async operations so it outlives them.
struct RpcClient::Impl : std::enable_shared_from_this<RpcClient::Impl> {
  // kHandshaking: connected, waiting for the server's challenge; kAwaitingAck: Hello sent.
  enum class State { kIdle, kConnecting, kHandshaking, kAwaitingAck, kReady };

  using Expiry = asio::steady_timer::time_point;

  struct Pending {
    std::string method;
    std::optional<OutMessage> unsent;  // set while waiting for a connection
    Callback done;
    std::optional<Expiry> expiry;  // none: no deadline
    absl::Duration timeout = absl::InfiniteDuration();
    absl::Time start;
    bool wait_for_ready = false;
    PayloadPlacer place_payloads;
  };

  Impl(EventLoop& l, const Options& o)
      : loop(l), options(o), retry_timer(l.context()), connect_timer(l.context()), backoff(o.initial_backoff),
        deadline_timer(l.context()) {}

  // Any thread: sends the call at once when a connection is ready. Otherwise returns false
  // and leaves `request` and `done` untouched.
  bool TrySendNow(const std::string& method, OutMessage& request, const CallOptions& call_options,
                  Callback& done) ABSL_LOCKS_EXCLUDED(mu);
  // Registers call `id` (and its deadline, if any) under mu.
  Pending& AddPendingLocked(uint64_t id, std::string method, const CallOptions& call_options,
                            Callback done) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // One timer serves every call's deadline: armed for the earliest deadline it knows of, and
  // moved only when a call with an earlier one arrives. A call that completes leaves it
  // alone; when it fires, the calls past their deadline fail and it is re-armed for the
  // earliest left. (A timer per call cost two trips through the reactor's timer queue per
  // call.)
  void ArmDeadlineLocked(Expiry expiry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void OnDeadline() ABSL_LOCKS_EXCLUDED(mu);

  // The rest runs on the loop thread.
  void Submit(std::string method, OutMessage request, const CallOptions& call_options, Callback done);
  void Complete(uint64_t id, absl::StatusOr<InMessage> result) ABSL_LOCKS_EXCLUDED(mu);
  void EnsureConnecting();
  void Connect();
  void ConnectFailed(const absl::Status& status);
  void OnFrame(InMessage frame);
  // The placement the call an answer's header names asks for (CallOptions::place_payloads).
  // Reads of `header` may throw.
  PayloadPlacement PlacePayloads(const InMessage& header) ABSL_LOCKS_EXCLUDED(mu);
  // Handshake steps; return a refusal, or "" to go on.
  std::string AnswerChallenge(const InMessage& frame);
  std::string CheckAck(const InMessage& frame, PeerInfo* info);
  void HandshakeFailed(const std::string& refusal);
  void OnClosed(const absl::Status& reason);
  // Fails the waiting calls that do not wait for ready (all of them when `all`).
  void FailWaiting(const absl::Status& status, bool all = false);
  bool AnyWaitingForReady() const;
  void Shutdown();

  EventLoop& loop;
  const Options options;
  State state = State::kIdle;
  std::shared_ptr<Connection> connection;
  std::unique_ptr<tcp::socket> connecting_socket;
  asio::steady_timer retry_timer;
  bool retry_armed = false;
  asio::steady_timer connect_timer;
  absl::Time next_attempt = absl::InfinitePast();
  absl::Duration backoff;
  // The latest connection attempt was refused (net/peer_absent.h): the calls failed until the
  // next attempt say so too.
  bool refused = false;
  std::deque<uint64_t> waiting;  // ids (in `pending`) not yet sent; stale ids are skipped
  std::string client_nonce;      // this connection's challenge to the server
  // When the server last sent a frame (absl::ToUnixNanos; 0: never). Written by the loop thread
  // for every frame, read by Silence from any thread: an atomic, not mu, so the receive path
  // takes no lock for it.
  std::atomic<int64_t> last_frame_nanos{0};

  mutable Mutex mu;
  // Touched only under mu (by callers arming it and by the loop when it fires).
  asio::steady_timer deadline_timer ABSL_GUARDED_BY(mu);
  std::optional<Expiry> deadline_armed ABSL_GUARDED_BY(mu);  // what deadline_timer waits for
  bool shut_down ABSL_GUARDED_BY(mu) = false;
  uint64_t next_id ABSL_GUARDED_BY(mu) = 1;
  absl::flat_hash_map<uint64_t, Pending> pending ABSL_GUARDED_BY(mu);
  // `connection` while it is ready (handshake done): callers send on it directly.
  std::shared_ptr<Connection> ready ABSL_GUARDED_BY(mu);
  PeerInfo peer ABSL_GUARDED_BY(mu);
};

namespace {

// With other calls in flight, a call is likely part of a burst: it is queued, and written
// together with the ones queued before it once half as many as are in flight have gathered
// (at most 16), or by the loop thread when this thread stops making calls. The server then
// reads them with one system call and answers them with one, and works on one part of a
// burst while this thread makes the next (writing whole bursts made the two sides take
// turns: 64 in flight measured 1.0-1.4x a raw echo, in parts 1.3-2.3x). A lone call is
// written at once from this thread, sparing the hop to the loop.
size_t FlushFrames(size_t in_flight) { return std::clamp<size_t>(in_flight / 2, 1, 16); }

// Fills in what the RPC layer owns in a request envelope.
void PrepareRequest(OutMessage& request, uint64_t id, const std::string& method,
                    std::optional<asio::steady_timer::time_point> expiry) {
  auto envelope = request.envelope();
  envelope.setRequestId(id);
  // A request with no body never touched the union; make it a request now.
  auto r = envelope.which() == wire::Envelope::REQUEST ? envelope.getRequest() : envelope.initRequest();
  r.setMethod(method);
  if (expiry.has_value()) {
    const auto left = *expiry - asio::steady_timer::clock_type::now();
    r.setTimeoutMicros(std::max<int64_t>(
        1, std::chrono::duration_cast<std::chrono::microseconds>(left).count()));
  }
}

}  // namespace

RpcClient::Impl::Pending& RpcClient::Impl::AddPendingLocked(uint64_t id, std::string method,
                                                             const CallOptions& call_options,
                                                             Callback done) {
  Pending& p = pending[id];
  p.method = std::move(method);
  p.done = std::move(done);
  p.start = absl::Now();
  p.wait_for_ready = call_options.wait_for_ready.value_or(options.wait_for_ready);
  p.place_payloads = call_options.place_payloads;
  p.timeout = call_options.timeout;
  if (p.timeout != absl::InfiniteDuration()) {
    // Registered while `mu` is held, so the deadline cannot pass unnoticed before the call is.
    // Saturated: a timeout of centuries must not wrap around into the past.
    const Expiry now = asio::steady_timer::clock_type::now();
    const auto left = ToAsio(p.timeout);
    p.expiry = left >= Expiry::max() - now ? Expiry::max() : now + left;
    if (!deadline_armed.has_value() || *p.expiry < *deadline_armed) ArmDeadlineLocked(*p.expiry);
  }
  return p;
}

void RpcClient::Impl::ArmDeadlineLocked(Expiry expiry) {
  deadline_armed = expiry;
  deadline_timer.expires_at(expiry);  // a wait armed before completes with operation_aborted
  deadline_timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (!ec) self->OnDeadline();
  });
}

void RpcClient::Impl::OnDeadline() {
  struct Expired {
    uint64_t id;
    absl::Duration timeout;
  };
  std::vector<Expired> expired;
  {
    MutexLock lock(&mu);
    if (shut_down) return;
    const Expiry now = asio::steady_timer::clock_type::now();
    std::optional<Expiry> next;
    for (const auto& [id, p] : pending) {
      if (!p.expiry.has_value()) continue;
      if (*p.expiry <= now) {
        expired.push_back({id, p.timeout});
      } else if (!next.has_value() || *p.expiry < *next) {
        next = p.expiry;
      }
    }
    deadline_armed.reset();
    if (next.has_value()) ArmDeadlineLocked(*next);
  }
  for (const Expired& e : expired) {
    Complete(e.id, absl::DeadlineExceededError(absl::StrCat("no response from ", options.address, " within ",
                                                            absl::FormatDuration(e.timeout))));
  }
}

bool RpcClient::Impl::TrySendNow(const std::string& method, OutMessage& request,
                                 const CallOptions& call_options, Callback& done) {
  std::shared_ptr<Connection> conn;
  uint64_t id = 0;
  std::optional<asio::steady_timer::time_point> expiry;
  size_t in_flight = 0;
  {
    MutexLock lock(&mu);
    if (ready == nullptr) return false;
    conn = ready;
    in_flight = pending.size();
    id = next_id++;
    expiry = AddPendingLocked(id, method, call_options, std::move(done)).expiry;
  }
  PrepareRequest(request, id, method, expiry);
  // If the connection closed meanwhile, Send drops the frame and OnClosed fails the call.
  if (in_flight > 0) {
    conn->SendDeferred(std::move(request), FlushFrames(in_flight));
  } else {
    conn->Send(std::move(request));
  }
  return true;
}

void RpcClient::Impl::Submit(std::string method, OutMessage request,
                             const CallOptions& call_options, Callback done) {
  uint64_t id = 0;
  std::optional<asio::steady_timer::time_point> expiry;
  std::shared_ptr<Connection> conn;
  {
    MutexLock lock(&mu);
    if (!shut_down) {
      id = next_id++;
      Pending& p = AddPendingLocked(id, method, call_options, std::move(done));
      expiry = p.expiry;
      if (state == State::kReady) {
        conn = connection;
      } else {
        p.unsent.emplace(std::move(request));
      }
    }
  }
  if (id == 0) {
    done(absl::CancelledError("rpc client destroyed"));
    return;
  }
  if (conn != nullptr) {
    PrepareRequest(request, id, method, expiry);
    conn->Send(std::move(request));
    return;
  }
  waiting.push_back(id);
  EnsureConnecting();
}

void RpcClient::Impl::Complete(uint64_t id, absl::StatusOr<InMessage> result) {
  Pending p;
  {
    MutexLock lock(&mu);
    auto it = pending.find(id);
    if (it == pending.end()) return;  // already completed (e.g. a late response after a timeout)
    p = std::move(it->second);
    pending.erase(it);
  }
  if (options.metrics != nullptr) {
    options.metrics->RecordClientCall(p.method, static_cast<int>(result.status().code()),
                                      absl::ToDoubleSeconds(absl::Now() - p.start));
  }
  p.done(std::move(result));
}

void RpcClient::Impl::FailWaiting(const absl::Status& status, bool all) {
  std::deque<uint64_t> ids;
  ids.swap(waiting);
  std::vector<uint64_t> failed;
  {
    MutexLock lock(&mu);
    for (uint64_t id : ids) {
      auto it = pending.find(id);
      if (it == pending.end()) continue;
      if (all || !it->second.wait_for_ready) {
        failed.push_back(id);
      } else {
        waiting.push_back(id);
      }
    }
  }
  for (uint64_t id : failed) Complete(id, status);
}

bool RpcClient::Impl::AnyWaitingForReady() const {
  MutexLock lock(&mu);
  for (uint64_t id : waiting) {
    auto it = pending.find(id);
    if (it != pending.end() && it->second.wait_for_ready) return true;
  }
  return false;
}

void RpcClient::Impl::EnsureConnecting() {
  if (state != State::kIdle) return;
  {
    MutexLock lock(&mu);
    if (shut_down) return;
  }
  const absl::Time now = absl::Now();
  if (now >= next_attempt) return Connect();
  absl::Status unreachable = absl::UnavailableError(
      absl::StrCat(options.address, refused ? " refused the connection" : " is unreachable", "; next attempt in ",
                   absl::FormatDuration(next_attempt - now)));
  FailWaiting(refused ? MarkPeerAbsent(std::move(unreachable)) : std::move(unreachable));
  if (!AnyWaitingForReady() || retry_armed) return;
  retry_armed = true;
  retry_timer.expires_after(ToAsio(next_attempt - now));
  retry_timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    self->retry_armed = false;
    if (ec) return;
    if (!self->waiting.empty()) self->EnsureConnecting();
  });
}

void RpcClient::Impl::Connect() {
  std::string host;
  int port = 0;
  const size_t colon = options.address.rfind(':');
  if (colon != std::string::npos) host = options.address.substr(0, colon);
  boost::system::error_code ec;
  asio::ip::address address;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(absl::string_view(options.address).substr(colon + 1), &port)) {
    ec = asio::error::invalid_argument;
  } else {
    address = asio::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
  }
  if (ec) {
    // Names other than literal addresses are resolved synchronously: cluster addresses are
    // resolved once per (re)connect, off the hot path.
    tcp::resolver resolver(loop.context());
    auto results = resolver.resolve(host, std::to_string(port), ec);
    if (ec || results.empty()) {
      return ConnectFailed(absl::UnavailableError(
          absl::StrCat("cannot resolve '", options.address, "': ", ec.message())));
    }
    address = results.begin()->endpoint().address();
  }
  state = State::kConnecting;
  connecting_socket = std::make_unique<tcp::socket>(loop.context());
  auto self = shared_from_this();
  connect_timer.expires_after(ToAsio(options.connect_timeout));
  connect_timer.async_wait([self](const boost::system::error_code& ec) {
    if (!ec && self->connecting_socket != nullptr) {
      boost::system::error_code ignored;
      self->connecting_socket->close(ignored);
    }
  });
  connecting_socket->async_connect(
      tcp::endpoint(address, static_cast<uint16_t>(port)),
      [self](const boost::system::error_code& ec) {
        self->connect_timer.cancel();
        auto socket = std::move(self->connecting_socket);
        {
          MutexLock lock(&self->mu);
          if (self->shut_down) return;
        }
        if (ec) {
          absl::Status failed =
              absl::UnavailableError(absl::StrCat("cannot connect to ", self->options.address, ": ", ec.message()));
          self->refused = ec == asio::error::connection_refused;
          return self->ConnectFailed(self->refused ? MarkPeerAbsent(std::move(failed)) : std::move(failed));
        }
        self->refused = false;
        self->state = State::kHandshaking;
        self->connection = std::make_shared<Connection>(std::move(*socket), self->options.limits,
                                                        self->options.metrics);
        std::weak_ptr<Impl> weak = self;
        auto conn = self->connection;
        // Until the server proved it holds the token, it may send only small frames.
        conn->SetLimits(HandshakeFrameLimits());
        conn->SetPayloadPlacer([weak](const InMessage& header) {
          auto s = weak.lock();
          return s != nullptr ? s->PlacePayloads(header) : PayloadPlacement();
        });
        conn->Start(
            [weak](InMessage frame) {
              if (auto s = weak.lock()) s->OnFrame(std::move(frame));
            },
            [weak, conn](const absl::Status& reason) {
              auto s = weak.lock();
              if (s != nullptr && s->connection == conn) s->OnClosed(reason);
            });
      });
}

void RpcClient::Impl::ConnectFailed(const absl::Status& status) {
  state = State::kIdle;
  next_attempt = absl::Now() + backoff;
  backoff = std::min(backoff * 2, options.max_backoff);
  FailWaiting(status);
  if (!waiting.empty()) EnsureConnecting();  // arms the retry timer for wait-for-ready calls
}

std::string RpcClient::Impl::AnswerChallenge(const InMessage& frame) {
  auto envelope = frame.envelope();
  if (envelope.which() != wire::Envelope::CHALLENGE) return "server did not send a handshake challenge";
  auto challenge = envelope.getChallenge();
  if (challenge.getProtocolVersion() != kProtocolVersion) {
    return absl::StrCat("server speaks protocol version ", challenge.getProtocolVersion(), " (this client ",
                        kProtocolVersion, ")");
  }
  auto nonce = challenge.getNonce();
  if (nonce.size() != kNonceBytes) return "server sent a malformed challenge";
  client_nonce = MakeNonce();
  OutMessage hello_message;
  auto hello = hello_message.envelope().initHello();
  hello.setProtocolVersion(kProtocolVersion);
  hello.setRole(options.role);
  hello.setTaskIndex(options.task_index);
  hello.setIncarnation(ProcessIncarnation());
  const std::string proof =
      ComputeProof(options.token, ProofDirection::kClientHello,
                   absl::string_view(reinterpret_cast<const char*>(nonce.begin()), nonce.size()),
                   {options.role, options.task_index, ProcessIncarnation()});
  hello.setProof(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(proof.data()), proof.size()));
  hello.setNonce(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(client_nonce.data()),
                                     client_nonce.size()));
  connection->Send(std::move(hello_message));
  return "";
}

std::string RpcClient::Impl::CheckAck(const InMessage& frame, PeerInfo* info) {
  auto envelope = frame.envelope();
  if (envelope.which() != wire::Envelope::HELLO_ACK) return "server did not answer the handshake";
  auto ack = envelope.getHelloAck();
  if (!ack.getOk()) return ack.getError().cStr();
  info->role = ack.getRole().cStr();
  info->task_index = ack.getTaskIndex();
  info->incarnation = ack.getIncarnation();
  info->address = options.address;
  auto proof = ack.getProof();
  if (!VerifyProof(options.token, ProofDirection::kServerAck, client_nonce,
                   {info->role, info->task_index, info->incarnation},
                   absl::string_view(reinterpret_cast<const char*>(proof.begin()), proof.size()))) {
    return "server could not prove it holds the cluster token";
  }
  return "";
}

void RpcClient::Impl::HandshakeFailed(const std::string& refusal) {
  spdlog::error("handshake with {} refused: {}", options.address, refusal);
  auto conn = std::move(connection);
  state = State::kIdle;
  conn->Close(absl::PermissionDeniedError(refusal));
  next_attempt = absl::Now() + backoff;
  backoff = std::min(backoff * 2, options.max_backoff);
  FailWaiting(absl::PermissionDeniedError(absl::StrCat("handshake with ", options.address, " refused: ", refusal)),
              /*all=*/true);
}

void RpcClient::Impl::OnFrame(InMessage frame) {
  last_frame_nanos.store(absl::ToUnixNanos(absl::Now()), std::memory_order_relaxed);
  if (absl::Status s = CheckEnvelope(frame); !s.ok()) {
    // Everything read below is in the envelope, so it cannot throw after this check.
    spdlog::error("closing connection to {}: {}", options.address, s.ToString());
    if (state == State::kReady) return connection->Close(s);
    return HandshakeFailed(std::string(s.message()));
  }
  if (state == State::kHandshaking) {
    std::string refusal = AnswerChallenge(frame);
    if (!refusal.empty()) return HandshakeFailed(refusal);
    state = State::kAwaitingAck;
    return;
  }
  if (state == State::kAwaitingAck) {
    PeerInfo info;
    std::string refusal = CheckAck(frame, &info);
    if (!refusal.empty()) return HandshakeFailed(refusal);
    connection->SetLimits(options.limits);
    state = State::kReady;
    backoff = options.initial_backoff;
    struct Unsent {
      uint64_t id;
      std::string method;
      std::optional<asio::steady_timer::time_point> expiry;
      OutMessage request;
    };
    std::vector<Unsent> unsent;
    {
      MutexLock lock(&mu);
      peer = info;
      ready = connection;
      for (uint64_t id : waiting) {
        auto it = pending.find(id);
        if (it == pending.end() || !it->second.unsent.has_value()) continue;
        Pending& p = it->second;
        unsent.push_back({id, p.method, p.expiry, std::move(*p.unsent)});
        p.unsent.reset();
      }
    }
    waiting.clear();
    for (Unsent& u : unsent) {
      PrepareRequest(u.request, u.id, u.method, u.expiry);
      connection->Send(std::move(u.request));
    }
    return;
  }
  uint64_t id = 0;
  absl::Status decode = CatchDecodeErrors([&] {
    id = frame.envelope().getRequestId();
    return absl::OkStatus();
  });
  if (!decode.ok()) return connection->Close(decode);
  absl::Status status = StatusFromResponse(frame);
  if (status.ok()) {
    Complete(id, std::move(frame));
  } else {
    Complete(id, status);
  }
}

PayloadPlacement RpcClient::Impl::PlacePayloads(const InMessage& header) {
  if (state != State::kReady) return PayloadPlacement();
  auto envelope = header.envelope();
  if (envelope.which() != wire::Envelope::RESPONSE || envelope.getResponse().getCode() != 0) {
    return PayloadPlacement();
  }
  const uint64_t id = envelope.getRequestId();
  PayloadPlacer placer;
  {
    MutexLock lock(&mu);
    auto it = pending.find(id);
    if (it == pending.end() || !it->second.place_payloads) return PayloadPlacement();
    placer = it->second.place_payloads;
  }
  // Outside the lock: the placer is the caller's code.
  return placer(header);
}

void RpcClient::Impl::OnClosed(const absl::Status& reason) {
  const bool was_ready = state == State::kReady;
  connection.reset();
  state = State::kIdle;
  if (was_ready) {
    // A healthy connection dropped: the peer may be restarting; let the next call try at once.
    next_attempt = absl::Now();
  } else {
    next_attempt = absl::Now() + backoff;
    backoff = std::min(backoff * 2, options.max_backoff);
  }
  std::vector<uint64_t> in_flight;
  {
    // Calls registered before this point were sent on (or dropped by) the closed connection;
    // later ones go through Submit and wait for the next connection.
    MutexLock lock(&mu);
    ready = nullptr;
    for (const auto& [id, p] : pending) {
      if (!p.unsent.has_value()) in_flight.push_back(id);
    }
  }
  const absl::Status status = reason.code() == absl::StatusCode::kPermissionDenied
                                  ? reason
                                  : absl::UnavailableError(std::string(reason.message()));
  for (uint64_t id : in_flight) Complete(id, status);
  if (!waiting.empty()) {
    FailWaiting(status);
    if (!waiting.empty()) EnsureConnecting();
  }
}

void RpcClient::Impl::Shutdown() {
  std::vector<uint64_t> ids;
  {
    MutexLock lock(&mu);
    shut_down = true;
    ready = nullptr;
    for (const auto& [id, p] : pending) ids.push_back(id);
    deadline_timer.cancel();  // its wait holds this object
    deadline_armed.reset();
  }
  retry_timer.cancel();
  connect_timer.cancel();
  if (connecting_socket != nullptr) {
    boost::system::error_code ignored;
    connecting_socket->close(ignored);
  }
  if (connection != nullptr) {
    auto conn = std::move(connection);
    conn->Close(absl::CancelledError("rpc client destroyed"));
  }
  for (uint64_t id : ids) Complete(id, absl::CancelledError("rpc client destroyed"));
  waiting.clear();
}

RpcClient::RpcClient(EventLoop& loop, Options options)
    : loop_(loop), options_(std::move(options)), impl_(std::make_shared<Impl>(loop, options_)) {}

RpcClient::~RpcClient() {
  Notification done;
  loop_.Post([impl = impl_, &done] {
    impl->Shutdown();
    done.Notify();
  });
  done.WaitForNotification();
}

void RpcClient::CallAsync(const std::string& method, OutMessage request,
                          const CallOptions& call_options, Callback done) {
  // On a ready connection the calling thread writes the request itself; only connecting
  // (and everything after it) needs the loop thread.
  if (impl_->TrySendNow(method, request, call_options, done)) return;
  auto shared_request = std::make_shared<OutMessage>(std::move(request));
  loop_.Post([impl = impl_, method, shared_request, call_options, done = std::move(done)]() mutable {
    impl->Submit(method, std::move(*shared_request), call_options, std::move(done));
  });
}

absl::StatusOr<InMessage> RpcClient::Call(const std::string& method, OutMessage request,
                                          const CallOptions& timeout) {
  // The answer is written once, on the loop thread, before `ready` is notified; the event's
  // acquire/release orders it for this thread. A bare futex: the hand-off from the loop
  // thread is the largest part of a small call's cost above the network round trip.
  struct Waiter {
    OneShotEvent ready;
    std::optional<absl::StatusOr<InMessage>> result;
  };
  auto waiter = std::make_shared<Waiter>();
  CallAsync(method, std::move(request), timeout, [waiter](absl::StatusOr<InMessage> result) {
    waiter->result.emplace(std::move(result));
    waiter->ready.Notify();
  });
  waiter->ready.Wait();
  return std::move(*waiter->result);
}

PeerInfo RpcClient::peer() const {
  MutexLock lock(&impl_->mu);
  return impl_->peer;
}

absl::Duration RpcClient::Silence() const {
  absl::Time oldest = absl::InfiniteFuture();
  // Bytes arriving on the connection count as a word from the server: a 300 MB answer on a
  // 1 Gbit/s link takes 2.4 s to arrive as one frame, and its sender is not silent.
  absl::Time moved = absl::InfinitePast();
  {
    MutexLock lock(&impl_->mu);
    for (const auto& [id, p] : impl_->pending) oldest = std::min(oldest, p.start);
    if (impl_->ready != nullptr) moved = impl_->ready->last_progress();
  }
  if (oldest == absl::InfiniteFuture()) return absl::ZeroDuration();
  const absl::Time heard = absl::FromUnixNanos(impl_->last_frame_nanos.load(std::memory_order_relaxed));
  return std::max(absl::ZeroDuration(), absl::Now() - std::max({oldest, heard, moved}));
}

void RpcClient::Disconnect() {
  // Only the connection that is ready now: a later one (the peer came back) must survive.
  std::shared_ptr<Connection> target;
  {
    MutexLock lock(&impl_->mu);
    target = impl_->ready;
  }
  if (target == nullptr) return;
  auto close = [target] { target->Close(absl::UnavailableError("disconnected")); };
  if (loop_.InLoopThread()) return close();
  Notification closed;
  loop_.Post([&] {
    close();
    closed.Notify();
  });
  closed.WaitForNotification();
}

}  // namespace asyncps::net
