@0x8574dae7d6468c72;
# Messages of the parameter-server service ("ps.*" methods).

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("asyncps::wire");
using import "/net/envelope.capnp".TensorRef;

struct OptimizerConfig {
  type @0 :Text;               # "" (none), "sgd", "momentum", "adagrad", "adam", "ftrl"
  learningRate @1 :Float32;
  momentum @2 :Float32;
  nesterov @3 :Bool;
  beta1 @4 :Float32;
  beta2 @5 :Float32;
  epsilon @6 :Float32;
  initialAccumulatorValue @7 :Float32;
  learningRatePower @8 :Float32;
  l1 @9 :Float32;
  l2 @10 :Float32;
  l2Shrinkage @11 :Float32;
  beta @12 :Float32;
  stalenessAwareLr @13 :Bool;    # learning rate / max(1, staleness) (docs/staleness.md)
  maxStaleness @14 :Int64 = -1;  # a push staler than this is refused; -1: no bound
  decaySteps @15 :Int64;         # cosine learning-rate decay over this many versions; 0: none
  decayAlpha @16 :Float32;       # the decayed rate's floor, a fraction of learningRate
}

# How to fill a (shard of a) variable on the PS itself, so large tables are never built on the
# coordinator. Values depend only on the global row, never on the sharding.
struct InitializerSpec {
  kind @0 :Text;               # zeros, ones, constant, uniform, normal, truncated_normal,
                               # glorot_uniform, tensor
  value @1 :Float64;           # constant
  minval @2 :Float64;          # uniform
  maxval @3 :Float64;
  mean @4 :Float64;            # normal, truncated_normal
  stddev @5 :Float64;
  seed @6 :UInt64;
  fullShape @7 :List(Int64);   # the whole variable's shape (glorot fans come from it)
  rowOffset @8 :Int64;         # global row of this shard's first row
  tensor @9 :TensorRef;        # kind == "tensor": this shard's values
}

# Replicated shards (issue 19; ps/replication/). A group is the set of variable shards whose
# placement names PS index `group`; each group has a primary and k-1 backups. A request with a
# route (generation != 0) is for that group at that generation: the PS refuses it
# FailedPrecondition "stale shard map: ..." unless it is the group's primary at exactly that
# generation. Without a route: this PS's own group, generation unchecked (k = 1 behaviour).
struct Route {
  group @0 :UInt32;
  generation @1 :UInt64;
}

struct CreateVariableRequest {
  name @0 :Text;
  dtype @1 :UInt8;
  shape @2 :List(Int64);
  initializer @3 :InitializerSpec;
  optimizer @4 :OptimizerConfig;
  route @5 :Route;             # absent / generation 0: this PS's own group, unchecked
}

struct CreateVariableResponse {
  created @0 :Bool;            # false: it already existed with the same dtype and shape
}

struct ReadRequest {
  names @0 :List(Text);
  route @1 :Route;
  valuesAs @2 :UInt8;          # 0: each variable in its own dtype. 7 (bf16, core/bf16.h): f32
                               # variables answered narrowed to bf16 (round to nearest even),
                               # others in their own dtype; each TensorRef says which. 8 (int8
                               # blocks, core/compression.h): f32 variables answered as int8
                               # with a scale per 256 values. A PS older than this field answers
                               # f32; one older than int8 refuses 8
}

struct ReadResponse {
  tensors @0 :List(TensorRef);
  versions @1 :List(Int64);    # parallel to tensors: each variable's version (Variable::version)
}

enum UpdateKind {
  assign @0;
  add @1;
  sub @2;
  min @3;
  max @4;
  mul @5;
  div @6;
}

# One update: dense over the whole variable when `ids` is absent, otherwise on the listed rows
# (ids are rows of this shard, i64).
struct VariableUpdate {
  name @0 :Text;
  kind @1 :UpdateKind;
  value @2 :TensorRef;
  ids @3 :TensorRef;
  hasIds @4 :Bool;
}

