#include "net/raw_client_testing.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "net/frame_codec.h"
#include "net/handshake.h"
#include "net/peer.h"
#include "net/wire_check.h"

namespace asyncps::net::testutil {

std::string HelloFrame(const std::string& token, const std::string& nonce, const std::string& role,
                       int task_index, uint64_t incarnation) {
  OutMessage m;
  auto hello = m.envelope().initHello();
  hello.setProtocolVersion(kProtocolVersion);
  hello.setRole(role);
  hello.setTaskIndex(task_index);
  hello.setIncarnation(incarnation);
  const std::string proof =
      ComputeProof(token, ProofDirection::kClientHello, nonce, {role, task_index, incarnation});
  hello.setProof(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(proof.data()), proof.size()));
  const std::string own_nonce(kNonceBytes, 'n');
  hello.setNonce(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(own_nonce.data()), own_nonce.size()));
  return EncodeFrameToString(m);
}

std::string RequestFrame(OutMessage message, uint64_t id, const std::string& method) {
  auto envelope = message.envelope();
  envelope.setRequestId(id);
  auto r = envelope.which() == wire::Envelope::REQUEST ? envelope.getRequest() : envelope.initRequest();
  r.setMethod(method);
  return EncodeFrameToString(message);
}

RawClient::RawClient(int port) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  connected_ = fd_ >= 0 && connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  int one = 1;
  if (connected_) setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

RawClient::~RawClient() {
  if (fd_ >= 0) close(fd_);
}

bool RawClient::Write(const std::string& bytes) {
  const char* data = bytes.data();
  size_t size = bytes.size();
  while (size > 0) {
    const ssize_t n = send(fd_, data, size, MSG_NOSIGNAL);
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool RawClient::WriteInPieces(const std::string& bytes, const std::vector<size_t>& pieces) {
  size_t offset = 0;
  for (size_t i = 0; offset < bytes.size(); ++i) {
    const size_t n = std::min(pieces[i % pieces.size()], bytes.size() - offset);
    if (!Write(bytes.substr(offset, n))) return false;
    offset += n;
  }
  return true;
}

absl::StatusOr<InMessage> RawClient::ReadFrame(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    size_t consumed = 0;
    absl::StatusOr<InMessage> frame = FrameDecoder::DecodeAll(
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(pending_.data()), pending_.size()), FrameLimits(),
        &consumed);
    if (frame.ok()) {
      pending_.erase(0, consumed);
      if (absl::Status s = CheckEnvelope(*frame); !s.ok()) return s;
      return frame;
    }
    if (frame.status().message() != "truncated frame") return frame.status();
    const absl::Duration left = deadline - absl::Now();
    pollfd p{fd_, POLLIN, 0};
    if (left <= absl::ZeroDuration() || poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1) != 1) {
      return absl::DeadlineExceededError("no frame from the server");
    }
    char buf[65536];
    const ssize_t n = read(fd_, buf, sizeof(buf));
    if (n <= 0) return absl::UnavailableError("server closed the connection");
    pending_.append(buf, static_cast<size_t>(n));
  }
}

absl::StatusOr<std::string> RawClient::ReadChallenge(absl::Duration timeout) {
  absl::StatusOr<InMessage> frame = ReadFrame(timeout);
  if (!frame.ok()) return frame.status();
  if (frame->envelope().which() != wire::Envelope::CHALLENGE) {
    return absl::InternalError("first frame is not a challenge");
  }
  auto nonce = frame->envelope().getChallenge().getNonce();
  return std::string(reinterpret_cast<const char*>(nonce.begin()), nonce.size());
}

absl::StatusOr<InMessage> RawClient::Handshake(const std::string& token, const std::string& role, int task_index) {
  absl::StatusOr<std::string> nonce = ReadChallenge();
  if (!nonce.ok()) return nonce.status();
  if (!Write(HelloFrame(token, *nonce, role, task_index))) return absl::UnavailableError("write failed");
  return ReadFrame();
}

bool RawClient::WaitClosed(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1) != 1) return false;
    char buf[65536];
    const ssize_t n = read(fd_, buf, sizeof(buf));
    if (n <= 0) return true;  // EOF or reset
  }
}

}  // namespace asyncps::net::testutil
