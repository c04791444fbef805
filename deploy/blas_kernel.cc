#include "deploy/blas_kernel.h"

namespace asyncps::deploy {

CpuVectorFeatures ThisCpuVectorFeatures() {
  CpuVectorFeatures cpu;
#if defined(__x86_64__)
  __builtin_cpu_init();
  cpu.avx512f = __builtin_cpu_supports("avx512f");
  cpu.avx512bw = __builtin_cpu_supports("avx512bw");
  cpu.avx512cd = __builtin_cpu_supports("avx512cd");
  cpu.avx512dq = __builtin_cpu_supports("avx512dq");
  cpu.avx512vl = __builtin_cpu_supports("avx512vl");
  cpu.avx2 = __builtin_cpu_supports("avx2");
  cpu.fma = __builtin_cpu_supports("fma");
#endif
  return cpu;
}

std::string OpenBlasCoreTypeFor(const CpuVectorFeatures& cpu) {
  if (cpu.avx512f && cpu.avx512bw && cpu.avx512cd && cpu.avx512dq && cpu.avx512vl) {
    return "SkylakeX";
  }
  if (cpu.avx2 && cpu.fma) return "Haswell";
  return "";
}

}  // namespace asyncps::deploy
