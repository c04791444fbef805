#!/usr/bin/env bash
# Installs every Debian package asyncps needs to build, test and run its examples.
# Idempotent: packages already present are left alone, and apt-get is skipped entirely
# when nothing is missing.
set -euo pipefail

packages=(
  capnproto libcapnp-dev libboost-dev libboost-system-dev libabsl-dev libspdlog-dev
  prometheus-cpp-dev libgtest-dev libgmock-dev libbenchmark-dev libeigen3-dev
  nlohmann-json3-dev zlib1g-dev pkgconf cmake ninja-build g++ ccache libssl-dev clang
  dataset-fashion-mnist
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "install_deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install_deps: installing ${missing[*]}"
sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
