#include "net/peer_absent.h"

#include "absl/strings/cord.h"

namespace asyncps::net {
namespace {

constexpr char kPeerAbsentUrl[] = "asyncps.net/peer_absent";

}  // namespace

bool IsPeerAbsent(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kPeerAbsentUrl).has_value();
}

absl::Status MarkPeerAbsent(absl::Status status) {
  if (!status.ok()) status.SetPayload(kPeerAbsentUrl, absl::Cord("1"));
  return status;
}

}  // namespace asyncps::net
