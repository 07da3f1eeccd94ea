"""The GPU node: configs/qwen_gpu.py's presets (shapes, validation on their GPU
counts, the step traced with dot_product attention) and launch/gpu_node.sh's
command on one node, under SLURM and with explicit flags, with `python`
stubbed."""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import subprocess
import sys
import textwrap
import types

import jax
import ml_collections
import numpy as np
import pytest

from configs import qwen_gpu, qwen_tpu
from genenv_jax import coevolve
from genenv_jax import sharding
from genenv_jax.domains import get_domain
from models.config import get_preset
from tests.test_text_domain import QA, make_tokenizer
from train import build, config_validation

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "launch" / "gpu_node.sh"
DOC = ROOT / "docs" / "gpu.md"
# ModelConfig fields that choose how a model computes, not its shapes.
COMPUTE_FIELDS = {"dtype", "param_dtype", "remat_policy", "scan_layers",
                  "attention"}


def _shape_fields(config, lora: bool = False) -> dict:
  """The shape fields of a ModelConfig; with `lora` its adapters' left out."""
  adapters = {"lora_rank", "lora_alpha", "lora_targets"} if lora else set()
  return {k: v for k, v in vars(config).items()
          if k not in COMPUTE_FIELDS | adapters}


# ------------------------------------------------------------------ presets


@pytest.mark.parametrize("size", qwen_gpu.VARIANTS)
def test_gpu_presets_have_the_qwen_shapes_and_gpu_settings(size):
  config = qwen_gpu.get_config(size)
  players = build.build_players(config, types.SimpleNamespace(vocab_size=1000))
  preset = get_preset(f"qwen2.5-{qwen_tpu.size_of(size)}")
  lora = size == "7b_lora"
  for model in (players.agent_model, players.simulator_model):
    assert _shape_fields(model, lora) == _shape_fields(preset, lora)
    assert (model.dtype, model.param_dtype) == (
        "bfloat16", "bfloat16" if lora else "float32")
    assert model.attention == "dot_product"
    assert model.remat_policy == "full" and model.scan_layers
    assert model.lora_rank == (qwen_tpu.LORA["rank"] if lora else 0)
  # What is trained is the TPU variant's: batches (but 7b_lora's, a quarter
  # of 7b's on one GPU), widths, learning rates.
  tpu = qwen_tpu.get_config(size)
  if lora:
    tpu.coevolve.update(num_seeds=4, agent_minibatches=10)
    tpu.pool.replay_tasks = 4
  for section in ("coevolve", "pool", "task", "grpo", "curriculum", "data"):
    assert config[section].to_dict() == tpu[section].to_dict(), section
  assert (config.agent.learning_rate, config.simulator.learning_rate) == (
      (1e-5, 5e-6) if lora else (1e-6, 5e-7))
  assert qwen_gpu.get_config().to_dict() == qwen_gpu.get_config(
      qwen_gpu.DEFAULT_SIZE).to_dict()


def test_the_7b_preset_shards_over_the_8_gpus_of_a_node():
  mesh = qwen_gpu.get_config("7b").mesh
  assert sharding.mesh_dims(dict(mesh), 8) == (1, 8, 1)
  assert sharding.mesh_dims(dict(mesh), 16) == (2, 8, 1)  # two nodes
  assert sharding.mesh_dims(dict(qwen_gpu.get_config("0.5b").mesh), 1) == (
      1, 1, 1)


VALID = [(size, gpus) for size, counts in qwen_gpu.GPUS.items()
         for gpus in counts]


@pytest.mark.parametrize("size, gpus", VALID,
                         ids=[f"{s} on {g}" for s, g in VALID])
def test_gpu_presets_pass_validation_on_their_gpu_counts(size, gpus):
  config = qwen_gpu.get_config(size)
  if config.task.name == "travelplanner":  # a run names its data directory
    config.task.data_dir = "/data/travelplanner"
  config_validation.validate(config, gpus)


