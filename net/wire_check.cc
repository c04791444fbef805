#include "net/wire_check.h"

#include <capnp/schema.capnp.h>
#include <capnp/layout.h>
#include <kj/exception.h>

#include <deque>
#include <exception>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace asyncps::net {

// The plan is built once from the schema, so checking a message walks plain tables and reads
// the message through the same internal readers the generated accessors use — with the same
// checks, so what passes here cannot throw there. (Walking the schema through capnp's dynamic
// API per message cost ~2 µs per small request: more than the rest of the server's work.)
struct WireChecker::Plan {
  struct Struct;

  // How one pointer is read, as the generated accessor of its type reads it.
  struct Value {
    enum class Kind : uint8_t { kText, kData, kStruct, kList, kPointerList, kStructList };
    Kind kind = Kind::kStruct;
    capnp::ElementSize element_size = capnp::ElementSize::VOID;  // kList
    const Struct* structure = nullptr;  // kStruct, kStructList (elements)
    const Value* element = nullptr;     // kPointerList: how each element is read
  };

  struct Field {
    // Read only while the struct's union discriminant equals `discriminant` (unions carry
    // only their active member).
    bool in_union = false;
    uint16_t discriminant = 0;
    const Struct* group = nullptr;  // a group: its fields live in the same struct
    uint32_t pointer_index = 0;     // otherwise: the pointer this field reads
    const Value* value = nullptr;
  };

  struct Struct {
    uint32_t discriminant_offset = 0;  // in 16-bit units of the data section
    std::vector<Field> fields;         // only fields that can fail to read
  };

  const Struct* root = nullptr;
  std::string name;
  std::deque<Struct> structs;  // deques: pointers into them stay valid as they grow
  std::deque<Value> values;
  // Recursive schemas refer back. Keyed by schema identity, which includes a generic
  // struct's brand (its type parameters), not by node id alone.
  std::vector<std::pair<capnp::StructSchema, const Struct*>> built;

  const Struct* Build(capnp::StructSchema schema);
  // nullptr for types whose reads cannot fail (scalars, AnyPointer, interfaces).
  const Value* BuildValue(capnp::Type type);
  bool NeedsCheck(const Struct* s) const { return s == nullptr || !s->fields.empty(); }
};

namespace {

using capnp::ElementSize;

// The element size the generated List(T) accessor asks for; POINTER for pointer elements.
ElementSize ListElementSize(capnp::Type element) {
  switch (element.which()) {
    case capnp::schema::Type::VOID:
      return ElementSize::VOID;
    case capnp::schema::Type::BOOL:
      return ElementSize::BIT;
    case capnp::schema::Type::INT8:
    case capnp::schema::Type::UINT8:
      return ElementSize::BYTE;
    case capnp::schema::Type::INT16:
    case capnp::schema::Type::UINT16:
    case capnp::schema::Type::ENUM:
      return ElementSize::TWO_BYTES;
    case capnp::schema::Type::INT32:
    case capnp::schema::Type::UINT32:
    case capnp::schema::Type::FLOAT32:
      return ElementSize::FOUR_BYTES;
    case capnp::schema::Type::INT64:
    case capnp::schema::Type::UINT64:
    case capnp::schema::Type::FLOAT64:
      return ElementSize::EIGHT_BYTES;
    case capnp::schema::Type::STRUCT:
      return ElementSize::INLINE_COMPOSITE;
    default:
      return ElementSize::POINTER;
  }
}

}  // namespace

const WireChecker::Plan::Value* WireChecker::Plan::BuildValue(capnp::Type type) {
  Value v;
  switch (type.which()) {
    case capnp::schema::Type::TEXT:
      v.kind = Value::Kind::kText;
      break;
    case capnp::schema::Type::DATA:
      v.kind = Value::Kind::kData;
      break;
    case capnp::schema::Type::STRUCT:
      v.kind = Value::Kind::kStruct;
      v.structure = Build(type.asStruct());
      break;
    case capnp::schema::Type::LIST: {
      const capnp::Type element = type.asList().getElementType();
      v.element_size = ListElementSize(element);
      if (element.isStruct()) {
        v.kind = Value::Kind::kStructList;
        v.structure = Build(element.asStruct());
      } else if (v.element_size == ElementSize::POINTER) {
        v.kind = Value::Kind::kPointerList;
        v.element = BuildValue(element);  // nullptr: elements of AnyPointer/interfaces
      } else {
        v.kind = Value::Kind::kList;
      }
      break;
    }
    default:
      return nullptr;
  }
  values.push_back(v);
  return &values.back();
}

