#!/usr/bin/env bash
# Proves the installed package works for a program outside this tree:
#   1. `cmake --install` of a built tree into a fresh prefix (BUILD_DIR/check-install/prefix);
#   2. every installed public header compiles on its own with only that prefix on the include
#      path (a header the install left out fails here, not in a user's build);
#   3. examples/installed/ configured in a fresh build dir with find_package(asyncps) and
#      -DCMAKE_PREFIX_PATH=<prefix> (Ninja, ccache), built, and run on a local cluster started
#      by the installed asyncps_launch (2 PS, 2 workers); it checks its own results;
#   4. when the package has the LibTorch part, a program linking asyncps::torch.
# No network. Any failing step fails the script.
#   scripts/check_install.sh [BUILD_DIR]          (BUILD_DIR: a built tree; default build)
#   ASYNCPS_INSTALLED_PREFIX=DIR scripts/check_install.sh   checks DIR as installed, skipping 1.
set -euo pipefail
cd "$(dirname "$0")/.."
src_dir=$PWD
build_dir="${1:-build}"
work="$build_dir/check-install"
work=$(mkdir -p "$work" && cd "$work" && pwd)
prefix="${ASYNCPS_INSTALLED_PREFIX:-$work/prefix}"
fail() { echo "check_install: FAILED: $*" >&2; exit 1; }

if [[ -z "${ASYNCPS_INSTALLED_PREFIX:-}" ]]; then
  echo "check_install: installing $build_dir into $prefix"
  rm -rf "$prefix"
  cmake --install "$build_dir" --prefix "$prefix" >"$work/install.log" 2>&1 ||
    { cat "$work/install.log" >&2; fail "cmake --install $build_dir"; }
  grep -- '-- asyncps:' "$work/install.log" || true
fi

# 2. Every public header on its own (as a program may include just that one), with nothing of
# the source or build tree reachable: only the include root asyncpsTargets.cmake gives
# asyncps::asyncps. Object files through ccache, so a rerun costs nothing.
headers=("$prefix"/include/asyncps/*.h)
[[ -e "${headers[0]}" ]] || fail "no public headers in $prefix/include/asyncps"
header_dir="$work/public-headers"
rm -rf "$header_dir"
mkdir -p "$header_dir"
for h in "${headers[@]}"; do
  echo "#include \"asyncps/$(basename "$h")\"" >"$header_dir/$(basename "$h" .h).cc"
done
export CCACHE_BASEDIR="$work"
compile=(${CXX:-c++})
command -v ccache >/dev/null && compile=(ccache "${compile[@]}")
(cd "$header_dir" && printf '%s\n' *.cc |
   xargs -P "${ASYNCPS_BUILD_JOBS:-2}" -I{} "${compile[@]}" -std=c++20 -c -I"$prefix/include" {} -o {}.o) ||
  fail "an installed public header does not compile against $prefix alone (see above)"
echo "check_install: ${#headers[@]} public headers each compile against the prefix alone"

# 3. The out-of-tree example, in a fresh build dir. CCACHE_BASEDIR keeps the cache warm across
# runs (the paths under $work are the same each time).
example_build="$work/example"
rm -rf "$example_build"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
cmake -S "$src_dir/examples/installed" -B "$example_build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_PREFIX_PATH="$prefix" "${launcher[@]}" >"$work/configure.log" 2>&1 ||
  { cat "$work/configure.log" >&2; fail "configuring examples/installed against $prefix"; }
grep -q "$prefix/lib/cmake/asyncps" "$example_build/CMakeCache.txt" ||
  fail "find_package(asyncps) did not pick the package in $prefix"
cmake --build "$example_build" -j "${ASYNCPS_BUILD_JOBS:-2}" ||
  fail "building examples/installed against $prefix"

echo "check_install: running exactly_once_sum on a local cluster (2 PS, 2 workers)"
# The example's `run` target: the imported asyncps::asyncps_launch with the program. No metrics
# endpoints: nothing scrapes them here. timeout signals its whole process group (the launcher
# stops its tasks on SIGTERM).
ASYNCPS_METRICS_PORT=-1 timeout 120 cmake --build "$example_build" --target run ||
  fail "exactly_once_sum on a local cluster (exit code $?)"

# 4. The LibTorch component, when the package has it: find_package(asyncps COMPONENTS torch)
# and a program linking asyncps::torch (it calls into libasyncps_torch.a and LibTorch).
if [[ -e "$prefix/lib/cmake/asyncps/asyncpsTorchTargets.cmake" ]]; then
  torch_src="$work/torch-smoke-src"
  rm -rf "$torch_src" "$work/torch-smoke"
  mkdir -p "$torch_src"
  cat >"$torch_src/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.22)
project(asyncps_torch_smoke LANGUAGES C CXX)
set(CMAKE_CXX_STANDARD 20)
find_package(asyncps REQUIRED COMPONENTS torch)
add_executable(torch_smoke torch_smoke.cc)
target_link_libraries(torch_smoke PRIVATE asyncps::torch asyncps::asyncps)
CMAKE
  cat >"$torch_src/torch_smoke.cc" <<'CC'
#include "asyncps/torch.h"
int main() {
  asyncps::torch_bridge::SetNumThreads(1);
  return 0;
}
CC
  cmake -S "$torch_src" -B "$work/torch-smoke" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" "${launcher[@]}" \
    >"$work/torch-configure.log" 2>&1 ||
    { cat "$work/torch-configure.log" >&2; fail "find_package(asyncps COMPONENTS torch) against $prefix"; }
  cmake --build "$work/torch-smoke" >/dev/null || fail "linking asyncps::torch"
  "$work/torch-smoke/torch_smoke" || fail "a program linked with asyncps::torch"
  echo "check_install: asyncps::torch links and runs"
fi
echo "check_install: ok"
