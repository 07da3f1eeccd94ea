#!/usr/bin/env bash
# Runs GenEnv-JAX on a Cloud TPU VM pod slice: creates the slice (or reuses it),
# puts this repository on every worker, installs it, fetches the players'
# checkpoint and the seed tasks, and starts `python -m train.main` on all workers.
# Run `launch/tpu_pod.sh --help` for the flags; `--dry_run` prints every command.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REMOTE_REPO='$HOME/genenv-jax'
REMOTE_VENV='$HOME/genenv-venv'
REMOTE_LOG='$HOME/genenv-train.log'
REMOTE_PID='$HOME/genenv-train.pid'

usage() {
  cat <<EOF
Usage: launch/tpu_pod.sh --name=NAME --zone=ZONE --accelerator=TYPE --workdir=gs://BUCKET/RUN
                         [options] [-- extra train.main flags]

Required (each may also come from the environment variable shown):
  --name=NAME          TPU VM name                                  (TPU_NAME)
  --zone=ZONE          e.g. us-central2-b                           (TPU_ZONE)
  --accelerator=TYPE   slice type, e.g. v4-64, v5p-64, v5litepod-32 (TPU_ACCELERATOR)
  --workdir=DIR        checkpoints, metrics and report; a gs:// path every worker
                       shares. Rerunning with the same workdir resumes.
Options:
  --runtime=VERSION    TPU VM software version (TPU_RUNTIME; default: the accelerator's
                       generation's: v4 tpu-ubuntu2204-base, v5p v2-alpha-tpuv5,
                       v5litepod v2-alpha-tpuv5-lite, v6e v2-alpha-tpuv6e)
  --project=PROJECT    Google Cloud project (GCP_PROJECT; default: gcloud's)
  --config=CONFIG      default configs/qwen_tpu.py:7b (on v5litepod slices, 16 GiB
                       chips, its remat policy becomes "full" unless -- sets one)
  --hf_model=REPO      Hugging Face model downloaded on every worker and used for both
                       players and the tokenizer, e.g. Qwen/Qwen2.5-7B-Instruct
  --seed_data=GS_DIR   gs:// directory of the run's seed data, copied to every worker
                       and passed in the config field its domain reads it from
                       (train.tools.seed_data: data.source_dir for text tasks,
                       task.data_dir for TravelPlanner and BFCL multi-turn); the
                       preflight checks its files against what the domain reads
  --repo_url=URL       clone this git repository (--branch=BRANCH) instead of copying
                       the local working tree
  --spot               create a Spot slice
  --tokenizer_dir=DIR  the players' tokenizer for the preflight of text tasks (a local
                       or gs:// directory; default: fetched from --hf_model into
                       ~/.cache/genenv_jax/tokenizers when the hub is reachable)
  --skip_preflight     do not compile the run for the slice on this host first
                       (train.bench.compile_check; needs this host's Python with
                       requirements.txt and requirements-tpu.txt: PYTHON, default python3)
  --dry_run            print the commands instead of running them
  -h, --help           this message
Flags after -- go to train.main, e.g. -- --config.coevolve.num_steps=400
  (--heartbeat_timeout_s=S: how long the workers wait for one that hangs, default
  120; --lost_host_timeout_s=S: for one whose VM stops answering, default 60;
  --initialization_timeout_s, --barrier_timeout_s: see train.main)

Rerunning after a preemption or a lost worker:
  A Spot reclaim or a maintenance event sends the workers SIGTERM. Each train.main
  agrees with the others on one step (JAX's preemption sync point), saves it, prints
  "Preempted: saved step S in WORKDIR/checkpoints ..." and exits with status 75.
  A worker lost without notice makes the others exit with status 1, naming the lost
  process: at once when its train.main ended (crashed, killed), within
  --lost_host_timeout_s when its VM is gone, within --heartbeat_timeout_s when it
  hangs; the last periodic checkpoint holds. Either way, rerun this same command
  (same --name, --workdir and flags after --): it reuses or recreates the slice and
  every worker resumes from the newest intact checkpoint. A reclaimed Spot slice
  must be deleted first:
    gcloud compute tpus tpu-vm delete NAME --zone=ZONE
  Check worker 0's log for the step:
    gcloud compute tpus tpu-vm ssh NAME --zone=ZONE --worker=0 --command='tail -n 20 ~/genenv-train.log'
EOF
}

die() {
  echo "tpu_pod.sh: error: $*" >&2
  echo "Run launch/tpu_pod.sh --help for usage." >&2
  exit 2
}

name="${TPU_NAME:-}"
zone="${TPU_ZONE:-}"
accelerator="${TPU_ACCELERATOR:-}"
runtime="${TPU_RUNTIME:-}"
project="${GCP_PROJECT:-}"
workdir=""
config="configs/qwen_tpu.py:7b"
hf_model=""
seed_data=""
repo_url=""
branch=""
spot=0
preflight=1
tokenizer_dir=""
dry_run=0
train_flags=()

while (($#)); do
  arg="$1"
  shift
  case "$arg" in
    -h|--help) usage; exit 0 ;;
    --dry_run|--dry-run) dry_run=1 ;;
    --spot) spot=1 ;;
    --skip_preflight|--skip-preflight) preflight=0 ;;
    --) train_flags=("$@"); break ;;
    --*=*)
      value="${arg#*=}"
      case "${arg%%=*}" in
        --name) name="$value" ;;
        --zone) zone="$value" ;;
        --accelerator) accelerator="$value" ;;
        --runtime) runtime="$value" ;;
        --project) project="$value" ;;
        --workdir) workdir="$value" ;;
        --config) config="$value" ;;
        --hf_model) hf_model="$value" ;;
        --seed_data) seed_data="$value" ;;
        --repo_url) repo_url="$value" ;;
        --branch) branch="$value" ;;
        --tokenizer_dir) tokenizer_dir="$value" ;;
        *) die "unknown flag ${arg%%=*}" ;;
      esac ;;
    *) die "unexpected argument '$arg' (flags take the form --flag=value)" ;;
  esac
