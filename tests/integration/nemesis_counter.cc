// nemesis_counter: the exactly-once counter program scripts/nemesis.py runs under faults (issue
// 35), as a user would run it: `asyncps_launch --max_restarts R [--ps_replicas 2]
// [--data_workers D] -- nemesis_counter --checkpoint_dir DIR`. Every process runs this binary.
//
// The chief hands out the ids 0..ids-1 by dynamic sharding (batches of --batch, splits of 8
// batches), --epochs times, 32 closures per join. Each closure, for its batch, makes four update
// calls, each deduplicated on its own:
//   1. counts[id] += 1                (i64 [ids], FixedShardsPartitioner(2 x PS): sharded)
//   2. total += sum of the ids        (i64 scalar)
//   3. PushGradients w: gradient -1   (f32 scalar, SGD at learning rate 1 on the PS: w += 1)
//   4. PushEmbeddingGradients emb: row of key id*K+17 gets gradient (-1, 0)
//      (hash-keyed embedding table, dim 2, zeros, SGD 1: element 0 counts the pushes)
// then works --work_ms, so a kill then lands after its updates and before its answer. A
// `ballast` f32 variable (--ballast_mb, sharded, never updated) makes state transfers and
// checkpoint saves take long enough for the nemesis to hit them.
//
// Checkpoints (variables, the embedding table, the split cursor and this chief's epoch) at every
// epoch's start and every --checkpoint_every joins; automatic PS recovery restores from them; a
// chief started again with the same command line resumes from the newest. At the end the chief
// reads everything back and checks: every counts[id] and every key's row equals the epochs, total
// equals epochs x the sum of the ids, w equals the number of batches applied. It prints
//   exactly once: N keys x E epochs (counts, total, w, embedding table exact)
// and exits 0, or prints MISMATCH lines naming the first wrong keys and exits 1.
//
// --until_file PATH: --epochs is then a least number; the chief goes on with more epochs (up to
// 1000) until PATH exists when one ends, and checks against the epochs it ran. A test that
// changes the cluster while it trains (issue 37) ends the training by creating PATH. (Not for a
// chief that restarts: the resumed one counts --epochs again.)
//
// --data_service auto (default): with a dispatcher in the cluster (asyncps_launch
// --data_workers D) the batches come from the data workers (DYNAMIC mode); off: each worker reads
// its split itself. --test_only_no_dedup turns the coordinator's exactly-once updates off
// (ClusterCoordinator::Options::deduplicate_updates = false): a planted bug, for checking that
// the nemesis finds it.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_reader.h"
#include "coordinator/checkpoint_manager.h"
#include "coordinator/chief_process.h"
#include "coordinator/cluster_coordinator.h"
#include "coordinator/parameter_server_strategy.h"
#include "core/cluster_spec.h"
#include "core/exit_code.h"
#include "core/logging.h"
#include "core/process_options.h"
#include "core/status_macros.h"
#include "data/dataset.h"
#include "data_service/service_dataset.h"
#include "partitioners/partitioner.h"
#include "worker/program.h"
#include "worker/serve.h"
#include "worker/step_context.h"

