#!/usr/bin/env bash
# Lays out under PREFIX what the image runs:   deploy/stage_image.sh BUILD_DIR PREFIX
#   PREFIX/bin/asyncps_ps, PREFIX/bin/asyncps_launch   from `cmake --install BUILD_DIR` (which
#       also lays out the package's headers, static libraries and CMake config under PREFIX)
#   PREFIX/bin/fashion_mnist   the example the image runs by default (not part of the installed
#       package), when BUILD_DIR has it (a build with LibTorch)
#   PREFIX/entrypoint.sh       deploy/entrypoint.sh
# deploy/Dockerfile's build stage runs it into /opt/asyncps and its runtime stage copies bin/
# and entrypoint.sh; deploy/runtime_packages_test.sh runs it into a scratch prefix and checks
# that the runtime stage's packages provide every shared library those binaries need.
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 BUILD_DIR PREFIX" >&2; exit 2; }
src=$(cd "$(dirname "$0")/.." && pwd)
build=$1
prefix=$2
cmake --install "$build" --prefix "$prefix"
if [[ -x "$build/bin/fashion_mnist" ]]; then
  install -m 0755 "$build/bin/fashion_mnist" "$prefix/bin/fashion_mnist"
fi
install -m 0755 "$src/deploy/entrypoint.sh" "$prefix/entrypoint.sh"
