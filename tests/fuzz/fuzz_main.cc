// libFuzzer entry point (clang -fsanitize=fuzzer): see server_fuzz_entry.h.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/server_fuzz_entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return asyncps::fuzz::FuzzServerInput(data, size);
}
