#include "deploy/blas_kernel.h"

#include "gtest/gtest.h"

namespace asyncps::deploy {
namespace {

CpuVectorFeatures Avx512() {
  CpuVectorFeatures cpu;
  cpu.avx512f = cpu.avx512bw = cpu.avx512cd = cpu.avx512dq = cpu.avx512vl = true;
  cpu.avx2 = cpu.fma = true;
  return cpu;
}

TEST(OpenBlasCoreTypeTest, AvxFiveTwelveCpusGetTheSkylakeXKernels) {
  EXPECT_EQ(OpenBlasCoreTypeFor(Avx512()), "SkylakeX");
}

TEST(OpenBlasCoreTypeTest, APartialAvxFiveTwelveIsTreatedAsAvxTwo) {
  // Knights Landing has F and CD but neither BW, DQ nor VL: the SkylakeX kernels would fault.
  CpuVectorFeatures cpu = Avx512();
  cpu.avx512bw = cpu.avx512dq = cpu.avx512vl = false;
  EXPECT_EQ(OpenBlasCoreTypeFor(cpu), "Haswell");
}

TEST(OpenBlasCoreTypeTest, AvxTwoNeedsFmaToo) {
  CpuVectorFeatures cpu;
  cpu.avx2 = cpu.fma = true;
  EXPECT_EQ(OpenBlasCoreTypeFor(cpu), "Haswell");
  cpu.fma = false;
  EXPECT_EQ(OpenBlasCoreTypeFor(cpu), "");
}

TEST(OpenBlasCoreTypeTest, OlderCpusAreLeftToOpenBlas) {
  EXPECT_EQ(OpenBlasCoreTypeFor(CpuVectorFeatures{}), "");
}

TEST(OpenBlasCoreTypeTest, ThisCpusChoiceIsOneOfTheFamilies) {
  const std::string core = OpenBlasCoreTypeFor(ThisCpuVectorFeatures());
  EXPECT_TRUE(core.empty() || core == "SkylakeX" || core == "Haswell") << core;
}

}  // namespace
}  // namespace asyncps::deploy
