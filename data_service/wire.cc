#include "data_service/wire.h"

#include "core/status_macros.h"

namespace asyncps::data_service {

void SetArgs(const std::map<std::string, std::string>& args, capnp::List<wire::ds::Arg>::Builder out) {
  unsigned i = 0;
  for (const auto& [key, value] : args) {
    out[i].setKey(key);
    out[i].setValue(value);
    ++i;
  }
}

std::map<std::string, std::string> GetArgs(capnp::List<wire::ds::Arg>::Reader in) {
  std::map<std::string, std::string> args;
  for (auto a : in) args[a.getKey().cStr()] = a.getValue().cStr();
  return args;
}

absl::StatusOr<ProcessingMode> ModeFromWire(uint8_t value) {
  switch (static_cast<ProcessingMode>(value)) {
    case ProcessingMode::kOff:
    case ProcessingMode::kDynamic:
    case ProcessingMode::kData:
      return static_cast<ProcessingMode>(value);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown processing mode ", value));
}

void EncodeRequest(const ElementServer::Request& r, wire::ds::GetElementRequest::Builder out) {
  out.setDatasetId(r.dataset_id);
  out.setJobId(r.job_id);
  out.setMode(static_cast<uint8_t>(r.mode));
  out.setBound(r.bound);
  out.setBegin(r.begin);
  out.setEnd(r.end);
  out.setSeed(r.seed);
  out.setPosition(r.position);
  out.setAcked(r.acked);
  out.setMaxElementBytes(r.max_element_bytes);
}

absl::StatusOr<ElementServer::Request> DecodeRequest(wire::ds::GetElementRequest::Reader in) {
  ElementServer::Request r;
  r.dataset_id = in.getDatasetId();
  r.job_id = in.getJobId();
  ASSIGN_OR_RETURN(r.mode, ModeFromWire(in.getMode()));
  r.bound = in.getBound();
  r.begin = in.getBegin();
  r.end = in.getEnd();
  r.seed = in.getSeed();
  r.position = in.getPosition();
  r.acked = in.getAcked();
  r.max_element_bytes = in.getMaxElementBytes();
  return r;
}

void EncodeResult(const ElementServer::Result& result, net::OutMessage* response) {
  auto body = response->InitResponseBody<wire::ds::GetElementResponse>();
  body.setEndOfSequence(result.end_of_sequence);
  body.setBeyondSource(result.beyond_source);
  body.setPosition(result.position);
  auto components = body.initComponents(static_cast<unsigned>(result.element.size()));
  for (unsigned i = 0; i < result.element.size(); ++i) response->AddTensor(result.element[i], components[i]);
}

absl::StatusOr<ElementServer::Result> DecodeResult(const net::InMessage& response) {
  ElementServer::Result result;
  RETURN_IF_ERROR(net::CatchDecodeErrors([&]() -> absl::Status {
    auto body = response.ResponseBody<wire::ds::GetElementResponse>();
    result.end_of_sequence = body.getEndOfSequence();
    result.beyond_source = body.getBeyondSource();
    result.position = body.getPosition();
    for (auto ref : body.getComponents()) {
      ASSIGN_OR_RETURN(Tensor t, response.TensorAt(ref));
      result.element.push_back(std::move(t));
    }
    return absl::OkStatus();
  }));
  return result;
}

}  // namespace asyncps::data_service
