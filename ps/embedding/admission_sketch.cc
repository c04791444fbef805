#include "ps/embedding/admission_sketch.h"

#include <algorithm>

#include "ps/embedding/key_partition.h"

namespace asyncps::ps {
namespace {

constexpr uint16_t kSaturated = 0xffff;

uint32_t RoundUpPow2(uint32_t x) {
  uint32_t p = 1;
  while (p < x) p <<= 1;
  return p;
}

}  // namespace

bool AdmissionSketch::Needed(const EmbeddingAdmission& admission) {
  return admission.min_count > 1 || admission.probability > 0.0f;
}

AdmissionSketch::AdmissionSketch(const EmbeddingAdmission& admission, uint64_t seed)
    : admission_(admission),
      seed_(MixKey(seed ^ 0x243f6a8885a308d3ULL)),
      width_(RoundUpPow2(std::max<uint32_t>(
          16, admission.sketch_width == 0 ? EmbeddingAdmission::kDefaultSketchWidth : admission.sketch_width))),
      counters_(new std::atomic<uint16_t>[static_cast<size_t>(kDepth) * width_]) {
  Clear();
}

void AdmissionSketch::Hashes(int64_t key, uint64_t* h1, uint64_t* h2) const {
  *h1 = MixKey(static_cast<uint64_t>(key) ^ seed_);
  *h2 = MixKey(*h1) | 1;  // odd: the kDepth probes of a key are distinct
}

void AdmissionSketch::Count(int64_t key) {
  uint64_t h1, h2;
  Hashes(key, &h1, &h2);
  for (int r = 0; r < kDepth; ++r) {
    std::atomic<uint16_t>& c = counters_[static_cast<size_t>(r) * width_ + Index(h1, h2, r)];
    uint16_t v = c.load(std::memory_order_relaxed);
    while (v != kSaturated && !c.compare_exchange_weak(v, static_cast<uint16_t>(v + 1), std::memory_order_relaxed)) {
    }
  }
}

uint32_t AdmissionSketch::Estimate(int64_t key) const {
  uint64_t h1, h2;
  Hashes(key, &h1, &h2);
  uint32_t best = kSaturated;
  for (int r = 0; r < kDepth; ++r) {
    best = std::min<uint32_t>(
        best, counters_[static_cast<size_t>(r) * width_ + Index(h1, h2, r)].load(std::memory_order_relaxed));
  }
  return best;
}

bool AdmissionSketch::Admitted(int64_t key) const {
  const uint32_t c = Estimate(key);
  if (admission_.min_count > 1 && c < admission_.min_count) return false;
  if (admission_.probability > 0.0f) {
    const uint64_t h = MixKey(MixKey(static_cast<uint64_t>(key) ^ seed_) + c * 0x9e3779b97f4a7c15ULL + 1);
    const float u = static_cast<float>(h >> 40) * (1.0f / 16777216.0f);
    return u < admission_.probability;
  }
  return true;
}

void AdmissionSketch::ExportTo(int32_t* out) const {
  const size_t n = static_cast<size_t>(kDepth) * width_;
  for (size_t i = 0; i < n; ++i) out[i] = counters_[i].load(std::memory_order_relaxed);
}

void AdmissionSketch::AddFrom(const int32_t* in) {
  const size_t n = static_cast<size_t>(kDepth) * width_;
  for (size_t i = 0; i < n; ++i) {
    const int64_t sum = int64_t{counters_[i].load(std::memory_order_relaxed)} + std::max<int32_t>(in[i], 0);
    counters_[i].store(static_cast<uint16_t>(std::min<int64_t>(sum, kSaturated)), std::memory_order_relaxed);
  }
}

void AdmissionSketch::Clear() {
  const size_t n = static_cast<size_t>(kDepth) * width_;
  for (size_t i = 0; i < n; ++i) counters_[i].store(0, std::memory_order_relaxed);
}

}  // namespace asyncps::ps
