// Which OpenBLAS kernel family the launcher names for its tasks.
//
// Debian 12's OpenBLAS (0.3.21, built with DYNAMIC_ARCH) picks its kernels by CPU model, and a
// CPU newer than its release (an Emerald Rapids VM reports family 6 model 0xCF) falls back to
// the Prescott (SSE3) kernels: the MLP's matrix products then take 2.4-4x the CPU they take
// with the AVX-512 kernels. OpenBLAS reads OPENBLAS_CORETYPE once, when it is loaded, so the
// choice has to be in a process's environment before it starts: the launcher puts it there.
#ifndef ASYNCPS_DEPLOY_BLAS_KERNEL_H_
#define ASYNCPS_DEPLOY_BLAS_KERNEL_H_

#include <string>

namespace asyncps::deploy {

// The vector extensions OpenBLAS's x86-64 kernel families need.
struct CpuVectorFeatures {
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512cd = false;
  bool avx512dq = false;
  bool avx512vl = false;
  bool avx2 = false;
  bool fma = false;
};

// What this CPU has (cpuid, through the compiler's builtins). Thread-safe.
CpuVectorFeatures ThisCpuVectorFeatures();

// The OPENBLAS_CORETYPE naming the fastest kernel family `cpu` can run whatever its model:
// "SkylakeX" with AVX-512 F/BW/CD/DQ/VL, "Haswell" with AVX2 and FMA, else "" (leave the
// choice to OpenBLAS, whose older families every x86-64 CPU runs).
std::string OpenBlasCoreTypeFor(const CpuVectorFeatures& cpu);

}  // namespace asyncps::deploy

#endif  // ASYNCPS_DEPLOY_BLAS_KERNEL_H_
