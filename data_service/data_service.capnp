@0x98aea27bbf498d15;
# Messages of the tf.data service: "dispatcher.*" and "data_worker.*" methods.

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("asyncps::wire::ds");
using import "/net/envelope.capnp".TensorRef;

struct Arg {
  key @0 :Text;
  value @1 :Text;
}

# A program dataset (Program::AddDataset name) and the arguments its factory is given.
struct RegisterDatasetRequest {
  name @0 :Text;
  args @1 :List(Arg);
}

struct RegisterDatasetResponse {
  datasetId @0 :Int64;
}

struct GetDatasetRequest {
  datasetId @0 :Int64;
}

struct GetDatasetResponse {
  name @0 :Text;
  args @1 :List(Arg);
}

# jobName "" makes an anonymous job (a new one on every call).
struct GetOrCreateJobRequest {
  datasetId @0 :Int64;
  jobName @1 :Text;
  mode @2 :UInt8;  # data_service::ProcessingMode
}

struct GetOrCreateJobResponse {
  jobId @0 :Int64;
  # The dispatcher's generation the job id belongs to (see GetElementRequest.generation).
  generation @1 :UInt64;
}

# A data worker's registration and heartbeat (the first one registers it), with what it holds
# (shown on the chief's status page).
struct HeartbeatRequest {
  address @0 :Text;
  taskIndex @1 :Int32;
  jobs @2 :Int64;          # jobs with a pass in progress
  splitStreams @3 :Int64;  # split pipelines kept (DYNAMIC)
  elements @4 :Int64;      # elements served since it started
}

struct HeartbeatResponse {
  # The dispatcher's generation: new whenever it starts without a journal to recover from. A
  # data worker that sees a newer one drops its datasets and jobs (their ids mean others now).
  generation @0 :UInt64;
}

struct DataWorkerInfo {
  address @0 :Text;
  taskIndex @1 :Int32;
}

struct GetWorkersResponse {
  workers @0 :List(DataWorkerInfo);
  # Data workers the cluster spec lists: FILE and DATA reads end only once that many ended
  # the job (each holds its own share of the data).
  numDataWorkers @1 :Int32;
  generation @2 :UInt64;
}

# dispatcher.GetStatus (the chief's status page).
struct DataWorkerStatus {
  address @0 :Text;
  taskIndex @1 :Int32;
  state @2 :Text;  # "up"; "lost" (stopped heartbeating); "absent" (listed, never heard from)
  secondsSinceHeartbeat @3 :Float64;  # -1 when never heard from
  jobs @4 :Int64;
  splitStreams @5 :Int64;
  elements @6 :Int64;
}

struct JobStatus {
  id @0 :Int64;
  name @1 :Text;
  datasetId @2 :Int64;
  mode @3 :Text;
}

struct GetStatusResponse {
  address @0 :Text;
  generation @1 :UInt64;
  inChief @2 :Bool;
  journal @3 :Text;  # "" when in memory only
  datasets @4 :Int64;
  numJobs @5 :Int64;
  jobs @6 :List(JobStatus);  # the most recent ones (at most 100)
  dataWorkers @7 :List(DataWorkerStatus);
}

# One element. Split-bound reads (DYNAMIC under the coordinator's split cursor) name the split
# of the sources, its seed and the element's position in the split's pipeline: the answer is
# the same on every data worker. Job reads (OFF, DATA) take the job's next element on this
# data worker.
struct GetElementRequest {
  datasetId @0 :Int64;
  jobId @1 :Int64;
  mode @2 :UInt8;
  bound @3 :Bool;
  begin @4 :Int64;
  end @5 :Int64;
  seed @6 :UInt64;
  position @7 :Int64;
  # The consumer received every element of this split before `acked`: the data worker may drop
  # what it keeps of them.
  acked @8 :Int64;
  maxElementBytes @9 :UInt64;
  # data_service::Compression: how the answer's tensors travel.
  compression @10 :UInt8;
  # Coordinated reads (ReadOptions::num_consumers > 0): this consumer's element of round
  # `round` of the job on this data worker; 0 consumers is a first-come first-served read.
  numConsumers @11 :Int32;
  consumerIndex @12 :Int32;
  round @13 :Int64;
  # The dispatcher generation datasetId and jobId come from (0: unknown, not checked). A data
  # worker refuses an older one than it knows (FailedPrecondition) and, for a newer one, drops
  # what the ids named before.
  generation @14 :UInt64;
}

# A tensor deflated with zlib (Compression::kZlib): its dtype and shape, and the compressed
# bytes as a u8 [n] payload.
struct CompressedTensor {
  dtype @0 :UInt8;
  shape @1 :List(Int64);
  data @2 :TensorRef;
}

struct GetElementResponse {
  endOfSequence @0 :Bool;
  # With endOfSequence on a bound read: the split starts past the end of the data.
  beyondSource @1 :Bool;
  position @2 :Int64;
  components @3 :List(TensorRef);
  # Instead of components, when the request asked for compression.
  compressed @4 :List(CompressedTensor);
}
