"""The TPU pod launch: launch/tpu_pod.sh (dry run, and run against a stand-in
gcloud), configs/qwen_tpu.py's variants, and train.main's multi-host set-up."""

from __future__ import annotations

import json
import os
import pathlib
import shlex
import subprocess
import sys
import textwrap
import threading
import time
import types

import jax
import numpy as np
import pytest

from configs import qwen_tpu
from genenv_jax import coevolve
from genenv_jax import policy
from genenv_jax import sharding
from genenv_jax.domains import get_domain
from models.config import ModelConfig, get_preset
from tests.test_text_domain import QA, make_tokenizer
from train import build

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "launch" / "tpu_pod.sh"
REQUIRED = ["--name=genenv-7b", "--zone=us-central2-b", "--accelerator=v4-64",
            "--workdir=gs://bucket/run1"]
# ModelConfig fields that choose how a model computes, not its shapes.
COMPUTE_FIELDS = {"dtype", "param_dtype", "remat_policy", "scan_layers",
                  "attention"}


def _launch(args, path_prefix: str | None = None, **env):
  environ = {k: v for k, v in os.environ.items()
             if k not in ("TPU_NAME", "TPU_ZONE", "TPU_ACCELERATOR",
                          "TPU_RUNTIME", "GCP_PROJECT")}
  if path_prefix:
    environ["PATH"] = f"{path_prefix}:{environ['PATH']}"
  environ.update(env)
  return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True,
                        text=True, env=environ, timeout=60, check=False)


def _gcloud_lines(stdout: str) -> list[list[str]]:
  """The printed `gcloud compute ...` commands (not the seed data's listing)."""
  return [shlex.split(line) for line in stdout.splitlines()
          if line.startswith("gcloud compute ")]


def test_dry_run_prints_every_command():
  out = _launch(["--dry_run", *REQUIRED, "--hf_model=Qwen/Qwen2.5-7B-Instruct",
                 "--seed_data=gs://bucket/seeds", "--",
                 "--config.coevolve.num_steps=400"], XDG_CACHE_HOME="/cache",
                PYTHON=sys.executable)
  assert out.returncode == 0, out.stderr
  # The seed data's listing, checked by the domain's declaration.
  listing = next(line for line in out.stdout.splitlines()
                 if line.startswith("gcloud storage ls"))
  assert listing.startswith("gcloud storage ls --recursive gs://bucket/seeds | ")
  assert ("-m train.tools.seed_data --config=configs/qwen_tpu.py:7b "
          "--config.coevolve.num_steps=400 --listing=- --root=gs://bucket/seeds"
          ) in listing
  commands = _gcloud_lines(out.stdout)
  subcommands = [c[4] for c in commands]
  assert subcommands == ["describe", "create", "ssh", "scp", "ssh", "ssh",
                         "ssh", "ssh", "ssh"]
  for command in commands:
    assert command[:4] == ["gcloud", "compute", "tpus", "tpu-vm"]
    assert "--zone=us-central2-b" in command
  create = commands[1]
  assert create[5] == "genenv-7b"
  assert "--accelerator-type=v4-64" in create
  assert "--version=tpu-ubuntu2204-base" in create
  for command in commands[2:]:
    assert "--worker=all" in command
  remote = [next(w for w in c if w.startswith("--command="))
            for c in commands if c[4] == "ssh"]
  _, _, install, download, seeds, start = remote
  assert ("pip install -q -r $HOME/genenv-jax/requirements.txt -r "
          "$HOME/genenv-jax/requirements-tpu.txt") in install
  preflight = next(shlex.split(line) for line in out.stdout.splitlines()
                   if "train.bench.compile_check" in line)
  assert preflight[2:] == [
      "-m", "train.bench.compile_check", "--config=configs/qwen_tpu.py:7b",
      "--topology=v4-64", "--config.task.tokenizer_dir="
      "/cache/genenv_jax/tokenizers/Qwen--Qwen2.5-7B-Instruct",
      "--config.coevolve.num_steps=400"]
  assert "hf download Qwen/Qwen2.5-7B-Instruct" in download
  assert "gs://bucket/seeds" in seeds
  train = shlex.split(start.split("nohup ", 1)[1].split(" > ", 1)[0])
  assert train[1:3] == ["-m", "train.main"]
  model_dir = "$HOME/models/Qwen2.5-7B-Instruct"
  for flag in ("--config=configs/qwen_tpu.py:7b", "--workdir=gs://bucket/run1",
               "--distributed=true", f"--config.agent.hf_dir={model_dir}",
               f"--config.simulator.hf_dir={model_dir}",
               f"--config.task.tokenizer_dir={model_dir}",
               "--config.data.source_dir=$HOME/genenv-seeds",
               "--config.coevolve.num_steps=400"):
    assert flag in train, flag


