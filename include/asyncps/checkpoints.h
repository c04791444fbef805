#ifndef ASYNCPS_INCLUDE_ASYNCPS_CHECKPOINTS_H_
#define ASYNCPS_INCLUDE_ASYNCPS_CHECKPOINTS_H_

// Public API: sharded checkpoints of the variables on the parameter servers
// (asyncps::CheckpointManager: Save, Latest, Restore with resharding) and following a checkpoint
// directory from a side-car evaluator (asyncps::CheckpointFollower, MarkFinalCheckpoint), and
// reading one without a cluster (asyncps::CheckpointReader).
// Contracts are on each declaration.

#include "checkpoint/checkpoint_follower.h"  // IWYU pragma: export
#include "checkpoint/checkpoint_reader.h"    // IWYU pragma: export
#include "coordinator/checkpoint_manager.h"  // IWYU pragma: export

#endif  // ASYNCPS_INCLUDE_ASYNCPS_CHECKPOINTS_H_
