#include "net/in_memory_transport.h"

#include "net/frame_codec.h"

namespace asyncps::net {

void InMemoryTransport::Send(OutMessage message) {
  std::string bytes = EncodeFrameToString(message);
  MutexLock lock(&mu_);
  if (!closed_) sent_.push_back(std::move(bytes));
}

void InMemoryTransport::Close(const absl::Status& reason) {
  MutexLock lock(&mu_);
  if (closed_) return;
  closed_ = true;
  close_reason_ = reason;
}

void InMemoryTransport::SetLimits(const FrameLimits& limits) {
  MutexLock lock(&mu_);
  limits_ = limits;
}

bool InMemoryTransport::closed() const {
  MutexLock lock(&mu_);
  return closed_;
}

absl::Status InMemoryTransport::close_reason() const {
  MutexLock lock(&mu_);
  return close_reason_;
}

std::vector<std::string> InMemoryTransport::sent() const {
  MutexLock lock(&mu_);
  return sent_;
}

FrameLimits InMemoryTransport::limits() const {
  MutexLock lock(&mu_);
  return limits_;
}

void DeliverBytes(absl::Span<const uint8_t> bytes, InMemoryTransport& transport, ServerSession& session) {
  while (!bytes.empty() && !transport.closed()) {
    size_t consumed = 0;
    absl::StatusOr<InMessage> frame = FrameDecoder::DecodeAll(bytes, transport.limits(), &consumed);
    if (!frame.ok()) {
      if (frame.status().message() != "truncated frame") transport.Close(frame.status());
      return;
    }
    bytes.remove_prefix(consumed);
    session.OnFrame(std::move(*frame));
  }
}

}  // namespace asyncps::net