const WireChecker::Plan::Struct* WireChecker::Plan::Build(capnp::StructSchema schema) {
  for (const auto& [known, plan] : built) {
    if (known == schema) return plan;
  }
  Struct& s = structs.emplace_back();
  built.emplace_back(schema, &s);  // before the fields: a field may refer back to this struct
  s.discriminant_offset = schema.getProto().getStruct().getDiscriminantOffset();
  for (capnp::StructSchema::Field field : schema.getFields()) {
    const auto proto = field.getProto();
    Field f;
    f.in_union = proto.getDiscriminantValue() != capnp::schema::Field::NO_DISCRIMINANT;
    f.discriminant = proto.getDiscriminantValue();
    if (proto.isGroup()) {
      f.group = Build(field.getType().asStruct());
      if (f.group->fields.empty()) continue;
    } else {
      f.value = BuildValue(field.getType());
      if (f.value == nullptr) continue;
      f.pointer_index = proto.getSlot().getOffset();
    }
    s.fields.push_back(f);
  }
  return &s;
}

namespace {

using Plan = WireChecker::Plan;

void CheckStructReader(const Plan::Struct& plan, const capnp::_::StructReader& reader);

// Reads `pointer` as `value` says; throws kj::Exception where a generated accessor would.
void CheckPointer(const Plan::Value& value, const capnp::_::PointerReader& pointer) {
  switch (value.kind) {
    case Plan::Value::Kind::kText:
      pointer.getBlob<capnp::Text>(nullptr, capnp::bounded<0>() * capnp::BYTES);
      return;
    case Plan::Value::Kind::kData:
      pointer.getBlob<capnp::Data>(nullptr, capnp::bounded<0>() * capnp::BYTES);
      return;
    case Plan::Value::Kind::kStruct:
      CheckStructReader(*value.structure, pointer.getStruct(nullptr));
      return;
    case Plan::Value::Kind::kList:
      pointer.getList(value.element_size, nullptr);
      return;
    case Plan::Value::Kind::kStructList: {
      const capnp::_::ListReader list = pointer.getList(ElementSize::INLINE_COMPOSITE, nullptr);
      if (value.structure->fields.empty()) return;
      const uint32_t n = list.size();
      for (uint32_t i = 0; i < n; ++i) CheckStructReader(*value.structure, list.getStructElement(i));
      return;
    }
    case Plan::Value::Kind::kPointerList: {
      const capnp::_::ListReader list = pointer.getList(ElementSize::POINTER, nullptr);
      if (value.element == nullptr) return;
      const uint32_t n = list.size();
      for (uint32_t i = 0; i < n; ++i) CheckPointer(*value.element, list.getPointerElement(i));
      return;
    }
  }
}

void CheckStructReader(const Plan::Struct& plan, const capnp::_::StructReader& reader) {
  if (plan.fields.empty()) return;
  // Read as the generated which() reads it: 0 when the data section is too short.
  const uint16_t active = reader.getDataField<uint16_t>(plan.discriminant_offset * capnp::ELEMENTS);
  for (const Plan::Field& f : plan.fields) {
    if (f.in_union && f.discriminant != active) continue;
    if (f.group != nullptr) {
      CheckStructReader(*f.group, reader);
    } else {
      CheckPointer(*f.value, reader.getPointerField(f.pointer_index * capnp::POINTERS));
    }
  }
}

}  // namespace

WireChecker::WireChecker(capnp::StructSchema schema) {
  auto plan = std::make_shared<Plan>();
  plan->name = schema.getUnqualifiedName().cStr();
  plan->root = plan->Build(schema);
  plan_ = std::move(plan);
}

WireChecker::~WireChecker() = default;
WireChecker::WireChecker(const WireChecker&) = default;
WireChecker& WireChecker::operator=(const WireChecker&) = default;

absl::Status WireChecker::Check(capnp::AnyPointer::Reader pointer) const {
  try {
    CheckStructReader(*plan_->root,
                      capnp::_::PointerHelpers<capnp::AnyPointer>::getInternalReader(pointer).getStruct(nullptr));
    return absl::OkStatus();
  } catch (const kj::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed ", plan_->name, ": ", e.getDescription().cStr()));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed ", plan_->name, ": ", e.what()));
  }
}

absl::Status CheckStruct(capnp::AnyPointer::Reader pointer, capnp::StructSchema schema) {
  return WireChecker(schema).Check(pointer);
}

absl::Status CheckEnvelope(const InMessage& message) {
  // Built on first use and never changed: a table derived from the compiled-in schema, like
  // the schema itself.
  static const WireChecker* const kEnvelope = new WireChecker(capnp::Schema::from<wire::Envelope>());
  if (!message.has_reader()) return absl::InvalidArgumentError("empty message");
  return kEnvelope->Check(message.root());
}

}  // namespace asyncps::net