def _train_and_preflight_flags(out) -> tuple[list[str], list[str]]:
  preflight = next(shlex.split(line) for line in out.stdout.splitlines()
                   if "train.bench.compile_check" in line)
  start = next(w for c in _gcloud_lines(out.stdout) if c[4] == "ssh"
               for w in c if "train.main" in w)
  return shlex.split(start.split("nohup ", 1)[1].split(" > ", 1)[0]), preflight


@pytest.mark.parametrize("accelerator,extra,full", [
    ("v5litepod-32", [], True),
    ("v4-64", [], False),
    ("v5litepod-32", ["--config.agent.model_overrides.remat_policy=dots"],
     False)])
def test_16_gib_chips_get_the_7b_presets_full_remat(accelerator, extra, full):
  """On v5litepod slices the 7b preset's remat becomes "full" in both the
  preflight and the run, unless the flags after -- choose one."""
  required = [f for f in REQUIRED if not f.startswith("--accelerator")]
  out = _launch(["--dry_run", *required, f"--accelerator={accelerator}",
                 "--", *extra])
  assert out.returncode == 0, out.stderr
  flags = [f"--config.{p}.model_overrides.remat_policy=full"
           for p in ("agent", "simulator")]
  for command in _train_and_preflight_flags(out):
    assert all((flag in command) == full for flag in flags), command
    assert all(flag in command for flag in extra)


@pytest.mark.parametrize("missing", ["--name", "--zone", "--accelerator",
                                     "--workdir"])
def test_a_missing_required_flag_fails_with_its_name(missing):
  args = [a for a in REQUIRED if not a.startswith(missing + "=")]
  out = _launch(["--dry_run", *args])
  assert out.returncode != 0
  assert f"{missing} is required" in out.stderr
  assert "gcloud" not in out.stdout


def test_bad_flags_fail_and_help_prints_usage():
  out = _launch(["--dry_run", *REQUIRED, "--acelerator=v4-8"])
  assert out.returncode != 0 and "unknown flag --acelerator" in out.stderr
  out = _launch(["--dry_run", *REQUIRED, "--seed_data=/local/dir"])
  assert out.returncode != 0 and "--seed_data" in out.stderr
  out = _launch(["--help"])
  assert out.returncode == 0 and out.stdout.startswith("Usage:")


FAKE_GCLOUD = """#!/usr/bin/env bash
# `storage ls` prints $FAKE_LISTING; anything else records its arguments, one
# per line, then a separator line.
if [[ "$1 $2" == "storage ls" ]]; then cat "${FAKE_LISTING:-/dev/null}"; exit 0; fi
printf '%s\\n' "$@" '---' >> "$GCLOUD_LOG"
[[ "$4 ${FAKE_TPU_EXISTS:-0}" != "describe 0" ]]
"""


