"""`train.tools.evaluate ... --generate` on a sharded mesh and as several JAX
processes: the agent's parameters are read straight into their fsdp / tensor
shards, and the predictions are token for token those of the data-only mesh
and of one process; only process 0 writes files."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys

import jax
from jax.sharding import PartitionSpec
import numpy as np
import orbax.checkpoint as ocp
import pytest

from genenv_jax import sharding
from genenv_jax.scoring import InputError
from models import decoder, hf
from models.config import get_preset
from tests.test_text_domain import make_tokenizer
from train.checkpoints import state_checkpoint
from train.checkpoints import state_layout
from train.tools import agent_generate, evaluate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARDED = "data=2,fsdp=2,tensor=2"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
  """(HF directory of a random tiny qwen2 model, Bamboogle fixture directory)."""
  root = tmp_path_factory.mktemp("evaluate_sharded")
  tokenizer = make_tokenizer(root / "tokenizer")
  # The vocabulary padded to split over the tensor axis.
  config = get_preset("tiny", vocab_size=-(-len(tokenizer) // 8) * 8, dtype="float32")
  params = decoder.init_params(config, jax.random.PRNGKey(0))
  hf.save_hf_params(params, config, root / "model", "qwen2",
                    tokenizer_dir=root / "tokenizer")
  assert evaluate.main(["bamboogle", "--write_fixture", str(root / "bamboogle")]) == 0
  return str(root / "model"), str(root / "bamboogle")


def _flags(hf_dir, data_dir, predictions, *extra):
  return ["bamboogle", "--generate", "--hf_dir", hf_dir, "--data_dir", data_dir,
          "--predictions", str(predictions), "--max_new_tokens", "8",
          "--batch_size", "8", *extra]


def test_sharded_mesh_predicts_what_the_data_only_mesh_does(tiny, tmp_path, capsys):
  hf_dir, data_dir = tiny
  agent = agent_generate.load_agent("", hf_dir, None, "", SHARDED)
  assert dict(agent.mesh.shape) == dict(data=2, fsdp=2, tensor=2)
  # Each parameter lies in its shards by the training rules, not replicated.
  mlp = agent.params["layers_0"]["mlp"]["gate_proj"]["kernel"]  # (embed, mlp)
  assert mlp.sharding.spec == PartitionSpec("fsdp", "tensor")
  assert mlp.addressable_shards[0].data.shape == (64, 256)
  plain, sharded = tmp_path / "plain.jsonl", tmp_path / "sharded.jsonl"
  assert evaluate.main(_flags(hf_dir, data_dir, plain)) == 0
  assert evaluate.main(_flags(hf_dir, data_dir, sharded, "--mesh", SHARDED)) == 0
  out = capsys.readouterr().out
  assert out.count("accuracy=") == 2
  assert sharded.read_text() == plain.read_text()
  results = [json.loads(line)["result"] for line in plain.read_text().splitlines()]
  assert len(results) >= 2 and any(results)


def test_bad_mesh_is_a_clear_error(tiny, tmp_path, capsys):
  hf_dir, data_dir = tiny
  for mesh, words in (("data=-1,fsdp=3", "--mesh=data=-1,fsdp=3"),
                      ("data=-1,pipe=2", "'pipe' is not one of"),
                      ("data=x", "no integer size")):
    assert evaluate.main(_flags(hf_dir, data_dir, tmp_path / "p.jsonl",
                                "--mesh", mesh)) == 2
    assert words in capsys.readouterr().err
  # A job named by half its flags.
  assert evaluate.main(["--num_processes=2"] + _flags(hf_dir, data_dir,
                                                     tmp_path / "p.jsonl")) == 2
  assert "--num_processes=2 --process_id=-1: a job named here needs all three" in (
      capsys.readouterr().err)
  # tensor=8 does not divide the 2 key-value heads: the parameter is named.
  with pytest.raises(InputError, match=r"--hf_dir .* on the mesh \{'data': 1, 'fsdp': 1, "
                     r"'tensor': 8\}: layers_0/attn/k_proj.*not divisible"):
    agent_generate.load_agent("", hf_dir, None, "", "data=1,tensor=8")


def test_checkpoint_part_restores_into_its_shards(tiny, tmp_path):
  """state_checkpoint.read_sharded: a run's saved agent parameters restored
  straight into the fsdp / tensor layout equal those read on the host."""
  hf_dir, _ = tiny
  model = hf.config_from_hf(hf.read_hf_config(hf_dir))
  params, _ = hf.load_hf_params(hf_dir, model)
  manager = ocp.CheckpointManager(tmp_path / "checkpoints")
  manager.save(0, args=ocp.args.StandardSave({"agent": {"params": params}}))
  manager.wait_until_finished()
  mesh = agent_generate.agent_mesh("", SHARDED)
  target = state_layout.abstract_params(model, mesh, sharding.DEFAULT_RULES)
  restored = state_checkpoint.read_sharded(str(tmp_path), None, "agent.params", target)
  for got, want, place in zip(jax.tree.leaves(restored), jax.tree.leaves(params),
                              jax.tree.leaves(target)):
    assert got.sharding == place.sharding
    np.testing.assert_array_equal(np.asarray(got), want)
  wrong = state_layout.abstract_params(model.replace(hidden_size=64, head_dim=16), mesh,
                                       sharding.DEFAULT_RULES)
  with pytest.raises(ValueError, match="agent.params.*has shape"):
    state_checkpoint.read_sharded(str(tmp_path), None, "agent.params", wrong)


def test_run_evaluates_on_its_config_mesh(tiny, tmp_path, capsys):
  """--run: the agent of a text run's checkpoint, restored into the shards of
  the run's config.mesh, predicts what it predicts on the data-only mesh."""
  from configs import text as text_config  # pylint: disable=g-import-not-at-top
  from genenv_jax.domains import get_domain  # pylint: disable=g-import-not-at-top
  from train import build  # pylint: disable=g-import-not-at-top
  from train.checkpoints import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  hf_dir, data_dir = tiny
  config = text_config.get_config("cpu")
  config.agent.hf_dir = config.simulator.hf_dir = config.task.tokenizer_dir = hf_dir
  config.mesh.update(data=2, fsdp=2, tensor=2)
  workdir = str(tmp_path / "run")
  (tmp_path / "run").mkdir()
  workdir_lib.write_config(config, workdir)
  model = build.build_players(config, get_domain(config.task)).agent_model
  mesh = agent_generate.agent_mesh("", SHARDED)
  params = build.init_player_params(model, jax.random.PRNGKey(0), mesh,
                                    sharding.DEFAULT_RULES, hf_dir)
  manager = ocp.CheckpointManager(tmp_path / "run" / "checkpoints")
  manager.save(0, args=ocp.args.StandardSave({"agent": {"params": params}}))
  manager.wait_until_finished()
  agent = agent_generate.load_agent(workdir, "", None, "", "")
  assert dict(agent.mesh.shape) == dict(data=2, fsdp=2, tensor=2)
  assert agent.model.dtype == "float32" and agent.layout == "gathered"
  kernel = agent.params["layers_0"]["mlp"]["gate_proj"]["kernel"]
  assert kernel.sharding.spec == PartitionSpec("fsdp", "tensor")
  on_run_mesh, data_only = tmp_path / "run.jsonl", tmp_path / "data.jsonl"
  flags = ["bamboogle", "--generate", "--run", workdir, "--data_dir", data_dir,
           "--max_new_tokens", "8", "--batch_size", "8", "--predictions"]
  assert evaluate.main(flags + [str(on_run_mesh)]) == 0
  assert evaluate.main(flags + [str(data_only), "--mesh", "data=-1"]) == 0
  assert on_run_mesh.read_text() == data_only.read_text()
  assert evaluate.main(flags + [str(data_only), "--step", "3"]) == 2
  assert "no step-3 checkpoint" in capsys.readouterr().err


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def test_two_processes_predict_what_one_does_and_only_process_0_writes(
    tiny, tmp_path, capsys):
  hf_dir, data_dir = tiny
  one = tmp_path / "one.jsonl"
  assert evaluate.main(_flags(hf_dir, data_dir, one, "--mesh", SHARDED)) == 0
  want_summary = capsys.readouterr().out.splitlines()
  # Two processes of 4 CPU devices each, the same global mesh; each is given
  # its own predictions path, so that a file process 1 wrote would show.
  port = _free_port()
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu",
             XLA_FLAGS="--xla_force_host_platform_device_count=4")
  procs = [subprocess.Popen(
      [sys.executable, "-m", "train.tools.evaluate",
       f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2",
       f"--process_id={i}",
       *_flags(hf_dir, data_dir, tmp_path / f"two_{i}.jsonl", "--mesh", SHARDED)],
      cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
      for i in range(2)]
  outs = [p.communicate(timeout=300) for p in procs]
  for p, (out, err) in zip(procs, outs):
    assert p.returncode == 0, (out[-2000:], err[-3000:])
  assert (tmp_path / "two_0.jsonl").read_text() == one.read_text()
  assert not (tmp_path / "two_1.jsonl").exists()
  assert not (tmp_path / "two_1.jsonl.verdicts.jsonl").exists()
  assert ((tmp_path / "two_0.jsonl.verdicts.jsonl").read_text()
          == (tmp_path / "one.jsonl.verdicts.jsonl").read_text())
  # The key=value lines (gloo prints its own), timing aside.
  summary = lambda lines: [line for line in lines if re.match(r"\w+=", line)
                           and not line.startswith("generation_seconds")]
  assert summary(outs[0][0].splitlines()) == summary(want_summary)
  assert "accuracy=" not in outs[1][0]
