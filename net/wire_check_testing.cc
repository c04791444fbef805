#include "net/wire_check_testing.h"

#include <capnp/dynamic.h>
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <exception>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "net/wire_check.h"

namespace asyncps::net::testutil {
namespace {

void ReadStruct(capnp::DynamicStruct::Reader s);

void ReadValue(const capnp::DynamicValue::Reader& value) {
  switch (value.getType()) {
    case capnp::DynamicValue::STRUCT:
      ReadStruct(value.as<capnp::DynamicStruct>());
      break;
    case capnp::DynamicValue::LIST:
      for (auto element : value.as<capnp::DynamicList>()) ReadValue(element);
      break;
    default:
      break;
  }
}

void ReadField(capnp::DynamicStruct::Reader s, capnp::StructSchema::Field field) {
  const auto type = field.getType();
  if (type.isAnyPointer() || type.isInterface()) return;
  ReadValue(s.get(field));
}

void ReadStruct(capnp::DynamicStruct::Reader s) {
  for (auto field : s.getSchema().getNonUnionFields()) ReadField(s, field);
  KJ_IF_MAYBE(active, s.which()) { ReadField(s, *active); }
}

// Fills `s` with something in every field: the shape the damage works on.
void Fill(capnp::DynamicStruct::Builder s, std::mt19937_64& rng, int depth);

void FillField(capnp::DynamicStruct::Builder s, capnp::StructSchema::Field field, std::mt19937_64& rng,
               int depth) {
  const capnp::Type type = field.getType();
  const uint32_t n = static_cast<uint32_t>(rng() % 4);
  switch (type.which()) {
    case capnp::schema::Type::TEXT:
      s.set(field, capnp::Text::Reader(std::string(rng() % 9, 'x').c_str()));
      break;
    case capnp::schema::Type::DATA: {
      std::vector<capnp::byte> bytes(rng() % 17, 0x5a);
      s.set(field, capnp::Data::Reader(bytes.data(), bytes.size()));
      break;
    }
    case capnp::schema::Type::STRUCT:
      if (depth > 0) Fill(s.init(field).as<capnp::DynamicStruct>(), rng, depth - 1);
      break;
    case capnp::schema::Type::LIST: {
      if (depth <= 0) break;
      auto list = s.init(field, n).as<capnp::DynamicList>();
      const capnp::Type element = type.asList().getElementType();
      for (uint32_t i = 0; i < n; ++i) {
        if (element.isStruct()) {
          Fill(list[i].as<capnp::DynamicStruct>(), rng, depth - 1);
        } else if (element.isText()) {
          list.set(i, capnp::Text::Reader("abc"));
        } else if (element.isData()) {
          list.set(i, capnp::Data::Reader(reinterpret_cast<const capnp::byte*>("abcd"), 4));
        } else if (element.isList()) {
          list.init(i, 2);
        } else if (element.isBool()) {
          list.set(i, true);
        } else if (element.isEnum()) {
          list.set(i, capnp::DynamicEnum(element.asEnum(), 0));
        } else if (element.isFloat32() || element.isFloat64()) {
          list.set(i, 1.5);
        } else if (!element.isVoid() && !element.isAnyPointer() && !element.isInterface()) {
          list.set(i, static_cast<int>(rng() % 100));
        }
      }
      break;
    }
    case capnp::schema::Type::BOOL:
      s.set(field, (rng() & 1) != 0);
      break;
    case capnp::schema::Type::FLOAT32:
    case capnp::schema::Type::FLOAT64:
      s.set(field, 2.5);
      break;
    case capnp::schema::Type::INT8:
    case capnp::schema::Type::INT16:
    case capnp::schema::Type::INT32:
    case capnp::schema::Type::INT64:
    case capnp::schema::Type::UINT8:
    case capnp::schema::Type::UINT16:
    case capnp::schema::Type::UINT32:
    case capnp::schema::Type::UINT64:
      s.set(field, static_cast<int>(rng() % 100));
      break;
    default:  // void, enum (left at 0), AnyPointer, interfaces
      break;
  }
}

void Fill(capnp::DynamicStruct::Builder s, std::mt19937_64& rng, int depth) {
  const capnp::StructSchema schema = s.getSchema();
  for (auto field : schema.getNonUnionFields()) {
    if (field.getProto().isGroup()) {
      Fill(s.init(field).as<capnp::DynamicStruct>(), rng, depth);
    } else {
      FillField(s, field, rng, depth);
    }
  }
  const auto members = schema.getUnionFields();
  if (members.size() == 0) return;
  auto member = members[static_cast<uint32_t>(rng() % members.size())];
  if (member.getProto().isGroup()) {
    Fill(s.init(member).as<capnp::DynamicStruct>(), rng, depth);
  } else if (member.getType().isVoid()) {
    s.set(member, capnp::VOID);
  } else {
    FillField(s, member, rng, depth);
  }
}

absl::Status CheckCopy(const kj::Array<capnp::word>& words, capnp::StructSchema schema, bool reference) {
  try {
    capnp::FlatArrayMessageReader reader(words.asPtr());
    auto root = reader.getRoot<capnp::AnyPointer>();
    return reference ? ReferenceCheck(root, schema) : WireChecker(schema).Check(root);
  } catch (const kj::Exception& e) {  // the segment table itself was damaged: neither runs
    return absl::InvalidArgumentError(e.getDescription().cStr());
  }
}

}  // namespace

absl::Status ReferenceCheck(capnp::AnyPointer::Reader pointer, capnp::StructSchema schema) {
  try {
    ReadStruct(pointer.getAs<capnp::DynamicStruct>(schema));
    return absl::OkStatus();
  } catch (const kj::Exception& e) {
    return absl::InvalidArgumentError(e.getDescription().cStr());
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(e.what());
  }
}

MutationReport CompareOnDamagedMessages(capnp::StructSchema schema, int messages, uint64_t seed) {
  std::mt19937_64 rng(seed);
  capnp::MallocMessageBuilder builder;
  Fill(builder.initRoot<capnp::DynamicStruct>(schema), rng, 4);
  const kj::Array<capnp::word> original = capnp::messageToFlatArray(builder);
  MutationReport report;
  for (int m = 0; m < messages; ++m) {
    auto words = kj::heapArray<capnp::word>(original.asPtr());
    auto* raw = reinterpret_cast<uint64_t*>(words.begin());
    const int damages = 1 + static_cast<int>(rng() % 3);
    for (int d = 0; d < damages && words.size() > 1; ++d) {
      // Word 0 is the segment table; leave it, so the reader gets as far as the pointers.
      uint64_t& w = raw[1 + rng() % (words.size() - 1)];
      switch (rng() % 4) {
        case 0: w ^= uint64_t{1} << (rng() % 64); break;
        case 1: w = (w & ~uint64_t{3}) | (rng() % 4); break;  // a pointer's kind
        case 2: w = rng(); break;
        default: w = 0; break;
      }
    }
    const absl::Status planned = CheckCopy(words, schema, false);
    const absl::Status reference = CheckCopy(words, schema, true);
    ++report.messages;
    if (planned.ok() != reference.ok()) {
      if (report.first_disagreement.empty()) {
        report.first_disagreement = absl::StrCat("message ", m, ": WireChecker says ", planned.ToString(),
                                                 ", the dynamic reference says ", reference.ToString());
      }
    } else if (planned.ok()) {
      ++report.accepted;
    } else {
      ++report.rejected;
    }
  }
  return report;
}

}  // namespace asyncps::net::testutil
