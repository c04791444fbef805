#include "ps/replication/logged_write.h"

#include <capnp/message.h>
#include <capnp/serialize.h>

#include "absl/strings/str_cat.h"
#include "core/bf16.h"
#include "core/compression.h"

namespace asyncps::ps {
namespace {

// Visits every tensor reference of a write's body, always in the same order (so the tensors
// collected by Make line up with the references AppendTo rewrites).
template <typename Body, typename Fn>
absl::Status ForEachTensorRef(const std::string& method, Body body, Fn fn) {
  if (method == "ps.Update") {
    for (auto u : body.template getAs<wire::UpdateRequest>().getUpdates()) {
      fn(u.getValue());
      if (u.getHasIds()) fn(u.getIds());
    }
  } else if (method == "ps.PushGradients") {
    for (auto g : body.template getAs<wire::PushGradientsRequest>().getGradients()) {
      fn(g.getValue());
      if (g.getHasIds()) fn(g.getIds());
    }
  } else if (method == "ps.CreateVariable") {
    auto init = body.template getAs<wire::CreateVariableRequest>().getInitializer();
    if (init.hasTensor() && std::string(init.getKind().cStr()) == "tensor") fn(init.getTensor());
  } else if (method != "ps.RestoreCheckpoint") {
    return absl::InvalidArgumentError(absl::StrCat("'", method, "' is not a replicated write"));
  }
  return absl::OkStatus();
}

}  // namespace

bool IsReplicatedWrite(const std::string& method) {
  return method == "ps.Update" || method == "ps.PushGradients" || method == "ps.CreateVariable" ||
         method == "ps.RestoreCheckpoint";
}

bool ForwardsBeforeApply(const std::string& method) {
  return method == "ps.PushGradients" || method == "ps.Update";
}

absl::StatusOr<std::shared_ptr<const LoggedWrite>> LoggedWrite::Make(const std::string& method,
                                                                     const net::InMessage& frame,
                                                                     capnp::AnyPointer::Reader body,
                                                                     const CopyExtension* extension) {
  std::shared_ptr<LoggedWrite> write(new LoggedWrite());
  write->method_ = method;
  absl::Status bad;
  auto collect = [&](wire::TensorRef::Reader ref) {
    if (!bad.ok()) return;
    if (net::InMessage::IsEncoded(ref)) {
      // A bf16 or compressed gradient (core/compression.h) is forwarded as it came: each copy
      // decodes the same bytes alike. AppendTo sees the encoded reference in the copied body.
      absl::StatusOr<Tensor> bytes = frame.EncodedBytesAt(ref);
      if (!bytes.ok()) {
        bad = bytes.status();
        return;
      }
      write->bytes_ += bytes->num_bytes();
      write->tensors_.push_back(*std::move(bytes));
      return;
    }
    absl::StatusOr<Tensor> t = frame.TensorAt(ref);
    if (!t.ok()) {
      bad = t.status();
      return;
    }
    write->bytes_ += t->num_bytes();
    write->tensors_.push_back(*std::move(t));
  };
  absl::Status walked;
  if (extension != nullptr && extension->IsWrite(method)) {
    write->extension_ = extension;
    walked = extension->ForEachTensorRef(method, body, collect);
  } else {
    walked = ForEachTensorRef(method, body, collect);
  }
  if (!walked.ok()) return walked;
  if (!bad.ok()) return bad;
  capnp::MallocMessageBuilder copy;
  copy.getRoot<capnp::AnyPointer>().set(body);
  write->body_ = capnp::messageToFlatArray(copy);
  write->bytes_ += write->body_.size() * sizeof(capnp::word);
  return std::shared_ptr<const LoggedWrite>(std::move(write));
}

void LoggedWrite::AppendTo(wire::ReplicatedEntry::Builder entry, net::OutMessage& message) const {
  entry.setMethod(method_);
  capnp::FlatArrayMessageReader reader(body_.asPtr());
  entry.getBody().set(reader.getRoot<capnp::AnyPointer>());
  size_t next = 0;
  // The body was walked once in Make: the same method and body visit the same references.
  auto add = [&](wire::TensorRef::Builder ref) {
    if (ref.getDtype() == kBf16WireCode || ref.getDtype() == kInt8BlockWireCode || ref.getDtype() == kTopKWireCode) {
      message.AddEncoded(ref.getDtype(), tensors_[next++], net::GetShape(ref.getShape().asReader()), ref);
    } else {
      message.AddTensor(tensors_[next++], ref);
    }
  };
  if (extension_ != nullptr) {
    extension_->ForEachTensorRef(method_, entry.getBody(), add);
  } else {
    (void)ForEachTensorRef(method_, entry.getBody(), add);
  }
}

}  // namespace asyncps::ps
