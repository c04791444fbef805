#ifndef ASYNCPS_PS_EMBEDDING_KEY_PARTITION_H_
#define ASYNCPS_PS_EMBEDDING_KEY_PARTITION_H_

#include <cstdint>

namespace asyncps::ps {

// Which parameter server holds an embedding key: the one stable function that clients (to send
// a key to its PS) and parameter servers (to keep, on a restore into another PS count, the keys
// that are now theirs) both use. Its name is recorded in checkpoints (kKeyPartitionName); a
// change of the function must change the name.
//
// Jump consistent hash (Lamping & Veach 2014) of the key's SplitMix64 mix: keys spread evenly
// whatever their pattern (sequential ids, hashed n-grams), and going from n to n + 1 PS moves only
// about 1/(n + 1) of the keys.

inline constexpr const char kKeyPartitionName[] = "jump_splitmix64_v1";

// SplitMix64's finaliser: a bijection on 64 bits with full avalanche.
inline uint64_t MixKey(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The PS (0 .. num_ps - 1) that holds `key`; 0 when num_ps <= 1. Pure; any thread.
inline int PsForKey(int64_t key, int num_ps) {
  if (num_ps <= 1) return 0;
  uint64_t h = MixKey(static_cast<uint64_t>(key));
  int64_t b = -1;
  int64_t j = 0;
  while (j < num_ps) {
    b = j;
    h = h * 2862933555777941757ULL + 1;
    j = static_cast<int64_t>(static_cast<double>(b + 1) *
                             (static_cast<double>(int64_t{1} << 31) / static_cast<double>((h >> 33) + 1)));
  }
  return static_cast<int>(b);
}

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_EMBEDDING_KEY_PARTITION_H_