namespace asyncps {
namespace {

constexpr int64_t kKeyStride = 1'000'003;  // embedding key of id: id * kKeyStride + 17
constexpr int64_t kEmbeddingDim = 2;
constexpr int kClosuresPerJoin = 32;
constexpr char kEpochKey[] = "nemesis_counter/epoch";  // beside the split cursor in the manifest
constexpr char kStepKey[] = "nemesis_counter/step";

int64_t KeyOf(int64_t id) { return id * kKeyStride + 17; }

struct Flags {
  int64_t ids = 100'000;
  int64_t batch = 50;
  int epochs = 2;
  std::string checkpoint_dir;
  int checkpoint_every = 16;  // joins (of 32 closures)
  int64_t work_ms = 2;
  int64_t ballast_mb = 16;
  int closures_per_worker = 2;
  bool data_service = true;
  bool no_dedup = false;
  std::string until_file;
};

absl::Status ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (!absl::StartsWith(arg, "--")) continue;
    std::string name = arg.substr(2), value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto next = [&]() -> bool {
      if (has_value) return true;
      if (i + 1 >= argc) return false;
      value = argv[++i];
      return true;
    };
    bool ok = true;
    if (name == "ids") {
      ok = next() && absl::SimpleAtoi(value, &f->ids) && f->ids >= 1;
    } else if (name == "batch") {
      ok = next() && absl::SimpleAtoi(value, &f->batch) && f->batch >= 1;
    } else if (name == "epochs") {
      ok = next() && absl::SimpleAtoi(value, &f->epochs) && f->epochs >= 1;
    } else if (name == "checkpoint_dir") {
      ok = next() && !value.empty();
      f->checkpoint_dir = value;
    } else if (name == "checkpoint_every") {
      ok = next() && absl::SimpleAtoi(value, &f->checkpoint_every) && f->checkpoint_every >= 1;
    } else if (name == "work_ms") {
      ok = next() && absl::SimpleAtoi(value, &f->work_ms) && f->work_ms >= 0;
    } else if (name == "ballast_mb") {
      ok = next() && absl::SimpleAtoi(value, &f->ballast_mb) && f->ballast_mb >= 0;
    } else if (name == "closures_per_worker") {
      ok = next() && absl::SimpleAtoi(value, &f->closures_per_worker) && f->closures_per_worker >= 1;
    } else if (name == "data_service") {
      ok = next() && (value == "auto" || value == "off");
      f->data_service = value == "auto";
    } else if (name == "until_file") {
      ok = next() && !value.empty();
      f->until_file = value;
    } else if (name == "test_only_no_dedup") {
      f->no_dedup = true;  // a switch
    } else {
      continue;  // a cluster or process flag (ClusterSpec, ProcessOptions)
    }
    if (!ok) return absl::InvalidArgumentError(absl::StrCat("bad value for --", name, ": '", value, "'"));
  }
  if (f->checkpoint_dir.empty()) return absl::InvalidArgumentError("--checkpoint_dir is required");
  return absl::OkStatus();
}

Program MakeProgram(const std::string& token) {
  Program program;
  program.AddDataset("ids", [](const DatasetContext& ctx) -> absl::StatusOr<data::Dataset> {
    ASSIGN_OR_RETURN(int64_t n, ctx.IntArg("n"));
    ASSIGN_OR_RETURN(int64_t batch, ctx.IntArg("batch"));
    return data::Dataset::Range(0, n).Batch(batch);
  });
  program.AddDataset("ids_service", [token](const DatasetContext& ctx) -> absl::StatusOr<data::Dataset> {
    data_service::ServiceOptions service;
    ASSIGN_OR_RETURN(service.dispatcher, ctx.Arg("dispatcher"));
    service.token = token;
    service.task_index = ctx.worker_index();
    ASSIGN_OR_RETURN(int64_t id, ctx.IntArg("id"));
    return data_service::FromDatasetId(service, id, {.mode = data_service::ProcessingMode::kDynamic});
  });
  program.AddFunction("nemesis_count", [](StepContext& ctx) -> absl::StatusOr<Values> {
    absl::StatusOr<data::Element> batch = ctx.Next(0);
    if (data::IsEndOfData(batch.status())) return Values{Tensor::Scalar<int64_t>(0)};
    if (!batch.ok()) return batch.status();
    const Tensor& ids = batch->at(0);
    const int64_t n = ids.num_elements();
    int64_t sum = 0;
    Tensor keys(DType::kI64, {n});
    Tensor gradients(DType::kF32, {n, kEmbeddingDim});
    for (int64_t i = 0; i < n; ++i) {
      const int64_t id = ids.data<int64_t>()[i];
      sum += id;
      keys.data<int64_t>()[i] = KeyOf(id);
      gradients.data<float>()[i * kEmbeddingDim] = -1.0f;
    }
    RETURN_IF_ERROR(ctx.Scatter(UpdateKind::kAdd, "counts", ids, Tensor::FromVector(std::vector<int64_t>(n, 1))));
    RETURN_IF_ERROR(ctx.AssignAdd("total", Tensor::Scalar<int64_t>(sum)));
    RETURN_IF_ERROR(ctx.PushGradients({{"w", Tensor::Scalar(-1.0f), {}}}));
    RETURN_IF_ERROR(ctx.PushEmbeddingGradients("emb", keys, gradients));
    ASSIGN_OR_RETURN(Tensor ms, ctx.arg(1));
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms.data<int64_t>()[0]);
    while (std::chrono::steady_clock::now() < end) {
      if (ctx.cancelled()) return absl::CancelledError("cancelled");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the closure's work, not a wait
    }
    return Values{Tensor::Scalar<int64_t>(n)};
  });
  return program;
}

