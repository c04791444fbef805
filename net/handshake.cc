#include "net/handshake.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace asyncps::net {

std::string MakeNonce() {
  std::string nonce(kNonceBytes, '\0');
  // RAND_bytes fails only when the OS entropy source is unusable; a predictable nonce would
  // make every proof replayable, so stop rather than go on without one.
  if (RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), static_cast<int>(nonce.size())) != 1) {
    std::abort();
  }
  return nonce;
}

std::string ComputeProof(absl::string_view token, ProofDirection direction, absl::string_view nonce,
                         const PeerClaim& claim) {
  // Length-prefixed fields, so no two different (nonce, claim) pairs give the same input.
  const std::string message = absl::StrCat(
      direction == ProofDirection::kClientHello ? "asyncps/2 client hello" : "asyncps/2 server ack",
      "|", nonce.size(), ":", nonce, "|", claim.role.size(), ":", claim.role, "|", claim.task_index, "|",
      claim.incarnation);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int out_len = 0;
  // An empty key is legal for HMAC (and allowed on loopback-only clusters); OpenSSL wants a
  // non-null pointer for it.
  static const unsigned char kEmpty = 0;
  const void* key = token.empty() ? static_cast<const void*>(&kEmpty) : token.data();
  if (HMAC(EVP_sha256(), key, static_cast<int>(token.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), out, &out_len) == nullptr) {
    std::abort();  // only on allocation failure inside OpenSSL
  }
  return std::string(reinterpret_cast<const char*>(out), out_len);
}

bool VerifyProof(absl::string_view token, ProofDirection direction, absl::string_view nonce,
                 const PeerClaim& claim, absl::string_view proof) {
  const std::string expected = ComputeProof(token, direction, nonce, claim);
  return proof.size() == expected.size() && CRYPTO_memcmp(proof.data(), expected.data(), expected.size()) == 0;
}

}  // namespace asyncps::net
