#!/usr/bin/env bash
# The whole test suite: installs what is needed, builds, and runs every test with ctest —
# unit tests, multi-process integration tests (real ps/worker processes killed and
# restarted), and quick benchmark smoke runs — then the threaded modules' tests and the
# fault-tolerance scenarios again under ThreadSanitizer.
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
print_phase_times() {
  local status=$? i
  phase ""
  echo "== [time] phases (wall seconds, exit status $status):"
  for i in "${!phase_names[@]}"; do
    printf '  %-28s %6d\n' "${phase_names[$i]}" "${phase_secs[$i]}"
  done
  printf '  %-28s %6d\n' total $((SECONDS - run_start))
}
trap print_phase_times EXIT

phase "install deps"
bash scripts/install_deps.sh

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

phase "build"
echo "== build (RelWithDebInfo) =="
bash scripts/build.sh build
phase "header + install checks"
echo "== public headers: nothing heavy reachable from include/asyncps/*.h =="
bash scripts/check_public_headers.sh build
echo "== installed package: find_package(asyncps) from a program outside the tree =="
bash scripts/check_install.sh build
phase "tests"
echo "== tests =="
(cd build && run_in_fresh_tmpdir ctest --output-on-failure -j2 --timeout 300)

if [[ "${ASYNCPS_SKIP_TSAN:-0}" != "1" ]]; then
  phase "TSan build"
  echo "== build (ThreadSanitizer) =="
  # Everything with threads: sync primitives, RPC, the PS's striped locks, the closure queue
  # and coordinator, the worker's cancellation flags, the input pipelines' prefetch threads,
  # per-worker datasets, checkpoints (saves racing training, parallel CRC checks, a PS killed
  # mid-save), the PS's window of applied closure updates, replication between PS and state
  # transfer (ps_test), the staleness gate, the tf.data service's dispatcher and data workers,
  # and the multi-process fault-tolerance, shutdown, recovery and exactly-once (dynamic
  # sharding) scenarios.
  ASYNCPS_TARGETS="core_test data_test net_test ps_test worker_test coordinator_test fault_tolerance_test \
    per_worker_dataset_test coordinator_shutdown_test coordinator_recovery_test checkpoint_io_test \
    checkpoint_test checkpoint_cluster_test coordinator_restart_test ps_failure_test update_dedup_test \
    exactly_once_test dynamic_sharding_test exit_codes_test metrics_test status_board_test staleness_test \
    data_service_unit_test data_service_test data_service_test_program" \
    bash scripts/build.sh build-tsan -DASYNCPS_SANITIZE=thread
  phase "TSan tests"
  echo "== tests under ThreadSanitizer =="
  (cd build-tsan && TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/../tests/tsan.supp" \
     run_in_fresh_tmpdir ctest --output-on-failure -j2 --timeout 900 -LE bench -E _NOT_BUILT)
fi

if [[ "${ASYNCPS_SKIP_ASAN:-0}" != "1" ]]; then
  # The input pipelines read untrusted files (truncated/corrupt IDX, TFRecord, gzip) and stop
  # prefetch threads mid-flight: AddressSanitizer (with leak checks) over their tests only.
  phase "ASan build"
  echo "== build (AddressSanitizer: data_test) =="
  ASYNCPS_TARGETS="data_test" bash scripts/build.sh build-asan -DASYNCPS_SANITIZE=address
  phase "ASan data_test"
  echo "== data_test under AddressSanitizer =="
  ASAN_OPTIONS="detect_leaks=1" run_in_fresh_tmpdir build-asan/bin/data_test
fi

if [[ "${ASYNCPS_SKIP_FUZZ:-0}" != "1" ]]; then
  phase "fuzz build (clang)"
  echo "== clang: thread-safety analysis; fuzz: server frame handling, handshake and dispatch (libFuzzer, 60 s) =="
  # clang with -fsanitize=fuzzer,address,undefined in its own tree; only the fuzzer's libraries.
  # A crash, sanitizer report, leak, timeout or OOM makes libFuzzer exit non-zero and fails the
  # run; the input is left in build-fuzz/artifacts/ (check it in under tests/fuzz/regressions/
  # once fixed: fuzz_replay_test replays every file there).
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DASYNCPS_FUZZ=ON >/dev/null
  # The same clang tree checks the thread-safety annotations (-Wthread-safety as an error) of
  # our code but the LibTorch modules: what the fuzzer links as it is built, the coordinator,
  # launcher and test helpers parsed only (asyncps_thread_safety, no instrumentation).
  cmake --build build-fuzz -j "${ASYNCPS_BUILD_JOBS:-2}" --target server_fuzzer asyncps_thread_safety
  phase "fuzz run"
  mkdir -p build-fuzz/corpus build-fuzz/artifacts
  build-fuzz/bin/server_fuzzer -max_total_time="${ASYNCPS_FUZZ_SECONDS:-60}" -timeout=10 \
    -rss_limit_mb=2048 -artifact_prefix=build-fuzz/artifacts/ build-fuzz/corpus tests/fuzz/corpus
fi
