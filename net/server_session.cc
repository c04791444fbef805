#include "net/server_session.h"

#include <spdlog/spdlog.h>

#include <kj/exception.h>

#include <algorithm>
#include <exception>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "net/handshake.h"
#include "net/wire_check.h"

namespace asyncps::net {
namespace {

// fmt formats std::string_view, not this absl's own string_view.
std::string_view ForLog(absl::string_view s) { return std::string_view(s.data(), s.size()); }

absl::string_view ToView(capnp::Data::Reader data) {
  return absl::string_view(reinterpret_cast<const char*>(data.begin()), data.size());
}

capnp::Data::Reader ToData(absl::string_view s) {
  return capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(s.data()), s.size());
}

// The response frame for request `request_id` answered with `status` (and `response`'s body
// when OK); counts the call.
OutMessage Finish(OutMessage response, absl::Status status, uint64_t request_id, absl::string_view method,
                  absl::Time received, const RequestContext& ctx, metrics::RpcMetrics* metrics) {
  if (!status.ok()) {
    response = OutMessage();  // drop any partial body or payloads
    if (status.code() == absl::StatusCode::kInvalidArgument) {
      spdlog::warn("{} from {}: {}", ForLog(method), ctx.peer.address, status.ToString());
    }
  }
  auto env = response.envelope();
  env.setRequestId(request_id);
  if (env.which() != wire::Envelope::RESPONSE || !status.ok()) env.initResponse();
  auto r = env.getResponse();
  r.setCode(static_cast<int>(status.code()));
  if (!status.ok()) r.setMessage(std::string(status.message()));
  if (metrics != nullptr) {
    metrics->RecordServerCall(method, static_cast<int>(status.code()),
                              absl::ToDoubleSeconds(absl::Now() - received));
  }
  return response;
}

// Runs `fn` (a handler's call): the status it returns, or the status for what it threw.
template <typename Fn>
absl::Status Guarded(Fn fn) {
  // The body was checked completely before (HandleRequest), so the handler's reads cannot
  // throw half-way through applying the request. The catch stays as the last line of
  // defence.
  try {
    return fn();
  } catch (const kj::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed request: ", e.getDescription().cStr()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("handler failed: ", e.what()));
  } catch (...) {
    return absl::InternalError("handler failed with an unknown exception");
  }
}

absl::Status Expired(const RequestContext& ctx) {
  if (absl::Now() > ctx.deadline) return absl::DeadlineExceededError("request expired before it was served");
  return absl::OkStatus();
}

// Runs `entry`'s (non-deferred) handler for one request and returns the response frame to
// send back.
OutMessage Serve(const MethodTable::Entry& entry, const RequestContext& ctx, uint64_t request_id,
                 absl::string_view method, absl::Time received, const InMessage& frame,
                 metrics::RpcMetrics* metrics) {
  OutMessage response;
  absl::Status status = Expired(ctx);
  if (status.ok()) status = Guarded([&] { return entry.handler(ctx, frame, &response); });
  return Finish(std::move(response), std::move(status), request_id, method, received, ctx, metrics);
}

}  // namespace

ServerSession::ServerSession(const SessionConfig* config, const MethodTable* methods, Executor pool,
                             std::unique_ptr<SessionTransport> transport, std::string peer_address,
                             std::string nonce)
    : config_(*config),
      methods_(*methods),
      pool_(std::move(pool)),
      transport_(std::move(transport)),
      nonce_(std::move(nonce)),
      started_(absl::Now()),
      last_activity_ns_(absl::ToUnixNanos(started_)) {
  peer_.address = std::move(peer_address);
}

void ServerSession::Start() {
  transport_->SetLimits(config_.handshake_limits);
  OutMessage challenge_message;
  auto challenge = challenge_message.envelope().initChallenge();
  challenge.setProtocolVersion(kProtocolVersion);
  challenge.setNonce(ToData(nonce_));
  transport_->Send(std::move(challenge_message));
}

void ServerSession::Touch() { last_activity_ns_.store(absl::ToUnixNanos(absl::Now())); }

void ServerSession::Reject(absl::string_view reason, const absl::Status& why) {
  if (rejected_) return;
  rejected_ = true;
  // An idle connection is housekeeping, not a misbehaving peer.
  spdlog::log(reason == "idle_timeout" ? spdlog::level::info : spdlog::level::warn,
              "{} server closing connection from {}{}: {}", config_.role, peer_.address,
              authenticated_ ? absl::StrCat(" (", peer_.role, ":", peer_.task_index, ")") : "", why.ToString());
  if (config_.metrics != nullptr) config_.metrics->RecordRejected(reason);
  transport_->Close(why);
}

void ServerSession::Close(const absl::Status& reason) {
  if (rejected_) return;
  rejected_ = true;
  transport_->Close(reason);
}

