#ifndef ASYNCPS_DATA_SERVICE_WIRE_H_
#define ASYNCPS_DATA_SERVICE_WIRE_H_

// Conversions between the service's messages (data_service.capnp) and its C++ types. Decoders
// run on received data: they check it and return InvalidArgument instead of throwing.

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "data_service/data_service.capnp.h"
#include "data_service/element_server.h"
#include "net/message.h"

namespace asyncps::data_service {

void SetArgs(const std::map<std::string, std::string>& args, capnp::List<wire::ds::Arg>::Builder out);
std::map<std::string, std::string> GetArgs(capnp::List<wire::ds::Arg>::Reader in);

// InvalidArgument for a value that names no mode.
absl::StatusOr<ProcessingMode> ModeFromWire(uint8_t value);

void EncodeRequest(const ElementServer::Request& request, wire::ds::GetElementRequest::Builder out);
absl::StatusOr<ElementServer::Request> DecodeRequest(wire::ds::GetElementRequest::Reader in);

// The element's tensors travel as payloads, not copied into the message; with
// Compression::kZlib, deflated into the message instead.
void EncodeResult(const ElementServer::Result& result, Compression compression, net::OutMessage* response);
// Inflates compressed tensors; InvalidArgument for a bad dtype or shape, or bytes that do not
// inflate to exactly the tensor's size.
absl::StatusOr<ElementServer::Result> DecodeResult(const net::InMessage& response);

}  // namespace asyncps::data_service

#endif  // ASYNCPS_DATA_SERVICE_WIRE_H_
