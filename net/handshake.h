#ifndef ASYNCPS_NET_HANDSHAKE_H_
#define ASYNCPS_NET_HANDSHAKE_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace asyncps::net {

// The proofs of the token-free handshake (see envelope.capnp). Each is
// HMAC-SHA256(token, label || nonce || identity) where the label names the direction
// ("client hello" or "server ack") and the identity is the role, task index and incarnation
// the sender claims. So a proof answers exactly one nonce, in one direction, for one claimed
// identity: replaying it on another connection, reflecting it back, or reusing it under
// another role fails. The token itself never leaves the process.
//
// Thread-safe (pure functions over OpenSSL's libcrypto).

// Bytes of every nonce.
inline constexpr size_t kNonceBytes = 32;

// A fresh nonce from the operating system's CSPRNG (OpenSSL RAND_bytes).
std::string MakeNonce();

struct PeerClaim {
  absl::string_view role;
  int32_t task_index = 0;
  uint64_t incarnation = 0;
};

enum class ProofDirection { kClientHello, kServerAck };

// The 32-byte proof for `claim` answering `nonce`.
std::string ComputeProof(absl::string_view token, ProofDirection direction, absl::string_view nonce,
                         const PeerClaim& claim);

// True when `proof` is ComputeProof(token, direction, nonce, claim). Compares in constant
// time (CRYPTO_memcmp).
bool VerifyProof(absl::string_view token, ProofDirection direction, absl::string_view nonce,
                 const PeerClaim& claim, absl::string_view proof);

}  // namespace asyncps::net

#endif  // ASYNCPS_NET_HANDSHAKE_H_
