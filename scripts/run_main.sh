#!/usr/bin/env bash
# The main job: installs what is needed, builds, and trains Fashion-MNIST (a LibTorch MLP on
# the workers, Adam on the parameter servers) asynchronously on a local cluster of real
# processes: 2 parameter servers, 2 workers and the chief. Extra arguments go to the program
# (e.g. --model cnn --epochs 3).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh build
exec build/bin/asyncps_launch --ps 2 --workers 2 -- build/bin/fashion_mnist "$@"