done

[[ -n "$name" ]] || die "--name is required (or set TPU_NAME)"
[[ -n "$zone" ]] || die "--zone is required (or set TPU_ZONE)"
[[ -n "$accelerator" ]] || die "--accelerator is required (or set TPU_ACCELERATOR)"
[[ -n "$workdir" ]] || die "--workdir is required (a gs:// path all workers share)"
[[ -z "$branch" || -n "$repo_url" ]] || die "--branch needs --repo_url"
[[ -z "$seed_data" || "$seed_data" == gs://* ]] ||
  die "--seed_data=$seed_data must be a gs:// directory"
if [[ "$workdir" != gs://* ]]; then
  echo "tpu_pod.sh: warning: --workdir=$workdir is not a gs:// path; a multi-host" \
       "job needs a directory every worker shares." >&2
fi

[[ -f "$ROOT/requirements-tpu.txt" ]] || die "$ROOT/requirements-tpu.txt is missing"

# The TPU VM software version of the accelerator's generation, unless given.
if [[ -z "$runtime" ]]; then
  case "$accelerator" in
    v4-*) runtime=tpu-ubuntu2204-base ;;
    v5p-*) runtime=v2-alpha-tpuv5 ;;
    v5litepod-*) runtime=v2-alpha-tpuv5-lite ;;
    v6e-*) runtime=v2-alpha-tpuv6e ;;
    *) die "no default --runtime for --accelerator=$accelerator; pass --runtime=VERSION" ;;
  esac
fi

# Prints a command as a shell line: words of safe characters bare, others quoted.
print_command() {
  local word out=()
  for word in "$@"; do
    if [[ "$word" =~ ^[A-Za-z0-9_./:=@,+%-]+$ ]]; then
      out+=("$word")
    else
      out+=("'${word//\'/\'\\\'\'}'")
    fi
  done
  echo "${out[*]}"
}

# Runs a command, or prints it with --dry_run.
run() {
  if ((dry_run)); then
    print_command "$@"
  else
    echo "+ $(print_command "$@")" >&2
    "$@"
  fi
}

tpu=(gcloud compute tpus tpu-vm)
where=(--zone="$zone")
[[ -z "$project" ]] || where+=(--project="$project")

# A command line for the workers' shell, each word quoted for it.
remote_words() {
  local out=() word
  for word in "$@"; do out+=("$(printf '%q' "$word")"); done
  echo "${out[*]}"
}

on_all_workers() {  # $1: a shell command line run on every worker
  run "${tpu[@]}" ssh "$name" "${where[@]}" --worker=all --command="$1"
}

# 16 GiB chips (v5litepod): the 7b presets' remat policy "dots_no_batch" (which
# keeps the blocks' matmul outputs) does not fit them; they recompute each block
# whole ("full"), unless the flags after -- choose a policy.
if [[ "$accelerator" == v5litepod-* && "$config" =~ qwen_tpu\.py(:7b)?$
      && " ${train_flags[*]} " != *remat_policy=* ]]; then
  train_flags=(--config.agent.model_overrides.remat_policy=full
               --config.simulator.model_overrides.remat_policy=full
               "${train_flags[@]}")
fi

python_bin="${PYTHON:-python3}"
# The config flags given after -- (the preflight and the seed-data field see them).
config_flags=()
for flag in "${train_flags[@]}"; do
  [[ "$flag" != --config.* ]] || config_flags+=("$flag")
done

