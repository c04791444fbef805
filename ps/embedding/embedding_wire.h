#ifndef ASYNCPS_PS_EMBEDDING_EMBEDDING_WIRE_H_
#define ASYNCPS_PS_EMBEDDING_EMBEDDING_WIRE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/tensor.h"
#include "net/message.h"
#include "ps/embedding/embedding.capnp.h"
#include "ps/embedding/embedding_config.h"
#include "ps/update_tag.h"

namespace asyncps::ps {

// The embedding methods of a parameter server (ps/embedding/embedding_service.h) and the C++
// helpers that build their requests (clients: the coordinator creates tables, workers look up
// and push) and read their answers. Builders never fail; readers validate what they read.
//
// A client sends each key to the PS PsForKey(key, num_ps) names (ps/embedding/key_partition.h),
// creates a table by sending the same request to every PS, and deduplicates keys per request
// (keys of one lookup or push must be distinct).

inline constexpr char kCreateEmbeddingTableMethod[] = "ps.CreateEmbeddingTable";
inline constexpr char kEmbeddingLookupMethod[] = "ps.EmbeddingLookup";
inline constexpr char kEmbeddingPushMethod[] = "ps.EmbeddingPush";
inline constexpr char kEmbeddingStatsMethod[] = "ps.EmbeddingStats";

void EmbeddingTableConfigToWire(const EmbeddingTableConfig& config,
                                wire::CreateEmbeddingTableRequest::Builder out);
// Reads the config; does not validate it beyond the names (ValidateEmbeddingTableConfig does).
// InvalidArgument for an unknown initializer kind, optimizer type or dtype.
absl::StatusOr<EmbeddingTableConfig> EmbeddingTableConfigFromWire(wire::CreateEmbeddingTableRequest::Reader in);

// A whole ps.CreateEmbeddingTable request in `message`.
void BuildCreateEmbeddingTableRequest(const EmbeddingTableConfig& config, net::OutMessage& message);

// Keys of one table for one PS: i64 [n], distinct.
struct EmbeddingKeys {
  std::string table;
  Tensor keys;
};

// A whole ps.EmbeddingLookup request: one lookup per entry of `lookups`. `train`: the keys count
// towards admission (training steps); false for evaluation. The tensors are sent from their own
// memory (they stay alive with `message`).
void BuildEmbeddingLookupRequest(absl::Span<const EmbeddingKeys> lookups, bool train, net::OutMessage& message);

// The values of an EmbeddingLookup answer, one f32 [n_i, dim] tensor per lookup, viewing the
// frame in place. InvalidArgument when the answer does not hold `num_lookups` f32 rank-2 tensors.
absl::StatusOr<std::vector<Tensor>> ReadEmbeddingLookupResponse(const net::InMessage& response, size_t num_lookups);

// Gradients of one table for one PS: keys i64 [n] distinct, gradients f32 [n, dim].
struct EmbeddingGradients {
  std::string table;
  Tensor keys;
  Tensor gradients;
};

// A whole ps.EmbeddingPush request; `tag` as for ps.PushGradients (set only when tagged).
void BuildEmbeddingPushRequest(absl::Span<const EmbeddingGradients> pushes, const UpdateTag& tag,
                               net::OutMessage& message);

// A ps.EmbeddingStats request for `tables` (empty: every table of the PS).
void BuildEmbeddingStatsRequest(absl::Span<const std::string> tables, net::OutMessage& message);

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_EMBEDDING_EMBEDDING_WIRE_H_