@pytest.mark.parametrize("exists", [False, True])
def test_runs_the_commands_and_reuses_an_existing_slice(tmp_path, exists):
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  (bin_dir / "gcloud").write_text(FAKE_GCLOUD)
  (bin_dir / "gcloud").chmod(0o755)
  log = tmp_path / "gcloud.log"
  out = _launch([*REQUIRED, "--repo_url=https://example.com/genenv-jax.git",
                 "--branch=main", "--project=my-project", "--spot",
                 "--skip_preflight"],
                path_prefix=str(bin_dir), GCLOUD_LOG=str(log),
                FAKE_TPU_EXISTS=str(int(exists)), TMPDIR=str(tmp_path))
  assert out.returncode == 0, out.stderr
  calls = [c.strip("\n").split("\n") for c in log.read_text().split("---\n")
           if c.strip()]
  subcommands = [c[3] for c in calls]
  assert subcommands == ["describe"] + ([] if exists else ["create"]) + [
      "ssh", "ssh", "ssh", "ssh"]
  for call in calls:
    assert "--project=my-project" in call
  if not exists:
    assert "--spot" in calls[1]
  clone, _, start = (c[-1] for c in calls[-3:])
  assert "git clone --depth=1 --branch main https://example.com/genenv-jax.git" in clone
  assert "--workdir=gs://bucket/run1" in start and "--distributed=true" in start
  assert ("Reusing TPU VM genenv-7b" in out.stderr) == exists


FAKE_PREFLIGHT_PYTHON = """#!/usr/bin/env bash
# The preflight's interpreter. The seed-data lookup runs in $REAL_PYTHON when
# set, else prints $FAKE_SEED_FIELD (status $FAKE_SEED_STATUS); anything else records its arguments, one
# per line, then a separator line; the compile check exits with
# $FAKE_CHECK_STATUS.
if [[ "$2" == train.tools.seed_data ]]; then
  [[ -z "${REAL_PYTHON:-}" ]] || exec "$REAL_PYTHON" "$@"
  echo "${FAKE_SEED_FIELD:-data.source_dir}"; exit "${FAKE_SEED_STATUS:-0}"
fi
printf '%s\\n' "$@" '---' >> "$PYTHON_LOG"
[[ "$2" != train.bench.compile_check ]] || exit "${FAKE_CHECK_STATUS:-0}"
"""


def _documented_launch() -> list[str]:
  """The launch command of docs/tpu_pods.md, as its words."""
  doc = (ROOT / "docs" / "tpu_pods.md").read_text()
  block = doc.split("```bash\n", 1)[1].split("```", 1)[0]
  words = shlex.split(block.replace("\\\n", " "))
  assert words[0] == "launch/tpu_pod.sh"
  return [w.replace("BUCKET", "bucket") for w in words[1:]]


def _stubbed_launch(tmp_path, args, check_status=0, listing=(),
                    real_lookup=False, seed_status=0):
  """tpu_pod.sh with gcloud and the preflight's Python stubbed; `listing`:
  the URLs `gcloud storage ls` prints; `real_lookup`: the seed-data lookup
  runs in this interpreter (the domains' declarations), else the stub names
  data.source_dir."""
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir(exist_ok=True)
  for name, text in (("gcloud", FAKE_GCLOUD),
                     ("python", FAKE_PREFLIGHT_PYTHON)):
    (bin_dir / name).write_text(text)
    (bin_dir / name).chmod(0o755)
  (tmp_path / "listing").write_text("".join(f"{url}\n" for url in listing))
  out = _launch(args, path_prefix=str(bin_dir),
                GCLOUD_LOG=str(tmp_path / "gcloud.log"),
                PYTHON_LOG=str(tmp_path / "python.log"),
                PYTHON=str(bin_dir / "python"), HOME=str(tmp_path),
                XDG_CACHE_HOME=str(tmp_path / "cache"), TMPDIR=str(tmp_path),
                FAKE_CHECK_STATUS=str(check_status),
                FAKE_LISTING=str(tmp_path / "listing"),
                REAL_PYTHON=sys.executable if real_lookup else "",
                FAKE_SEED_STATUS=str(seed_status))
  calls = lambda name: [c.strip("\n").split("\n") for c in (
      (tmp_path / name).read_text().split("---\n")
      if (tmp_path / name).exists() else []) if c.strip()]
  return out, calls("python.log"), calls("gcloud.log")


@pytest.mark.parametrize("accelerator,runtime", [
    ("v4-64", "tpu-ubuntu2204-base"), ("v5p-64", "v2-alpha-tpuv5"),
    ("v5litepod-32", "v2-alpha-tpuv5-lite")])