@pytest.mark.parametrize("size, gpus, message", [
    ("7b", 4, r"config\.mesh=.*fsdp.*8.*4 devices"),
    ("7b", 24, r"num_seeds \* coevolve\.variations = 64 rows .*data x fsdp "
     r"= 3 x 8"),
    ("0.5b", 3, r"num_seeds \* coevolve\.variations = 64 rows .*data x fsdp "
     r"= 3 x 1"),
])
def test_gpu_presets_on_other_counts_are_refused_naming_the_field(
    size, gpus, message):
  with pytest.raises(ValueError, match=message):
    config_validation.validate(qwen_gpu.get_config(size), gpus)


def test_an_unknown_variant_is_named():
  with pytest.raises(ValueError, match=r"qwen_gpu\.py: unknown variant "
                     r"'13b'.*\('0\.5b', '7b', '7b_lora', '7b_bfcl'"):
    qwen_gpu.get_config("13b")


@pytest.mark.parametrize("size", ["0.5b", "7b"])
def test_each_presets_step_traces_on_its_mesh(tmp_path, monkeypatch,
                                                 size):
  """The preset's whole co-evolution step, its players shrunk to tiny
  widths (8 CPU devices: 0.5b's data=8, 7b's fsdp=8), traced with the
  dot_product attention."""
  config = qwen_gpu.get_config(size)
  make_tokenizer(tmp_path / "tokenizer")
  config.task.tokenizer_dir = str(tmp_path / "tokenizer")
  config.task.update(max_task_tokens=24, max_answer_tokens=8,
                     max_response_tokens=16, max_written_tokens=48,
                     max_simulator_tokens=48)
  for player in (config.agent, config.simulator):
    overrides = dict(player.model_overrides, **qwen_tpu.CPU_SHAPES)
    del overrides["vocab_size"]
    player.model_overrides = ml_collections.ConfigDict(overrides)
  config_validation.validate(config, jax.device_count())
  domain = get_domain(config.task)
  players = build.build_players(config, domain)
  assert players.agent_model.attention == "dot_product"
  mesh = sharding.make_mesh(dict(config.mesh))
  params = build.init_player_params(players.agent_model, jax.random.PRNGKey(0),
                                    mesh, sharding.DEFAULT_RULES)
  rows = domain.encode_tasks([q for q, _ in QA][:8], [a for _, a in QA][:8])
  state, _ = build.create_state(config, domain, players, params, params, rows,
                                np.ones(len(rows), np.int32), mesh)
  step = sharding.in_mesh(mesh, sharding.DEFAULT_RULES)(
      coevolve.make_step(config, domain, players))
  calls = []
  real = jax.nn.dot_product_attention

  def counted(*args, **kwargs):
    calls.append(kwargs)
    return real(*args, **kwargs)

  monkeypatch.setattr(jax.nn, "dot_product_attention", counted)
  new_state, _ = jax.eval_shape(step, state)
  assert jax.tree.structure(new_state) == jax.tree.structure(state)
  # Scoring and training passes attend through it (the XLA implementation
  # on this CPU), causal.
  assert calls and all(c["is_causal"] and c["implementation"] == "xla"
                       for c in calls)


# ----------------------------------------------------------------- launcher

STUB = textwrap.dedent("""\
    #!/usr/bin/env bash
    # The seed-data lookup runs in $REAL_PYTHON when set, else prints
    # $FAKE_SEED_FIELD (status $FAKE_SEED_STATUS); anything else records its argv, working directory and
    # JAX variables, then exits.
    if [[ "$2" == train.tools.seed_data ]]; then
      [[ -z "${REAL_PYTHON:-}" ]] || exec "$REAL_PYTHON" "$@"
      echo "${FAKE_SEED_FIELD:-data.source_dir}"; exit "${FAKE_SEED_STATUS:-0}"
    fi
    {
      echo "cwd=$PWD"
      echo "JAX_PLATFORMS=${JAX_PLATFORMS-<unset>}"
      echo "JAX_LOCAL_DEVICE_IDS=${JAX_LOCAL_DEVICE_IDS-<unset>}"
      echo "XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION-<unset>}"
      echo "PYTHONPATH=${PYTHONPATH-<unset>}"
      for a in "$@"; do echo "arg=$a"; done
    } > "$STUB_RECORD"
    exit "${STUB_STATUS:-0}"
    """)
