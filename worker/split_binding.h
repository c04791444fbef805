#ifndef ASYNCPS_WORKER_SPLIT_BINDING_H_
#define ASYNCPS_WORKER_SPLIT_BINDING_H_

#include <cstdint>

namespace asyncps {

// One batch of dynamic sharding (ShardingPolicy::kDynamic), bound by the coordinator to a
// closure: element `batch` of the dataset's pipeline over records [begin, end) of its sources
// (split `split`), in epoch `epoch`.
struct SplitBinding {
  int64_t epoch = 0;
  int64_t split = 0;
  int64_t begin = 0;
  int64_t end = 0;
  int64_t batch = 0;

  bool operator==(const SplitBinding& o) const {
    return epoch == o.epoch && split == o.split && begin == o.begin && end == o.end && batch == o.batch;
  }
};

// What a worker found reading a SplitBinding (mirrors wire::SplitOutcome).
enum class SplitOutcome {
  kUnread,        // not read (the function did not ask, or reading failed)
  kMore,          // read; the split has further batches
  kLast,          // read; it was the split's last batch
  kPastEnd,       // the split has fewer batches: nothing was read
  kBeyondSource,  // the split starts past the end of the data: nothing was read
};

}  // namespace asyncps

#endif  // ASYNCPS_WORKER_SPLIT_BINDING_H_
