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
  # examples/wordnet_supersense and its accuracy test read WordNet 3.0 (/usr/share/wordnet).
  wordnet-base
  # LibTorch for the models on the workers. OpenBLAS is not optional in practice: LibTorch
  # calls the system BLAS, and Debian's default reference BLAS makes training ~10x slower.
  libtorch-dev libopenblas0-pthread
  # Operating a job: tests/integration/observability_test starts a real Prometheus and renders
  # the chief's status page in headless Chromium.
  prometheus chromium
  # Hosts in network namespaces (scripts/netns_hosts.py, asyncps_launch --hosts netns):
  # partitions are nftables drop rules; ip and tc come with iproute2. (Debian leaves the nftables
  # service disabled: installing it loads no rules on the machine itself.)
  nftables iproute2
)
# The linker CMakeLists.txt picks when present (faster links than ld.bfd).
packages+=(lld)
# kubectl parses deploy/k8s/*.yaml offline in k8s_manifests_test. Any kubectl will do, and
# Debian's kubernetes-client cannot be installed beside another package that ships
# /usr/bin/kubectl (e.g. Google's), so it is only added when there is none.
command -v kubectl >/dev/null 2>&1 || packages+=(kubernetes-client)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

check_blas() {
  # libopenblas0-pthread registers itself as the libblas.so.3 alternative with a higher
  # priority than the reference BLAS; say so if something else is selected.
  local alt=libblas.so.3-x86_64-linux-gnu
  if command -v update-alternatives >/dev/null &&
     ! update-alternatives --query "$alt" 2>/dev/null | grep -q '^Value: .*openblas'; then
    echo "install_deps: warning: $alt does not point at OpenBLAS; LibTorch will be ~10x slower" >&2
    echo "install_deps:   fix: update-alternatives --set $alt /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3" >&2
  fi
}

if ((${#missing[@]} == 0)); then
  echo "install_deps: all ${#packages[@]} packages present"
  check_blas
  exit 0
fi

echo "install_deps: installing ${missing[*]}"
sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
# Debian's prometheus package starts a daemon on :9090 where an init system runs services.
# Tests start their own Prometheus on an ephemeral port; a policy-rc.d that refuses every
# service start (exit 101) keeps the package from starting one. An existing policy is left
# alone, and ours is removed again afterwards.
policy=/usr/sbin/policy-rc.d
own_policy=0
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\n# installed by asyncps scripts/install_deps.sh for the duration of apt-get\nexit 101\n' |
    $sudo tee "$policy" >/dev/null
  $sudo chmod 755 "$policy"
  own_policy=1
  trap '$sudo rm -f "$policy"' EXIT
fi
# --force-unsafe-io: dpkg skips its fsync per unpacked file (~550 packages, tens of thousands of
# header files on a fresh machine); a crash mid-install means re-running this script anyway.
$sudo apt-get install -y -q --no-install-recommends -o Dpkg::Options::=--force-unsafe-io \
  "${missing[@]}"
if ((own_policy)); then
  $sudo rm -f "$policy"
  trap - EXIT
fi
# systemd ignores policy-rc.d for units it starts itself: stop only what the package started.
if command -v systemctl >/dev/null && [[ -d /run/systemd/system ]] && [[ " ${missing[*]} " == *" prometheus "* ]]; then
  for unit in prometheus prometheus-node-exporter; do
    $sudo systemctl disable --now "$unit" 2>/dev/null || true
  done
fi
check_blas