# Which closure attempt sent an update or a push, so that the PS applies it at most once
# (ps/update_dedup.h). Absent, or coordinator 0: not from a closure; applied every time.
struct UpdateTag {
  coordinator @0 :UInt64;      # the coordinator's identity: its first closure id
  closure @1 :UInt64;          # the closure's id (>= coordinator; ids grow in schedule order)
  sequence @2 :UInt64;         # the call's number within the attempt: 1, 2, ...
  watermark @3 :UInt64;        # every closure of this coordinator with a lower id has finished
}

struct UpdateRequest {
  updates @0 :List(VariableUpdate);
  tag @1 :UpdateTag;
  route @2 :Route;
}

# Answer of ps.Update and ps.PushGradients.
struct UpdateResponse {
  alreadyApplied @0 :UInt32;   # variables of the request skipped as applied before (UpdateTag)
  staleness @1 :Int64 = -1;    # the largest staleness among the gradients applied that named a
                               # base version; -1 when none did
  values @2 :List(TensorRef);  # ps.PushGradients with readAfter: those variables' values once the
                               # push is applied here (also when it was applied before: a retry);
                               # absent from a PS older than readAfter, and from ps.Update
  versions @3 :List(Int64);    # parallel to values: each variable's version (Variable::version)
}

# A gradient for the variable's optimizer: dense, or rows (ids local to the shard) when hasIds.
struct Gradient {
  name @0 :Text;
  value @1 :TensorRef;         # the variable's dtype, or bf16 (wire code 7, core/bf16.h) for an
                               # f32 variable: widened to f32 before it is checked and applied.
                               # A PS older than bf16 refuses it (unknown dtype code). Dense f32
                               # only: int8 blocks (8) or top-k (9) (core/compression.h), its
                               # shape the variable's, decoded to f32 likewise (a payload that
                               # does not fit that shape is refused before it is expanded)
  ids @2 :TensorRef;
  hasIds @3 :Bool;
  baseVersion @4 :Int64 = -1;  # the version the gradient was computed from; -1: unknown (never
                               # checked against max_staleness nor scaled)
}

struct PushGradientsRequest {
  gradients @0 :List(Gradient);
  tag @1 :UpdateTag;
  route @2 :Route;
  readAfter @3 :List(Text);    # variables (of this PS) to answer in UpdateResponse.values once the
                               # push is applied: a push and the next pull in one round trip. Checked
                               # with the gradients (an unknown name applies nothing); a PS older
                               # than this field ignores it and answers no values
  readAfterAs @4 :UInt8;       # the readAfter values' dtype, as ReadRequest.valuesAs
}

struct GatherRequest {
  lookups @0 :List(Lookup);
  struct Lookup {
    name @0 :Text;
    ids @1 :TensorRef;         # i64 rows of the shard
  }
  route @1 :Route;
}

struct GatherResponse {
  values @0 :List(TensorRef);
  versions @1 :List(Int64);    # parallel to values: each shard's version when its rows were copied
}

struct VariableInfo {
  name @0 :Text;
  dtype @1 :UInt8;
  shape @2 :List(Int64);
  iterations @3 :Int64;
  version @4 :Int64;           # Variable::version
}

struct ListVariablesResponse {
  variables @0 :List(VariableInfo);
}

# Checkpoints ("ps.SaveCheckpoint" / "ps.RestoreCheckpoint"; see ps/store_checkpoint.h).

struct SaveCheckpointRequest {
  directory @0 :Text;          # absolute; exists (a shared file system)
  fileName @1 :Text;           # [A-Za-z0-9._-]+, written as directory/fileName
  names @2 :List(Text);        # shards of this PS to save
  step @3 :Int64;
  route @4 :Route;
}

struct SavedShard {
  name @0 :Text;
  dtype @1 :UInt8;
  shape @2 :List(Int64);
  tensor @3 :Text;
  slotNames @4 :List(Text);
  slotTensors @5 :List(Text);
  iterations @6 :Int64;
  optimizer @7 :OptimizerConfig;   # type "" when the shard has no optimizer
}