@pytest.mark.parametrize("preset", ["", "0.5b", "1.5b", "7b",
                                    "7b_bfcl_multi_turn"])
def test_the_documented_launch_sends_its_commands(tmp_path, accelerator,
                                                   runtime, preset):
  """docs/tpu_pods.md's command with gcloud and the preflight's Python
  stubbed, on each generation and preset: the tokenizer is fetched for the
  preflight, the preflight compiles for the slice, then create, install,
  start."""
  args = [a.replace("--accelerator=v4-64", f"--accelerator={accelerator}")
          for a in _documented_launch()]
  if preset:
    args.insert(0, f"--config=configs/qwen_tpu.py:{preset}")
  out, python_calls, gcloud_calls = _stubbed_launch(tmp_path, args)
  assert out.returncode == 0, out.stderr
  fetch, check = python_calls
  cache = f"{tmp_path}/cache/genenv_jax/tokenizers/Qwen--Qwen2.5-7B-Instruct"
  assert fetch[0] == "-c" and "snapshot_download" in fetch[1]
  assert fetch[2:] == ["Qwen/Qwen2.5-7B-Instruct", cache]
  assert check[:4] == ["-m", "train.bench.compile_check",
                       f"--config=configs/qwen_tpu.py:{preset or '7b'}",
                       f"--topology={accelerator}"]
  assert f"--config.task.tokenizer_dir={cache}" in check
  assert "--config.task.verifier=tool_call" in check
  assert [c[3] for c in gcloud_calls] == [
      "describe", "create", "ssh", "scp", "ssh", "ssh", "ssh", "ssh", "ssh"]
  create = gcloud_calls[1]
  assert f"--accelerator-type={accelerator}" in create
  assert f"--version={runtime}" in create
  install = gcloud_calls[5][-1]
  for requirements in ("-r $HOME/genenv-jax/requirements.txt",
                       "-r $HOME/genenv-jax/requirements-tpu.txt",
                       "--no-deps -r $HOME/genenv-jax/requirements-nodeps.txt"):
    assert requirements in install, requirements
  start = gcloud_calls[-1][-1]
  for flag in (f"--config=configs/qwen_tpu.py:{preset or '7b'}",
               "--workdir=gs://bucket/genenv-7b", "--distributed=true",
               "--config.task.verifier=tool_call"):
    assert flag in start, flag


def _alfworld_launch() -> list[str]:
  """docs/tpu_pods.md's ALFWorld launch command, as its words."""
  doc = (ROOT / "docs" / "tpu_pods.md").read_text()
  block = next(b.split("```", 1)[0] for b in doc.split("```bash\n")[1:]
               if "7b_alfworld" in b.split("```", 1)[0])
  words = shlex.split(block.replace("\\\n", " "))
  assert words[0] == "launch/tpu_pod.sh"
  return [w.replace("BUCKET", "bucket") for w in words[1:]]


def test_the_alfworld_launch_installs_alfworld_on_the_workers(tmp_path):
  """docs/tpu_pods.md's ALFWorld command, gcloud and the preflight stubbed:
  the workers install requirements-alfworld.txt (with the tools its planner
  builds with) after the requirements every preset installs; the default
  preset's launch does not."""
  out, python_calls, gcloud_calls = _stubbed_launch(tmp_path, _alfworld_launch())
  assert out.returncode == 0, out.stderr
  check = python_calls[-1]
  assert check[:3] == ["-m", "train.bench.compile_check",
                       "--config=configs/qwen_tpu.py:7b_alfworld"]
  ssh = [c[-1] for c in gcloud_calls if c[3] == "ssh"]
  base = next(i for i, c in enumerate(ssh) if "requirements-tpu.txt" in c)
  assert "build-essential cmake" in ssh[base + 1]
  assert ("--no-deps -r $HOME/genenv-jax/requirements-alfworld.txt"
          in ssh[base + 1])
  assert "--config=configs/qwen_tpu.py:7b_alfworld" in ssh[-1]
  default_dir = tmp_path / "default"
  default_dir.mkdir()
  out, _, gcloud_calls = _stubbed_launch(default_dir, _documented_launch())
  assert out.returncode == 0, out.stderr
  assert not any("requirements-alfworld" in c[-1] for c in gcloud_calls)


