#ifndef ASYNCPS_EXAMPLES_FMNIST_IDX_SHARD_H_
#define ASYNCPS_EXAMPLES_FMNIST_IDX_SHARD_H_

// The main job's training set in memory: a worker's static shard of an IDX file, decoded once.
//
// Inflating the gzipped 60,000 training images took a quarter of a worker's CPU while it
// trained: every epoch (each pass of Repeat reopens the file), and each worker inflated the whole
// file for its half of it. The training pipeline slices this tensor instead
// (data::Dataset::FromTensorSlices). No LibTorch here.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "asyncps/datasets.h"

namespace asyncps::fmnist {

// Records index, index + num_shards, ... of the IDX file `path` (plain or gzipped; those
// data::Dataset::IdxFile(path).Shard(num_shards, index) yields, in that order) as one tensor
// [records, record dims...] of the file's dtype. The process keeps the last few shards read
// (a worker builds its dataset, then its iterator, from the same factory; each reads its images
// and labels) and returns the kept tensor, which shares their bytes, for the same arguments.
// IdxFile's errors (a missing file, DataLoss); InvalidArgument for a shard without records.
// Thread-safe.
absl::StatusOr<Tensor> ReadIdxShard(const std::string& path, int64_t num_shards, int64_t index);

}  // namespace asyncps::fmnist

#endif  // ASYNCPS_EXAMPLES_FMNIST_IDX_SHARD_H_
