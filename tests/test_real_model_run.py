"""GenEnv with a real chat model for both players: configs/text.py:smollm runs a
few co-evolution steps on the project's tiny seed set through the README's
command, `python -m train.main`, on 2 CPU devices at small batches, with
SmolLM2-135M-Instruct cut to its first 4 decoder layers (built once into the
cache by train.tools.real_models): the real model's tokenizer, chat template,
stop tokens and weights through every stage of the run, at a size whose run
fits beside the other test worker (the full model's logits and decoding are
checked against transformers in tests/test_real_model.py).

A benchmark (`./launch/test.sh -m benchmark tests/test_real_model_run.py`):
about 50 s alone, 95 s beside the other workers, and a gigabyte of
checkpoints; in the default run the chat config runs its step on a stand-in
of the same architecture (tests/test_chat_arithmetic.py) and the real
weights' logits and decoding are checked against transformers
(tests/test_real_model.py)."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest

from train.outputs import metrics_log
from train.runtime import cpu_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVICES = 2


@pytest.mark.benchmark
def test_smollm2_players_run_the_text_step(smollm2_first4_dir, tmp_path):
  env = dict(os.environ, GENENV_SMOLLM2_DIR=smollm2_first4_dir, PYTHONPATH=ROOT,
             XLA_FLAGS=cpu_flags.with_device_count(
                 os.environ.get("XLA_FLAGS", ""), DEVICES))
  result = subprocess.run(
      [sys.executable, "-m", "train.main", "--config=configs/text.py:smollm",
       f"--workdir={tmp_path}", "--config.coevolve.num_steps=2",
       # Smaller batches than the preset's (which split over 8 devices): 2
       # generations, (2 + 2 replayed) x 4 = 16 attempts in 2 minibatches.
       "--config.coevolve.num_seeds=1", "--config.pool.replay_tasks=2",
       "--config.checkpoint_every=1000"],  # only the step-0 and final checkpoints
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800, check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  with open(tmp_path / "config.json") as f:
    assert smollm2_first4_dir in f.read()  # both players and the tokenizer

  records = metrics_log.read_metrics(str(tmp_path / metrics_log.METRICS_FILE))
  steps = {r["step"]: r for r in records if "env/valid_frac" in r}
  assert sorted(steps) == [1, 2]
  last = steps[2]
  assert last["perf/compiles"] == 1
  for name in ("env/valid_frac", "env/success_rate", "agent/logp_mismatch",
               "env/logp_mismatch", "agent/reward_mean", "env/delimiter_variant_frac"):
    assert math.isfinite(last[name]), name
  assert 0.0 <= last["env/valid_frac"] <= 1.0
  # Sampler and trainer run the same f32 model: their log-probs agree closely.
  assert 0.0 <= last["agent/logp_mismatch"] < 0.05
  assert 0.0 <= last["env/logp_mismatch"] < 0.05