def test_the_bfcl_preset_imports_what_the_workers_install():
  """The multi-turn preset's domain imports bfcl_eval (and its APIs mpmath):
  requirements-nodeps.txt and requirements.txt, which every launcher
  installs, carry them."""
  nodeps = (ROOT / "requirements-nodeps.txt").read_text()
  assert "bfcl-eval==" in nodeps
  assert "mpmath==" in (ROOT / "requirements.txt").read_text()
  code = ("from genenv_jax.scoring import bfcl_apis; "
          "bfcl_apis.api_class('MathAPI')")
  subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True,
                 env=dict(os.environ, PYTHONPATH=str(ROOT)))


@pytest.mark.parametrize("status,message", [
    (3, "does not compile within v4-64's HBM"),
    (1, "stopped with an error (status 1, above), before compiling: not an "
        "HBM verdict")])
def test_the_preflight_tells_a_compile_failure_from_an_error(tmp_path, status,
                                                             message):
  out, _, gcloud_calls = _stubbed_launch(tmp_path, _documented_launch(),
                                         check_status=status)
  assert out.returncode == 2
  assert message in out.stderr
  assert not gcloud_calls  # nothing created


def test_an_unknown_generation_needs_a_runtime(tmp_path):
  args = [a.replace("--accelerator=v4-64", "--accelerator=v9x-8")
          for a in _documented_launch()]
  out, _, _ = _stubbed_launch(tmp_path, args)
  assert out.returncode == 2
  assert "no default --runtime for --accelerator=v9x-8" in out.stderr
  out, _, gcloud_calls = _stubbed_launch(
      tmp_path, ["--runtime=custom-1", "--skip_preflight", *args])
  assert out.returncode == 0, out.stderr
  assert "--version=custom-1" in gcloud_calls[1]


FAKE_PYTHON = """#!/usr/bin/env bash
# Records its process id, working directory and arguments, then waits to be
# stopped.
printf '%s\\n' "$$" "$PWD" "$@" > "$HOME/train_args"
exec sleep 60
"""


def test_the_workers_commands_stop_the_last_job_and_start_a_new_one(tmp_path):
  """The stop and start command lines, run by a real shell with HOME=tmp_path
  standing in for a worker's home."""
  out = _launch(["--dry_run", *REQUIRED, "--", "--config.task.verifier=f1",
                 "--config.task.simulator_system_prompt=It's short."])
  ssh = [c for c in _gcloud_lines(out.stdout) if c[4] == "ssh"]
  command = lambda c: next(w for w in c if w.startswith("--command="))[10:]
  stop, start = command(ssh[0]), command(ssh[-1])
  venv_bin = tmp_path / "genenv-venv" / "bin"
  venv_bin.mkdir(parents=True)
  (venv_bin / "python").write_text(FAKE_PYTHON)
  (venv_bin / "python").chmod(0o755)
  (tmp_path / "genenv-jax").mkdir()
  env = dict(os.environ, HOME=str(tmp_path))
  shell = lambda line: subprocess.run(["bash", "-c", line], env=env, timeout=30,
                                      check=True)
  earlier = subprocess.Popen(["sleep", "60"])
  # Reaped as soon as it ends, as a worker's init reaps a detached job.
  threading.Thread(target=earlier.wait, daemon=True).start()
  try:
    (tmp_path / "genenv-train.pid").write_text(f"{earlier.pid}\n")
    shell(stop)
    assert earlier.wait(timeout=10) is not None  # the earlier job is gone
    shell(start)
    started = int((tmp_path / "genenv-train.pid").read_text())
    for _ in range(100):
      if (tmp_path / "train_args").exists():
        break
      time.sleep(0.1)
    pid, cwd, *args = (tmp_path / "train_args").read_text().splitlines()
    assert int(pid) == started  # the pid file names the job itself
    assert cwd == str(tmp_path / "genenv-jax")
    assert args == ["-m", "train.main", "--config=configs/qwen_tpu.py:7b",
                    "--workdir=gs://bucket/run1", "--distributed=true",
                    f"--config.data.tfds_dir={tmp_path}/genenv-tfds",
                    "--config.task.verifier=f1",
                    "--config.task.simulator_system_prompt=It's short."]
    shell(stop)  # stops the job it started, found by its pid file
    with pytest.raises(ProcessLookupError):
      for _ in range(100):
        os.kill(started, 0)
        time.sleep(0.1)
  finally:
    if earlier.poll() is None:
      earlier.kill()


