#ifndef ASYNCPS_METRICS_THREAD_STACKS_H_
#define ASYNCPS_METRICS_THREAD_STACKS_H_

#include <cstddef>

namespace asyncps::metrics {

// Why this exists: glibc (bug 11787) carves a thread's static TLS out of the stack size the
// caller asked for, and pthread_create fails with EINVAL when the TLS does not fit. civetweb
// (the HTTP server behind /metrics) starts every thread with a fixed 100 KiB stack
// (USE_STACK_SIZE=102400 in Debian's build), while a process that has loaded LibTorch carries
// ~105 KiB of static TLS (OpenBLAS 60 KiB, glog 30 KiB, libtorch_cpu 10 KiB, ...). civetweb's
// first worker thread then cannot start, mg_start returns NULL, and CivetServer throws "null
// context when constructing CivetServer" right after a successful bind.
//
// This library therefore defines pthread_attr_setstacksize for the whole process: it asks
// glibc for the requested size plus the process's static TLS, so every caller gets the usable
// stack it asked for. Larger sizes only reserve address space; pages are committed on use.

// The bytes of static TLS of every object loaded now (sum of PT_TLS sizes, aligned). Computed
// once, at the first call. Thread-safe.
size_t StaticTlsBytes();

// True when this process's pthread_attr_setstacksize is the TLS-aware one above (it is when
// the executable exports it; see metrics/CMakeLists.txt). Tests check it.
bool TlsAwareStacksInstalled();

}  // namespace asyncps::metrics

#endif  // ASYNCPS_METRICS_THREAD_STACKS_H_
