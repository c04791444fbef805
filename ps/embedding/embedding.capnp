@0xc35305312d765833;
# Messages of the hash-keyed embedding tables on a parameter server ("ps.*Embedding*" methods;
# see ps/embedding/embedding_service.h for their semantics and ps/embedding/embedding_wire.h for
# the C++ helpers that build and read them).
#
# A table is an open set of rows keyed by int64 ids. Its keys are spread over the PS by
# PsForKey (ps/embedding/key_partition.h): every PS of a job holds a table of the same name and
# config, and a client sends each key only to the PS PsForKey names.

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("asyncps::wire");
using import "/net/envelope.capnp".TensorRef;
using Ps = import "/ps/ps.capnp";

# The value a key's row starts from: a pure function of (key, element, seed), so every PS (and a
# row created again after eviction or a restore) computes the same one.
struct EmbeddingInitializer {
  kind @0 :Text;               # "zeros", "constant", "uniform", "normal", "truncated_normal"
  value @1 :Float64;           # constant
  minval @2 :Float64;          # uniform
  maxval @3 :Float64;
  mean @4 :Float64;            # normal, truncated_normal (cut at 2 stddev, as TF)
  stddev @5 :Float64;
  seed @6 :UInt64;
}

# When a key gets a row. Training lookups (EmbeddingLookupRequest.train) count a key's
# occurrences in a count-min sketch; a push creates the row of a key that is admitted and drops
# the gradient of one that is not.
struct EmbeddingAdmission {
  minCount @0 :UInt32;         # admitted once counted this many times; 0 and 1: at once
  probability @1 :Float32;     # 0: off; in (0, 1]: beside minCount, each counted occurrence
                               # admits with this probability (deterministic in key, seed, count)
  sketchWidth @2 :UInt32;      # counters per sketch row (4 rows, 16 bits each); 0: default
}

struct CreateEmbeddingTableRequest {
  name @0 :Text;
  dim @1 :Int64;               # floats per row, 1 .. 65536
  dtype @2 :UInt8;             # core DType; only f32
  initializer @3 :EmbeddingInitializer;
  optimizer @4 :Ps.OptimizerConfig;   # sgd, momentum, adagrad, adam, ftrl; type "" = sgd 0.01
  admission @5 :EmbeddingAdmission;
  ttlSteps @6 :Int64;          # 0: off; else rows not updated in this many table steps go
  memoryCapBytes @7 :UInt64;   # 0: off; else rows least recently updated go to stay under it
  route @8 :Ps.Route;          # replicated shard groups: the key partition's group and the
                               # generation (ps/ps.capnp Route); absent: this PS's own group
}

struct CreateEmbeddingTableResponse {
  created @0 :Bool;            # false: it existed with the same config
}

struct EmbeddingLookupRequest {
  lookups @0 :List(Lookup);
  train @1 :Bool;              # counts the keys towards admission; never inserts a row
  struct Lookup {
    table @0 :Text;
    keys @1 :TensorRef;        # i64 [n], distinct, each owned by this PS (PsForKey)
  }
  route @2 :Ps.Route;          # replicated shard groups: the key partition's group and the
                               # generation (ps/ps.capnp Route); absent: this PS's own group
}

struct EmbeddingLookupResponse {
  values @0 :List(TensorRef);  # f32 [n, dim] per lookup; a key without a row: its initial value
  missing @1 :List(UInt32);    # per lookup: keys that had no row
}

struct EmbeddingPushRequest {
  pushes @0 :List(Push);
  tag @1 :Ps.UpdateTag;        # exactly once per (closure, call, table), as ps.PushGradients
  struct Push {
    table @0 :Text;
    keys @1 :TensorRef;        # i64 [n], distinct (a repeated key's gradients are summed)
    gradients @2 :TensorRef;   # f32 [n, dim]
  }
  route @2 :Ps.Route;          # replicated shard groups: the key partition's group and the
                               # generation (ps/ps.capnp Route); absent: this PS's own group
}

