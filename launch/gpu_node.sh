#!/usr/bin/env bash
# Runs `python -m train.main` with a GPU preset (configs/qwen_gpu.py) on one node,
# or as one process per node of a multi-node job joined by jax.distributed (from
# SLURM's variables, or --coordinator/--num_processes/--process_id on each node).
# Run `launch/gpu_node.sh --help` for the flags; `--dry_run` prints the command.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

usage() {
  cat <<EOF
Usage: launch/gpu_node.sh --workdir=DIR [options] [-- extra train.main flags]

  --workdir=DIR        checkpoints, metrics and report; on several nodes a directory
                       every node shares (a network file system or gs://).
                       Rerunning with the same workdir resumes.
Options:
  --preset=VARIANT     configs/qwen_gpu.py variant: 0.5b (default; 1 GPU), 7b
                       (8 x 80 GB GPUs a node), 7b_lora (one 80 GB GPU), or a
                       benchmark's 7b preset (7b_bfcl_multi_turn, 7b_api_bank,
                       7b_travelplanner, 7b_alfworld; docs/table1.md)
  --config=CONFIG      another config instead, e.g. configs/qwen_gpu.py:7b
  --hf_dir=DIR         local Hugging Face checkpoint of both players, also their
                       tokenizer (e.g. a download of Qwen/Qwen2.5-7B-Instruct)
  --seed_data=DIR      the run's seed-data directory, passed in the config field its
                       domain reads it from (train.tools.seed_data: data.source_dir
                       for text tasks, task.data_dir for TravelPlanner and BFCL
                       multi-turn); checked against what the domain reads first
  --coordinator=HOST:PORT --num_processes=N --process_id=I
                       a multi-node job named explicitly, the same first two on every
                       node, I = 0 on the node at HOST
  --port=PORT          the coordinator's port under SLURM (default: 61440 + the job
                       id modulo 4096, the same on every node)
  --gpus_per_node=N    GPUs this process drives in a multi-node job (default: the
                       count in CUDA_VISIBLE_DEVICES, else nvidia-smi's)
  --dry_run            print the environment and command instead of running it
  -h, --help           this message
Flags after -- go to train.main, e.g. -- --config.coevolve.num_steps=400

One node: every GPU of it runs in this one process; no jax.distributed.
Several nodes under SLURM (one task per node, run through srun), e.g.
  #SBATCH --nodes=2 --ntasks-per-node=1 --gpus-per-node=8 --exclusive
  srun launch/gpu_node.sh --preset=7b --workdir=/shared/runs/7b --hf_dir=/shared/Qwen2.5-7B-Instruct
Each task passes train.main --distributed=true --coordinator_address=FIRST_NODE:PORT
--num_processes=\$SLURM_NTASKS --process_id=\$SLURM_PROCID, FIRST_NODE the first host of
SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST), and sets JAX_LOCAL_DEVICE_IDS to all of its
GPUs (jax.distributed would otherwise give a SLURM task one GPU, its SLURM_LOCALID).
The environment, each unless set: JAX_PLATFORMS=cuda (a node without a working GPU fails
instead of training on its CPU), XLA_PYTHON_CLIENT_MEM_FRACTION=0.90 (JAX's memory pool:
90% of each GPU, not JAX's default 75%). The Python is \$GENENV_PYTHON, else python on PATH
(the environment requirements-gpu.txt was installed into).
A preemption (SIGTERM, as SLURM sends before a job's time limit or a requeue) reaches
train.main itself: it saves a step and exits with status 75; rerun to resume.
EOF
}

die() {
  echo "gpu_node.sh: error: $*" >&2
  echo "Run launch/gpu_node.sh --help for usage." >&2
  exit 2
}

workdir=""
preset="0.5b"
config=""
hf_dir=""
seed_data=""
coordinator=""
num_processes=""
process_id=""
port=""
gpus_per_node=""
dry_run=0
train_flags=()

while (($#)); do
  arg="$1"
  shift
  case "$arg" in
    -h|--help) usage; exit 0 ;;
    --dry_run|--dry-run) dry_run=1 ;;
    --) train_flags=("$@"); break ;;
    --*=*)
      value="${arg#*=}"
      case "${arg%%=*}" in
        --workdir) workdir="$value" ;;
        --preset) preset="$value" ;;
        --config) config="$value" ;;
        --hf_dir) hf_dir="$value" ;;
        --seed_data) seed_data="$value" ;;
        --coordinator) coordinator="$value" ;;
        --num_processes) num_processes="$value" ;;
        --process_id) process_id="$value" ;;
        --port) port="$value" ;;
        --gpus_per_node) gpus_per_node="$value" ;;
        *) die "unknown flag ${arg%%=*}" ;;
      esac ;;
    *) die "unexpected argument '$arg' (flags take the form --flag=value)" ;;
  esac
done

[[ -n "$workdir" ]] || die "--workdir is required"
PRESETS="0.5b 7b 7b_lora 7b_bfcl_multi_turn 7b_api_bank 7b_travelplanner 7b_alfworld"
[[ " $PRESETS " == *" $preset "* ]] ||
  die "--preset=$preset: expected one of $PRESETS (configs/qwen_gpu.py)"
config="${config:-configs/qwen_gpu.py:$preset}"
is_count() { [[ $1 =~ ^[1-9][0-9]*$ ]]; }

