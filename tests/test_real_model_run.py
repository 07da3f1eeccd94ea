"""GenEnv with a real chat model for both players: configs/text.py:smollm
(SmolLM2-135M-Instruct, built once into the cache by train.tools.real_models)
runs a few co-evolution steps on the project's tiny seed set on the CPU mesh."""

from __future__ import annotations

import math

import pytest

from configs import text as text_config
from train import loop
from train import metrics_log


# Measured peak resident memory of the run (two 135M-parameter players with their
# references and AdamW states, f32, and the compiled step): about 13.5 GB.
NEEDED_GIB = 16


def _available_gib() -> float:
  with open("/proc/meminfo", encoding="ascii") as f:
    fields = dict(line.split(":", 1) for line in f)
  return int(fields["MemAvailable"].split()[0]) / 2**20


@pytest.fixture(scope="module")
def enough_memory():
  if _available_gib() < NEEDED_GIB:
    pytest.skip(f"the SmolLM2 run needs about {NEEDED_GIB} GiB of free memory; "
                f"{_available_gib():.1f} GiB available")


def test_smollm2_players_run_the_text_step(enough_memory, smollm2_dir, tmp_path,
                                           monkeypatch):
  monkeypatch.setenv("GENENV_SMOLLM2_DIR", smollm2_dir)
  config = text_config.get_config("smollm")
  assert config.agent.hf_dir == smollm2_dir == config.task.tokenizer_dir
  config.coevolve.num_steps = 2
  config.checkpoint_every = 1000  # only the step-0 and the final checkpoint
  loop.train_and_evaluate(config, str(tmp_path))

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
