#!/usr/bin/env bash
# Fails when anything reachable from a public header (include/asyncps/*.h: the umbrella
# asyncps.h and the headers outside it, process.h, checkpoints.h, torch.h) includes Asio, a
# generated Cap'n Proto header, Eigen or spdlog: user programs must not pay for (or depend on)
# the implementation's heavy headers. (scripts/check_install.sh checks that the installed
# package holds everything they reach.)
#   scripts/check_public_headers.sh [BUILD_DIR]   (BUILD_DIR: where generated headers live)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${1:-build}"
deps=$(for h in include/asyncps/*.h; do echo "#include \"asyncps/$(basename "$h")\""; done |
       g++ -std=c++20 -I. -Iinclude -I"$build_dir" -M -x c++ - | tr ' \\' '\n\n' | grep -v '^$')
bad=$(echo "$deps" | grep -E 'boost/asio|\.capnp\.h$|/eigen3/|/Eigen/|/spdlog/' || true)
if [[ -n "$bad" ]]; then
  echo "check_public_headers: include/asyncps/*.h reach heavy headers:" >&2
  echo "$bad" >&2
  exit 1
fi
echo "check_public_headers: ok ($(echo "$deps" | wc -l) headers, none of Asio/capnp-generated/Eigen/spdlog)"