SLURM_VARIABLES = ("SLURM_JOB_ID", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID",
                   "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
                   "SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES")


def _launch(tmp_path, args, **env):
  """Runs gpu_node.sh with a stub `python` first on PATH; returns (the
  process, {"cwd", "env": {...}, "args": [...]} of the stub's call or
  None)."""
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir(exist_ok=True)
  stub = bin_dir / "python"
  stub.write_text(STUB)
  stub.chmod(0o755)
  record = tmp_path / "record"
  if record.exists():
    record.unlink()
  environ = {k: v for k, v in os.environ.items()
             if k not in SLURM_VARIABLES + ("GENENV_PYTHON", "JAX_PLATFORMS",
                                            "CUDA_VISIBLE_DEVICES",
                                            "JAX_LOCAL_DEVICE_IDS",
                                            "XLA_PYTHON_CLIENT_MEM_FRACTION")}
  path = env.pop("PATH", environ["PATH"])
  environ.update(PATH=f"{bin_dir}:{path}", STUB_RECORD=str(record), **env)
  out = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True,
                       text=True, env=environ, cwd=tmp_path, timeout=60,
                       check=False)
  if not record.exists():
    return out, None
  call = {"env": {}, "args": []}
  for line in record.read_text().splitlines():
    key, value = line.split("=", 1)
    if key == "arg":
      call["args"].append(value)
    elif key == "cwd":
      call["cwd"] = value
    else:
      call["env"][key] = value
  return out, call


