#include "ps/checkpoint_wire.h"

#include "core/status_macros.h"
#include "net/message.h"
#include "ps/ps_wire.h"

namespace asyncps::ps {
namespace {

void SetTexts(capnp::List<capnp::Text>::Builder list, const std::vector<std::string>& values) {
  for (unsigned i = 0; i < values.size(); ++i) list.set(i, values[i]);
}

std::vector<std::string> GetTexts(capnp::List<capnp::Text>::Reader list) {
  std::vector<std::string> out;
  for (auto t : list) out.emplace_back(t.cStr());
  return out;
}

absl::StatusOr<std::optional<OptimizerConfig>> OptionalOptimizer(wire::OptimizerConfig::Reader in) {
  ASSIGN_OR_RETURN(std::unique_ptr<OptimizerConfig> c, OptimizerFromWire(in));
  if (c == nullptr) return std::nullopt;
  return *c;
}

}  // namespace

void SavedFileToWire(const SavedFile& saved, wire::SaveCheckpointResponse::Builder out) {
  out.setFileName(saved.file_name);
  out.setBytes(saved.digest.bytes);
  out.setCrc32(saved.digest.crc32);
  auto shards = out.initShards(static_cast<unsigned>(saved.shards.size()));
  for (unsigned i = 0; i < saved.shards.size(); ++i) {
    const SavedShard& s = saved.shards[i];
    auto w = shards[i];
    w.setName(s.name);
    w.setDtype(static_cast<uint8_t>(s.dtype));
    net::SetShape(w.initShape(static_cast<unsigned>(s.shape.size())), s.shape);
    w.setTensor(s.tensor);
    SetTexts(w.initSlotNames(static_cast<unsigned>(s.slot_names.size())), s.slot_names);
    SetTexts(w.initSlotTensors(static_cast<unsigned>(s.slot_tensors.size())), s.slot_tensors);
    w.setIterations(s.iterations);
    OptimizerToWire(s.optimizer ? &*s.optimizer : nullptr, w.initOptimizer());
  }
}

absl::StatusOr<SavedFile> SavedFileFromWire(wire::SaveCheckpointResponse::Reader in) {
  SavedFile saved;
  saved.file_name = in.getFileName().cStr();
  saved.digest = {in.getBytes(), in.getCrc32()};
  for (auto w : in.getShards()) {
    SavedShard s;
    s.name = w.getName().cStr();
    ASSIGN_OR_RETURN(s.dtype, DTypeFromWire(w.getDtype()));
    s.shape = net::GetShape(w.getShape());
    s.tensor = w.getTensor().cStr();
    s.slot_names = GetTexts(w.getSlotNames());
    s.slot_tensors = GetTexts(w.getSlotTensors());
    if (s.slot_names.size() != s.slot_tensors.size())
      return absl::InvalidArgumentError("unpaired slot names");
    s.iterations = w.getIterations();
    ASSIGN_OR_RETURN(s.optimizer, OptionalOptimizer(w.getOptimizer()));
    saved.shards.push_back(std::move(s));
  }
  return saved;
}

void RestorePlanToWire(const RestorePlan& plan, wire::RestoreCheckpointRequest::Builder out) {
  out.setDirectory(plan.directory);
  auto files = out.initFiles(static_cast<unsigned>(plan.files.size()));
  for (unsigned i = 0; i < plan.files.size(); ++i) {
    files[i].setName(plan.files[i].file_name);
    files[i].setBytes(plan.files[i].digest.bytes);
    files[i].setCrc32(plan.files[i].digest.crc32);
  }
  auto shards = out.initShards(static_cast<unsigned>(plan.shards.size()));
  for (unsigned i = 0; i < plan.shards.size(); ++i) {
    const RestoreShard& s = plan.shards[i];
    auto w = shards[i];
    w.setName(s.name);
    w.setDtype(static_cast<uint8_t>(s.dtype));
    net::SetShape(w.initShape(static_cast<unsigned>(s.shape.size())), s.shape);
    OptimizerToWire(s.optimizer ? &*s.optimizer : nullptr, w.initOptimizer());
    w.setIterations(s.iterations);
    auto pieces = w.initPieces(static_cast<unsigned>(s.pieces.size()));
    for (unsigned j = 0; j < s.pieces.size(); ++j) {
      const RestorePiece& p = s.pieces[j];
      pieces[j].setFile(static_cast<uint32_t>(p.file));
      pieces[j].setTensor(p.tensor);
      SetTexts(pieces[j].initSlotNames(static_cast<unsigned>(p.slot_names.size())), p.slot_names);
      SetTexts(pieces[j].initSlotTensors(static_cast<unsigned>(p.slot_tensors.size())),
               p.slot_tensors);
      pieces[j].setSrcRowBegin(p.src_row_begin);
      pieces[j].setSrcRowEnd(p.src_row_end);
      pieces[j].setDstRowBegin(p.dst_row_begin);
    }
  }
}

absl::StatusOr<RestorePlan> RestorePlanFromWire(wire::RestoreCheckpointRequest::Reader in) {
  RestorePlan plan;
  plan.directory = in.getDirectory().cStr();
  for (auto f : in.getFiles())
    plan.files.push_back({f.getName().cStr(), {f.getBytes(), f.getCrc32()}});
  for (auto w : in.getShards()) {
    RestoreShard s;
    s.name = w.getName().cStr();
    ASSIGN_OR_RETURN(s.dtype, DTypeFromWire(w.getDtype()));
    s.shape = net::GetShape(w.getShape());
    ASSIGN_OR_RETURN(s.optimizer, OptionalOptimizer(w.getOptimizer()));
    s.iterations = w.getIterations();
    for (auto p : w.getPieces()) {
      RestorePiece piece;
      piece.file = p.getFile();
      piece.tensor = p.getTensor().cStr();
      piece.slot_names = GetTexts(p.getSlotNames());
      piece.slot_tensors = GetTexts(p.getSlotTensors());
      piece.src_row_begin = p.getSrcRowBegin();
      piece.src_row_end = p.getSrcRowEnd();
      piece.dst_row_begin = p.getDstRowBegin();
      s.pieces.push_back(std::move(piece));
    }
    plan.shards.push_back(std::move(s));
  }
  return plan;
}

}  // namespace asyncps::ps
