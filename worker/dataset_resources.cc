#include "worker/dataset_resources.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "data/dataset_node.h"

namespace asyncps {

std::string ShardingArgValue(ShardingPolicy policy) {
  switch (policy) {
    case ShardingPolicy::kData:
      return "data";
    case ShardingPolicy::kDynamic:
      return "dynamic";
    case ShardingPolicy::kFile:
      return "file";
    case ShardingPolicy::kAuto:
      return "auto";
    case ShardingPolicy::kOff:
      break;
  }
  return "off";
}

absl::StatusOr<data::Element> IteratorResource::Next() {
  MutexLock lock(&mu_);
  return iterator_->Next();
}

absl::StatusOr<data::Element> DynamicIteratorResource::Read(const SplitBinding& b, SplitOutcome* outcome) {
  *outcome = SplitOutcome::kUnread;
  MutexLock lock(&mu_);
  ++uses_;
  // A batch a kept pipeline went past for a later one (closures running at once on this worker
  // ask in any order): kept for its closure, so it costs neither a rebuild nor a replay.
  for (auto p = positions_.begin(); p != positions_.end(); ++p) {
    if (p->epoch != b.epoch || p->split != b.split) continue;
    auto kept = p->skipped.find(b.batch);
    if (kept == p->skipped.end()) continue;
    data::Element element = std::move(kept->second);
    p->skipped.erase(kept);
    p->last_used = uses_;
    *outcome = p->end_batch == b.batch + 1 ? SplitOutcome::kLast : SplitOutcome::kMore;
    if (p->iterator == nullptr && p->skipped.empty()) positions_.erase(p);
    return element;
  }
  // At or past the end of a split whose end this worker saw: no pipeline to build and replay
  // (the coordinator binds closures past a split's end until a worker reports it).
  for (const EndedSplit& e : ended_) {
    if (e.epoch == b.epoch && e.split == b.split && b.batch >= e.end_batch) {
      *outcome = e.beyond_source ? SplitOutcome::kBeyondSource : SplitOutcome::kPastEnd;
      return absl::OutOfRangeError("end of split");
    }
  }
  // A kept pipeline of this split at or before the batch (closest first): skipping forward
  // there is cheaper than building the split's pipeline again (two workers sharing a split at
  // the end of an epoch take turns).
  auto it = positions_.end();
  for (auto p = positions_.begin(); p != positions_.end(); ++p) {
    if (p->epoch == b.epoch && p->split == b.split && p->iterator != nullptr && p->next_batch <= b.batch &&
        (it == positions_.end() || p->next_batch > it->next_batch)) {
      it = p;
    }
  }
  // Ends the kept pipeline at `p` (its split ended or failed); its skipped batches stay.
  auto retire = [&](std::vector<Position>::iterator p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (p->end_batch >= 0) {
      ended_.push_back({p->epoch, p->split, p->end_batch, p->end_batch == 0 && p->beyond_source->load()});
      while (ended_.size() > kMaxEnded) ended_.pop_front();
    }
    if (p->skipped.empty()) {
      positions_.erase(p);
    } else {
      p->iterator.reset();
      p->peeked.reset();
    }
  };
  if (it == positions_.end()) {
    // Not where a kept pipeline stands: build the split's pipeline (and skip to the batch,
    // below). The seed depends on the split only, so every worker reads the same order.
    Position p;
    p.epoch = b.epoch;
    p.split = b.split;
    p.beyond_source = std::make_shared<std::atomic<bool>>(false);
    const uint64_t seed = data::internal::MixSeed(static_cast<uint64_t>(b.epoch), static_cast<uint64_t>(b.split));
    ASSIGN_OR_RETURN(p.iterator, dataset_.MakeSinglePassSplitIterator({b.begin, b.end, 1}, seed, p.beyond_source));
    ++built_;
    if (positions_.size() >= kMaxPositions) {
      positions_.erase(std::min_element(positions_.begin(), positions_.end(),
                                        [](const Position& x, const Position& y) { return x.last_used < y.last_used; }));
    }
    positions_.push_back(std::move(p));
    it = positions_.end() - 1;
  }
  for (; it->next_batch < b.batch; ++it->next_batch) {
    absl::StatusOr<data::Element> skipped = it->peeked.has_value() ? std::move(*it->peeked) : it->iterator->Next();
    it->peeked.reset();
    if (!skipped.ok()) {
      if (data::IsEndOfData(skipped.status())) {
        *outcome = it->beyond_source->load() ? SplitOutcome::kBeyondSource : SplitOutcome::kPastEnd;
        it->end_batch = it->next_batch;
      }
      retire(it);
      return skipped.status();
    }
    it->skipped[it->next_batch] = *std::move(skipped);
    // Bounded: the oldest goes first (its closure may have run elsewhere).
    while (it->skipped.size() > kMaxSkipped) it->skipped.erase(it->skipped.begin());
  }
  it->last_used = uses_;
  absl::StatusOr<data::Element> element = it->peeked.has_value() ? std::move(*it->peeked) : it->iterator->Next();
  it->peeked.reset();
  if (!element.ok()) {
    if (data::IsEndOfData(element.status())) {
      *outcome = it->beyond_source->load() ? SplitOutcome::kBeyondSource : SplitOutcome::kPastEnd;
      it->end_batch = b.batch;
    }
    retire(it);
    return element;
  }
  // Look one element ahead, so the coordinator learns the split ended without sending a closure
  // past it. An error stays for the closure that reads that batch.
  absl::StatusOr<data::Element> next = it->iterator->Next();
  if (data::IsEndOfData(next.status())) {
    *outcome = SplitOutcome::kLast;
    it->end_batch = b.batch + 1;
    retire(it);
  } else {
    *outcome = SplitOutcome::kMore;
    it->peeked.emplace(std::move(next));
    it->next_batch = b.batch + 1;
  }
  return element;
}

int64_t DynamicIteratorResource::pipelines_built() const {
  MutexLock lock(&mu_);
  return built_;
}

absl::StatusOr<data::Element> BoundSplitIterator::Next() {
  if (read_) {
    return absl::FailedPreconditionError(
        "a dynamically sharded iterator gives one batch per closure (it read its batch already)");
  }
  read_ = true;
  return iterator_->Read(binding_, &outcome_);
}

std::string DatasetResourceName(const std::string& name) { return absl::StrCat("dataset:", name); }
std::string IteratorResourceName(const std::string& name) { return absl::StrCat("iterator:", name); }

namespace {

struct Built {
  data::Dataset dataset;
  ShardingPolicy policy = ShardingPolicy::kOff;
};

absl::Status InDataset(const std::string& name, const ResourceContext& ctx, const std::string& what,
                       const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(what, "dataset '", name, "' on worker ", ctx.worker_index(), ": ",
                                             s.message()));
}

// Runs the user's factory: under kDynamic as worker 0 of 1 (every worker must build the same
// pipeline), always without the sharding argument.
absl::StatusOr<Built> Build(const std::string& name, const DatasetFactory& factory, const ResourceContext& ctx) {
  Built built;
  std::map<std::string, std::string> args = ctx.args();
  if (auto it = args.find(kShardingArg); it != args.end()) {
    if (it->second == "data") {
      built.policy = ShardingPolicy::kData;
    } else if (it->second == "dynamic") {
      built.policy = ShardingPolicy::kDynamic;
    } else if (it->second == "file") {
      built.policy = ShardingPolicy::kFile;
    } else if (it->second == "auto") {
      built.policy = ShardingPolicy::kAuto;
    } else if (it->second != "off") {
      return InDataset(name, ctx, "", absl::InvalidArgumentError(absl::StrCat("unknown sharding '", it->second, "'")));
    }
    args.erase(it);
  }
  const bool dynamic = built.policy == ShardingPolicy::kDynamic;
  const ResourceContext user_ctx(dynamic ? 0 : ctx.worker_index(), dynamic ? 1 : ctx.num_workers(), args);
  absl::StatusOr<data::Dataset> dataset = factory(user_ctx);
  // The user's factory failed: say which dataset, keep the code.
  if (!dataset.ok()) return InDataset(name, ctx, "", dataset.status());
  built.dataset = *std::move(dataset);
  return built;
}

// Starts the pass a worker reads under `built.policy` (for kDynamic: a probe of the first
// split, which checks the pipeline's files and rules).
absl::StatusOr<std::unique_ptr<data::Iterator>> StartPass(const Built& built, const ResourceContext& ctx) {
  switch (built.policy) {
    case ShardingPolicy::kData:
      return built.dataset.MakeSplitIterator(
          {ctx.worker_index(), std::numeric_limits<int64_t>::max(), std::max(1, ctx.num_workers())});
    case ShardingPolicy::kDynamic:
      return built.dataset.MakeSinglePassSplitIterator({0, 1, 1}, 0);
    case ShardingPolicy::kFile:
    case ShardingPolicy::kAuto: {
      data::AutoShardPolicy applied;
      ASSIGN_OR_RETURN(auto it, built.dataset.MakeShardedIterator(
                                    built.policy == ShardingPolicy::kFile ? data::AutoShardPolicy::kFile
                                                                          : data::AutoShardPolicy::kAuto,
                                    ctx.worker_index(), std::max(1, ctx.num_workers()), &applied));
      if (built.policy == ShardingPolicy::kAuto) {
        spdlog::info("dataset on worker {}: AUTO sharding applied {}", ctx.worker_index(),
                     applied == data::AutoShardPolicy::kFile ? "FILE" : "DATA");
      }
      return it;
    }
    case ShardingPolicy::kOff:
      break;
  }
  return built.dataset.MakeIterator();
}

}  // namespace

