#include "net/handshake.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace asyncps::net {
namespace {

TEST(HandshakeTest, NoncesAreFreshAndFullLength) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    std::string nonce = MakeNonce();
    EXPECT_EQ(nonce.size(), kNonceBytes);
    EXPECT_TRUE(seen.insert(nonce).second);
  }
}

TEST(HandshakeTest, ProofVerifiesOnlyForItsTokenNonceDirectionAndClaim) {
  const std::string nonce = MakeNonce();
  const PeerClaim claim{"worker", 3, 42};
  const std::string proof = ComputeProof("tok", ProofDirection::kClientHello, nonce, claim);
  EXPECT_EQ(proof.size(), 32u);  // SHA-256
  EXPECT_EQ(proof.find("tok"), std::string::npos);
  EXPECT_TRUE(VerifyProof("tok", ProofDirection::kClientHello, nonce, claim, proof));
  EXPECT_FALSE(VerifyProof("tok2", ProofDirection::kClientHello, nonce, claim, proof));
  EXPECT_FALSE(VerifyProof("tok", ProofDirection::kServerAck, nonce, claim, proof));  // reflected
  EXPECT_FALSE(VerifyProof("tok", ProofDirection::kClientHello, MakeNonce(), claim, proof));  // replayed
  EXPECT_FALSE(VerifyProof("tok", ProofDirection::kClientHello, nonce, {"chief", 3, 42}, proof));
  EXPECT_FALSE(VerifyProof("tok", ProofDirection::kClientHello, nonce, {"worker", 4, 42}, proof));
  EXPECT_FALSE(VerifyProof("tok", ProofDirection::kClientHello, nonce, {"worker", 3, 43}, proof));
  EXPECT_FALSE(VerifyProof("tok", ProofDirection::kClientHello, nonce, claim, proof.substr(0, 31)));
  EXPECT_FALSE(VerifyProof("tok", ProofDirection::kClientHello, nonce, claim, ""));
}

TEST(HandshakeTest, FieldBoundariesCannotBeShifted) {
  // "ab" + "c" and "a" + "bc" must not give one proof: fields are length-prefixed.
  const std::string nonce(kNonceBytes, 'x');
  EXPECT_NE(ComputeProof("t", ProofDirection::kClientHello, nonce + "a", {"bc", 0, 0}),
            ComputeProof("t", ProofDirection::kClientHello, nonce + "ab", {"c", 0, 0}));
}

TEST(HandshakeTest, EmptyTokenStillGivesAProof) {
  const std::string nonce = MakeNonce();
  const std::string proof = ComputeProof("", ProofDirection::kClientHello, nonce, {"chief", 0, 1});
  EXPECT_TRUE(VerifyProof("", ProofDirection::kClientHello, nonce, {"chief", 0, 1}, proof));
  EXPECT_FALSE(VerifyProof("x", ProofDirection::kClientHello, nonce, {"chief", 0, 1}, proof));
}

}  // namespace
}  // namespace asyncps::net
