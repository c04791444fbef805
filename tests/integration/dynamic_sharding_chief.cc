// A chief process for dynamic_sharding_test's coordinator-restart scenario: one epoch of
// "count_ids" over the kDynamic dataset "ids", a checkpoint (variables + split cursor) after
// every joined round of closures. Started again after a SIGKILL, it restores the latest
// checkpoint — the counter's values and the split cursor — and finishes the epoch.
//
// Environment: TF_CONFIG (task chief), ASYNCPS_CLUSTER_TOKEN (and the other ProcessOptions
// variables), and DS_DIR (checkpoints),
// DS_IDS, DS_BATCH, DS_RECORDS_PER_SPLIT, DS_LINGER_MS. Prints "checkpoint N saved" after each
// save and "epoch complete: counted N ids" at the end (exit 0); any error exits 1.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "coordinator/checkpoint_manager.h"
#include "checkpoint/checkpoint_reader.h"
#include "coordinator/chief_process.h"
#include "coordinator/cluster_coordinator.h"
#include "coordinator/parameter_server_strategy.h"
#include "core/process_options.h"
#include "core/status_macros.h"
#include "partitioners/partitioner.h"
#include "tests/integration/test_functions.h"
#include "tests/testutil/local_cluster.h"

namespace asyncps {
namespace {

absl::StatusOr<int64_t> IntEnv(const char* name) {
  const char* v = std::getenv(name);
  int64_t n;
  if (v == nullptr || !absl::SimpleAtoi(v, &n)) return absl::InvalidArgumentError(absl::StrCat("set ", name));
  return n;
}

absl::Status Run(const ProcessOptions& process) {
  const char* tf_config = std::getenv("TF_CONFIG");
  const char* dir = std::getenv("DS_DIR");
  if (tf_config == nullptr || dir == nullptr) return absl::InvalidArgumentError("set TF_CONFIG and DS_DIR");
  ASSIGN_OR_RETURN(int64_t ids, IntEnv("DS_IDS"));
  ASSIGN_OR_RETURN(int64_t batch, IntEnv("DS_BATCH"));
  ASSIGN_OR_RETURN(int64_t records_per_split, IntEnv("DS_RECORDS_PER_SPLIT"));
  ASSIGN_OR_RETURN(int64_t linger_ms, IntEnv("DS_LINGER_MS"));
  ASSIGN_OR_RETURN(ClusterSpec cluster, ClusterSpec::FromTfConfig(tf_config));
  ASSIGN_OR_RETURN(auto partitioner, FixedShardsPartitioner::Create(2));
  ASSIGN_OR_RETURN(std::unique_ptr<ChiefProcess> chief, ChiefProcess::Create(cluster, {.process = process}));
  ParameterServerStrategy strategy(*chief, std::move(partitioner));
  // A restarted chief re-creates its variables (the PS keep theirs); the restore below resets them.
  RETURN_IF_ERROR(strategy.CreateVariable("counts", init::Zeros({ids}, DType::kI64)).status());
  CheckpointManager checkpoints(strategy, dir, /*max_to_keep=*/3);
  const Program program = testutil::MakeTestProgram();
  ClusterCoordinator coordinator(strategy, program, testutil::FastFailureDetection());
  ASSIGN_OR_RETURN(PerWorkerDataset dataset,
                   coordinator.CreatePerWorkerDataset(
                       "ids", {{"n", std::to_string(ids)}, {"batch", std::to_string(batch)}},
                       ShardingPolicy::kDynamic, records_per_split));
  int64_t step = 0;
  if (absl::StatusOr<std::string> latest = checkpoints.Latest(); latest.ok()) {
    ASSIGN_OR_RETURN(step, checkpoints.Restore(*latest));
    ASSIGN_OR_RETURN(CheckpointManifest manifest, ReadManifest(*latest));
    RETURN_IF_ERROR(coordinator.RestoreSplitCursors(manifest.coordinator_state));
    std::printf("restored checkpoint %lld\n", static_cast<long long>(step));
    std::fflush(stdout);
  }
  ASSIGN_OR_RETURN(PerWorkerValues iterator, dataset.MakeIterator());
  int64_t counted = 0;
  while (true) {
    std::vector<RemoteValue> values;
    for (int i = 0; i < 16; ++i) {
      ASSIGN_OR_RETURN(RemoteValue v, coordinator.Schedule("count_ids", {iterator, Tensor::Scalar<int64_t>(linger_ms)}));
      values.push_back(v);
    }
    const absl::Status joined = coordinator.Join();
    for (const RemoteValue& v : values) {
      if (absl::StatusOr<Values> r = v.Fetch(); r.ok()) counted += r->at(1).data<int64_t>()[0];
    }
    if (absl::IsOutOfRange(joined)) break;
    RETURN_IF_ERROR(joined);
    // Joined: nothing in flight, so the cursor and the variables are one consistent cut.
    ++step;
    RETURN_IF_ERROR(checkpoints.Save(step, coordinator.SplitCursorState()).status());
    std::printf("checkpoint %lld saved\n", static_cast<long long>(step));
    std::fflush(stdout);
  }
  std::printf("epoch complete: counted %lld ids\n", static_cast<long long>(counted));
  std::fflush(stdout);
  return absl::OkStatus();
}

}  // namespace
}  // namespace asyncps

int main(int argc, char** argv) {
  absl::Status s = asyncps::Run(asyncps::ProcessOptions::FromEnvAndFlags(argc, argv));
  if (!s.ok()) {
    std::fprintf(stderr, "dynamic_sharding_chief: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