absl::Status Expect(bool ok, const std::string& what) {
  if (!ok) std::printf("MISMATCH: %s\n", what.c_str());
  return ok ? absl::OkStatus() : absl::DataLossError(what);
}

// Every id's count (and its key's row) must be `epochs`; total and w follow.
absl::Status Check(ParameterServerStrategy& strategy, const Flags& f) {
  ASSIGN_OR_RETURN(ShardedVariable counts, strategy.GetVariable("counts"));
  ASSIGN_OR_RETURN(ShardedVariable total, strategy.GetVariable("total"));
  ASSIGN_OR_RETURN(ShardedVariable w, strategy.GetVariable("w"));
  ASSIGN_OR_RETURN(Tensor c, counts.Read());
  ASSIGN_OR_RETURN(Tensor t, total.Read());
  ASSIGN_OR_RETURN(Tensor wv, w.Read());
  Tensor keys(DType::kI64, {f.ids});
  for (int64_t id = 0; id < f.ids; ++id) keys.data<int64_t>()[id] = KeyOf(id);
  ASSIGN_OR_RETURN(Tensor rows, strategy.LookupEmbeddings("emb", keys));
  absl::Status result;
  auto note = [&](absl::Status s) {
    if (result.ok()) result = s;
  };
  int64_t wrong = 0, wrong_rows = 0;
  std::string first, first_rows;
  for (int64_t id = 0; id < f.ids; ++id) {
    const int64_t got = c.data<int64_t>()[id];
    if (got != f.epochs && ++wrong <= 8) absl::StrAppend(&first, first.empty() ? "" : ", ", "#", id, ": ", got);
    const float row = rows.data<float>()[id * kEmbeddingDim];  // SGD 1, gradient -1: +1 per push
    if (row != static_cast<float>(f.epochs) && ++wrong_rows <= 8) {
      absl::StrAppend(&first_rows, first_rows.empty() ? "" : ", ", "key of #", id, ": ", row);
    }
  }
  note(Expect(wrong == 0, absl::StrCat("counts: ", wrong, " of ", f.ids, " ids not counted exactly ", f.epochs,
                                       " times (", first, wrong > 8 ? ", ..." : "", ")")));
  note(Expect(wrong_rows == 0, absl::StrCat("emb: ", wrong_rows, " of ", f.ids, " keys not pushed exactly ", f.epochs,
                                            " times (", first_rows, wrong_rows > 8 ? ", ..." : "", ")")));
  const int64_t want_total = f.epochs * (f.ids * (f.ids - 1) / 2);
  note(Expect(t.data<int64_t>()[0] == want_total,
              absl::StrCat("total = ", t.data<int64_t>()[0], ", expected ", want_total, " (off by ",
                           t.data<int64_t>()[0] - want_total, ")")));
  const int64_t batches = f.epochs * ((f.ids + f.batch - 1) / f.batch);
  // SGD at 1 with gradient -1 adds 1 per applied push (exact in f32 up to 2^24 pushes).
  const float want_w = static_cast<float>(batches);
  note(Expect(wv.data<float>()[0] == want_w,
              absl::StrCat("w = ", wv.data<float>()[0], ", expected ", want_w, " (one push per batch)")));
  if (result.ok()) {
    std::printf("exactly once: %lld keys x %d epochs (counts, total, w, embedding table exact)\n",
                static_cast<long long>(f.ids), f.epochs);
  }
  std::fflush(stdout);
  return result;
}

