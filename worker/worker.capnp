@0x9056a930f7751163;
# Messages of the worker service ("worker.*" methods).

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("asyncps::wire");
using import "/net/envelope.capnp".TensorRef;

# Where a variable lives: one shard per PS range of rows (a plain variable has one shard).
struct VariablePlacement {
  name @0 :Text;
  dtype @1 :UInt8;
  shape @2 :List(Int64);
  shards @3 :List(Shard);
  struct Shard {
    name @0 :Text;             # "name" or "name/part_i"
    ps @1 :Int32;
    rowBegin @2 :Int64;
    rowEnd @3 :Int64;
  }
}

struct SetDirectoryRequest {
  version @0 :UInt64;
  variables @1 :List(VariablePlacement);
}

struct Argument {
  union {
    tensor @0 :TensorRef;
    resource @1 :UInt64;       # id of a per-worker resource created on this worker
  }
}

struct RunRequest {
  function @0 :Text;
  args @1 :List(Argument);
  closureId @2 :UInt64;
  # The worker incarnation the coordinator prepared (directory, resources); a restarted worker
  # refuses the closure until the coordinator has brought it up to date. 0 = any.
  incarnation @3 :UInt64;
  # Exactly-once updates (ps/update_dedup.h): the coordinator's identity (its first closure
  # id; 0 = do not tag updates) and the lowest id of its closures not finished yet.
  coordinator @4 :UInt64;
  watermark @5 :UInt64;
  # Dynamic sharding: the batch the closure reads from its per-worker iterator (absent: none).
  split @6 :SplitBinding;
}

# Element `batch` of the pipeline of per-worker iterator `resource` over records [begin, end)
# of its source (split `split` of epoch `epoch`).
struct SplitBinding {
  resource @0 :UInt64;
  epoch @1 :Int64;
  split @2 :Int64;
  begin @3 :Int64;
  end @4 :Int64;
  batch @5 :Int64;
}

# What the worker found reading a SplitBinding.
enum SplitOutcome {
  unread @0;                   # the function did not read it (or reading failed)
  more @1;                     # read; the split has further batches
  last @2;                     # read; it was the split's last batch
  pastEnd @3;                  # the split has fewer batches: nothing was read
  beyondSource @4;             # the split starts past the end of the data: nothing was read
}

# A closure's outcome. Errors of the closure travel here with an OK RPC status, so a failed
# RPC always means the worker (or the connection to it) failed, never the function.
struct RunResponse {
  values @0 :List(TensorRef);
  code @1 :Int32;              # absl::StatusCode of the function; 0 = OK
  message @2 :Text;
  errorSource @3 :ErrorSource;
  split @4 :SplitOutcome;      # for a RunRequest with a split
}

enum ErrorSource {
  function @0;                 # the user's function returned an error
  ps @1;                       # a parameter server was unreachable
  cancelled @2;                # the coordinator cancelled the closure
  psStateLost @3;              # a parameter server no longer holds a variable (restarted empty)
}

struct CancelRequest {
  closureIds @0 :List(UInt64);
}

struct CreateResourceRequest {
  id @0 :UInt64;
  factory @1 :Text;
  args @2 :List(NamedArg);
  struct NamedArg {
    name @0 :Text;
    value @1 :Text;
  }
}

struct DeleteResourceRequest {
  id @0 :UInt64;
}

struct HeartbeatResponse {
  incarnation @0 :UInt64;
  directoryVersion @1 :UInt64;
  resources @2 :List(UInt64);
  # Per PS (in cluster order): how long it has owed this worker an answer without a word, in
  # microseconds (0: nothing owed). The chief fails over a primary its workers cannot reach.
  psSilenceMicros @3 :List(Int64);
}

# Elastic membership ("membership.*" methods, served by the chief under --elastic; see
# coordinator/membership_service.h). Workers call them about themselves: `index` must be the
# caller's own task index, as it authenticated in the handshake.
struct JoinRequest {
  index @0 :Int32;
  address @1 :Text;            # host:port the worker serves on (at most 255 bytes)
}

struct JoinResponse {
  members @0 :Int32;           # workers in the job (joining and up) after this one
  alreadyMember @1 :Bool;      # it was one already (a starting worker, or a repeat): nothing changed
}

struct LeaveRequest {
  index @0 :Int32;
}

struct LeaveResponse {
  requeued @0 :Int32;          # closures that went back to the queue instead of finishing here
}

# asyncps_launch's control port (--elastic): "launcher.Scale", called by `asyncps_launch scale`
# as role "operator", authenticated by the cluster token like every connection.
struct ScaleRequest {
  workers @0 :Int32;           # workers wanted, 1 to 256 (0: unchanged, when ps is given)
  ps @1 :Int32;                # PS wanted, 1 to --max_ps (0: unchanged)
}

struct ScaleResponse {
  message @0 :Text;            # what the launcher did, for a person
}
