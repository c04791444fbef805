#!/usr/bin/env bash
# The whole test suite: installs what is needed, builds, and runs every test with ctest —
# unit tests, multi-process integration tests (real ps/worker processes killed and
# restarted), and quick benchmark smoke runs — then the threaded modules' tests and the
# fault-tolerance scenarios again under ThreadSanitizer, the input pipelines' tests under
# AddressSanitizer, clang's thread-safety analysis and a libFuzzer run.
#
# Time (the CI runs this on a fresh 2-core machine with a cold ccache, in 20 minutes at most):
# every tree compiles its libraries in unity batches (ASYNCPS_UNITY_LIBS), and the sanitizer and
# clang trees build in the background at the lowest CPU and I/O priority (nice 19, ionice idle)
# while the tests of the tree before them run: the multi-process tests leave cores idle much of
# the time, a niced compiler takes only what they leave, and the tests see no other difference.
# The clang tree builds the fuzzer first: its 60 s run (one core) starts as soon as it is linked,
# beside the rest of that tree's build and the header/install checks.
# ASYNCPS_CI_OVERLAP=0 builds them in the foreground, one after another, as before.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each phase's wall time, printed as it ends and again as a table at the end (also when a phase
# fails), so a CI log shows where the time went.
phase_names=()
phase_secs=()
phase_name=""
phase_start=$SECONDS
run_start=$SECONDS
# phase NAME: ends the running phase (if any) and starts NAME; "phase ''" only ends it.
phase() {
  if [[ -n "$phase_name" ]]; then
    phase_names+=("$phase_name")
    phase_secs+=($((SECONDS - phase_start)))
    echo "== [time] $phase_name: $((SECONDS - phase_start)) s (total $((SECONDS - run_start)) s)"
  fi
  phase_name="$1"
  phase_start=$SECONDS
}
# print_phase_times [STATUS]
print_phase_times() {
  local status=${1:-$?} i
  phase ""
  echo "== [time] phases (wall seconds, exit status $status):"
  for i in "${!phase_names[@]}"; do
    printf '  %-34s %6d\n' "${phase_names[$i]}" "${phase_secs[$i]}"
  done
  printf '  %-34s %6d\n' total $((SECONDS - run_start))
}

# Background jobs (bg NAME CMD..., bg_wait NAME): CMD runs in a session of its own (so that an
# early exit ends its whole process tree), its output goes to a log printed when it is waited
# for, and its wall time joins the table as "NAME (background)", after the phases it ran beside.
overlap="${ASYNCPS_CI_OVERLAP:-1}"
bg_dir="$(mktemp -d "${TMPDIR:-/tmp}/asyncps_ci_bg.XXXXXX")"
declare -A bg_pid=()
low_priority=(nice -n 19)
if command -v ionice >/dev/null && ionice -c 3 true 2>/dev/null; then
  low_priority+=(ionice -c 3)
fi
# bg [--normal] NAME CMD...: starts CMD (at the lowest priority unless --normal).
bg() {
  local prio=("${low_priority[@]}")
  if [[ "$1" == "--normal" ]]; then prio=(); shift; fi
  local name=$1; shift
  echo "== [background] $name: started${prio:+ at low priority} =="
  BG_TIME="$bg_dir/$name.time" setsid "${prio[@]}" bash -c \
    'start=$SECONDS; status=0; "$@" || status=$?; echo $((SECONDS - start)) >"$BG_TIME"; exit $status' \
    bash "$@" >"$bg_dir/$name.log" 2>&1 &
  bg_pid[$name]=$!
  if [[ "$overlap" == "0" ]]; then bg_wait "$name"; fi
}
# bg_wait NAME: waits for NAME, prints its output, and fails when it failed.
bg_wait() {
  local name=$1 status=0
  [[ -n "${bg_pid[$name]:-}" ]] || return 0
  wait "${bg_pid[$name]}" || status=$?
  unset "bg_pid[$name]"
  echo "== [background] $name: output =="
  cat "$bg_dir/$name.log"
  phase_names+=("$name (background)")
  phase_secs+=("$(cat "$bg_dir/$name.time" 2>/dev/null || echo 0)")
  echo "== [time] $name (background): ${phase_secs[-1]} s, exit status $status"
  return "$status"
}
end_background() {
  local name
  for name in "${!bg_pid[@]}"; do
    kill -TERM -- "-${bg_pid[$name]}" 2>/dev/null || true
  done
  rm -rf "$bg_dir"
}
on_exit() {
  local status=$?
  end_background
  print_phase_times "$status"
}
trap on_exit EXIT

