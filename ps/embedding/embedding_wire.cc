#include "ps/embedding/embedding_wire.h"

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ps/ps_wire.h"

namespace asyncps::ps {

void EmbeddingTableConfigToWire(const EmbeddingTableConfig& c, wire::CreateEmbeddingTableRequest::Builder out) {
  out.setName(c.name);
  out.setDim(c.dim);
  out.setDtype(static_cast<uint8_t>(c.dtype));
  auto init = out.initInitializer();
  init.setKind(EmbeddingInitializerKindName(c.initializer.kind));
  init.setValue(c.initializer.value);
  init.setMinval(c.initializer.minval);
  init.setMaxval(c.initializer.maxval);
  init.setMean(c.initializer.mean);
  init.setStddev(c.initializer.stddev);
  init.setSeed(c.initializer.seed);
  OptimizerToWire(&c.optimizer, out.initOptimizer());
  auto admission = out.initAdmission();
  admission.setMinCount(c.admission.min_count);
  admission.setProbability(c.admission.probability);
  admission.setSketchWidth(c.admission.sketch_width);
  out.setTtlSteps(c.ttl_steps);
  out.setMemoryCapBytes(c.memory_cap_bytes);
}

absl::StatusOr<EmbeddingTableConfig> EmbeddingTableConfigFromWire(wire::CreateEmbeddingTableRequest::Reader in) {
  EmbeddingTableConfig c;
  c.name = in.getName().cStr();
  c.dim = in.getDim();
  auto dtype = DTypeFromWire(in.getDtype());
  if (!dtype.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("embedding table '", c.name, "': ", dtype.status().message()));
  }
  c.dtype = *dtype;
  auto init = in.getInitializer();
  RETURN_IF_ERROR(ParseEmbeddingInitializerKind(init.getKind().cStr(), &c.initializer.kind));
  c.initializer.value = init.getValue();
  c.initializer.minval = init.getMinval();
  c.initializer.maxval = init.getMaxval();
  c.initializer.mean = init.getMean();
  c.initializer.stddev = init.getStddev();
  c.initializer.seed = init.getSeed();
  ASSIGN_OR_RETURN(std::unique_ptr<OptimizerConfig> optimizer, OptimizerFromWire(in.getOptimizer()));
  if (optimizer != nullptr) c.optimizer = *optimizer;
  auto admission = in.getAdmission();
  c.admission.min_count = admission.getMinCount();
  c.admission.probability = admission.getProbability();
  c.admission.sketch_width = admission.getSketchWidth();
  c.ttl_steps = in.getTtlSteps();
  c.memory_cap_bytes = in.getMemoryCapBytes();
  return c;
}

void BuildCreateEmbeddingTableRequest(const EmbeddingTableConfig& config, net::OutMessage& message) {
  EmbeddingTableConfigToWire(config, message.InitRequestBody<wire::CreateEmbeddingTableRequest>());
}

void BuildEmbeddingLookupRequest(absl::Span<const EmbeddingKeys> lookups, bool train, net::OutMessage& message) {
  auto req = message.InitRequestBody<wire::EmbeddingLookupRequest>();
  req.setTrain(train);
  auto list = req.initLookups(static_cast<unsigned>(lookups.size()));
  for (unsigned i = 0; i < lookups.size(); ++i) {
    list[i].setTable(lookups[i].table);
    message.AddTensor(lookups[i].keys, list[i].initKeys());
  }
}

absl::StatusOr<std::vector<Tensor>> ReadEmbeddingLookupResponse(const net::InMessage& response, size_t num_lookups) {
  std::vector<Tensor> out;
  RETURN_IF_ERROR(net::CatchDecodeErrors([&]() -> absl::Status {
    auto values = response.ResponseBody<wire::EmbeddingLookupResponse>().getValues();
    if (values.size() != num_lookups) {
      return absl::InvalidArgumentError(
          absl::StrCat("ps.EmbeddingLookup answered ", values.size(), " tensors for ", num_lookups, " lookups"));
    }
    for (auto ref : values) {
      ASSIGN_OR_RETURN(Tensor t, response.TensorAt(ref));
      if (t.dtype() != DType::kF32 || t.rank() != 2) {
        return absl::InvalidArgumentError(absl::StrCat("ps.EmbeddingLookup answered a ", DTypeName(t.dtype()),
                                                       " tensor of rank ", t.rank(), "; want f32 [n, dim]"));
      }
      out.push_back(std::move(t));
    }
    return absl::OkStatus();
  }));
  return out;
}

void BuildEmbeddingPushRequest(absl::Span<const EmbeddingGradients> pushes, const UpdateTag& tag,
                               net::OutMessage& message) {
  auto req = message.InitRequestBody<wire::EmbeddingPushRequest>();
  if (tag.tagged()) UpdateTagToWire(tag, req.initTag());
  auto list = req.initPushes(static_cast<unsigned>(pushes.size()));
  for (unsigned i = 0; i < pushes.size(); ++i) {
    list[i].setTable(pushes[i].table);
    message.AddTensor(pushes[i].keys, list[i].initKeys());
    message.AddTensor(pushes[i].gradients, list[i].initGradients());
  }
}

void BuildEmbeddingStatsRequest(absl::Span<const std::string> tables, net::OutMessage& message) {
  auto list = message.InitRequestBody<wire::EmbeddingStatsRequest>().initTables(static_cast<unsigned>(tables.size()));
  for (unsigned i = 0; i < tables.size(); ++i) list.set(i, tables[i]);
}

}  // namespace asyncps::ps
