// data_service_test_program: the test program plus the datasets data_service_test reads through
// the tf.data service. It runs as training worker, dispatcher and data worker.
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/cluster_spec.h"
#include "core/process_options.h"
#include "core/status_macros.h"
#include "data_service/service_dataset.h"
#include "tests/integration/test_functions.h"
#include "worker/serve.h"

namespace asyncps {
namespace {

Program MakeProgram(const ProcessOptions& options) {
  Program program = testutil::MakeTestProgram();
  // Produced by the data workers.
  program.AddDataset("svc_ids", [](const DatasetContext& ctx) -> absl::StatusOr<data::Dataset> {
    ASSIGN_OR_RETURN(int64_t n, ctx.IntArg("n"));
    ASSIGN_OR_RETURN(int64_t batch, ctx.IntArg("batch"));
    return data::Dataset::Range(0, n).Shuffle(256, static_cast<uint64_t>(ctx.worker_index())).Batch(batch);
  });
  // FILE mode: the records of this data worker's share of `files`, each with its index.
  program.AddDataset("svc_records", [](const DatasetContext& ctx) -> absl::StatusOr<data::Dataset> {
    ASSIGN_OR_RETURN(std::string files, ctx.Arg("files"));
    const int64_t index = ctx.worker_index();
    return data::Dataset::TFRecord(absl::StrSplit(files, ',')).Map([index](data::Element e) -> absl::StatusOr<data::Element> {
      e.push_back(Tensor::Scalar<int64_t>(index));
      return e;
    });
  });
  // Coordinated reads: 0 .. n-1 forever (the guide requires a Repeat'd dataset).
  program.AddDataset("svc_repeat", [](const DatasetContext& ctx) -> absl::StatusOr<data::Dataset> {
    ASSIGN_OR_RETURN(int64_t n, ctx.IntArg("n"));
    return data::Dataset::Range(0, n).Repeat();
  });
  program.AddDataset("svc_big", [](const DatasetContext&) -> absl::StatusOr<data::Dataset> {
    return data::Dataset::FromElements({{Tensor::FromVector(std::vector<int64_t>(4096, 7))}});
  });
  // Read by the training workers.
  program.AddDataset("from_service", [options](const DatasetContext& ctx) -> absl::StatusOr<data::Dataset> {
    data_service::ServiceOptions service;
    ASSIGN_OR_RETURN(service.dispatcher, ctx.Arg("dispatcher"));
    service.token = options.cluster_token;
    service.task_index = ctx.worker_index();
    data_service::ReadOptions read;
    ASSIGN_OR_RETURN(std::string mode, ctx.Arg("mode"));
    ASSIGN_OR_RETURN(read.mode, data_service::ProcessingModeFromName(mode));
    if (auto job = ctx.Arg("job"); job.ok()) read.job_name = *job;
    // Absent: ReadOptions' default.
    read.max_outstanding_requests =
        static_cast<int>(ctx.IntArg("outstanding").value_or(read.max_outstanding_requests));
    ASSIGN_OR_RETURN(int64_t id, ctx.IntArg("id"));
    return data_service::FromDatasetId(service, id, read);
  });
  return program;
}

}  // namespace
}  // namespace asyncps

int main(int argc, char** argv) {
  auto cluster = asyncps::ClusterSpec::FromEnvOrFlags(argc, argv);
  if (!cluster.ok()) {
    std::fprintf(stderr, "data_service_test_program: %s\n", cluster.status().ToString().c_str());
    return 2;
  }
  const asyncps::ProcessOptions options = asyncps::ProcessOptions::FromEnvAndFlags(argc, argv);
  return asyncps::Serve(*cluster, asyncps::MakeProgram(options), options);
}