phase "install deps"
bash scripts/install_deps.sh

# ccache's depend mode: on a miss (every compile on a fresh CI machine) ccache takes the headers
# a file read from the compiler's own -MD output instead of running the preprocessor over it
# first (0.2-0.35 s CPU a file of ours, 1.3 s one with LibTorch). Hits are found as before.
export CCACHE_DEPEND="${CCACHE_DEPEND:-1}"

# OpenBLAS's kernels for this CPU, as asyncps_launch names them for its tasks
# (deploy/blas_kernel.h): Debian 12's OpenBLAS falls back to its slowest (Prescott) kernels on
# CPUs newer than itself. Exported so the tests' own processes and children get them too.
if [[ -z "${OPENBLAS_CORETYPE+set}" ]]; then
  cpu_flags=" $(grep -m1 '^flags' /proc/cpuinfo || true) "
  has_flags() { local f; for f; do [[ "$cpu_flags" == *" $f "* ]] || return 1; done; }
  if has_flags avx512f avx512bw avx512cd avx512dq avx512vl; then
    export OPENBLAS_CORETYPE=SkylakeX
  elif has_flags avx2 fma; then
    export OPENBLAS_CORETYPE=Haswell
  fi
  echo "== OpenBLAS kernels: ${OPENBLAS_CORETYPE:-as OpenBLAS picks them} =="
fi

# Runs "$@" with TMPDIR pointing at a fresh directory of its own and, once it ends, fails
# listing what is left there: tests clean up after themselves, also when they fail. The
# directory is removed either way.
run_in_fresh_tmpdir() {
  local dir left status=0
  dir="$(mktemp -d "${TMPDIR:-/tmp}/asyncps_tests.XXXXXX")"
  TMPDIR="$dir" "$@" || status=$?
  left="$(cd "$dir" && find . -mindepth 1 -maxdepth 2 | sort | head -n 50)" || true
  rm -rf "$dir"
  if [[ -n "$left" ]]; then
    echo "FAILED: the tests left these in their TMPDIR (first 50, two levels deep):" >&2
    echo "$left" >&2
    return 1
  fi
  return "$status"
}

# Sanitizer and clang trees: what they build. (ThreadSanitizer: everything with threads: sync
# primitives, RPC, the PS's striped locks, the closure queue and coordinator, the worker's
# cancellation flags, the input pipelines' prefetch threads, per-worker datasets, checkpoints
# (saves racing training, parallel CRC checks, a PS killed mid-save), the PS's window of applied
# closure updates, replication between PS and state transfer (ps_test), the embedding tables and
# their service (embedding_test; its single-threaded 10^7-key case is not registered there, see
# ps/CMakeLists.txt), the staleness gate, the tf.data service's dispatcher and data workers, and
# the multi-process fault-tolerance, shutdown, recovery and exactly-once (dynamic sharding)
# scenarios.)
tsan_targets="core_test data_test net_test ps_test worker_test coordinator_test fault_tolerance_test \
  per_worker_dataset_test coordinator_shutdown_test coordinator_recovery_test checkpoint_io_test \
  checkpoint_test checkpoint_cluster_test coordinator_restart_test ps_failure_test update_dedup_test \
  exactly_once_test dynamic_sharding_test exit_codes_test metrics_test status_board_test staleness_test \
  data_service_unit_test data_service_test data_service_test_program embedding_test"