def _fields(config: ModelConfig, lora: bool = False) -> dict:
  """Shape fields; with `lora` the adapters' left out."""
  adapters = {"lora_rank", "lora_alpha", "lora_targets"} if lora else set()
  return {k: v for k, v in vars(config).items()
          if k not in COMPUTE_FIELDS | adapters}


@pytest.mark.parametrize("size", ["0.5b", "1.5b", "7b", "7b_bfcl_multi_turn",
                                  "7b_alfworld", "7b_bfcl", "7b_api_bank",
                                  "7b_travelplanner", "7b_lora"])
def test_tpu_variants_have_the_preset_shapes_and_fitting_meshes(size):
  config = qwen_tpu.get_config(size)
  players = build.build_players(config, types.SimpleNamespace(vocab_size=1000))
  preset = get_preset(f"qwen2.5-{qwen_tpu.size_of(size)}")
  lora = size.endswith("_lora")
  for model in (players.agent_model, players.simulator_model):
    assert _fields(model, lora) == _fields(preset, lora)
    # A LoRA player's frozen base in bfloat16 (its adapters stay float32).
    assert (model.dtype, model.param_dtype) == (
        "bfloat16", "bfloat16" if lora else "float32")
    assert model.remat_policy != "none"
    assert model.attention == "splash"
    assert model.lora_rank == (qwen_tpu.LORA["rank"] if lora else 0)
  assert (config.agent.learning_rate, config.simulator.learning_rate) == (
      (1e-5, 5e-6) if lora else (1e-6, 5e-7))
  # Each sharded dimension divides its mesh axes.
  mesh = config.mesh
  assert -1 in (mesh.data, mesh.fsdp, mesh.tensor)
  for dim in (preset.num_kv_heads, preset.num_heads, preset.vocab_size,
              preset.intermediate_size):
    assert dim % mesh.tensor == 0
  if mesh.fsdp != -1:
    assert preset.hidden_size % mesh.fsdp == 0
  # Batches split evenly into GRPO minibatches and over the batch shards.
  cc = config.coevolve
  attempts = (cc.num_seeds * cc.variations + config.pool.replay_tasks) * cc.attempts
  assert attempts % cc.agent_minibatches == 0
  if -1 not in (mesh.data, mesh.fsdp):
    shards = mesh.data * mesh.fsdp
    assert (attempts // cc.agent_minibatches) % shards == 0
    assert cc.num_seeds % shards == 0
  assert 0 < cc.logprob_chunk_size < config.task.max_written_tokens


def test_the_default_variant_is_7b_and_unknown_ones_are_named():
  assert qwen_tpu.get_config().to_dict() == qwen_tpu.get_config("7b").to_dict()
  with pytest.raises(ValueError, match="unknown variant '13b'"):
    qwen_tpu.get_config("13b")


def test_the_cpu_variant_builds_its_step(tmp_path, monkeypatch):
  config = qwen_tpu.get_config("cpu")
  make_tokenizer(tmp_path / "tokenizer")
  config.task.tokenizer_dir = str(tmp_path / "tokenizer")
  domain = get_domain(config.task)
  players = build.build_players(config, domain)
  assert players.agent_model.vocab_size == domain.vocab_size
  remat = qwen_tpu.SIZES["7b"]["remat_policy"]
  assert players.agent_model.remat_policy == remat
  mesh = sharding.make_mesh(dict(config.mesh))
  params = build.init_player_params(players.agent_model, jax.random.PRNGKey(0),
                                   mesh, sharding.DEFAULT_RULES)
  rows = domain.encode_tasks([q for q, _ in QA][:8], [a for _, a in QA][:8])
  state, _ = build.create_state(config, domain, players, params, params, rows,
                               np.ones(len(rows), np.int32), mesh)
  chunk_sizes = []
  score = policy.response_logprobs

  def recording(*args, **kwargs):
    chunk_sizes.append(args[7] if len(args) > 7 else kwargs["chunk_size"])
    return score(*args, **kwargs)

  monkeypatch.setattr(policy, "response_logprobs", recording)
  step = sharding.in_mesh(mesh, sharding.DEFAULT_RULES)(
      coevolve.make_step(config, domain, players))
  new_state, metrics = jax.eval_shape(step, state)
  assert jax.tree.structure(new_state) == jax.tree.structure(state)
  assert all(m.shape == (2,) for m in metrics.values())  # (sum, count)
  # The config's chunk reaches every scoring call: GRPO reference and update,
  # the simulator's reference and update (the latter twice, for its KL cap).
  assert len(chunk_sizes) >= 4 and set(chunk_sizes) == {4}


DISTRIBUTED_PROBE = textwrap.dedent("""
    import json, os, sys
    import jax
    from absl import flags
    from train import main

    calls = []
    jax.distributed.initialize = lambda **timeouts: calls.append(1)
    cases = {
        "auto, one host": ("auto", {"TPU_WORKER_HOSTNAMES": "10.0.0.2"}),
        "auto, no variables": ("auto", {}),
        "auto, two TPU hosts": ("auto", {"TPU_WORKER_HOSTNAMES": "h0,h1"}),
        "auto, coordinator": ("auto", {"JAX_COORDINATOR_ADDRESS": "h0:1234"}),
        "true": ("true", {}),
        "false, two hosts": ("false", {"TPU_PROCESS_ADDRESSES": "h0:1,h1:1"}),
    }
    result = {name: main.maybe_initialize_distributed(mode, env)
              for name, (mode, env) in cases.items()}
    result["calls"] = len(calls)
    # main() with the flags a pod worker gets, the driver stubbed out.
    sys.modules["train.loop"] = type(sys)("train.loop")
    sys.modules["train.loop"].train_and_evaluate = lambda config, workdir: {}
    os.environ["TPU_WORKER_HOSTNAMES"] = "h0,h1"
    flags.FLAGS(["train.main", "--workdir=unused"])
    main.main(["train.main"])
    result["calls_after_main"] = len(calls)
    print(json.dumps(result))
""")


def test_train_main_initialises_multi_host_jax_only_on_several_hosts():
  env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
  env.pop("JAX_COORDINATOR_ADDRESS", None)
  out = subprocess.run([sys.executable, "-c", DISTRIBUTED_PROBE], cwd=ROOT,
                       capture_output=True, text=True, env=env, timeout=120,
                       check=False)
  assert out.returncode == 0, out.stderr[-2000:]
  result = json.loads(out.stdout.strip().splitlines()[-1])
  assert result == {"auto, one host": False, "auto, no variables": False,
                    "auto, two TPU hosts": True, "auto, coordinator": True,
                    "true": True, "false, two hosts": False, "calls": 3,
                    "calls_after_main": 4}


# The Table 1 presets (docs/table1.md): each with its seed data in a bucket,
# the lookup in this interpreter, so the domains' own declarations map
# --seed_data; TravelPlanner's splits, API-Bank's training files.
# (The other domains' fields and files: tests/test_seed_data.py, in process.)
TABLE1_LAUNCHES = [
    ("7b_travelplanner", "task.data_dir",
     ["train.csv", "train_ref_info.jsonl", "validation.csv",
      "validation_ref_info.jsonl"]),
]


def _table1_launch(seeds: str) -> list[str]:
  """docs/tpu_pods.md's launch without its flags after -- (a text task's),
  its seed data in gs://bucket/SEEDS."""
  words = _documented_launch()
  words = words[:words.index("--")] if "--" in words else words
  return [w.replace("gs://bucket/seed_tasks", f"gs://bucket/{seeds}")
          for w in words]


@pytest.mark.parametrize("preset,field,files", TABLE1_LAUNCHES,
                         ids=[p for p, _, _ in TABLE1_LAUNCHES])
def test_seed_data_reaches_the_field_its_domain_reads(tmp_path, preset, field,
                                                      files):
  args = [f"--config=configs/qwen_tpu.py:{preset}", *_table1_launch("seeds")]
  out, python_calls, gcloud_calls = _stubbed_launch(
      tmp_path, args, listing=["gs://bucket/seeds/:"] + [
          f"gs://bucket/seeds/{f}" for f in files], real_lookup=True)
  assert out.returncode == 0, out.stderr
  assert "+ gcloud storage ls --recursive gs://bucket/seeds" in out.stderr
  assert python_calls[-1][:3] == ["-m", "train.bench.compile_check",
                                  f"--config=configs/qwen_tpu.py:{preset}"]
  start = gcloud_calls[-1][-1]
  assert f"--config.{field}=$HOME/genenv-seeds" in start
  other = {"task.data_dir": "data.source_dir",
           "data.source_dir": "task.data_dir"}[field]
  assert f"--config.{other}=" not in start


def test_seed_data_the_domain_cannot_read_stops_the_preflight(tmp_path):
  """TravelPlanner's bucket without the validation split: the message names
  the field, the path and the files expected, and nothing is created or
  compiled."""
  args = ["--config=configs/qwen_tpu.py:7b_travelplanner",
          *_table1_launch("seed_tasks")]
  out, python_calls, gcloud_calls = _stubbed_launch(
      tmp_path, args, real_lookup=True, listing=[
          "gs://bucket/seed_tasks/train.csv",
          "gs://bucket/seed_tasks/train_ref_info.jsonl"])
  assert out.returncode == 2
  assert ("config.task.data_dir=gs://bucket/seed_tasks: the travelplanner domain "
          "reads") in out.stderr
  assert "lacks validation.csv; validation_ref_info.jsonl" in out.stderr
  assert "is not what configs/qwen_tpu.py:7b_travelplanner's domain reads" in out.stderr
  assert not gcloud_calls and not python_calls


def test_seed_data_for_a_domain_that_draws_its_seeds_is_refused(tmp_path):
  """The lookup's status 4 (a domain that reads none: ALFWorld's,
  tests/test_seed_data.py) stops the launch."""
  out, _, gcloud_calls = _stubbed_launch(
      tmp_path, ["--config=configs/qwen_tpu.py:7b_alfworld",
                 *_table1_launch("seeds")], seed_status=4)
  assert out.returncode == 2
  assert "7b_alfworld's domain reads no seed data" in out.stderr
  assert not gcloud_calls


@pytest.mark.parametrize("preset,seeds", [
    ("7b_bfcl", True), ("7b_bfcl_multi_turn", False), ("7b_api_bank", True),
    ("7b_travelplanner", True), ("7b_alfworld", False), ("7b_lora", True)])
def test_each_table1_preset_passes_the_stubbed_preflight(tmp_path, preset, seeds):
  """docs/table1.md's launches, gcloud, the compile check and the seed-data
  lookup stubbed (its real answers: tests/test_seed_data.py): the preflight
  compiles the preset for the slice, then the slice is created and the run
  started with it."""
  args = [f"--config=configs/qwen_tpu.py:{preset}", *_table1_launch("seeds")]
  if not seeds:
    args = [a for a in args if not a.startswith("--seed_data")]
  out, python_calls, gcloud_calls = _stubbed_launch(
      tmp_path, args, listing=["gs://bucket/seeds/a.jsonl"])
  assert out.returncode == 0, out.stderr
  assert python_calls[-1][:4] == ["-m", "train.bench.compile_check",
                                  f"--config=configs/qwen_tpu.py:{preset}",
                                  "--topology=v4-64"]
  assert [c[3] for c in gcloud_calls][:2] == ["describe", "create"]
  start = gcloud_calls[-1][-1]
  assert f"--config=configs/qwen_tpu.py:{preset}" in start
  assert ("genenv-seeds" in start) == seeds
