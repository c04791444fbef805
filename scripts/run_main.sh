#!/usr/bin/env bash
# The main job: installs what is needed, builds, and trains Fashion-MNIST (a LibTorch MLP on
# the workers, Adam on the parameter servers) asynchronously on a local cluster of real
# processes: 2 parameter servers, 2 workers and the chief. Extra arguments go to the program
# (e.g. --model cnn --epochs 3).
#
# A worker or parameter server that dies is started again (up to 3 times each): SIGKILL one by
# hand and the job goes on (a restarted parameter server gets its variables back from the
# newest checkpoint: --ps_recovery auto). Checkpoints go to a new directory per run under
# build/checkpoints (unless the arguments name a --checkpoint_dir); the end of the run prints
# the command that resumes from it. The tasks log warnings and errors only: --log_level info
# (or ASYNCPS_LOG_LEVEL=info) shows more. Arguments given here come after these defaults and
# win (e.g. --ps_recovery off).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh build
root="$PWD"
args=(--ps_recovery auto "$@")
have_checkpoint_dir=0
for arg in "$@"; do
  [[ "$arg" == --checkpoint_dir || "$arg" == --checkpoint_dir=* ]] && have_checkpoint_dir=1
done
if [[ $have_checkpoint_dir == 0 ]]; then
  args+=(--checkpoint_dir "$root/build/checkpoints/fmnist-$(date +%Y%m%d-%H%M%S)")
fi
# Absolute paths, so the resume command it prints works from any directory.
exec "$root/build/bin/asyncps_launch" --max_restarts 3 --ps 2 --workers 2 -- \
  "$root/build/bin/fashion_mnist" "${args[@]}"
