#!/bin/sh
# Container entrypoint: gives the program the TF_CONFIG of its pod, then execs it.
#
#   entrypoint.sh PROGRAM [ARGS...]
#
# Under Kubeflow's TFJob operator TF_CONFIG is already set: it is passed through untouched.
# Without the operator (deploy/k8s/statefulsets.yaml) each role is a StatefulSet behind a
# headless Service of the same name, so pod N of role R in job J is named J-R-N and reachable
# as J-R-N.J-R; this script reads J, R and N from the pod's hostname and builds TF_CONFIG from:
#   ASYNCPS_NUM_PS       parameter servers (required)
#   ASYNCPS_NUM_WORKERS  workers (required)
#   ASYNCPS_CHIEF        1 when there is a chief StatefulSet (default 1; 0: worker 0 is chief)
#   ASYNCPS_DISPATCHER   1 when there is a tf.data service dispatcher StatefulSet (default 0)
#   ASYNCPS_NUM_DATA_WORKERS  tf.data service data workers (default 0); their pods are named
#                        J-data-worker-N (DNS names take no "_") and their task type is data_worker
#   ASYNCPS_PORT         the port every task listens on (default 2222)
#   ASYNCPS_DNS_SUFFIX   appended to each service name, e.g. ".team.svc.cluster.local" (default "")
#   ASYNCPS_POD_NAME     the pod's name (default: $HOSTNAME, else `hostname`)
#   ASYNCPS_ELASTIC      1 or true: workers join and leave the running job (the program reads it
#                        too). A worker pod past ASYNCPS_NUM_WORKERS (the StatefulSet scaled up
#                        with kubectl scale) is then no mistake: its TF_CONFIG lists the workers
#                        up to itself, and it registers with the chief (J-chief-0.J-chief:port).
#   ASYNCPS_MAX_PS       elastic PS (with ASYNCPS_ELASTIC): the PS slots, >= ASYNCPS_NUM_PS. Every
#                        pod's TF_CONFIG lists this many PS and gets ASYNCPS_INITIAL_PS=NUM_PS:
#                        the job starts on the first NUM_PS, and a PS pod past them (the PS
#                        StatefulSet scaled up) registers with the chief and takes a share of the
#                        shard groups; scaled down, it hands them back before it exits.
# The evaluator ("J-evaluator-0") is given the training cluster without itself, as the operator
# does. Bad settings exit 2 (permanent under restartPolicy ExitCode); the program's own exit
# code is the container's (exec), and signals go straight to it. OPENBLAS_CORETYPE, unless set,
# names the OpenBLAS kernels the CPU runs (see below).
set -eu

die() {
  echo "entrypoint: $*" >&2
  exit 2
}

[ "$#" -ge 1 ] || die "usage: entrypoint.sh PROGRAM [ARGS...]"

# Debian 12's OpenBLAS falls back to its slowest (Prescott) kernels on CPUs newer than itself:
# name the family this CPU runs, as asyncps_launch does (deploy/blas_kernel.h), unless the pod
# names one. OpenBLAS reads it once, when the program loads it.
if [ -z "${OPENBLAS_CORETYPE+set}" ] && [ -r /proc/cpuinfo ]; then
  cpu_flags=" $(grep -m1 '^flags' /proc/cpuinfo || true) "
  has_flags() {
    for f in "$@"; do
      case "$cpu_flags" in *" $f "*) ;; *) return 1 ;; esac
    done
  }
  if has_flags avx512f avx512bw avx512cd avx512dq avx512vl; then
    export OPENBLAS_CORETYPE=SkylakeX
  elif has_flags avx2 fma; then
    export OPENBLAS_CORETYPE=Haswell
  fi
fi

if [ -n "${TF_CONFIG:-}" ]; then
  exec "$@"
fi

pod="${ASYNCPS_POD_NAME:-${HOSTNAME:-$(hostname)}}"
# JOB-ROLE-ORDINAL; the job name may itself contain dashes.
# J-data-worker-N first: the general pattern would read it as worker N of job J-data.
role_and_index=$(printf '%s\n' "$pod" | sed -n 's/^.*-\(data-worker\)-\([0-9][0-9]*\)$/\1 \2/p')
[ -n "$role_and_index" ] || role_and_index=$(printf '%s\n' "$pod" |
  sed -n 's/^.*-\(chief\|ps\|worker\|evaluator\|dispatcher\)-\([0-9][0-9]*\)$/\1 \2/p')
[ -n "$role_and_index" ] ||
  die "pod name '$pod' is not JOB-ROLE-N with ROLE chief, ps, worker, evaluator, dispatcher or data-worker"