# The config field the domain reads its seed data from (train.tools.seed_data, on
# this host): --seed_data reaches every domain through its registry. With the
# preflight, the same call first checks the bucket's files against what the
# domain reads, and a launch whose data it cannot read stops here, before
# anything is created.
seed_field=""
if [[ -n "$seed_data" ]]; then
  lookup=("$python_bin" -m train.tools.seed_data --config="$config" "${config_flags[@]}")
  listing=(gcloud storage ls --recursive "$seed_data")
  files=""
  if ((preflight)); then
    if ((dry_run)); then
      echo "$(print_command "${listing[@]}") | PYTHONPATH=$ROOT $(print_command "${lookup[@]}" --listing=- --root="$seed_data")"
    else
      echo "+ $(print_command "${listing[@]}")" >&2
      files="$("${listing[@]}")" ||
        die "preflight: could not list --seed_data=$seed_data (gcloud storage ls, above)"
      lookup+=(--listing=- --root="$seed_data")
    fi
  fi
  status=0
  seed_field="$(cd "$ROOT" && PYTHONPATH="$ROOT" JAX_PLATFORMS=cpu "${lookup[@]}" <<<"$files")" || status=$?
  if ((status == 4)); then
    die "--seed_data=$seed_data: $config's domain reads no seed data (it draws its seeds); drop --seed_data"
  elif ((status == 2)); then
    die "preflight: --seed_data=$seed_data is not what $config's domain reads (above); --skip_preflight skips this check"
  elif ((status != 0)) || [[ -z "$seed_field" ]]; then
    die "--seed_data: train.tools.seed_data could not name $config's seed-data field (status $status, above); this host's Python ($python_bin) needs requirements.txt"
  fi
fi