void ServerSession::OnFrame(InMessage frame) {
  if (rejected_) return;
  Touch();
  // The decode-error boundary: nothing read from the peer may throw past this point.
  try {
    OnFrameUnchecked(frame);
  } catch (const kj::Exception& e) {
    Reject("malformed", absl::InvalidArgumentError(absl::StrCat("malformed frame: ", e.getDescription().cStr())));
  } catch (const std::exception& e) {
    Reject("malformed", absl::InvalidArgumentError(absl::StrCat("malformed frame: ", e.what())));
  } catch (...) {
    Reject("malformed", absl::InvalidArgumentError("malformed frame"));
  }
}

void ServerSession::OnFrameUnchecked(InMessage& frame) {
  // After this every envelope accessor is safe; request bodies are checked per method.
  if (absl::Status s = CheckEnvelope(frame); !s.ok()) return Reject("malformed", s);
  const auto which = frame.envelope().which();
  if (!authenticated_) {
    if (which != wire::Envelope::HELLO) {
      return Reject("no_handshake", absl::InvalidArgumentError("expected a handshake"));
    }
    return HandleHello(frame);
  }
  if (which != wire::Envelope::REQUEST) {
    return Reject("bad_frame",
                  absl::InvalidArgumentError(absl::StrCat("unexpected frame type ", static_cast<int>(which))));
  }
  HandleRequest(std::move(frame));
}

void ServerSession::HandleHello(const InMessage& frame) {
  auto hello = frame.envelope().getHello();
  OutMessage ack_message;
  auto ack = ack_message.envelope().initHelloAck();
  ack.setRole(config_.role);
  ack.setTaskIndex(config_.task_index);
  ack.setIncarnation(config_.incarnation);
  const PeerClaim claim{hello.getRole().cStr(), hello.getTaskIndex(), hello.getIncarnation()};
  std::string refusal;
  absl::string_view reason;
  if (hello.getProtocolVersion() != kProtocolVersion) {
    refusal = absl::StrCat("protocol version ", hello.getProtocolVersion(), " (server speaks ",
                           kProtocolVersion, ")");
    reason = "bad_version";
  } else if (hello.getNonce().size() != kNonceBytes) {
    refusal = absl::StrCat("handshake nonce of ", hello.getNonce().size(), " bytes (need ", kNonceBytes, ")");
    reason = "bad_handshake";
  } else if (!VerifyProof(config_.token, ProofDirection::kClientHello, nonce_, claim,
                          ToView(hello.getProof()))) {
    // Either the peer does not hold the token, or it replays an answer to another nonce.
    refusal = "handshake proof does not match this connection's challenge (wrong cluster token?)";
    reason = "bad_proof";
  }
  if (!refusal.empty()) {
    ack.setOk(false);
    ack.setError(refusal);
    transport_->Send(std::move(ack_message));  // flushed by the close when it can be
    return Reject(reason, absl::PermissionDeniedError(absl::StrCat(
                              "handshake refused for ", claim.role, ":", claim.task_index, ": ", refusal)));
  }
  authenticated_ = true;
  peer_.role = std::string(claim.role);
  peer_.task_index = claim.task_index;
  peer_.incarnation = claim.incarnation;
  ack.setOk(true);
  ack.setProof(ToData(ComputeProof(config_.token, ProofDirection::kServerAck, ToView(hello.getNonce()),
                                   {config_.role, config_.task_index, config_.incarnation})));
  transport_->SetLimits(config_.limits);
  transport_->Send(std::move(ack_message));
}

void ServerSession::Answer(uint64_t request_id, absl::string_view method, const absl::Status& status) {
  OutMessage response;
  response.envelope().setRequestId(request_id);
  auto r = response.envelope().initResponse();
  r.setCode(static_cast<int>(status.code()));
  r.setMessage(std::string(status.message()));
  if (config_.metrics != nullptr) config_.metrics->RecordServerCall(method, static_cast<int>(status.code()), 0);
  transport_->Send(std::move(response));
}

bool ServerSession::RunInline(Dispatch dispatch, bool small_update) const {
  switch (dispatch) {
    case Dispatch::kPool:
      return false;
    case Dispatch::kInline:
      return true;
    case Dispatch::kInlineIfSmall:
      return small_update;
    case Dispatch::kAdaptive:
      return small_update &&
             (config_.pool_load == nullptr || config_.pool_load->load(std::memory_order_relaxed) == 0);
  }
  return false;
}