# The clang tree (-fsanitize=fuzzer-no-link,address,undefined on everything): the fuzzer and what
# it links; the thread-safety analysis (-Wthread-safety as an error) of our code but the LibTorch
# modules: what the fuzzer links as it is built, the coordinator, launcher and test helpers
# parsed only (asyncps_thread_safety, no instrumentation); and data_test, which runs under
# AddressSanitizer (with UndefinedBehaviorSanitizer and leak checks) from this tree: the input
# pipelines read untrusted files (truncated/corrupt IDX, TFRecord, gzip) and stop prefetch threads
# mid-flight.
# The fuzzer is built first and apart (fuzzer_targets), so that its 60 s run, which keeps one core
# busy, starts as soon as it is linked and overlaps the rest of the tree's build and the checks.
run_fuzz=1; [[ "${ASYNCPS_SKIP_FUZZ:-0}" == "1" ]] && run_fuzz=0
fuzzer_targets=()
clang_targets=()
if [[ "$run_fuzz" == "1" ]]; then fuzzer_targets+=(server_fuzzer); clang_targets+=(asyncps_thread_safety); fi
if [[ "${ASYNCPS_SKIP_ASAN:-0}" != "1" ]]; then clang_targets+=(data_test); fi
# build_clang_tree READY_FILE FIRST_TARGETS -- REST_TARGETS: configures the clang tree, builds
# FIRST_TARGETS, creates READY_FILE, then builds REST_TARGETS.
build_clang_tree() {
  local ready=$1 first=() rest=() t
  shift
  while [[ $# -gt 0 && "$1" != "--" ]]; do first+=(--target "$1"); shift; done
  shift
  for t in "$@"; do rest+=(--target "$t"); done
  # (No set -e in the shell bg starts: each step's failure is returned.)
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DASYNCPS_FUZZ=ON -DASYNCPS_UNITY_LIBS=ON >/dev/null || return
  if [[ ${#first[@]} -gt 0 ]]; then
    cmake --build build-fuzz -j "${ASYNCPS_BUILD_JOBS:-2}" "${first[@]}" || return
  fi
  touch "$ready"
  if [[ ${#rest[@]} -gt 0 ]]; then cmake --build build-fuzz -j "${ASYNCPS_BUILD_JOBS:-2}" "${rest[@]}" || return; fi
}
fuzzer_ready="$bg_dir/fuzzer.ready"
start_clang_build() {
  if [[ $((${#fuzzer_targets[@]} + ${#clang_targets[@]})) -gt 0 ]]; then
    bg clang_build build_clang_tree "$fuzzer_ready" "${fuzzer_targets[@]}" -- "${clang_targets[@]}"
  fi
}
# The libFuzzer run. A crash, sanitizer report, leak, timeout or OOM makes libFuzzer exit non-zero
# and fails the run; the input is left in build-fuzz/artifacts/ (check it in under
# tests/fuzz/regressions/ once fixed: fuzz_replay_test replays every file there).
run_fuzzer() {
  echo "== fuzz: server frame handling, handshake and dispatch (libFuzzer, ${ASYNCPS_FUZZ_SECONDS:-60} s) =="
  mkdir -p build-fuzz/corpus build-fuzz/artifacts
  build-fuzz/bin/server_fuzzer -max_total_time="${ASYNCPS_FUZZ_SECONDS:-60}" -timeout=10 \
    -rss_limit_mb=2048 -artifact_prefix=build-fuzz/artifacts/ build-fuzz/corpus tests/fuzz/corpus
}
# The public-header and installed-package checks (they use the normal tree).
header_and_install_checks() {
  echo "== public headers: nothing heavy reachable from include/asyncps/*.h =="
  bash scripts/check_public_headers.sh build
  echo "== installed package: find_package(asyncps) from a program outside the tree =="
  bash scripts/check_install.sh build
}
# The nemesis (scripts/nemesis.py, docs/operations.md#the-nemesis): 2 minutes of the exactly-once
# counter program (every role killed and paused, workers and PS scaled, on the seed of the day's
# schedule, replicated and unreplicated PS, with and without the tf.data service), every round
# checked exactly once.
# Budget: the suite already takes about 18.5 of its 20 minutes, and no phase leaves a core idle
# for long, so the nemesis cannot run in a phase of its own. It runs beside the fuzzer's 60 s run,
# the one phase whose length does not depend on the CPU it gets (libFuzzer stops at a wall-clock
# time; fewer executions is all it loses), at normal priority so its heartbeats and restarts keep
# their timing (a starved job fails over more, which the nemesis tolerates, but runs longer). It is
# bounded tightly: rounds start for 2 minutes, the last one ends without faults, and one still
# running a minute after that is a failure (a hang); `timeout` ends it in any case. The counter
# only, not the main job: its check is exact whatever the load, while the main job's accuracy
# target under CI's load would make the run flaky, and it costs a fraction of the main job's CPU.
# Measured on the 2-core development machine under another session's load (load average 4.6-5.9):
# 2 min 14 s of wall time, 65 s of CPU (half a core), 7 rounds. So it adds at most about 75 s to
# the phase (its 134 s against the fuzzer's 60 s; less when the clang tree's rest and the checks
# run longer than the fuzzer, as they do on a cold ccache) and takes about half a core from the
# niced clang build meanwhile.
# ASYNCPS_SKIP_NEMESIS=1 skips it; ASYNCPS_NEMESIS_MINUTES changes its length.
run_nemesis() {
  local minutes="${ASYNCPS_NEMESIS_MINUTES:-2}"
  echo "== nemesis: ${minutes} minutes of the exactly-once counter on the seed of the day ($(date -u +%Y%m%d)) =="
  timeout -k 10 $(( (${minutes%.*} + 3) * 60 )) python3 scripts/nemesis.py --minutes "$minutes" --seed day \
    --workloads counter --counter_ids 100000 --grace_minutes 1 --build build
}
export -f build_clang_tree header_and_install_checks run_fuzzer run_nemesis  # bg runs them in a shell of its own
run_tsan=1; [[ "${ASYNCPS_SKIP_TSAN:-0}" == "1" ]] && run_tsan=0
run_nemesis_ci=1; [[ "${ASYNCPS_SKIP_NEMESIS:-0}" == "1" ]] && run_nemesis_ci=0

phase "build"
echo "== build (RelWithDebInfo) =="
bash scripts/build.sh build -DASYNCPS_UNITY_LIBS=ON

phase "tests"
if [[ "$run_tsan" == "1" ]]; then
  bg tsan_build env ASYNCPS_TARGETS="$tsan_targets" \
    bash scripts/build.sh build-tsan -DASYNCPS_SANITIZE=thread -DASYNCPS_UNITY_LIBS=ON
else
  start_clang_build
fi
echo "== tests =="
(cd build && run_in_fresh_tmpdir ctest --output-on-failure -j2 --timeout 300)

if [[ "$run_tsan" == "1" ]]; then
  phase "TSan build (rest)"
  bg_wait tsan_build
  phase "TSan tests"
  start_clang_build
  echo "== tests under ThreadSanitizer =="
  (cd build-tsan && TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/../tests/tsan.supp" \
     run_in_fresh_tmpdir ctest --output-on-failure -j2 --timeout 900 -LE bench -E _NOT_BUILT)
fi

if [[ "$run_fuzz" == "1" ]]; then
  # The fuzzer first; then its run (one core) beside the rest of the clang tree (nice 19) and the
  # header/install checks.
  phase "clang tree: fuzzer build (rest)"
  echo "== clang tree: ${fuzzer_targets[*]}, then ${clang_targets[*]} =="
  while [[ ! -e "$fuzzer_ready" && -n "${bg_pid[clang_build]:-}" ]] &&
        kill -0 "${bg_pid[clang_build]}" 2>/dev/null; do
    sleep 1
  done
  if [[ ! -e "$fuzzer_ready" ]]; then bg_wait clang_build; exit 1; fi
  phase "fuzz + clang tree rest + checks"
  bg --normal fuzz run_fuzzer
  if [[ "$run_nemesis_ci" == "1" ]]; then bg --normal nemesis run_nemesis; fi
  bg --normal checks header_and_install_checks
  bg_wait clang_build
  if [[ "${ASYNCPS_SKIP_ASAN:-0}" != "1" ]]; then
    echo "== data_test under AddressSanitizer (clang tree) =="
    ASAN_OPTIONS="detect_leaks=1" run_in_fresh_tmpdir build-fuzz/bin/data_test
  fi
  bg_wait checks
  bg_wait fuzz
  bg_wait nemesis
else
  if [[ "${#clang_targets[@]}" -gt 0 ]]; then
    phase "clang tree build (rest)"
    echo "== clang tree: ${clang_targets[*]} =="
    bg_wait clang_build
  fi
  if [[ "${ASYNCPS_SKIP_ASAN:-0}" != "1" ]]; then
    phase "ASan data_test"
    echo "== data_test under AddressSanitizer (clang tree) =="
    ASAN_OPTIONS="detect_leaks=1" run_in_fresh_tmpdir build-fuzz/bin/data_test
  fi
  phase "header + install checks"
  if [[ "$run_nemesis_ci" == "1" ]]; then bg --normal nemesis run_nemesis; fi
  header_and_install_checks
  bg_wait nemesis
fi
