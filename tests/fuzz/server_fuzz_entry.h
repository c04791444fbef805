#ifndef ASYNCPS_TESTS_FUZZ_SERVER_FUZZ_ENTRY_H_
#define ASYNCPS_TESTS_FUZZ_SERVER_FUZZ_ENTRY_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace asyncps::fuzz {

// The token, server nonce and client nonce of every fuzzed session, so that seeds can carry a
// valid handshake and mutations of what follows it reach request dispatch.
inline constexpr char kFuzzToken[] = "fuzz-token";
std::string FuzzServerNonce();

// What one fuzzed connection came to (for tests of the harness and its seeds).
struct SessionOutcome {
  bool authenticated = false;
  bool closed = false;
  std::vector<int> response_codes;  // absl::StatusCode of each response, in order
};

// Feeds `data` as the byte stream of one connection into the server's real protocol code:
// frame decoding (Connection's FrameDecoder and limits), the handshake (ServerSession), and
// request dispatch into the real PS service and worker service handlers and the chief's
// membership handlers (one MethodTable with all, fresh for every input). Handlers run inline. Returns 0; a bug shows up as a
// crash, a sanitizer report, or an exception escaping (which aborts).
int FuzzServerInput(const uint8_t* data, size_t size);
SessionOutcome RunServerSession(const uint8_t* data, size_t size);

}  // namespace asyncps::fuzz

#endif  // ASYNCPS_TESTS_FUZZ_SERVER_FUZZ_ENTRY_H_
