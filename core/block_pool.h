#ifndef ASYNCPS_CORE_BLOCK_POOL_H_
#define ASYNCPS_CORE_BLOCK_POOL_H_

#include <cstddef>
#include <memory>

namespace asyncps {

// Large aligned blocks kept after use for the next allocation of about the same size, owned by
// whoever allocates blocks of a repeated size (a connection's frame decoder: every pull of a
// variable receives the same bytes).
//
// Why: glibc hands a block over its mmap threshold (32 MiB at most) back to the kernel when it
// is freed, and the kernel zeroes a fresh mapping page by page on first touch: a PS pull of a
// 64 MiB variable paid that on both sides, more than the bytes' own copy through loopback TCP
// (perf: clear_page_erms 12% of the run, _copy_to_iter 7%). malloc tuning does not replace
// this: mallopt caps M_MMAP_THRESHOLD at 32 MiB, and threads other than main allocate from
// arenas of at most 64 MiB, which map anything larger whatever the tuning (measured: the
// 64 MiB pull stayed at ~0.65x raw TCP unless every thread shared one arena).
//
// Blocks under `min_block_bytes` are not kept (malloc reuses those itself). A block handed out
// may be released on any thread and may outlive the pool (it is then freed). Idle blocks are
// bounded by max_idle_bytes and max_idle_blocks, the oldest freed first.
//
// Thread-safe.
class BlockPool {
 public:
  struct Options {
    size_t min_block_bytes = size_t{1} << 20;
    size_t max_idle_bytes = size_t{256} << 20;
    size_t max_idle_blocks = 2;
  };

  BlockPool();
  explicit BlockPool(Options options);
  // Frees the idle blocks; blocks in use are freed when released.
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // `bytes` uninitialised bytes aligned to 64 (as AllocateAlignedUninitialized, core/tensor.h):
  // an idle block of `bytes` to 1/8 more when there is one, else a new block. The caller must
  // not let unwritten bytes escape (a reused block holds its last user's bytes).
  std::shared_ptr<void> AllocateUninitialized(size_t bytes);

  // Blocks kept idle now (for tests).
  size_t idle_blocks() const;

 private:
  class Shelf;
  std::shared_ptr<Shelf> shelf_;  // shared with the blocks in use, which come back to it
};

}  // namespace asyncps

#endif  // ASYNCPS_CORE_BLOCK_POOL_H_