struct SaveCheckpointResponse {
  fileName @0 :Text;
  bytes @1 :UInt64;
  crc32 @2 :UInt32;
  shards @3 :List(SavedShard);
}

struct RestoreCheckpointRequest {
  directory @0 :Text;
  files @1 :List(File);
  shards @2 :List(Shard);
  # The restoring coordinator's identity and watermark (closure and sequence unused): every
  # closure of it below the watermark has finished and is never dispatched again, so once the
  # restore is done the PS refuses their updates as zombies (UpdateDedup::RaiseWatermark), as
  # it would have had a newer closure told it the watermark. Absent: the window is unchanged.
  closures @4 :UpdateTag;

  struct File {
    name @0 :Text;
    bytes @1 :UInt64;
    crc32 @2 :UInt32;
  }
  struct Piece {
    file @0 :UInt32;           # index into files
    tensor @1 :Text;
    slotNames @2 :List(Text);
    slotTensors @3 :List(Text);
    srcRowBegin @4 :Int64;
    srcRowEnd @5 :Int64;
    dstRowBegin @6 :Int64;
  }
  struct Shard {
    name @0 :Text;
    dtype @1 :UInt8;
    shape @2 :List(Int64);
    optimizer @3 :OptimizerConfig;   # used when the PS must create the variable
    iterations @4 :Int64;
    pieces @5 :List(Piece);
  }
  route @3 :Route;
}

# Shard map (ps.SetShardMap from the chief; ps.GetShardMap).
struct ShardMap {
  generation @0 :UInt64;       # map-wide: the highest generation of its groups (0: no map)
  groups @1 :List(GroupEntry);
  replicas @2 :UInt32;         # k
}

struct GroupEntry {
  group @0 :UInt32;
  generation @1 :UInt64;
  primary @2 :Int32;           # PS index; -1: no live copy
  backups @3 :List(Int32);     # in sync, counted for acks
  rebuilding @4 :List(Int32);  # receiving a state transfer, not counted for acks
  restorePending @5 :Bool;     # every copy was lost: the primary (when >= 0) is empty and serves
                               # nothing but the chief's restore until a map clears this
}

struct SetShardMapRequest {
  map @0 :ShardMap;
}

struct GetShardMapResponse {
  map @0 :ShardMap;            # generation 0: this PS holds no map
  psIndex @1 :Int32;
  incarnation @2 :UInt64;      # changes when the PS process restarts
}

# ps.ReplicaStatus (chief): Empty -> ReplicaStatusResponse. The chief's heartbeat for a PS.
enum CopyRole {
  primary @0;
  backup @1;
  rebuilding @2;               # receiving a state transfer (or waiting for one); never serves
  needsRebuild @3;             # refused a gap / out-of-order stream or lost a transfer; never serves
  fenced @4;                   # a primary whose backups refused its generation; serves nothing
  restoring @5;                # the primary of a group that lost every copy: takes only the
                               # chief's ps.RestoreCheckpoint / ps.CreateVariable until restored
}

struct BackupStatus {
  ps @0 :Int32;
  inSync @1 :Bool;             # counted for acks (a backup of the map, or a rebuilt copy caught up)
  ackedSequence @2 :UInt64;
  lag @3 :UInt64;              # sequences applied here and not yet acked by that copy
  transferBytesCopied @4 :UInt64;  # state transfer to that copy (0/0 when none)
  transferBytesTotal @5 :UInt64;
  needsRebuild @6 :Bool;       # it refused the stream as a gap / out of order
}

struct CopyStatus {
  group @0 :UInt32;
  generation @1 :UInt64;
  role @2 :CopyRole;
  appliedSequence @3 :UInt64;
  backups @4 :List(BackupStatus);  # the primary's view of the other copies of the group
  transferBytesCopied @5 :UInt64;  # a rebuilding copy: bytes of state received so far
  transferBytesTotal @6 :UInt64;
  stateBytes @7 :UInt64;           # the variable bytes this copy holds (what elastic PS
                                   # placement balances)
}