# The first host of a SLURM node list: node001, node[001-004,007], a[1,3],b2.
first_host() {
  local list="$1" prefix rest
  prefix="${list%%[\[,]*}"
  rest="${list:${#prefix}}"
  if [[ $rest == \[* ]]; then
    rest="${rest#\[}"
    echo "$prefix${rest%%[-,\]]*}"
  else
    echo "$prefix"
  fi
}

# The job: explicit flags, else SLURM's variables (a job of more than one task),
# else this node alone.
multi=0
if [[ -n "$coordinator$num_processes$process_id" ]]; then
  [[ -n "$coordinator" && -n "$num_processes" && -n "$process_id" ]] ||
    die "--coordinator=$coordinator --num_processes=$num_processes --process_id=$process_id: a job named here needs all three"
  [[ $coordinator == ?*:[0-9]* ]] || die "--coordinator=$coordinator: expected HOST:PORT"
  is_count "$num_processes" || die "--num_processes=$num_processes: expected a positive integer"
  [[ $process_id =~ ^[0-9]+$ ]] && ((process_id < num_processes)) ||
    die "--process_id=$process_id: expected 0 .. num_processes - 1 = $((num_processes - 1))"
  multi=1
elif [[ -n "${SLURM_NTASKS:-}" && ${SLURM_NTASKS} -gt 1 ]]; then
  nodelist="${SLURM_STEP_NODELIST:-${SLURM_JOB_NODELIST:-}}"
  nodes="${SLURM_STEP_NUM_NODES:-${SLURM_NNODES:-${SLURM_JOB_NUM_NODES:-}}}"
  [[ -n "${SLURM_PROCID:-}" && -n "$nodelist" ]] ||
    die "SLURM_NTASKS=$SLURM_NTASKS but SLURM_PROCID or SLURM_STEP_NODELIST is unset: start it with srun, one task per node"
  if [[ "$nodes" != "$SLURM_NTASKS" || "${SLURM_LOCALID:-0}" != 0 ]]; then
    die "SLURM runs $SLURM_NTASKS tasks on ${nodes:-?} nodes (this one SLURM_LOCALID=${SLURM_LOCALID:-?}): run one task per node (srun --ntasks-per-node=1); each drives all its node's GPUs"
  fi
  if [[ -z "$port" ]]; then
    [[ -n "${SLURM_JOB_ID:-}" ]] || die "SLURM_JOB_ID is unset: pass --port=PORT"
    port=$((61440 + SLURM_JOB_ID % 4096))
  fi
  is_count "$port" || die "--port=$port: expected a port number"
  coordinator="$(first_host "$nodelist"):$port"
  num_processes="$SLURM_NTASKS"
  process_id="$SLURM_PROCID"
  multi=1
fi

args=(-m train.main "--config=$config" "--workdir=$workdir")
if ((multi)); then
  args+=(--distributed=true "--coordinator_address=$coordinator"
         "--num_processes=$num_processes" "--process_id=$process_id")
fi
if [[ -n "$hf_dir" ]]; then
  args+=("--config.agent.hf_dir=$hf_dir" "--config.simulator.hf_dir=$hf_dir"
         "--config.task.tokenizer_dir=$hf_dir")
fi
python="${GENENV_PYTHON:-python}"
# The seed data: the config field its domain reads it from, and a check of its
# files against what the domain reads (train.tools.seed_data, on this node's CPU,
# also with --dry_run), before anything starts.
if [[ -n "$seed_data" ]]; then
  config_flags=()
  for flag in "${train_flags[@]}"; do
    [[ "$flag" != --config.* ]] || config_flags+=("$flag")
  done
  status=0
  seed_field="$(cd "$ROOT" && PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" JAX_PLATFORMS=cpu \
    "$python" -m train.tools.seed_data --config="$config" "${config_flags[@]}" \
    --dir="$seed_data")" || status=$?
  if ((status == 4)); then
    die "--seed_data=$seed_data: $config's domain reads no seed data (it draws its seeds); drop --seed_data"
  elif ((status == 2)); then
    die "--seed_data=$seed_data is not what $config's domain reads (above)"
  elif ((status != 0)) || [[ -z "$seed_field" ]]; then
    die "--seed_data: train.tools.seed_data stopped with status $status (above)"
  fi
  args+=("--config.$seed_field=$seed_data")
fi
args+=("${train_flags[@]}")

export JAX_PLATFORMS="${JAX_PLATFORMS:-cuda}"
# JAX takes 75% of a GPU's memory for its pool unless told otherwise; leave 10% to
# CUDA, cuDNN and NCCL instead.
export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.90}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
if ((multi)); then
  if [[ -z "$gpus_per_node" ]]; then
    if [[ -n "${CUDA_VISIBLE_DEVICES:-}" ]]; then
      IFS=, read -ra visible <<<"$CUDA_VISIBLE_DEVICES"
      gpus_per_node=${#visible[@]}
    elif command -v nvidia-smi >/dev/null 2>&1; then
      gpus_per_node="$(nvidia-smi -L | grep -c '^GPU ' || true)"
    fi
  fi
  is_count "${gpus_per_node:-}" ||
    die "--gpus_per_node='${gpus_per_node:-}': no GPUs found on this node (CUDA_VISIBLE_DEVICES unset, nvidia-smi absent or listing none); pass --gpus_per_node=N"
  JAX_LOCAL_DEVICE_IDS="$(seq -s, 0 $((gpus_per_node - 1)))"
  export JAX_LOCAL_DEVICE_IDS
fi

cd "$ROOT"
if ((dry_run)); then
  env_line="JAX_PLATFORMS=$JAX_PLATFORMS XLA_PYTHON_CLIENT_MEM_FRACTION=$XLA_PYTHON_CLIENT_MEM_FRACTION"
  ((multi)) && env_line+=" JAX_LOCAL_DEVICE_IDS=$JAX_LOCAL_DEVICE_IDS"
  printf '%s %q' "$env_line" "$python"
  printf ' %q' "${args[@]}"
  printf '\n'
  exit 0
fi
exec "$python" "${args[@]}"
