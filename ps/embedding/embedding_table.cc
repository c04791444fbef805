#include "ps/embedding/embedding_table.h"

#include <algorithm>
#include <cstring>
#include <new>

#include <sys/mman.h>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ps/embedding/embedding_initializer.h"
#include "ps/embedding/key_partition.h"

namespace asyncps::ps {
namespace {

constexpr uint64_t kMinIndexCapacity = 16;
constexpr uint64_t kIndexSlotBytes = 12;
constexpr uint64_t kRowMetaBytes = 2 * sizeof(int64_t);  // key and last update
// The largest step Import takes: the bound a checkpoint manifest puts on variables' counters.
constexpr int64_t kMaxImportedStep = int64_t{1} << 62;

// The index capacity that holds `rows` at load <= 1/2 (linear probing's misses — lookups of
// keys without a row, half of a training batch — grow fast above it).
uint64_t IndexCapacityFor(uint64_t rows) {
  uint64_t c = kMinIndexCapacity;
  while (rows * 2 > c) c <<= 1;
  return c;
}

// Bytes a stripe of at most `rows` rows may allocate: its rows and the index that holds them.
uint64_t StripeBytes(uint64_t rows, uint64_t row_bytes) {
  return rows * row_bytes + (rows == 0 ? 0 : IndexCapacityFor(rows) * kIndexSlotBytes);
}

constexpr size_t kHugePage = size_t{2} << 20;

// Rows of `bytes`: 2 MiB aligned when that large, with transparent huge pages asked for on its
// whole 2 MiB pages (a random row of a large table is otherwise a TLB miss besides a cache
// miss; dense variables get huge pages from AllocateAlignedUninitialized). The tail stays on
// small pages, so the resident size is what the block holds.
float* AllocateRows(size_t bytes) {
  void* p = nullptr;
  if (bytes >= kHugePage) {
    if (posix_memalign(&p, kHugePage, bytes) != 0) throw std::bad_alloc();
    madvise(p, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);
  } else {
    p = std::malloc(bytes);
    if (p == nullptr) throw std::bad_alloc();
  }
  return static_cast<float*>(p);
}

}  // namespace

void EmbeddingTable::FreeDeleter::operator()(float* p) const { std::free(p); }

uint64_t EmbeddingBytesPerRowBound(const EmbeddingTableConfig& config, int num_slots) {
  // Index at its lowest load (1/4, just after doubling): 12 * 4 = 48 bytes per row.
  return static_cast<uint64_t>(config.dim) * sizeof(float) * (1 + num_slots) + kRowMetaBytes +
         kIndexSlotBytes * 4;
}

absl::StatusOr<std::unique_ptr<EmbeddingTable>> EmbeddingTable::Create(const EmbeddingTableConfig& config) {
  RETURN_IF_ERROR(ValidateEmbeddingTableConfig(config));
  auto rule = UpdateRule::Create(config.optimizer);
  if (!rule.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("embedding table '", config.name, "': ", rule.status().message()));
  }
  const uint64_t row_bytes = static_cast<uint64_t>(config.dim) * sizeof(float) * (1 + (*rule)->slots().size()) +
                             kRowMetaBytes;
  const uint64_t sketch_bytes =
      AdmissionSketch::Needed(config.admission) ? AdmissionSketch(config.admission, 0).bytes() : 0;
  uint32_t max_rows = kNoRow - 1;
  if (config.memory_cap_bytes > 0) {
    const uint64_t minimum = sketch_bytes + kStripes * StripeBytes(kMinRowsPerStripe, row_bytes);
    if (config.memory_cap_bytes < minimum) {
      return absl::InvalidArgumentError(absl::StrCat(
          "embedding table '", config.name, "': memory cap ", config.memory_cap_bytes,
          " bytes is below the minimum of ", minimum, " bytes for dim ", config.dim, " with ", (*rule)->slots().size(),
          " optimizer slots (", kMinRowsPerStripe, " rows in each of ", kStripes, " stripes, plus the sketch)"));
    }
    const uint64_t budget = (config.memory_cap_bytes - sketch_bytes) / kStripes;
    uint64_t lo = kMinRowsPerStripe, hi = kNoRow - 1;  // StripeBytes(lo) <= budget
    while (lo < hi) {
      const uint64_t mid = lo + (hi - lo + 1) / 2;
      if (StripeBytes(mid, row_bytes) <= budget) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    max_rows = static_cast<uint32_t>(lo);
  }
  return std::unique_ptr<EmbeddingTable>(new EmbeddingTable(config, std::move(*rule), max_rows));
}

EmbeddingTable::EmbeddingTable(const EmbeddingTableConfig& config, std::unique_ptr<UpdateRule> rule,
                               uint32_t max_rows_per_stripe)
    : config_(config),
      rule_(std::move(rule)),
      num_slots_(static_cast<int>(rule_->slots().size())),
      row_floats_(config.dim * (1 + num_slots_)),
      max_rows_per_stripe_(max_rows_per_stripe),
      stripes_(new Stripe[kStripes]) {
  for (const SlotSpec& slot : rule_->slots()) initial_slot_values_.push_back(slot.initial_value);
  if (AdmissionSketch::Needed(config.admission)) {
    sketch_ = std::make_unique<AdmissionSketch>(config.admission, config.initializer.seed);
    bytes_.store(static_cast<int64_t>(sketch_->bytes()));
  }
}

EmbeddingTable::~EmbeddingTable() = default;

uint64_t EmbeddingTable::KeyHash(int64_t key) {
  // Salted so that neither the stripe nor the index position correlates with PsForKey.
  return MixKey(static_cast<uint64_t>(key) ^ 0x5851f42d4c957f2dULL);
}

void EmbeddingTable::AddBytes(Stripe& s, int64_t bytes) {
  s.bytes += bytes;
  bytes_.fetch_add(bytes, std::memory_order_relaxed);
}

void EmbeddingTable::PrefetchSlot(const Stripe& s, uint64_t hash) const {
  if (s.index_capacity != 0) __builtin_prefetch(&s.index[hash & (s.index_capacity - 1)], 0, 3);
}

uint32_t EmbeddingTable::Find(const Stripe& s, int64_t key, uint64_t hash) const {
  if (s.index_capacity == 0) return kNoRow;
  const uint64_t mask = s.index_capacity - 1;
  for (uint64_t i = hash & mask;; i = (i + 1) & mask) {
    const IndexSlot& slot = s.index[i];
    if (slot.row == kNoRow) return kNoRow;
    if (slot.key == key) return slot.row;
  }
}

void EmbeddingTable::GrowIndex(Stripe& s) {
  const uint64_t old_capacity = s.index_capacity;
  const uint64_t capacity = old_capacity == 0 ? kMinIndexCapacity : old_capacity * 2;
  std::unique_ptr<IndexSlot[]> index(new IndexSlot[capacity]);
  for (uint64_t i = 0; i < capacity; ++i) index[i].row = kNoRow;
  const uint64_t mask = capacity - 1;
  for (uint64_t i = 0; i < old_capacity; ++i) {
    const IndexSlot& slot = s.index[i];
    if (slot.row == kNoRow) continue;
    uint64_t j = KeyHash(slot.key) & mask;
    while (index[j].row != kNoRow) j = (j + 1) & mask;
    index[j] = slot;
  }
  s.index = std::move(index);
  s.index_capacity = capacity;
  AddBytes(s, static_cast<int64_t>((capacity - old_capacity) * kIndexSlotBytes));
}

uint32_t EmbeddingTable::Insert(Stripe& s, int64_t key, uint64_t hash, int64_t step, int64_t protect_step,
                                const float* src) {
  if (s.live >= max_rows_per_stripe_) EvictLeastRecent(s, protect_step);
  uint32_t row;
  if (s.free_head >= 0) {
    row = static_cast<uint32_t>(s.free_head);
    s.free_head = -2 - LastAt(s, row);
  } else {
    row = s.used++;
    const RowRef ref = Locate(row);
    if (ref.block == s.blocks.size()) {
      Block block;
      // Never more rows than the cap allows: allocated memory stays under it.
      block.rows = std::min<uint32_t>(BlockRows(ref.block), max_rows_per_stripe_ - BlockStart(ref.block));
      block.data.reset(AllocateRows(static_cast<size_t>(block.rows) * row_floats_ * sizeof(float)));
      block.keys.reset(new int64_t[block.rows]);
      block.last.reset(new int64_t[block.rows]);
      s.blocks.push_back(std::move(block));
      AddBytes(s, static_cast<int64_t>(uint64_t{s.blocks.back().rows} *
                                       (static_cast<uint64_t>(row_floats_) * sizeof(float) + kRowMetaBytes)));
    }
  }
  if (uint64_t{s.live + 1} * 2 > s.index_capacity) GrowIndex(s);
  const uint64_t mask = s.index_capacity - 1;
  uint64_t i = hash & mask;
  while (s.index[i].row != kNoRow) i = (i + 1) & mask;
  s.index[i].key = key;
  s.index[i].row = row;
  ++s.live;
  rows_.fetch_add(1, std::memory_order_relaxed);

  float* data = RowData(s, row);
  if (src != nullptr) {
    std::memcpy(data, src, static_cast<size_t>(row_floats_) * sizeof(float));
  } else {
    EmbeddingInitialValue(config_.initializer, key, config_.dim, data);
    for (int k = 0; k < num_slots_; ++k) {
      std::fill_n(data + (k + 1) * config_.dim, config_.dim, initial_slot_values_[k]);
    }
  }
  KeyAt(s, row) = key;
  LastAt(s, row) = step;
  return row;
}

void EmbeddingTable::Evict(Stripe& s, uint32_t row) {
  const int64_t key = KeyAt(s, row);
  const uint64_t mask = s.index_capacity - 1;
  uint64_t i = KeyHash(key) & mask;
  while (s.index[i].row != row) i = (i + 1) & mask;
  // Backward-shift deletion: entries after the hole move into it unless their home position
  // lies cyclically in (hole, entry], so probes never need tombstones.
  for (uint64_t j = i;;) {
    j = (j + 1) & mask;
    if (s.index[j].row == kNoRow) break;
    const uint64_t home = KeyHash(s.index[j].key) & mask;
    const bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
    if (stays) continue;
    s.index[i] = s.index[j];
    i = j;
  }
  s.index[i].row = kNoRow;
  LastAt(s, row) = -2 - s.free_head;
  s.free_head = row;
  --s.live;
  rows_.fetch_sub(1, std::memory_order_relaxed);
}

void EmbeddingTable::SweepTtl(Stripe& s, int64_t step) {
  const int64_t ttl = config_.ttl_steps;
  uint64_t evicted = 0;
  for (uint32_t row = 0; row < s.used; ++row) {
    const int64_t last = LastAt(s, row);
    if (last >= 0 && step - last > ttl) {
      Evict(s, row);
      ++evicted;
    }
  }
  evicted_ttl_.fetch_add(evicted, std::memory_order_relaxed);
}

void EmbeddingTable::EvictLeastRecent(Stripe& s, int64_t protect_step) {
  const uint32_t target = std::max<uint32_t>(1, max_rows_per_stripe_ / 16);
  std::vector<int64_t> lasts;
  lasts.reserve(s.live);
  for (uint32_t row = 0; row < s.used; ++row) {
    const int64_t last = LastAt(s, row);
    if (last >= 0 && last != protect_step) lasts.push_back(last);
  }
  if (lasts.empty()) return;
  int64_t threshold = std::numeric_limits<int64_t>::max();
  if (lasts.size() > target) {
    std::nth_element(lasts.begin(), lasts.begin() + (target - 1), lasts.end());
    threshold = lasts[target - 1];
  }
  uint32_t evicted = 0;
  // Strictly older first, then rows of the threshold step by key until the target is met: the
  // order is (last update step, key), never the rows' places in memory, so copies of a table
  // built in another order (a replica rebuilt by state transfer) evict the same rows.
  std::vector<std::pair<int64_t, uint32_t>> ties;
  for (uint32_t row = 0; row < s.used; ++row) {
    const int64_t last = LastAt(s, row);
    if (last < 0 || last == protect_step) continue;
    if (last < threshold) {
      Evict(s, row);
      ++evicted;
    } else if (last == threshold) {
      ties.emplace_back(KeyAt(s, row), row);
    }
  }
  if (evicted < target && !ties.empty()) {
    const size_t want = std::min<size_t>(ties.size(), target - evicted);
    std::nth_element(ties.begin(), ties.begin() + static_cast<std::ptrdiff_t>(want - 1), ties.end());
    for (size_t i = 0; i < want; ++i) Evict(s, ties[i].second);
    evicted += static_cast<uint32_t>(want);
  }
  evicted_cap_.fetch_add(evicted, std::memory_order_relaxed);
}

void EmbeddingTable::ClearStripe(Stripe& s) {
  rows_.fetch_sub(s.live, std::memory_order_relaxed);
  AddBytes(s, -s.bytes);
  s.blocks.clear();
  s.index.reset();
  s.index_capacity = 0;
  s.live = 0;
  s.used = 0;
  s.free_head = -1;
}

EmbeddingTable::StripeGroups EmbeddingTable::GroupByStripe(absl::Span<const int64_t> keys) {
  StripeGroups g;
  g.hashes.resize(keys.size());
  g.starts.fill(0);
  for (size_t i = 0; i < keys.size(); ++i) {
    g.hashes[i] = KeyHash(keys[i]);
    ++g.starts[StripeOf(g.hashes[i]) + 1];
  }
  for (int s = 0; s < kStripes; ++s) g.starts[s + 1] += g.starts[s];
  g.order.resize(keys.size());
  std::array<uint32_t, kStripes> next;
  std::copy(g.starts.begin(), g.starts.end() - 1, next.begin());
  for (size_t i = 0; i < keys.size(); ++i) g.order[next[StripeOf(g.hashes[i])]++] = static_cast<uint32_t>(i);
  return g;
}

uint64_t EmbeddingTable::Lookup(absl::Span<const int64_t> keys, bool train, float* out) {
  const int64_t dim = config_.dim;
  const StripeGroups groups = GroupByStripe(keys);
  const std::vector<uint64_t>& hashes = groups.hashes;
  const std::array<uint32_t, kStripes + 1>& starts = groups.starts;
  const std::vector<uint32_t>& order = groups.order;
  std::vector<uint32_t> missing;
  std::vector<std::pair<uint32_t, const float*>> found;
  for (int si = 0; si < kStripes; ++si) {
    if (starts[si] == starts[si + 1]) continue;
    Stripe& s = stripes_[si];
    ReaderMutexLock lock(&s.mu);
    // Index slots and rows of a large table are cache misses: the slots a few keys ahead are
    // prefetched while one key is probed, and found rows are copied one pass later.
    found.clear();
    const uint32_t end = starts[si + 1];
    for (uint32_t o = starts[si]; o < std::min(end, starts[si] + kPrefetchAhead); ++o) PrefetchSlot(s, hashes[order[o]]);
    for (uint32_t o = starts[si]; o < end; ++o) {
      if (o + kPrefetchAhead < end) PrefetchSlot(s, hashes[order[o + kPrefetchAhead]]);
      const uint32_t i = order[o];
      const uint32_t row = Find(s, keys[i], hashes[i]);
      if (row == kNoRow) {
        missing.push_back(i);
      } else {
        const float* data = RowData(s, row);
        __builtin_prefetch(data, 0, 3);
        found.emplace_back(i, data);
      }
    }
    for (const auto& [i, data] : found) {
      std::memcpy(out + static_cast<int64_t>(i) * dim, data, static_cast<size_t>(dim) * sizeof(float));
    }
  }
  for (uint32_t i : missing) {
    EmbeddingInitialValue(config_.initializer, keys[i], dim, out + static_cast<int64_t>(i) * dim);
    if (train && sketch_ != nullptr) sketch_->Count(keys[i]);
  }
  return missing.size();
}

absl::Status EmbeddingTable::CheckPush(absl::Span<const int64_t> keys) const {
  std::array<uint64_t, kStripes> counts{};
  for (int64_t key : keys) ++counts[StripeOf(KeyHash(key))];
  for (int s = 0; s < kStripes; ++s) {
    if (counts[s] > max_rows_per_stripe_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "embedding table '", config_.name, "': a push of ", keys.size(), " keys puts ", counts[s],
          " rows into one of the table's ", kStripes, " stripes, which holds at most ", max_rows_per_stripe_,
          " rows under its memory cap of ", config_.memory_cap_bytes,
          " bytes; raise memory_cap_bytes or push fewer keys at once"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<EmbeddingTable::PushResult> EmbeddingTable::Push(absl::Span<const int64_t> keys,
                                                                const float* gradients) {
  RETURN_IF_ERROR(CheckPush(keys));
  PushResult result;
  result.step = step_.fetch_add(1, std::memory_order_acq_rel) + 1;
  const int64_t dim = config_.dim;
  const StripeGroups groups = GroupByStripe(keys);
  const std::vector<uint64_t>& hashes = groups.hashes;
  const std::array<uint32_t, kStripes + 1>& starts = groups.starts;
  const std::vector<uint32_t>& order = groups.order;
  if (config_.ttl_steps > 0) {
    // One push claims each sweep; every stripe is swept, touched by this push or not.
    int64_t due = next_sweep_.load(std::memory_order_acquire);
    if (result.step >= due &&
        next_sweep_.compare_exchange_strong(due, result.step + std::max<int64_t>(1, config_.ttl_steps / 8))) {
      for (int si = 0; si < kStripes; ++si) {
        MutexLock lock(&stripes_[si].mu);
        SweepTtl(stripes_[si], result.step);
      }
    }
  }
  std::vector<std::pair<uint32_t, const float*>> rows;
  // Sums of the gradients of keys repeated in this push (rare; they are summed as Keras
  // deduplicates IndexedSlices before a sparse apply).
  std::vector<std::unique_ptr<float[]>> summed;
  for (int si = 0; si < kStripes; ++si) {
    if (starts[si] == starts[si + 1]) continue;
    Stripe& s = stripes_[si];
    MutexLock lock(&s.mu);
    rows.clear();
    const uint32_t end = starts[si + 1];
    for (uint32_t o = starts[si]; o < std::min(end, starts[si] + kPrefetchAhead); ++o) PrefetchSlot(s, hashes[order[o]]);
    for (uint32_t o = starts[si]; o < end; ++o) {
      if (o + kPrefetchAhead < end) PrefetchSlot(s, hashes[order[o + kPrefetchAhead]]);
      const uint32_t i = order[o];
      const float* grad = gradients + static_cast<int64_t>(i) * dim;
      uint32_t row = Find(s, keys[i], hashes[i]);
      if (row == kNoRow) {
        if (sketch_ != nullptr && !sketch_->Admitted(keys[i])) {
          ++result.dropped;
          continue;
        }
        row = Insert(s, keys[i], hashes[i], result.step, result.step, nullptr);
        ++result.created;
      } else if (LastAt(s, row) == result.step) {
        auto it = std::find_if(rows.begin(), rows.end(), [row](const auto& r) { return r.first == row; });
        if (it != rows.end()) {
          summed.emplace_back(new float[dim]);
          float* sum = summed.back().get();
          for (int64_t d = 0; d < dim; ++d) sum[d] = it->second[d] + grad[d];
          it->second = sum;
          continue;
        }
      } else {
        LastAt(s, row) = result.step;
      }
      rows.emplace_back(row, grad);
    }
    ApplySorted(s, rows, result.step);
  }
  admitted_.fetch_add(result.created, std::memory_order_relaxed);
  dropped_.fetch_add(result.dropped, std::memory_order_relaxed);
  return result;
}

void EmbeddingTable::ApplySorted(Stripe& s, std::vector<std::pair<uint32_t, const float*>>& rows, int64_t step) {
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<int64_t> offsets;
  std::vector<const float*> grads;
  std::array<float*, 4> slots{};
  const int64_t dim = config_.dim;
  for (size_t begin = 0; begin < rows.size();) {
    const uint32_t block = Locate(rows[begin].first).block;
    offsets.clear();
    grads.clear();
    size_t end = begin;
    for (; end < rows.size(); ++end) {
      const RowRef ref = Locate(rows[end].first);
      if (ref.block != block) break;
      // Row r of "var" at data + r * dim and of slot k at data + (k + 1) * dim + r * dim: the
      // interleaved block read as UpdateRule::ApplyRows' row-major tables.
      offsets.push_back(static_cast<int64_t>(ref.offset) * (1 + num_slots_));
      grads.push_back(rows[end].second);
    }
    float* data = s.blocks[block].data.get();
    for (int k = 0; k < num_slots_; ++k) slots[k] = data + (k + 1) * dim;
    // The table's pushes are its versions: the decay is keyed on the pushes before this one.
    rule_->ApplyRowsScaled(data, absl::MakeSpan(slots.data(), num_slots_), dim, offsets, grads, step,
                           UpdateRule::DecayScale(rule_->config(), step - 1));
    begin = end;
  }
}

EmbeddingTableStats EmbeddingTable::Stats() const {
  EmbeddingTableStats out;
  out.rows = static_cast<uint64_t>(rows_.load(std::memory_order_relaxed));
  out.step = step_.load(std::memory_order_relaxed);
  out.admitted = admitted_.load(std::memory_order_relaxed);
  out.evicted_ttl = evicted_ttl_.load(std::memory_order_relaxed);
  out.evicted_cap = evicted_cap_.load(std::memory_order_relaxed);
  out.dropped_gradients = dropped_.load(std::memory_order_relaxed);
  out.memory_bytes = static_cast<uint64_t>(bytes_.load(std::memory_order_relaxed));
  return out;
}

bool EmbeddingTable::HasRow(int64_t key) const {
  const uint64_t hash = KeyHash(key);
  const Stripe& s = stripes_[StripeOf(hash)];
  ReaderMutexLock lock(&s.mu);
  return Find(s, key, hash) != kNoRow;
}

EmbeddingTableState EmbeddingTable::Export() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
  for (int si = 0; si < kStripes; ++si) stripes_[si].mu.ReaderLock();
  EmbeddingTableState state;
  state.step = step_.load(std::memory_order_acquire);
  int64_t n = 0;
  for (int si = 0; si < kStripes; ++si) n += stripes_[si].live;
  const int64_t dim = config_.dim;
  state.keys = Tensor(DType::kI64, {n});
  state.last_update = Tensor(DType::kI64, {n});
  state.values = Tensor(DType::kF32, {n, dim});
  for (int k = 0; k < num_slots_; ++k) state.slots.emplace_back(DType::kF32, Shape{n, dim});
  int64_t at = 0;
  for (int si = 0; si < kStripes; ++si) {
    const Stripe& s = stripes_[si];
    for (uint32_t row = 0; row < s.used; ++row) {
      const int64_t last = LastAt(s, row);
      if (last < 0) continue;
      state.keys.data<int64_t>()[at] = KeyAt(s, row);
      state.last_update.data<int64_t>()[at] = last;
      const float* data = RowData(s, row);
      std::memcpy(state.values.data<float>() + at * dim, data, static_cast<size_t>(dim) * sizeof(float));
      for (int k = 0; k < num_slots_; ++k) {
        std::memcpy(state.slots[k].data<float>() + at * dim, data + (k + 1) * dim, static_cast<size_t>(dim) * sizeof(float));
      }
      ++at;
    }
  }
  if (sketch_ != nullptr) {
    state.sketch = Tensor(DType::kI32, {AdmissionSketch::kDepth, sketch_->width()});
    sketch_->ExportTo(state.sketch.data<int32_t>());
  }
  for (int si = kStripes - 1; si >= 0; --si) stripes_[si].mu.ReaderUnlock();
  return state;
}

absl::Status EmbeddingTable::CheckImport(absl::Span<const EmbeddingTableState* const> states,
                                         const std::function<bool(int64_t)>& keep) const {
  const int64_t dim = config_.dim;
  auto bad = [&](size_t i, auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat("embedding table '", config_.name, "': restore part ", i, ": ", parts...));
  };
  absl::flat_hash_set<int64_t> kept;
  for (size_t i = 0; i < states.size(); ++i) {
    const EmbeddingTableState& st = *states[i];
    const int64_t n = st.keys.num_elements();
    if (st.keys.dtype() != DType::kI64 || st.keys.rank() != 1) return bad(i, "keys are not i64 [rows]");
    if (st.last_update.dtype() != DType::kI64 || st.last_update.shape() != Shape{n}) {
      return bad(i, "last-update steps are not i64 [", n, "]");
    }
    if (st.values.dtype() != DType::kF32 || st.values.shape() != Shape{n, dim}) {
      return bad(i, "values are not f32 [", n, ", ", dim, "]");
    }
    if (static_cast<int>(st.slots.size()) != num_slots_) {
      return bad(i, "holds ", st.slots.size(), " optimizer slots; the table's optimizer has ", num_slots_);
    }
    for (const Tensor& slot : st.slots) {
      if (slot.dtype() != DType::kF32 || slot.shape() != Shape{n, dim}) {
        return bad(i, "a slot is not f32 [", n, ", ", dim, "]");
      }
    }
    if (sketch_ != nullptr && st.sketch.num_elements() > 0 &&
        (st.sketch.dtype() != DType::kI32 ||
         st.sketch.shape() != Shape{AdmissionSketch::kDepth, static_cast<int64_t>(sketch_->width())})) {
      return bad(i, "sketch is not i32 [", AdmissionSketch::kDepth, ", ", sketch_->width(), "]");
    }
    // The push counter keys the TTL and the decay; from a step past 2^62 (only a damaged
    // checkpoint or state transfer carries one) it could overflow, wrapping negative.
    if (st.step < 0 || st.step > kMaxImportedStep) {
      return bad(i, "step ", st.step, " is negative or over ", kMaxImportedStep);
    }
    for (int64_t r = 0; r < n; ++r) {
      const int64_t key = st.keys.data<int64_t>()[r];
      if (st.last_update.data<int64_t>()[r] < 0) return bad(i, "key ", key, " has a negative last-update step");
      if (keep(key) && !kept.insert(key).second) return bad(i, "key ", key, " is in the checkpoint twice");
    }
  }
  return absl::OkStatus();
}

absl::Status EmbeddingTable::Import(absl::Span<const EmbeddingTableState* const> states,
                                    const std::function<bool(int64_t)>& keep) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  RETURN_IF_ERROR(CheckImport(states, keep));
  const int64_t dim = config_.dim;
  for (int si = 0; si < kStripes; ++si) stripes_[si].mu.Lock();
  int64_t step = 0;
  for (int si = 0; si < kStripes; ++si) ClearStripe(stripes_[si]);
  if (sketch_ != nullptr) sketch_->Clear();
  std::vector<float> row(static_cast<size_t>(row_floats_));
  for (const EmbeddingTableState* st : states) {
    step = std::max(step, st->step);
    if (sketch_ != nullptr && st->sketch.num_elements() > 0) sketch_->AddFrom(st->sketch.data<int32_t>());
    for (int64_t r = 0; r < st->keys.num_elements(); ++r) {
      const int64_t key = st->keys.data<int64_t>()[r];
      if (!keep(key)) continue;
      std::memcpy(row.data(), st->values.data<float>() + r * dim, static_cast<size_t>(dim) * sizeof(float));
      for (int k = 0; k < num_slots_; ++k) {
        std::memcpy(row.data() + (k + 1) * dim, st->slots[k].data<float>() + r * dim, static_cast<size_t>(dim) * sizeof(float));
      }
      const uint64_t hash = KeyHash(key);
      // Protecting step -1 protects nothing: a restore over the cap keeps the rows updated last.
      Insert(stripes_[StripeOf(hash)], key, hash, st->last_update.data<int64_t>()[r], -1, row.data());
    }
  }
  step_.store(step, std::memory_order_release);
  next_sweep_.store(0, std::memory_order_release);
  restores_.fetch_add(1, std::memory_order_acq_rel);
  for (int si = kStripes - 1; si >= 0; --si) stripes_[si].mu.Unlock();
  return absl::OkStatus();
}

void EmbeddingTable::SetReplicaCounters(uint64_t restores, int64_t next_sweep) {
  restores_.store(restores, std::memory_order_release);
  next_sweep_.store(next_sweep, std::memory_order_release);
}

}  // namespace asyncps::ps