def test_one_node_runs_train_main_with_the_preset(tmp_path):
  seeds = "/data/seeds"  # the stub names the text domain's field, data.source_dir
  out, call = _launch(tmp_path, [
      "--workdir=/runs/w", "--hf_dir=/ckpt/Qwen2.5-0.5B-Instruct",
      f"--seed_data={seeds}", "--", "--config.coevolve.num_steps=3"])
  assert out.returncode == 0, out.stderr
  assert call["args"] == [
      "-m", "train.main", "--config=configs/qwen_gpu.py:0.5b",
      "--workdir=/runs/w",
      "--config.agent.hf_dir=/ckpt/Qwen2.5-0.5B-Instruct",
      "--config.simulator.hf_dir=/ckpt/Qwen2.5-0.5B-Instruct",
      "--config.task.tokenizer_dir=/ckpt/Qwen2.5-0.5B-Instruct",
      f"--config.data.source_dir={seeds}", "--config.coevolve.num_steps=3"]
  assert call["cwd"] == str(ROOT)
  assert call["env"]["JAX_PLATFORMS"] == "cuda"
  assert call["env"]["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.90"
  # One process drives every GPU: no jax.distributed, no device restriction.
  assert call["env"]["JAX_LOCAL_DEVICE_IDS"] == "<unset>"
  assert call["env"]["PYTHONPATH"].split(":")[0] == str(ROOT)


def test_a_single_task_slurm_job_is_one_node(tmp_path):
  out, call = _launch(tmp_path, ["--workdir=/runs/w", "--preset=7b"],
                      SLURM_JOB_ID="77", SLURM_NTASKS="1", SLURM_PROCID="0",
                      SLURM_LOCALID="0", SLURM_STEP_NODELIST="gpu001",
                      SLURM_STEP_NUM_NODES="1")
  assert out.returncode == 0, out.stderr
  assert call["args"] == ["-m", "train.main", "--config=configs/qwen_gpu.py:7b",
                          "--workdir=/runs/w"]
  assert call["env"]["JAX_LOCAL_DEVICE_IDS"] == "<unset>"


@pytest.mark.parametrize("nodelist, first", [
    ("gpu[007-008]", "gpu007"), ("gpu007,gpu011", "gpu007"),
    ("a[3,5-6],b2", "a3")])
def test_a_slurm_task_joins_the_job_on_the_first_node(tmp_path, nodelist,
                                                      first):
  env = dict(SLURM_JOB_ID="4242", SLURM_NTASKS="3", SLURM_PROCID="1",
             SLURM_LOCALID="0", SLURM_STEP_NODELIST=nodelist,
             SLURM_STEP_NUM_NODES="3", CUDA_VISIBLE_DEVICES="0,1,2,3,4,5,6,7")
  out, call = _launch(tmp_path, ["--workdir=/shared/w", "--preset=7b", "--",
                                 "--heartbeat_timeout_s=300"], **env)
  assert out.returncode == 0, out.stderr
  port = 61440 + 4242 % 4096
  assert call["args"] == [
      "-m", "train.main", "--config=configs/qwen_gpu.py:7b",
      "--workdir=/shared/w", "--distributed=true",
      f"--coordinator_address={first}:{port}", "--num_processes=3",
      "--process_id=1", "--heartbeat_timeout_s=300"]
  # Every GPU of the node, not the one jax.distributed gives a SLURM task.
  assert call["env"]["JAX_LOCAL_DEVICE_IDS"] == "0,1,2,3,4,5,6,7"
  # --port and --gpus_per_node win over what the environment implies.
  out, call = _launch(tmp_path, ["--workdir=/shared/w", "--port=1234",
                                 "--gpus_per_node=4"], **env)
  assert out.returncode == 0, out.stderr
  assert f"--coordinator_address={first}:1234" in call["args"]
  assert call["env"]["JAX_LOCAL_DEVICE_IDS"] == "0,1,2,3"


def test_explicit_flags_name_the_job(tmp_path):
  out, call = _launch(tmp_path, [
      "--workdir=gs://b/w", "--coordinator=10.0.0.2:8476", "--num_processes=2",
      "--process_id=0", "--gpus_per_node=8"], JAX_PLATFORMS="cuda,cpu",
      XLA_PYTHON_CLIENT_MEM_FRACTION="0.8")
  assert out.returncode == 0, out.stderr
  assert call["args"][4:] == ["--distributed=true",
                              "--coordinator_address=10.0.0.2:8476",
                              "--num_processes=2", "--process_id=0"]
  # An explicit choice wins.
  assert call["env"]["JAX_PLATFORMS"] == "cuda,cpu"
  assert call["env"]["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.8"
  assert call["env"]["JAX_LOCAL_DEVICE_IDS"] == "0,1,2,3,4,5,6,7"


def test_dry_run_prints_the_command_it_would_run(tmp_path):
  args = ["--workdir=/runs/w", "--preset=7b", "--coordinator=h0:1",
          "--num_processes=2", "--process_id=1", "--gpus_per_node=2",
          "--", "--config.task.verifier=f1"]
  dry, call = _launch(tmp_path, ["--dry_run", *args])
  assert dry.returncode == 0 and call is None  # nothing run
  _, call = _launch(tmp_path, args)
  words = shlex.split(dry.stdout.strip())
  assert words[:4] == ["JAX_PLATFORMS=cuda", "XLA_PYTHON_CLIENT_MEM_FRACTION=0.90",
                       "JAX_LOCAL_DEVICE_IDS=0,1", "python"]
  assert words[4:] == call["args"]


def test_the_exit_status_is_train_mains(tmp_path):
  out, _ = _launch(tmp_path, ["--workdir=/runs/w"], STUB_STATUS="75")
  assert out.returncode == 75  # preempted after saving: rerun to resume


@pytest.mark.parametrize("args, env, message", [
    ([], {}, "--workdir is required"),
    (["--workdir=w", "--preset=13b"], {}, r"--preset=13b: expected one of 0\.5b 7b 7b_lora"),
    (["--workdir=w", "--zone=x"], {}, "unknown flag --zone"),
    (["--workdir=w", "--coordinator=h:1"], {},
     "a job named here needs all three"),
    (["--workdir=w", "--coordinator=h:1", "--num_processes=2",
      "--process_id=2", "--gpus_per_node=8"], {},
     r"--process_id=2: expected 0 \.\. num_processes - 1 = 1"),
    (["--workdir=w", "--coordinator=h", "--num_processes=2",
      "--process_id=0"], {}, "--coordinator=h: expected HOST:PORT"),
    # Two tasks on one node: each would drive only its share of the GPUs.
    (["--workdir=w"], dict(SLURM_JOB_ID="1", SLURM_NTASKS="16",
                           SLURM_PROCID="9", SLURM_LOCALID="1",
                           SLURM_STEP_NODELIST="g[1-2]",
                           SLURM_STEP_NUM_NODES="2"),
     "run one task per node"),
    (["--workdir=w"], dict(SLURM_NTASKS="2", SLURM_JOB_ID="1"),
     "start it with srun"),
    (["--workdir=w", "--coordinator=h:1", "--num_processes=2",
      "--process_id=1"], dict(PATH="/usr/bin:/bin"), "pass --gpus_per_node=N"),
])
def test_bad_launches_fail_naming_the_flag(tmp_path, args, env, message):
  if "PATH" in env:  # no CUDA_VISIBLE_DEVICES, an nvidia-smi listing no GPU
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'No devices were found'\n")
    smi.chmod(0o755)
  out, call = _launch(tmp_path, args, **env)
  assert out.returncode == 2 and call is None
  assert re.search(message, out.stderr), out.stderr


def test_the_commands_of_docs_gpu_md_launch_train_main(tmp_path):
  """Every gpu_node.sh command docs/gpu.md gives runs (python stubbed): alone
  as one node, under SLURM's variables as a task of the job, and the one
  naming its job by flags as that job's process."""
  launches = []
  for block in re.findall(r"```(?:bash)?\n(.*?)```", DOC.read_text(), re.S):
    for line in block.replace("\\\n", " ").splitlines():
      words = shlex.split(line, comments=True)
      if "launch/gpu_node.sh" in words:
        launches.append(words[words.index("launch/gpu_node.sh") + 1:])
  assert len(launches) >= 2, launches
  slurm = dict(SLURM_JOB_ID="9", SLURM_NTASKS="2", SLURM_PROCID="0",
               SLURM_LOCALID="0", SLURM_STEP_NODELIST="n[1-2]",
               SLURM_STEP_NUM_NODES="2", CUDA_VISIBLE_DEVICES="0,1,2,3,4,5,6,7")
  for args in launches:
    named = any(a.startswith("--coordinator=") for a in args)
    for env in ({}, slurm):
      # A job named by flags is one whatever the environment says.
      gpus = dict(CUDA_VISIBLE_DEVICES="0,1") if named else {}
      out, call = _launch(tmp_path, args, **{**env, **gpus})
      assert out.returncode == 0, (args, out.stderr)
      assert call["args"][:2] == ["-m", "train.main"]
      assert ("--distributed=true" in call["args"]) == (named or bool(env))
  assert any(a.startswith("--coordinator=") for a in launches[-1])


def test_seed_data_goes_to_the_field_its_domain_reads_or_stops(tmp_path):
  """TravelPlanner's preset reads task.data_dir: its splits arrive there; a
  directory without the validation split stops the launch naming the field,
  the path and the files expected; ALFWorld's takes no seed data."""
  from genenv_jax.scoring import travelplanner  # pylint: disable=g-import-not-at-top
  data = tmp_path / "tp"
  travelplanner.write_fixture(str(data), "train")
  args = ["--workdir=/runs/w", "--preset=7b_travelplanner", f"--seed_data={data}"]
  out, call = _launch(tmp_path, args, REAL_PYTHON=sys.executable)
  assert out.returncode == 2 and call is None
  assert f"config.task.data_dir={data}: the travelplanner domain reads" in out.stderr
  assert "lacks validation.csv; validation_ref_info.jsonl" in out.stderr
  travelplanner.write_fixture(str(data), "validation")
  out, call = _launch(tmp_path, args, REAL_PYTHON=sys.executable)
  assert out.returncode == 0, out.stderr
  assert call["args"][2:] == ["--config=configs/qwen_gpu.py:7b_travelplanner",
                              "--workdir=/runs/w", f"--config.task.data_dir={data}"]
  # A domain that reads none (tests/test_seed_data.py: ALFWorld's): the lookup's
  # status 4 stops the launch.
  out, call = _launch(tmp_path, ["--workdir=/runs/w", "--preset=7b_alfworld",
                                 f"--seed_data={data}"], FAKE_SEED_STATUS="4")
  assert out.returncode == 2 and call is None
  assert "configs/qwen_gpu.py:7b_alfworld's domain reads no seed data" in out.stderr