void ServerSession::HandleRequest(InMessage frame) {
  auto envelope = frame.envelope();
  const uint64_t request_id = envelope.getRequestId();
  // A view into the frame: the name is copied nowhere per request (entry->name labels what
  // outlives the frame).
  const capnp::Text::Reader method_text = envelope.getRequest().getMethod();
  const absl::string_view method(method_text.cStr(), method_text.size());
  const int64_t timeout_us = envelope.getRequest().getTimeoutMicros();
  RequestContext ctx;
  ctx.peer = peer_;
  const absl::Time received = absl::Now();
  // Clamped so a hostile timeout cannot overflow the deadline arithmetic.
  if (timeout_us > 0) ctx.deadline = received + absl::Microseconds(std::min<int64_t>(timeout_us, int64_t{1} << 50));

  const MethodTable::Entry* entry = methods_.Find(method);
  if (entry == nullptr) {
    spdlog::warn("unknown method '{}' from {}", ForLog(method), peer_.address);
    if (config_.metrics != nullptr) config_.metrics->RecordRejected("unknown_method");
    // Labelled "unknown": the method name comes from the peer and must not grow the metric.
    return Answer(request_id, "unknown",
                  absl::UnimplementedError(absl::StrCat("unknown method '", method, "'")));
  }
  if (!entry->callers.Allows(peer_.role)) {
    spdlog::warn("{} from {} ({}:{}) refused: only {} may call it", ForLog(method), peer_.address, peer_.role,
                 peer_.task_index, entry->callers.ToString());
    if (config_.metrics != nullptr) config_.metrics->RecordRejected("wrong_role");
    return Answer(request_id, method,
                  absl::PermissionDeniedError(absl::StrCat(method, " may be called by ", entry->callers.ToString(),
                                                           ", not by ", peer_.role)));
  }

  // Checked completely before the handler runs, so its reads cannot throw half-way through
  // applying the request. Then the frame's read budget is lifted: the check read all of it
  // once within the budget, so the handler's reads are bounded by how often its own code
  // reads, and must not fail on budget the parse and the checks spent (a list of
  // zero-sized structs is charged per element on every read, not per byte on the wire).
  if (absl::Status s = entry->request.Check(envelope.getRequest().getBody()); !s.ok()) {
    spdlog::warn("{} from {}: {}", ForLog(method), peer_.address, s.ToString());
    return Answer(request_id, method, s);
  }
  frame.LiftTraversalLimit();

  // A small request of a method whose work grows with what it carries (net::Dispatch).
  const bool small_update = (entry->dispatch == Dispatch::kAdaptive || entry->dispatch == Dispatch::kInlineIfSmall) &&
                            frame.payload_bytes() <= kSmallRequestPayloadBytes;
  in_flight_.fetch_add(1);
  if (entry->deferred) return StartDeferred(*entry, std::move(ctx), request_id, received, std::move(frame), small_update);
  if (RunInline(entry->dispatch, small_update)) {
    transport_->Send(Serve(*entry, ctx, request_id, method, received, frame, config_.metrics));
    in_flight_.fetch_sub(1);
    Touch();
    return;
  }
  std::atomic<int>* load = small_update ? nullptr : config_.pool_load;
  if (load != nullptr) load->fetch_add(1, std::memory_order_relaxed);
  // The pool thread sends the response itself (transports are thread-safe), so a pooled call
  // costs one hop (loop -> pool), not two.
  pool_([entry, metrics = config_.metrics, ctx = std::move(ctx), request_id, received, load, weak = weak_from_this(),
         frame = std::make_shared<InMessage>(std::move(frame))] {
    OutMessage response = Serve(*entry, ctx, request_id, *entry->name, received, *frame, metrics);
    if (load != nullptr) load->fetch_sub(1, std::memory_order_relaxed);
    if (auto self = weak.lock()) {
      self->transport_->Send(std::move(response));
      self->in_flight_.fetch_sub(1);
      self->Touch();
    }
  });
}

void ServerSession::StartDeferred(const MethodTable::Entry& entry, RequestContext ctx, uint64_t request_id,
                                  absl::Time received, InMessage frame, bool small_update) {
  // The answer, from whichever thread sends it: straight to the transport (thread-safe).
  DeferredResponse answer = DeferredResponse::Of([weak = weak_from_this(), metrics = config_.metrics, ctx, request_id,
                                                  method = entry.name, received](const absl::Status& status,
                                                                                 OutMessage response) {
    OutMessage out = Finish(std::move(response), status, request_id, *method, received, ctx, metrics);
    if (auto self = weak.lock()) {
      self->transport_->Send(std::move(out));
      self->in_flight_.fetch_sub(1);
      self->Touch();
    }
  });
  auto start = [&entry, ctx = std::move(ctx), answer](const InMessage& frame) {
    absl::Status status = Expired(ctx);
    if (status.ok()) {
      status = Guarded([&] {
        entry.deferred(ctx, frame, answer);
        return absl::OkStatus();
      });
    }
    // Answers only a handler that failed before answering (a handler's own answer wins).
    if (!status.ok()) answer.Send(status);
  };
  if (RunInline(entry.dispatch, small_update)) {
    start(frame);
    return;
  }
  std::atomic<int>* load = small_update ? nullptr : config_.pool_load;
  if (load != nullptr) load->fetch_add(1, std::memory_order_relaxed);
  pool_([start = std::move(start), load, frame = std::make_shared<InMessage>(std::move(frame))] {
    start(*frame);
    if (load != nullptr) load->fetch_sub(1, std::memory_order_relaxed);
  });
}

}  // namespace asyncps::net
