#include "net/wire_check.h"

#include <capnp/dynamic.h>
#include <kj/exception.h>

#include <exception>

#include "absl/strings/str_cat.h"

namespace asyncps::net {
namespace {

void CheckDynamicStruct(capnp::DynamicStruct::Reader s);

void CheckValue(const capnp::DynamicValue::Reader& value) {
  switch (value.getType()) {
    case capnp::DynamicValue::STRUCT:
      CheckDynamicStruct(value.as<capnp::DynamicStruct>());
      break;
    case capnp::DynamicValue::LIST:
      for (auto element : value.as<capnp::DynamicList>()) CheckValue(element);
      break;
    default:
      // Text and Data were checked when the value was read; scalars cannot be malformed;
      // AnyPointer belongs to whoever knows its type.
      break;
  }
}

void CheckField(capnp::DynamicStruct::Reader s, capnp::StructSchema::Field field) {
  const auto type = field.getType();
  if (type.isAnyPointer() || type.isInterface()) return;
  // get() follows the pointer and validates its kind (and, for text, the NUL terminator).
  CheckValue(s.get(field));
}

void CheckDynamicStruct(capnp::DynamicStruct::Reader s) {
  for (auto field : s.getSchema().getNonUnionFields()) CheckField(s, field);
  KJ_IF_MAYBE(active, s.which()) { CheckField(s, *active); }
}

}  // namespace

absl::Status CheckStruct(capnp::AnyPointer::Reader pointer, capnp::StructSchema schema) {
  try {
    CheckDynamicStruct(pointer.getAs<capnp::DynamicStruct>(schema));
    return absl::OkStatus();
  } catch (const kj::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed ", schema.getUnqualifiedName().cStr(), ": ", e.getDescription().cStr()));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed ", schema.getUnqualifiedName().cStr(), ": ", e.what()));
  }
}

absl::Status CheckEnvelope(const InMessage& message) {
  if (!message.has_reader()) return absl::InvalidArgumentError("empty message");
  return CheckStruct(message.root(), capnp::Schema::from<wire::Envelope>());
}

}  // namespace asyncps::net
