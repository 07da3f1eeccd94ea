#!/usr/bin/env bash
# Runs one train.main job (or, with -m MODULE, another command that takes train.main's
# job flags, such as train.tools.evaluate) as N JAX processes on this machine:
#   ./launch/multiprocess.sh N [-m MODULE] [flags ...]
#   e.g. ./launch/multiprocess.sh 2 --config=configs/default.py:smoke --workdir=/tmp/mp
#        ./launch/multiprocess.sh 2 -m train.tools.evaluate bamboogle --generate --run DIR ...
# Each process runs `python -m MODULE --coordinator_address=... --num_processes=N
# --process_id=I --heartbeat_timeout_s=900 flags ...`.
# The CPU devices split evenly: with XLA_FLAGS=--xla_force_host_platform_device_count=T
# (default: one per core, as train.main would use) each process gets T/N. Process 0
# listens on a free local port as the coordinator. Waits for all processes; when one
# fails, stops the others and exits with its status. SIGTERM or Ctrl-C here is passed
# to every process as SIGTERM, a preemption notice: they save one step together and
# each exits with status 75 (train.runtime.preemption), which this script waits for and
# returns; rerun the same command to resume. A process that ends on its own (killed,
# an error) is noticed by the others at once (train/runtime/peer_watch.py): they stop, naming
# it. The processes share this machine's cores, so each may go without a heartbeat
# for long while they compile: they allow 900 s before calling a silent (hung)
# process lost (--heartbeat_timeout_s; a later flag overrides it). Output: process 0 on this
# terminal, process I (> 0) in $GENENV_LOG_DIR/process_I.log when that is set, else
# here too. The Python is $GENENV_PYTHON, else .venv/bin/python, else python3.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ $# -lt 1 || ! $1 =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 N [-m MODULE] [flags ...]  (N: number of processes; MODULE: train.main)" >&2
  exit 2
fi
n=$1
shift
module=train.main
if [[ ${1:-} == -m ]]; then
  [[ -n ${2:-} ]] || { echo "$0: -m needs a module" >&2; exit 2; }
  module=$2
  shift 2
fi
python="${GENENV_PYTHON:-}"
[[ -n $python ]] || { [[ -x $ROOT/.venv/bin/python ]] && python="$ROOT/.venv/bin/python"; } || python=python3
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export JAX_PLATFORMS="${JAX_PLATFORMS:-cpu}"
XLA_FLAGS="$("$python" -m train.runtime.cpu_flags "$n")"
export XLA_FLAGS
port="$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"

pids=()
stop_all() { local p; for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap 'stop_all' INT TERM
for ((i = 0; i < n; i++)); do
  log=/dev/stdout
  if [[ $i -gt 0 && -n ${GENENV_LOG_DIR:-} ]]; then
    mkdir -p "$GENENV_LOG_DIR"
    log="$GENENV_LOG_DIR/process_$i.log"
  fi
  "$python" -m "$module" --coordinator_address="127.0.0.1:$port" \
    --num_processes="$n" --process_id="$i" --heartbeat_timeout_s=900 "$@" >"$log" 2>&1 &
  pids+=($!)
done
status=0
running=("${pids[@]}")
while [[ ${#running[@]} -gt 0 ]]; do
  rc=0
  finished=""
  wait -n -p finished "${running[@]}" || rc=$?
  [[ -n ${finished:-} ]] || continue  # a signal interrupted the wait (trap above)
  kept=()
  for p in "${running[@]}"; do [[ $p == "$finished" ]] || kept+=("$p"); done
  running=("${kept[@]}")
  if [[ $rc -eq 75 ]]; then  # preempted after saving: the others stop at the same step
    status=75
  elif [[ $rc -ne 0 ]]; then
    for i in "${!pids[@]}"; do [[ ${pids[$i]} == "$finished" ]] && index=$i; done
    echo "multiprocess.sh: process $index (pid $finished) exited with status $rc; stopping the others." >&2
    stop_all
    wait || true
    status=$rc
    break
  fi
done
exit "$status"