struct EmbeddingPushResponse {
  alreadyApplied @0 :UInt32;   # tables of the request skipped as applied before (UpdateTag)
  created @1 :UInt64;          # rows created by this push (admitted keys without a row)
  dropped @2 :UInt64;          # keys not admitted: their gradients changed nothing
}

struct EmbeddingStatsRequest {
  tables @0 :List(Text);       # empty: every table
  route @1 :Ps.Route;          # replicated shard groups: the key partition's group and the
                               # generation (ps/ps.capnp Route); absent: this PS's own group
}

struct EmbeddingTableStats {
  name @0 :Text;
  dim @1 :Int64;
  rows @2 :UInt64;
  step @3 :Int64;              # pushes applied to the table
  admitted @4 :UInt64;         # rows ever created (re-creations after eviction included)
  evictedTtl @5 :UInt64;
  evictedCap @6 :UInt64;
  droppedGradients @7 :UInt64; # keys of pushes whose gradient was dropped (not admitted)
  memoryBytes @8 :UInt64;      # rows, slots, index and sketch
  memoryCapBytes @9 :UInt64;
}

struct EmbeddingStatsResponse {
  tables @0 :List(EmbeddingTableStats);
}

# Checkpoints of embedding tables ("ps.SaveEmbeddingTables" / "ps.RestoreEmbeddingTables"; see
# ps/embedding/embedding_checkpoint.h). One safetensors file per PS; a restore into any number
# of PS reads every file of the checkpoint and keeps the keys PsForKey gives it.

struct SaveEmbeddingTablesRequest {
  directory @0 :Text;          # absolute; exists (a shared file system)
  fileName @1 :Text;           # [A-Za-z0-9._-]+, written as directory/fileName
  tables @2 :List(Text);       # empty: every table of this PS
  step @3 :Int64;
  numPs @4 :UInt32;            # recorded beside the key partition's name
  psIndex @5 :UInt32;
  route @6 :Ps.Route;          # replicated shard groups: the key partition's group and the
                               # generation (ps/ps.capnp Route); absent: this PS's own group
}

struct SaveEmbeddingTablesResponse {
  fileName @0 :Text;
  bytes @1 :UInt64;
  crc32 @2 :UInt32;
  rows @3 :UInt64;
}

struct RestoreEmbeddingTablesRequest {
  directory @0 :Text;
  files @1 :List(Text);        # every file of the checkpoint (all PS that saved it)
  numPs @2 :UInt32;            # the job being restored: this PS keeps the keys
  psIndex @3 :UInt32;          # with PsForKey(key, numPs) == psIndex
  route @4 :Ps.Route;          # replicated shard groups: the key partition's group and the
                               # generation (ps/ps.capnp Route); absent: this PS's own group
}

struct RestoreEmbeddingTablesResponse {
  tables @0 :UInt32;
  rows @1 :UInt64;             # rows this PS holds after the restore
}

# State transfer of a group copy's tables to a rebuilding copy (ps/replication/
# replicated_tables.h): carried as InstallStateRequest.extension, after the chunks of the
# group's variables. A table's rows come in pieces (rowBegin 0 first); the last chunk of the
# transfer holds the tables' update window.
struct EmbeddingStateChunk {
  pieces @0 :List(Piece);
  dedup @1 :List(Ps.DedupSpace);  # in the last chunk
  struct Piece {
    config @0 :CreateEmbeddingTableRequest;   # with the first piece of a table
    rowBegin @1 :Int64;
    rowsTotal @2 :Int64;
    keys @3 :TensorRef;        # i64 [m]
    lastUpdate @4 :TensorRef;  # i64 [m]
    values @5 :TensorRef;      # f32 [m, dim]
    slots @6 :List(TensorRef); # f32 [m, dim] each
    sketch @7 :TensorRef;      # with the first piece, when the table has a sketch
    hasSketch @8 :Bool;
    step @9 :Int64;
    restores @10 :UInt64;
    nextSweep @11 :Int64;
  }
}
