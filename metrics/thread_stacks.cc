#include "metrics/thread_stacks.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>

#include <cerrno>
#include <limits>

namespace asyncps::metrics {
namespace {

using SetStackSizeFn = int (*)(pthread_attr_t*, size_t);

int AddTls(dl_phdr_info* info, size_t /*size*/, void* data) {
  size_t* total = static_cast<size_t*>(data);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_TLS) continue;
    const size_t align = ph.p_align > 0 ? ph.p_align : 1;
    *total += (ph.p_memsz + align - 1) / align * align;
  }
  return 0;
}

SetStackSizeFn RealSetStackSize() {
  static const SetStackSizeFn real =
      reinterpret_cast<SetStackSizeFn>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  return real;
}

}  // namespace

size_t StaticTlsBytes() {
  // Libraries dlopen'ed later get dynamic TLS, which does not live on the stack; the static
  // set is fixed once the process has started.
  static const size_t bytes = [] {
    size_t total = 0;
    dl_iterate_phdr(&AddTls, &total);
    return total;
  }();
  return bytes;
}

bool TlsAwareStacksInstalled() {
  return reinterpret_cast<void*>(dlsym(RTLD_DEFAULT, "pthread_attr_setstacksize")) !=
         reinterpret_cast<void*>(RealSetStackSize());
}

}  // namespace asyncps::metrics

// Overrides libc's definition for every library in the process (the executable's symbol comes
// first in the lookup scope). glibc's own calls do not go through here.
extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t size) {
  asyncps::metrics::SetStackSizeFn real = asyncps::metrics::RealSetStackSize();
  if (real == nullptr) return ENOSYS;
  const size_t tls = asyncps::metrics::StaticTlsBytes();
  if (size > std::numeric_limits<size_t>::max() - tls) return real(attr, size);
  return real(attr, size + tls);
}
