"""The baseline arms' changes to the co-evolution step (static generation,
the reference code's seed trim and pool), with a warm-started simulator."""

import functools

import jax
import numpy as np
import pytest

from configs import default
from genenv_jax import pool as pool_lib
from genenv_jax import sharding
from genenv_jax.domains import get_domain
from train import build
from train import config_validation
from train import warmstart

from tests import step_runs

RULES = sharding.DEFAULT_RULES


@functools.lru_cache(maxsize=1)
def _warm_smoke_simulator():
  """(seed rows, difficulties, simulator parameters on the host) of the smoke
  simulator warm-started to write well-formed tasks."""
  config = default.get_config("smoke")
  domain = get_domain(config.task)
  model = build.build_players(config, domain).simulator_model
  mesh = sharding.make_mesh({"data": 1}, devices=jax.devices()[:1])
  rng = np.random.default_rng(0)
  rows, difficulty = domain.random_tasks(rng, 2048)
  env = build.init_player_params(model, jax.random.PRNGKey(1), mesh, RULES)
  env, _ = warmstart.train_supervised(
      model, env, warmstart.simulator_data(domain, rows, difficulty, rng, 64 * 150, -1),
      steps=150, batch_size=64, learning_rate=3e-3, seed=0, mesh=mesh,
      rules=RULES)
  return rows, difficulty, jax.device_get(env)


def _arm_run(arm, agent_key, num_steps=3, extra_rows=0):
  """num_steps steps of an arm's step (smoke sizes, one device) with a
  simulator warm-started to write well-formed tasks, from a pool of 64 base
  rows and `extra_rows` generated ones. Returns (final state, per-step
  metrics, the number of pool rows before the first step)."""
  config = default.get_config(f"smoke,{arm}")
  domain = get_domain(config.task)
  players = build.build_players(config, domain)
  mesh = sharding.make_mesh({"data": 1}, devices=jax.devices()[:1])
  rows, difficulty, env = _warm_smoke_simulator()
  agent = build.init_player_params(players.agent_model,
                                  jax.random.PRNGKey(agent_key), mesh, RULES)
  layout = jax.tree.map(lambda x: x.sharding, build.init_player_params(
      players.simulator_model, jax.random.PRNGKey(1), mesh, RULES))
  state, shardings = build.create_state(config, domain, players, agent,
                                       jax.device_put(env, layout), rows[:64],
                                       difficulty[:64], mesh)
  if extra_rows:
    state = state.replace(pool=pool_lib.add_tasks(
        state.pool, rows[64:64 + extra_rows], difficulty[64:64 + extra_rows],
        np.ones(extra_rows, bool)))
  state, history, _ = step_runs.run_steps(config, domain, players, state,
                                          shardings, mesh, num_steps)
  return state, history, 64 + extra_rows


def test_static_tasks_are_one_fixed_dataset_whatever_the_agent_and_pool():
  # Another agent, and a pool that holds generated rows (seeds of an online
  # simulator would come from them too): the same tasks are written.
  state_a, history_a, start_a = _arm_run("static", agent_key=0)
  state_b, history_b, start_b = _arm_run("static", agent_key=7, extra_rows=40)
  added = int(state_a.pool.total_added)
  assert added > 0  # well-formed tasks were written
  assert int(state_b.pool.total_added) == added + 40
  np.testing.assert_array_equal(
      np.asarray(state_a.pool.tasks[start_a:start_a + added]),
      np.asarray(state_b.pool.tasks[start_b:start_b + added]))
  for a, b in zip(history_a, history_b):
    assert a["env/difficulty_mean"] == b["env/difficulty_mean"]
  # The agents differ, and so do their attempts.
  assert any(a["agent/response_len"] != b["agent/response_len"]
             for a, b in zip(history_a, history_b))


def test_reference_code_pool_is_base_data_plus_the_latest_generation():
  state, history, num_base = _arm_run("reference_code", agent_key=0)
  generated = 8 * history[-1]["env/valid_frac"]  # smoke: 4 seeds x 2 tasks
  assert int(state.pool.total_added) > round(generated) > 0
  assert int(state.pool.size) == num_base + round(generated)


def test_static_generation_needs_a_frozen_simulator():
  config = default.get_config("smoke,static")
  config.simulator_update.method = "rwr"
  with pytest.raises(ValueError, match="config.coevolve.generation='static'"):
    config_validation.validate(config, 8)