absl::Status RunChief(ChiefProcess& chief, const Program& program, Flags f, const ProcessOptions& process) {
  const int num_ps = chief.cluster().num_ps();
  ASSIGN_OR_RETURN(std::unique_ptr<FixedShardsPartitioner> partitioner, FixedShardsPartitioner::Create(2 * num_ps));
  ParameterServerStrategy strategy(chief, std::move(partitioner));
  // Idempotent on the PS: a restarted chief finds them (and restores them below).
  RETURN_IF_ERROR(strategy.CreateVariable("counts", init::Zeros({f.ids}, DType::kI64)).status());
  RETURN_IF_ERROR(strategy.CreateVariable("total", init::Zeros({}, DType::kI64)).status());
  RETURN_IF_ERROR(strategy.CreateVariable("w", init::Zeros({}), opt::SGD(1.0f)).status());
  if (f.ballast_mb > 0) {
    RETURN_IF_ERROR(strategy.CreateVariable("ballast", init::Zeros({f.ballast_mb * 256 * 1024})).status());
  }
  EmbeddingInitializer zeros;
  zeros.kind = EmbeddingInitializer::Kind::kZeros;
  RETURN_IF_ERROR(strategy.CreateEmbeddingTable("emb", kEmbeddingDim, zeros, opt::SGD(1.0f)));
  CheckpointManager checkpoints(strategy, f.checkpoint_dir, /*max_to_keep=*/3);
  checkpoints.AddEmbeddingTable("emb");

  ClusterCoordinator::Options options;
  options.closures_per_worker = f.closures_per_worker;
  options.deduplicate_updates = !f.no_dedup;
  options.ps_recovery.enabled = true;
  options.ps_recovery.checkpoints = &checkpoints;
  if (f.no_dedup) std::printf("TEST ONLY: exactly-once updates are off (--test_only_no_dedup)\n");
  ClusterCoordinator coordinator(strategy, program, options);

  int epoch = 0;
  int64_t step = 0;
  bool resumed = false;
  if (absl::StatusOr<std::string> latest = checkpoints.Latest(); latest.ok()) {
    ASSIGN_OR_RETURN(step, checkpoints.Restore(*latest));
    ASSIGN_OR_RETURN(CheckpointManifest manifest, ReadManifest(*latest));
    RETURN_IF_ERROR(coordinator.RestoreSplitCursors(manifest.coordinator_state));
    auto e = manifest.coordinator_state.find(kEpochKey);
    if (e == manifest.coordinator_state.end() || !absl::SimpleAtoi(e->second, &epoch)) {
      return absl::DataLossError(absl::StrCat(*latest, " has no ", kEpochKey));
    }
    resumed = true;
    std::printf("resumed from checkpoint step %lld (epoch %d/%d)\n", static_cast<long long>(step),
                std::min(epoch + 1, f.epochs), f.epochs);
    std::fflush(stdout);
  }
  std::string dataset_name = "ids";
  std::map<std::string, std::string> dataset_args = {{"n", absl::StrCat(f.ids)}, {"batch", absl::StrCat(f.batch)}};
  if (f.data_service && !chief.cluster().data_service_dispatcher().empty()) {
    data_service::ServiceOptions service;
    service.dispatcher = chief.cluster().data_service_dispatcher();
    service.token = process.cluster_token;
    service.role = "chief";
    ASSIGN_OR_RETURN(const int64_t id, data_service::RegisterDataset(service, dataset_name, dataset_args));
    dataset_name = "ids_service";
    dataset_args = {{"dispatcher", service.dispatcher}, {"id", absl::StrCat(id)}};
    std::printf("ids from the tf.data service: dispatcher %s, %d data workers\n", service.dispatcher.c_str(),
                chief.cluster().num_data_workers());
  }
  ASSIGN_OR_RETURN(PerWorkerDataset dataset, coordinator.CreatePerWorkerDataset(dataset_name, dataset_args,
                                                                                ShardingPolicy::kDynamic, 8 * f.batch));
  std::printf("counting %lld ids x %d epochs in batches of %lld: %d workers, %d parameter servers%s\n",
              static_cast<long long>(f.ids), f.epochs, static_cast<long long>(f.batch),
              chief.cluster().num_workers(), num_ps, resumed ? " (resumed)" : "");
  std::fflush(stdout);
  // Saves with nothing in flight (after a Join): variables, table, cursor and epoch are one cut.
  auto save = [&](int at_epoch) -> absl::Status {
    ++step;
    std::map<std::string, std::string> state = coordinator.SplitCursorState();
    state[kEpochKey] = absl::StrCat(at_epoch);
    state[kStepKey] = absl::StrCat(step);
    absl::StatusOr<std::string> dir = checkpoints.Save(step, state);
    if (absl::IsAlreadyExists(dir.status())) return absl::OkStatus();
    RETURN_IF_ERROR(dir.status());
    std::printf("saved checkpoint step %lld (epoch %d)\n", static_cast<long long>(step), at_epoch + 1);
    std::fflush(stdout);
    return absl::OkStatus();
  };
  const Tensor work = Tensor::Scalar<int64_t>(f.work_ms);
  for (; epoch < f.epochs; ++epoch) {
    // The epoch's iterator; after a restore the first one continues the checkpoint's epoch.
    ASSIGN_OR_RETURN(PerWorkerValues iterator, dataset.MakeIterator());
    // The epoch's start is a cut too (nothing in flight), so every checkpoint's cursor is in the
    // epoch being read and a PS recovery never rolls back into an earlier one.
    if (!resumed) RETURN_IF_ERROR(save(epoch));
    resumed = false;
    int64_t counted = 0;
    for (int joins = 1;; ++joins) {
      std::vector<RemoteValue> results;
      for (int i = 0; i < kClosuresPerJoin; ++i) {
        ASSIGN_OR_RETURN(RemoteValue r, coordinator.Schedule("nemesis_count", {iterator, work}));
        results.push_back(std::move(r));
      }
      const absl::Status joined = coordinator.Join();
      for (const RemoteValue& r : results) {
        if (absl::StatusOr<Values> v = r.Fetch(); v.ok()) counted += v->at(0).data<int64_t>()[0];
      }
      if (absl::IsOutOfRange(joined)) break;
      RETURN_IF_ERROR(joined);
      if (joins % f.checkpoint_every == 0) RETURN_IF_ERROR(save(epoch));
    }
    std::printf("epoch %d/%d done (%lld ids counted by this chief's closures)\n", epoch + 1, f.epochs,
                static_cast<long long>(counted));
    std::fflush(stdout);
    if (epoch + 1 == f.epochs && !f.until_file.empty() && f.epochs < 1000 && access(f.until_file.c_str(), F_OK) != 0) {
      ++f.epochs;  // one more: the test is still changing the cluster
    }
  }
  RETURN_IF_ERROR(coordinator.Join());
  RETURN_IF_ERROR(save(f.epochs));  // the end: the same command started again has nothing left to do
  return Check(strategy, f);
}

}  // namespace
}  // namespace asyncps