struct ReplicaStatusResponse {
  psIndex @0 :Int32;
  incarnation @1 :UInt64;      # changes when the PS process restarts
  mapGeneration @2 :UInt64;    # 0: no map held (a PS restarted empty)
  copies @3 :List(CopyStatus);
}

# ps.Replicate (ps -> ps): the primary's ordered stream of applied writes to one copy.
struct ReplicatedEntry {
  method @0 :Text;             # "ps.CreateVariable", "ps.Update", "ps.PushGradients",
                               # "ps.RestoreCheckpoint"
  body @1 :AnyPointer;         # the request body as the writer sent it (a struct of the
                               # method's request type); its TensorRefs index the payloads of
                               # the ps.Replicate frame
}

struct ReplicateRequest {
  group @0 :UInt32;
  generation @1 :UInt64;
  firstSequence @2 :UInt64;    # entries[i] has sequence firstSequence + i
  entries @3 :List(ReplicatedEntry);
  fromPs @4 :Int32;
}

struct ReplicateResponse {
  appliedSequence @0 :UInt64;  # the copy has applied every entry up to this one
  # For each entry this call applied, from sequence skippedFrom on: how many of its updates the
  # copy's window of applied closure updates skipped as already applied (ps.Update and
  # ps.PushGradients; 0xFFFFFFFF for the writes that have no such count). The primary compares
  # them with its own: two copies whose windows decide differently have diverged. (Absent from
  # an older PS: nothing is compared.)
  skippedFrom @1 :UInt64;
  skipped @2 :List(UInt32);
}

# ps.InstallState (ps -> ps): a state transfer, pushed by the primary in chunks, in order.
struct SnapshotVariable {
  name @0 :Text;
  dtype @1 :UInt8;
  shape @2 :List(Int64);
  optimizer @3 :OptimizerConfig;
  iterations @4 :Int64;
  restores @5 :UInt64;         # Variable::restores (keys of the dedup window depend on it)
  rowBegin @6 :Int64;          # this chunk holds rows [rowBegin, rowBegin + rows of value)
  value @7 :TensorRef;
  slots @8 :List(TensorRef);   # in the optimizer's slot order, the same rows
}

struct DedupSpace {
  coordinator @0 :UInt64;
  watermark @1 :UInt64;
  closures @2 :List(UInt64);   # parallel lists: one applied key each
  sequences @3 :List(UInt64);
  variables @4 :List(UInt64);
}

struct InstallStateRequest {
  group @0 :UInt32;
  generation @1 :UInt64;
  transfer @2 :UInt64;         # id of this transfer; a new id starts over
  chunk @3 :UInt32;            # 0, 1, ... in order; chunk 0 drops what the copy held
  sequence @4 :UInt64;         # the snapshot's sequence S (entries > S follow by ps.Replicate)
  variables @5 :List(SnapshotVariable);
  dedup @6 :List(DedupSpace);  # in the last chunk
  last @7 :Bool;
  bytesTotal @8 :UInt64;       # tensor bytes of the whole transfer
  fromPs @9 :Int32;
  extension @10 :AnyPointer;   # state beside the variables (embedding tables: an
                               # EmbeddingStateChunk), in chunks after the variables' ones
}

# Elastic PS (issue 37): the chief's "membership.JoinPs" / "membership.LeavePs", called by a PS
# as role "ps" for its own index (coordinator/membership_service.h).
struct JoinPsRequest {
  index @0 :Int32;
  address @1 :Text;            # host:port the PS serves on: its slot's in the cluster spec
}

struct JoinPsResponse {
  members @0 :Int32;           # PS in the job after this one
  alreadyMember @1 :Bool;      # nothing changed
}

struct LeavePsRequest {
  index @0 :Int32;
}

struct LeavePsResponse {
  groupsMoved @0 :Int32;       # shard-group copies moved off the PS before it left
}