ResourceFactory MakeDatasetResourceFactory(std::string name, DatasetFactory factory) {
  return [name = std::move(name), factory = std::move(factory)](
             const ResourceContext& ctx) -> absl::StatusOr<std::unique_ptr<Resource>> {
    ASSIGN_OR_RETURN(Built built, Build(name, factory, ctx));
    // Files are opened (and arguments checked) when an iterator starts: start one now so a
    // missing file is the caller's error at creation, not the first closure's.
    absl::StatusOr<std::unique_ptr<data::Iterator>> probe = StartPass(built, ctx);
    if (!probe.ok()) return InDataset(name, ctx, "", probe.status());
    spdlog::info("per-worker dataset '{}' built on worker {} of {} (sharding {})", name, ctx.worker_index(),
                 ctx.num_workers(), ShardingArgValue(built.policy));
    return std::make_unique<DatasetResource>(std::move(built.dataset));
  };
}

ResourceFactory MakeIteratorResourceFactory(std::string name, DatasetFactory factory) {
  return [name = std::move(name), factory = std::move(factory)](
             const ResourceContext& ctx) -> absl::StatusOr<std::unique_ptr<Resource>> {
    // Datasets are cheap descriptions: building it again here keeps each iterator independent
    // of the DatasetResource's lifetime.
    ASSIGN_OR_RETURN(Built built, Build(name, factory, ctx));
    absl::StatusOr<std::unique_ptr<data::Iterator>> iterator = StartPass(built, ctx);
    if (!iterator.ok()) return InDataset(name, ctx, "iterator over ", iterator.status());
    if (built.policy == ShardingPolicy::kDynamic) {
      spdlog::info("per-worker iterator over dataset '{}' built on worker {} (dynamic sharding)", name,
                   ctx.worker_index());
      return std::make_unique<DynamicIteratorResource>(std::move(built.dataset));
    }
    spdlog::info("per-worker iterator over dataset '{}' built on worker {} (starts at the beginning)", name,
                 ctx.worker_index());
    return std::make_unique<IteratorResource>(std::move(*iterator));
  };
}

}  // namespace asyncps