int main(int argc, char** argv) {
  asyncps::Flags flags;
  if (absl::Status s = asyncps::ParseFlags(argc, argv, &flags); !s.ok()) {
    std::fprintf(stderr, "nemesis_counter: %s\n", s.ToString().c_str());
    return asyncps::kExitUsage;
  }
  auto cluster = asyncps::ClusterSpec::FromEnvOrFlags(argc, argv);
  if (!cluster.ok()) {
    std::fprintf(stderr, "nemesis_counter: %s\n", cluster.status().ToString().c_str());
    return asyncps::kExitUsage;
  }
  const asyncps::ProcessOptions process = asyncps::ProcessOptions::FromEnvAndFlags(argc, argv);
  asyncps::Program program = asyncps::MakeProgram(process.cluster_token);
  if (!cluster->is_chief()) return asyncps::Serve(*cluster, program, process);
  asyncps::InitLogging("chief", cluster->task_index(), process.log_level);
  auto chief = asyncps::ChiefProcess::Create(*cluster, {.process = process});
  const absl::Status status = chief.ok() ? asyncps::RunChief(**chief, program, flags, process) : chief.status();
  if (!status.ok()) {
    std::fprintf(stderr, "nemesis_counter failed: %s\n", status.ToString().c_str());
    return asyncps::ExitCodeForStatus(status);
  }
  return 0;
}
