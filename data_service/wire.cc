#include "data_service/wire.h"

#include <zlib.h>

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
    case ProcessingMode::kFile:
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
  out.setCompression(static_cast<uint8_t>(r.compression));
  out.setNumConsumers(r.num_consumers);
  out.setConsumerIndex(r.consumer_index);
  out.setRound(r.round);
  out.setGeneration(r.generation);
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
  const uint8_t compression = in.getCompression();
  if (compression > static_cast<uint8_t>(Compression::kZlib)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown compression ", compression));
  }
  r.compression = static_cast<Compression>(compression);
  r.num_consumers = in.getNumConsumers();
  r.consumer_index = in.getConsumerIndex();
  r.round = in.getRound();
  r.generation = in.getGeneration();
  return r;
}

void EncodeResult(const ElementServer::Result& result, Compression compression, net::OutMessage* response) {
  auto body = response->InitResponseBody<wire::ds::GetElementResponse>();
  body.setEndOfSequence(result.end_of_sequence);
  body.setBeyondSource(result.beyond_source);
  body.setPosition(result.position);
  const unsigned n = static_cast<unsigned>(result.element.size());
  if (compression == Compression::kNone) {
    auto components = body.initComponents(n);
    for (unsigned i = 0; i < n; ++i) response->AddTensor(result.element[i], components[i]);
    return;
  }
  auto compressed = body.initCompressed(n);
  for (unsigned i = 0; i < n; ++i) {
    const Tensor& t = result.element[i];
    compressed[i].setDtype(static_cast<uint8_t>(t.dtype()));
    net::SetShape(compressed[i].initShape(static_cast<unsigned>(t.shape().size())), t.shape());
    uLongf size = compressBound(static_cast<uLong>(t.num_bytes()));
    Tensor buffer(DType::kU8, {static_cast<int64_t>(size)});
    // Level 1: most of the bytes saved for a fraction of the time of the default level.
    if (compress2(buffer.data<uint8_t>(), &size, static_cast<const Bytef*>(t.raw_data()),
                  static_cast<uLong>(t.num_bytes()), 1) != Z_OK) {
      size = 0;  // cannot happen with compressBound's room; the consumer then refuses the tensor
    }
    response->AddTensor(*buffer.Slice(0, static_cast<int64_t>(size)), compressed[i].initData());
  }
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
    for (auto c : body.getCompressed()) {
      ASSIGN_OR_RETURN(DType dtype, DTypeFromWire(c.getDtype()));
      Shape shape = net::GetShape(c.getShape());
      // Checked before allocating: the frame limit bounds what a data worker may send.
      RETURN_IF_ERROR(ValidateShape(shape, dtype, net::FrameLimits().max_payload_bytes));
      ASSIGN_OR_RETURN(Tensor data, response.TensorAt(c.getData()));
      if (data.dtype() != DType::kU8) return absl::InvalidArgumentError("compressed bytes must be u8");
      Tensor t(dtype, std::move(shape));
      uLongf size = static_cast<uLongf>(t.num_bytes());
      if (uncompress(static_cast<Bytef*>(t.raw_data()), &size, data.data<uint8_t>(),
                     static_cast<uLong>(data.num_bytes())) != Z_OK ||
          size != t.num_bytes()) {
        return absl::InvalidArgumentError(absl::StrCat("a compressed ", DTypeName(dtype), ShapeString(t.shape()),
                                                       " does not inflate to its ", t.num_bytes(), " bytes"));
      }
      result.element.push_back(std::move(t));
    }
    return absl::OkStatus();
  }));
  return result;
}

}  // namespace asyncps::data_service
