"""The simulator's start (config.warmstart.simulator_start): its lessons and
how a run takes over a shared warm-start under another start (no training)."""

import json

from etils import epath
import numpy as np
import pytest

from configs import default
from genenv_jax.domains import get_domain
from genenv_jax.domains.arithmetic.domain import DIGIT0, EQUALS, PLUS
from train import warmstart
from train.checkpoints import init_from


def _level(tokens) -> int:
  """Digits of the longer operand of the `a+b=` in a row of tokens."""
  tokens = list(tokens)
  body = tokens[:tokens.index(EQUALS)]
  plus = body.index(PLUS)
  digits = lambda part: sum(DIGIT0 <= t < DIGIT0 + 10 for t in part)
  return max(digits(body[:plus]), digits(body[plus + 1:]))


@pytest.mark.parametrize("offset", [2, -1])
def test_lessons_target_the_seed_level_plus_the_offset(offset):
  domain = get_domain(default.get_config().task)  # levels 1..5
  rng = np.random.default_rng(0)
  rows, difficulty = domain.random_tasks(rng, 500)
  data = warmstart.simulator_data(domain, rows, difficulty, rng, 300, 1,
                                  offset)
  seed = np.array([_level(p) for p in data.prompt])
  target = np.array([_level(t) for t in data.target])
  step = target - np.clip(seed + offset, 1, 5)
  # Targets: the seed's level + offset ± 1, clipped to the levels present.
  assert np.all((np.abs(step) <= 1) | (target == 1) | (target == 5))
  assert set(np.unique(step[(seed + offset >= 2) & (seed + offset <= 4)])
             ) == {-1, 0, 1}


def test_matched_start_leaves_the_simulator_and_bad_names_are_refused():
  config = default.get_config("smoke")
  params = {"w": np.ones(3)}
  assert warmstart.start_simulator(config, None, None, params, None, None,
                                   None, None) is params
  config.warmstart.simulator_start = "medium"
  with pytest.raises(ValueError, match=r"simulator_start='medium'"):
    warmstart.start_simulator(config, None, None, params, None, None, None,
                              None)


def _source(tmp_path, start, **warm):
  config = default.get_config("smoke")
  config.warmstart.simulator_start = start
  config.warmstart.update(warm)
  source = json.loads(config.to_json_best_effort())
  if start == "matched":  # also a run made before the field existed
    del source["warmstart"]["simulator_start"]
  (tmp_path / "config.json").write_text(json.dumps(source))
  return epath.Path(tmp_path)


def _ours(start, **warm):
  config = default.get_config("smoke")
  config.warmstart.simulator_start = start
  config.warmstart.update(warm)
  return config


def test_a_matched_warm_start_is_moved_to_the_runs_start(tmp_path):
  source = _source(tmp_path, "matched")
  ours = _ours("hard", simulator_start_steps=9)
  assert not init_from.step0_conflicts(ours, source)
  assert init_from.simulator_start_pending(ours, source)
  assert not init_from.simulator_start_pending(_ours("matched"), source)


def test_a_moved_warm_start_serves_only_its_own_start(tmp_path):
  source = _source(tmp_path, "hard")
  assert not init_from.step0_conflicts(_ours("hard"), source)
  assert not init_from.simulator_start_pending(_ours("hard"), source)
  assert init_from.step0_conflicts(_ours("hard", simulator_start_steps=9),
                                   source) == [
      "warmstart.simulator_start_steps: 4 != 9"]
  for start in ("easy", "matched"):
    assert init_from.step0_conflicts(_ours(start), source) == [
        f"warmstart.simulator_start: 'hard' != '{start}'"]