# 0. Preflight: compile every program of the run for this slice here (no TPU
#    needed) and stop before creating anything when one does not fit in HBM.
#    Text tasks need the players' tokenizer here: --tokenizer_dir (copied from
#    gs:// first), else --hf_model's tokenizer files fetched from the hub.
if ((preflight)); then
  check=("$python_bin" -m train.bench.compile_check --config="$config"
         --topology="$accelerator")
  cache="${XDG_CACHE_HOME:-$HOME/.cache}/genenv_jax/tokenizers"
  local_tokenizer=""
  if [[ "$tokenizer_dir" == gs://* ]]; then
    local_tokenizer="$cache/${tokenizer_dir#gs://}"
    run mkdir -p "$local_tokenizer"
    run gcloud storage rsync --recursive "$tokenizer_dir" "$local_tokenizer"
  elif [[ -n "$tokenizer_dir" ]]; then
    local_tokenizer="$tokenizer_dir"
  elif [[ -n "$hf_model" ]]; then
    local_tokenizer="$cache/${hf_model//\//--}"
    fetch=("$python_bin" -c "import sys; from huggingface_hub import snapshot_download; snapshot_download(sys.argv[1], local_dir=sys.argv[2], allow_patterns=['tokenizer*', 'vocab*', 'merges.txt', '*config.json'])"
           "$hf_model" "$local_tokenizer")
    if ((dry_run)); then
      print_command "${fetch[@]}"
    elif ! { echo "+ $(print_command "${fetch[@]}")" >&2; "${fetch[@]}"; }; then
      echo "tpu_pod.sh: warning: preflight: could not fetch $hf_model's tokenizer;" \
           "a text task's preflight needs --tokenizer_dir=DIR." >&2
      local_tokenizer=""
    fi
  fi
  [[ -z "$local_tokenizer" ]] || check+=(--config.task.tokenizer_dir="$local_tokenizer")
  [[ -z "$hf_model" ]] || echo "tpu_pod.sh: preflight: the players take their shapes" \
    "from the config's preset; pass -- --config.agent.model=... if $hf_model differs." >&2
  check+=("${config_flags[@]}")
  if ((dry_run)); then
    echo "PYTHONPATH=$ROOT $(print_command "${check[@]}")"
  else
    echo "+ $(print_command "${check[@]}")" >&2
    status=0
    (cd "$ROOT" && PYTHONPATH="$ROOT" "${check[@]}") || status=$?
    if ((status == 3)); then
      die "preflight: the run does not compile within $accelerator's HBM (see above); --skip_preflight skips this check"
    elif ((status != 0)); then
      die "preflight: train.bench.compile_check stopped with an error (status $status, above), before compiling: not an HBM verdict. Fix what it names (a text task needs --tokenizer_dir or --hf_model), or --skip_preflight"
    fi
  fi
fi

# 1. The slice: reuse it when it exists.
create=("${tpu[@]}" create "$name" "${where[@]}" --accelerator-type="$accelerator"
        --version="$runtime")
((spot)) && create+=(--spot)
if ((dry_run)); then
  print_command "${tpu[@]}" describe "$name" "${where[@]}"
  echo "# when describe finds no TPU VM named $name:"
  print_command "${create[@]}"
elif "${tpu[@]}" describe "$name" "${where[@]}" >/dev/null 2>&1; then
  echo "Reusing TPU VM $name in $zone." >&2
else
  run "${create[@]}"
fi

# 2. Stop the job an earlier launch started (its pid file), before the code and
#    the venv under it change. kill sends SIGTERM: a running job saves a step
#    every worker agrees on before it exits (train/runtime/preemption.py).
on_all_workers "[ ! -f $REMOTE_PID ] || { kill \$(cat $REMOTE_PID) 2>/dev/null && while kill -0 \$(cat $REMOTE_PID) 2>/dev/null; do sleep 1; done; } || true"

# 3. The code on every worker.
if [[ -n "$repo_url" ]]; then
  clone=(git clone --depth=1)
  [[ -z "$branch" ]] || clone+=(--branch "$branch")
  on_all_workers "rm -rf $REMOTE_REPO && $(remote_words "${clone[@]}" "$repo_url") $REMOTE_REPO"
else
  tarball="${TMPDIR:-/tmp}/genenv-jax-$$.tgz"
  ((dry_run)) || trap 'rm -f "$tarball"' EXIT
  run tar -czf "$tarball" --exclude='./.venv*' --exclude=./.git --exclude=./runs \
    --exclude=./.pytest_cache --exclude=__pycache__ -C "$ROOT" .
  run "${tpu[@]}" scp "$tarball" "$name:genenv-jax.tgz" "${where[@]}" --worker=all
  on_all_workers "rm -rf $REMOTE_REPO && mkdir -p $REMOTE_REPO && tar -xzf \$HOME/genenv-jax.tgz -C $REMOTE_REPO"
fi

# 4. Python 3.11 and the requirements (requirements-tpu.txt: the libtpu that
#    jax[tpu] pins for requirements.txt's jax; requirements-nodeps.txt: the
#    packages installed without their dependencies, BFCL's APIs) in a venv.
on_all_workers "set -e; command -v python3.11 >/dev/null || { sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3.11 python3.11-venv; }; [ -x $REMOTE_VENV/bin/python ] || python3.11 -m venv $REMOTE_VENV; $REMOTE_VENV/bin/pip install -q --upgrade pip; $REMOTE_VENV/bin/pip install -q -r $REMOTE_REPO/requirements.txt -r $REMOTE_REPO/requirements-tpu.txt; $REMOTE_VENV/bin/pip install -q --no-deps -r $REMOTE_REPO/requirements-nodeps.txt"
# A config that plays ALFWorld (configs/alfworld.py, configs/qwen_tpu.py:7b_alfworld)
# also needs requirements-alfworld.txt, without dependencies; its planner and jericho
# build from source (a C++ compiler, cmake).
if [[ "$config" == *alfworld* ]]; then
  on_all_workers "set -e; command -v cmake >/dev/null && command -v g++ >/dev/null || { sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq build-essential cmake; }; $REMOTE_VENV/bin/pip install -q --no-deps -r $REMOTE_REPO/requirements-alfworld.txt"
fi

# 5. The players' checkpoint and the seed tasks, local to each worker. Each
#    worker builds its own tensorflow-datasets copy of the seeds.
main_flags=(--config="$config" --workdir="$workdir" --distributed=true)
remote_flags=("--config.data.tfds_dir=\$HOME/genenv-tfds")
if [[ -n "$hf_model" ]]; then
  model_dir="\$HOME/models/${hf_model##*/}"
  on_all_workers "$REMOTE_VENV/bin/hf download $(remote_words "$hf_model") --local-dir $model_dir"
  remote_flags+=("--config.agent.hf_dir=$model_dir" "--config.simulator.hf_dir=$model_dir"
                 "--config.task.tokenizer_dir=$model_dir")
fi
if [[ -n "$seed_data" ]]; then
  on_all_workers "mkdir -p \$HOME/genenv-seeds && gcloud storage rsync --recursive $(remote_words "$seed_data") \$HOME/genenv-seeds"
  remote_flags+=("--config.$seed_field=\$HOME/genenv-seeds")
fi

# 6. train.main on every worker, detached; it resumes from the workdir's
#    latest checkpoint.
start="cd $REMOTE_REPO && { PYTHONPATH=$REMOTE_REPO nohup $REMOTE_VENV/bin/python -m train.main"
start+=" $(remote_words "${main_flags[@]}") ${remote_flags[*]}"
((${#train_flags[@]} == 0)) || start+=" $(remote_words "${train_flags[@]}")"
start+=" > $REMOTE_LOG 2>&1 < /dev/null & echo \$! > $REMOTE_PID; }"
on_all_workers "$start"

echo "# Follow worker 0's log:" >&2
echo "# $(print_command "${tpu[@]}" ssh "$name" "${where[@]}" --worker=0 \
  --command="tail -f $REMOTE_LOG")" >&2
