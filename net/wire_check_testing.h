#ifndef ASYNCPS_NET_WIRE_CHECK_TESTING_H_
#define ASYNCPS_NET_WIRE_CHECK_TESTING_H_

// Test support for net/wire_check.h: a reference checker that walks the schema through Cap'n
// Proto's dynamic API (slow, obviously complete), and a mutation run that compares the planned
// WireChecker with it on damaged copies of a richly filled message.

#include <capnp/any.h>
#include <capnp/schema.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace asyncps::net::testutil {

// Reads every pointer field `schema` describes (recursively; for unions only the active
// member; AnyPointer and interfaces skipped) through the dynamic API. OK, or InvalidArgument.
absl::Status ReferenceCheck(capnp::AnyPointer::Reader pointer, capnp::StructSchema schema);

struct MutationReport {
  int messages = 0;  // damaged messages checked
  int accepted = 0;  // of which both checkers accepted
  int rejected = 0;  // of which both refused
  // The first damaged message the two disagreed on, described; empty when they never did.
  std::string first_disagreement;
};

// Builds a message with `schema` at its root, every field set (lists of up to 3 elements, a
// random union member, nesting up to a few levels), then `messages` times damages a copy of
// it (1-3 words: bit flips, a pointer's kind bits, random or zero words) and checks both
// copies with WireChecker and ReferenceCheck, each on its own reader (they must not share a
// traversal budget). Deterministic for a given seed.
MutationReport CompareOnDamagedMessages(capnp::StructSchema schema, int messages, uint64_t seed);

}  // namespace asyncps::net::testutil

#endif  // ASYNCPS_NET_WIRE_CHECK_TESTING_H_
