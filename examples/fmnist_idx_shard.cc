#include "examples/fmnist_idx_shard.h"

#include <cstring>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "asyncps/status.h"
#include "asyncps/sync.h"

namespace asyncps::fmnist {
namespace {

struct IdxShard {
  std::string path;
  int64_t num_shards = 0, index = 0;
  Tensor records;
};

struct IdxShardCache {
  static constexpr size_t kMaxShards = 4;
  Mutex mu;
  std::deque<IdxShard> shards ABSL_GUARDED_BY(mu);
};

IdxShardCache& Cache() {
  static auto* cache = new IdxShardCache();  // never destroyed
  return *cache;
}

absl::StatusOr<Tensor> Read(const std::string& path, int64_t num_shards, int64_t index) {
  ASSIGN_OR_RETURN(std::unique_ptr<data::Iterator> it,
                   data::Dataset::IdxFile(path).Shard(num_shards, index).MakeIterator());
  std::vector<Tensor> records;
  while (true) {
    absl::StatusOr<data::Element> record = it->Next();
    if (!record.ok()) {
      if (data::IsEndOfData(record.status())) break;
      return record.status();
    }
    records.push_back(std::move(record->at(0)));
  }
  if (records.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no records in shard ", index, " of ", num_shards));
  }
  Shape shape = records[0].shape();
  shape.insert(shape.begin(), static_cast<int64_t>(records.size()));
  Tensor all(records[0].dtype(), std::move(shape));
  char* out = static_cast<char*>(all.raw_data());
  const size_t bytes = records[0].num_bytes();
  for (const Tensor& r : records) {
    if (r.dtype() != records[0].dtype() || r.shape() != records[0].shape()) {
      return absl::DataLossError(absl::StrCat(path, ": records of different shapes"));
    }
    std::memcpy(out, r.raw_data(), bytes);
    out += bytes;
  }
  return all;
}

}  // namespace

absl::StatusOr<Tensor> ReadIdxShard(const std::string& path, int64_t num_shards, int64_t index) {
  IdxShardCache& cache = Cache();
  // Held while reading, so concurrent callers for the same shard decode it once.
  MutexLock lock(&cache.mu);
  for (const IdxShard& s : cache.shards) {
    if (s.path == path && s.num_shards == num_shards && s.index == index) return s.records;
  }
  ASSIGN_OR_RETURN(Tensor records, Read(path, num_shards, index));
  if (cache.shards.size() == IdxShardCache::kMaxShards) cache.shards.pop_front();
  cache.shards.push_back({path, num_shards, index, records});
  return records;
}

}  // namespace asyncps::fmnist
