"""Co-evolution on BFCL multi-turn at the smoke preset's sizes (configs/text.py:
bfcl_multi_turn_smoke) on the 8-device CPU mesh: the step compiles once, plays
episodes against the APIs inside it, parses the simulator's generations on the
host, and the agent learns from the checker's verdicts.

A random tiny agent never writes a call, so it would get no learning signal: the
agent here is a scripted bigram sampler. From the line break that ends each
assistant header it writes its seed's ground-truth call step or `Done.` with
equal odds, so some of its episodes pass and some do not. The simulator is the
preset's random tiny model: none of its generations is a valid task, so it has
nothing to learn from here (teaching a tiny model with a 152K vocabulary to
write one takes more supervised steps than a test affords on this CPU).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from configs import text as text_config
from genenv_jax.domains import get_domain
from genenv_jax.domains.bfcl_multi_turn import data as data
from tests import step_runs
from train import build



def _params(tree):
  return [np.asarray(x) for x in jax.tree.leaves(jax.device_get(tree))]


@pytest.fixture(scope="module")
def run(tmp_path_factory, qwen_tokenizer_dir):
  root = tmp_path_factory.mktemp("bfcl_run")
  config = text_config.get_config("bfcl_multi_turn_smoke")
  config.task.tokenizer_dir = qwen_tokenizer_dir
  domain = get_domain(config.task)
  splits = data.bfcl_splits(domain, tuple(config.data.categories),
                            config.data.test_fraction, config.data.seed,
                            config.data.max_seed_turns)
  train = splits["train"]
  seed = int(np.argmin((train.rows != domain.pad_id).sum(axis=1)))  # the shortest
  rows, difficulty = train.rows[seed:seed + 1], train.difficulty[seed:seed + 1]
  entry = domain.environment.host.task(rows[0])
  step = "[" + ", ".join(entry.ground_truth[0]) + "]"
  config.agent.hf_dir = step_runs.bigram_player(
      root / "agent", domain.tokenizer, build.build_players(config, domain).agent_model,
      [step, "Done."])
  # Its architecture now comes from its HF directory.
  config.agent.model_overrides = {"dtype": "float32"}

  players, state, shardings, mesh = step_runs.start(config, domain, rows, difficulty)
  before = (_params(state.agent.params), _params(state.simulator.params))
  state, history, traces = step_runs.run_steps(config, domain, players, state,
                                               shardings, mesh, 2)
  return dict(config=config, domain=domain, state=state, history=history,
              traces=traces, before=before, step=step, rows=rows)


def test_the_step_compiles_once_and_plays_episodes(run):
  history, config = run["history"], run["config"]
  assert run["traces"] == 1
  for metrics in history:
    for name, value in metrics.items():
      assert np.isfinite(value), name
    assert metrics["episode/errors"] == 0.0
    assert 1.0 <= metrics["episode/turns"] <= config.task.max_turns
    assert metrics["episode/observation_token_frac"] > 0.0  # results were observed
  # Some episodes passed the checker and some did not: GRPO had a signal.
  rewards = [m["agent/reward_mean"] for m in history]
  assert 0.0 < max(rewards) < 1.0, rewards


def test_the_agent_learns_and_generations_are_parsed(run):
  state, config = run["state"], run["config"]
  old, new = run["before"][0], _params(state.agent.params)
  assert any(not np.array_equal(a, b) for a, b in zip(old, new))
  assert run["history"][0]["agent/grad_norm"] > 0.0
  # The random simulator's generations were read on the host, inside the step,
  # and none is a task: nothing entered the pool, the simulator did not move.
  generated = config.coevolve.num_seeds * config.coevolve.variations
  for m in run["history"]:
    assert m["env/valid_frac"] == 0.0 and m["env/invalid_count"] == generated
  assert int(state.pool.size) == 1
  old, new = run["before"][1], _params(state.simulator.params)
  assert all(np.array_equal(a, b) for a, b in zip(old, new))
