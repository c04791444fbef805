#ifndef ASYNCPS_INCLUDE_ASYNCPS_SYNC_H_
#define ASYNCPS_INCLUDE_ASYNCPS_SYNC_H_

// Public API: asyncps::Mutex and MutexLock with Abseil's thread-safety annotations, for
// state a program shares between threads. Contracts are on each declaration.

#include "core/sync.h"  // IWYU pragma: export

#endif  // ASYNCPS_INCLUDE_ASYNCPS_SYNC_H_