role=${role_and_index% *}
index=${role_and_index#* }
job=${pod%-"$role"-"$index"}

is_count() {
  case "$1" in
    '' | *[!0-9]*) return 1 ;;
  esac
}
num_ps="${ASYNCPS_NUM_PS:-}"
max_ps="${ASYNCPS_MAX_PS:-}"
num_workers="${ASYNCPS_NUM_WORKERS:-}"
chief="${ASYNCPS_CHIEF:-1}"
dispatcher="${ASYNCPS_DISPATCHER:-0}"
num_data_workers="${ASYNCPS_NUM_DATA_WORKERS:-0}"
port="${ASYNCPS_PORT:-2222}"
suffix="${ASYNCPS_DNS_SUFFIX:-}"
is_count "$num_ps" && [ "$num_ps" -ge 1 ] || die "ASYNCPS_NUM_PS must be a number >= 1, got '$num_ps'"
if [ -n "$max_ps" ]; then
  is_count "$max_ps" && [ "$max_ps" -ge "$num_ps" ] ||
    die "ASYNCPS_MAX_PS must be a number >= ASYNCPS_NUM_PS ($num_ps), got '$max_ps'"
fi
is_count "$num_workers" && [ "$num_workers" -ge 1 ] ||
  die "ASYNCPS_NUM_WORKERS must be a number >= 1, got '$num_workers'"
[ "$chief" = 0 ] || [ "$chief" = 1 ] || die "ASYNCPS_CHIEF must be 0 or 1, got '$chief'"
[ "$dispatcher" = 0 ] || [ "$dispatcher" = 1 ] || die "ASYNCPS_DISPATCHER must be 0 or 1, got '$dispatcher'"
is_count "$num_data_workers" || die "ASYNCPS_NUM_DATA_WORKERS must be a number >= 0, got '$num_data_workers'"
is_count "$port" && [ "$port" -ge 1 ] && [ "$port" -le 65535 ] || die "ASYNCPS_PORT must be in 1..65535, got '$port'"
case "$suffix" in
  '' | .*) ;;
  *) die "ASYNCPS_DNS_SUFFIX must be empty or start with '.', got '$suffix'" ;;
esac

# Range of the pod's own ordinal (a StatefulSet scaled past the counts above is a mistake).
case "$role" in
  ps) limit=$num_ps ;;
  worker) limit=$num_workers ;;
  chief) limit=$chief ;;
  evaluator) limit=1 ;;
  dispatcher) limit=$dispatcher ;;
  data-worker) limit=$num_data_workers ;;
esac
elastic="${ASYNCPS_ELASTIC:-0}"
if [ "$role" = worker ] && { [ "$elastic" = 1 ] || [ "$elastic" = true ]; } && [ "$index" -ge "$num_workers" ]; then
  # Scaled up past the starting workers: the workers named up to this one.
  num_workers=$((index + 1))
  limit=$num_workers
fi
if [ -n "$max_ps" ] && [ "$max_ps" != "$num_ps" ]; then
  { [ "$elastic" = 1 ] || [ "$elastic" = true ]; } || die "ASYNCPS_MAX_PS needs ASYNCPS_ELASTIC=1"
  # Elastic PS: every task knows the slots, and which of them the job starts on.
  export ASYNCPS_INITIAL_PS="$num_ps"
  num_ps=$max_ps
  [ "$role" != ps ] || limit=$num_ps
fi
[ "$index" -lt "$limit" ] || die "pod '$pod' is $role $index but the job has $limit $role task(s)"

# "J-R-0.J-R<suffix>:port","J-R-1.J-R<suffix>:port",...
addresses() {
  r=$1
  n=$2
  i=0
  out=""
  while [ "$i" -lt "$n" ]; do
    [ -z "$out" ] || out="$out,"
    out="$out\"$job-$r-$i.$job-$r$suffix:$port\""
    i=$((i + 1))
  done
  printf '%s' "$out"
}

cluster="\"ps\":[$(addresses ps "$num_ps")],\"worker\":[$(addresses worker "$num_workers")]"
[ "$chief" = 0 ] || cluster="\"chief\":[$(addresses chief 1)],$cluster"
[ "$dispatcher" = 0 ] || cluster="$cluster,\"dispatcher\":[$(addresses dispatcher 1)]"
[ "$num_data_workers" = 0 ] || cluster="$cluster,\"data_worker\":[$(addresses data-worker "$num_data_workers")]"
type=$role
[ "$role" != data-worker ] || type=data_worker
TF_CONFIG="{\"cluster\":{$cluster},\"task\":{\"type\":\"$type\",\"index\":$index},\"environment\":\"cloud\"}"
export TF_CONFIG
exec "$@"
