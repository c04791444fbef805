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

struct CreateVariableRequest {
  name @0 :Text;
  dtype @1 :UInt8;
  shape @2 :List(Int64);
  initializer @3 :InitializerSpec;
  optimizer @4 :OptimizerConfig;
}

struct CreateVariableResponse {
  created @0 :Bool;            # false: it already existed with the same dtype and shape
}

struct ReadRequest {
  names @0 :List(Text);
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
}

# Answer of ps.Update and ps.PushGradients.
struct UpdateResponse {
  alreadyApplied @0 :UInt32;   # variables of the request skipped as applied before (UpdateTag)
  staleness @1 :Int64 = -1;    # the largest staleness among the gradients applied that named a
                               # base version; -1 when none did
}

# A gradient for the variable's optimizer: dense, or rows (ids local to the shard) when hasIds.
struct Gradient {
  name @0 :Text;
  value @1 :TensorRef;
  ids @2 :TensorRef;
  hasIds @3 :Bool;
  baseVersion @4 :Int64 = -1;  # the version the gradient was computed from; -1: unknown (never
                               # checked against max_staleness nor scaled)
}

struct PushGradientsRequest {
  gradients @0 :List(Gradient);
  tag @1 :UpdateTag;
}

struct GatherRequest {
  lookups @0 :List(Lookup);
  struct Lookup {
    name @0 :Text;
    ids @1 :TensorRef;         # i64 rows of the shard
  }
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
}
