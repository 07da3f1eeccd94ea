"""train/bench/save_time.py: the checkpoint save benchmark at a tiny size
(local disk and gs:// on the Cloud Storage emulator) and the 7B model's bytes
against a hand count from the preset's shapes."""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import pytest

from configs import qwen_tpu
from models.config import get_preset
from tests.test_text_domain import make_tokenizer
from train.bench import save_time
from train.checkpoints import checkpointing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
  directory = tmp_path_factory.mktemp("tokenizer")
  make_tokenizer(directory)
  return str(directory)


def _config(variant, tokenizer_dir):
  config = qwen_tpu.get_config(variant)
  config.task.tokenizer_dir = tokenizer_dir
  return config


def test_tiny_saves_time_the_state_they_write(tokenizer_dir, tmp_path):
  config = _config("cpu", tokenizer_dir)  # the 7b settings, tiny players
  measured = save_time.measure(config, (1, -1, 1), saves=2,
                               local_dir=str(tmp_path), gcs=True)
  shapes, _ = save_time.saved_shapes(config, (1, -1, 1))
  assert shapes.agent.ref_params is None  # the references are not saved
  state_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(shapes))
  assert measured["state_bytes"] == state_bytes > 0
  assert sum(measured["breakdown"].values()) == state_bytes
  assert measured["arrays"] == len(jax.tree.leaves(shapes))
  assert measured["mesh"] == {"data": 1, "fsdp": jax.device_count(),
                              "tensor": 1}
  for where in ("local", "gcs"):
    records = measured[where]
    assert [r["step"] for r in records] == [1, 2]
    for r in records:
      assert r["state_bytes"] == state_bytes
      assert r["total_s"] >= r["written_s"] >= r["blocked_s"] > 0
      assert r["mb_per_s"] == pytest.approx(state_bytes / r["total_s"] / 1e6)
      assert r["stored_bytes"] > 0
      assert r["rss_high_bytes"] >= r["rss_before_bytes"] > 0
  # The local saves are the run's checkpoints: committed, checksums recorded.
  for step in (1, 2):
    step_dir = checkpointing.workdir_path(str(tmp_path)) / "checkpoints" / str(step)
    assert checkpointing.verify(step_dir) is None
  lines = save_time.describe_measured(measured)
  assert len(lines) == 5 and "local save 2" in lines[2] and "gcs" in lines[3]


def test_the_7b_model_counts_both_players_weights_and_adam_moments(
    tokenizer_dir):
  preset = get_preset("qwen2.5-7b")
  e, f, layers = preset.hidden_size, preset.intermediate_size, preset.num_layers
  q, kv = preset.num_heads * preset.head_dim, preset.num_kv_heads * preset.head_dim
  block = (e * q + q) + 2 * (e * kv + kv) + q * e + 3 * e * f + 2 * e
  params = 2 * preset.vocab_size * e + layers * block + e  # untied, final norm
  assert params == 7_615_616_512
  modeled = save_time.model(_config("7b", tokenizer_dir), hosts=8,
                            host_gbytes_per_s=1.6)
  assert modeled["params_per_player"] == params
  b = modeled["breakdown"]
  for player in ("agent", "simulator"):
    assert b[f"{player}_params"] == 4 * params  # float32
    assert b[f"{player}_opt_state"] == 8 * params + 4  # mu, nu, int32 count
  # Pools, rng, step and success estimates: 35 MB beside 183 GB.
  assert 0 < b["other"] < 1e-3 * modeled["state_bytes"]
  assert modeled["state_bytes"] == 24 * params + 8 + b["other"]
  assert 182.7e9 < modeled["state_bytes"] < 182.9e9
  assert modeled["seconds"] == pytest.approx(
      modeled["state_bytes"] / (8 * 1.6e9))
  assert modeled["bytes_per_host"] == modeled["state_bytes"] / 8
  assert modeled["seconds_at_half_rate"] == pytest.approx(2 * modeled["seconds"])
  lines = save_time.describe_model(modeled, "7b")
  assert "7,615,616,512 parameters per player" in lines[0]
  assert "182.8" in lines[0] and "14.3 s" in lines[1]


def test_model_only_prints_without_building(tokenizer_dir):
  out = subprocess.run(
      [sys.executable, "-m", "train.bench.save_time", "--model_only",
       f"--config.task.tokenizer_dir={tokenizer_dir}", "--hosts=4",
       "--host_gbytes_per_s=2"],
      cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True,
      text=True, check=True).stdout
  assert "measured" not in out
  assert "7,615,616,512 parameters per player; saved state 182.8" in out
  assert "4 hosts x 2.0 GB/s each: 45.70" in out and "GB per host, 22.9 s" in out
