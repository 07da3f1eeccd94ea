"""Scripted generation (genenv_jax/scripted.py): the uniform and
learnability-oracle level draws, the per-level success estimate, and the
arms' co-evolution step on arithmetic and mazes."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from configs import default
from configs import maze as maze_config
from genenv_jax import coevolve
from genenv_jax import pool as pool_lib
from genenv_jax import scripted
from genenv_jax import sharding
from genenv_jax.domains import get_domain
from genenv_jax.domains.maze import data as maze_data
from train import build
from train import config_validation

from tests import step_runs

RULES = sharding.DEFAULT_RULES


@functools.lru_cache(maxsize=1)
def _demo_bank():
  """(the demo's arithmetic domain, a LevelBank of 64 random tasks per level
  1..5)."""
  domain = get_domain(default.get_config().task)
  rows, difficulty = domain.random_tasks(np.random.default_rng(0), 2000)
  return domain, scripted.level_bank(rows, difficulty, domain.max_difficulty,
                                     per_level=64, seed=0)


def _drawn_levels(domain, bank, weights, n, seed=1):
  """int[n] the levels of n tasks drawn with `weights`, read back by parsing
  the drawn rows (so the bank's bucketing is checked as well)."""
  rows, _ = scripted.draw_tasks(bank, jax.random.PRNGKey(seed),
                                jnp.asarray(weights), n)
  parsed = domain.parse(rows, rows != domain.pad_id)
  assert bool(parsed.valid.all())
  return np.asarray(parsed.difficulty)


def test_level_bank_buckets_seed_tasks_by_level():
  domain, bank = _demo_bank()
  assert bank.tasks.shape[:2] == (5, 64)
  np.testing.assert_array_equal(bank.count, [64] * 5)
  for level in range(1, 6):
    rows = jnp.asarray(bank.tasks[level - 1])
    parsed = domain.parse(rows, rows != domain.pad_id)
    np.testing.assert_array_equal(np.asarray(parsed.difficulty), level)


def test_level_bank_names_a_missing_level():
  domain, _ = _demo_bank()
  rows, difficulty = domain.random_tasks(np.random.default_rng(0), 50,
                                         difficulties=[1, 2, 4])
  with pytest.raises(ValueError, match="no task of level 3 of 1..4"):
    scripted.level_bank(rows, difficulty, 4, per_level=8, seed=0)


def test_uniform_level_histogram_is_uniform():
  domain, bank = _demo_bank()
  n = 5000
  levels = _drawn_levels(domain, bank, scripted.uniform_level_weights(5), n)
  counts = np.bincount(levels, minlength=6)[1:]
  assert counts.sum() == n
  # Pearson's chi-square against equal shares, 4 degrees of freedom: a
  # uniform draw exceeds the 0.999 quantile (18.5) once in a thousand seeds.
  chi2 = ((counts - n / 5) ** 2 / (n / 5)).sum()
  assert chi2 < stats.chi2.ppf(0.999, df=4), counts


def test_learnability_weights_follow_p_times_one_minus_p():
  planted = jnp.array([1.0, 0.9, 0.5, 0.2, 0.0])
  weights = np.asarray(scripted.learnability_level_weights(planted, 0.1))
  learnable = np.array([0.0, 0.09, 0.25, 0.16, 0.0])
  np.testing.assert_allclose(weights, 0.9 * learnable / learnable.sum() + 0.02,
                             rtol=1e-6)
  # Unknown levels count 1/4, the largest p(1 - p).
  unknown = jnp.array([1.0, pool_lib.UNKNOWN_SUCCESS, 0.5, 0.0, 0.0])
  np.testing.assert_allclose(
      np.asarray(scripted.learnability_level_weights(unknown, 0.0)),
      [0.0, 0.5, 0.5, 0.0, 0.0], rtol=1e-6)
  # All solved always or never: uniform.
  solved = jnp.array([1.0, 1.0, 0.0, 0.0, 0.0])
  np.testing.assert_allclose(
      np.asarray(scripted.learnability_level_weights(solved, 0.0)), 0.2,
      rtol=1e-6)


def test_oracle_draws_more_where_p_times_one_minus_p_is_larger():
  domain, bank = _demo_bank()
  planted = jnp.array([1.0, 0.9, 0.5, 0.2, 0.0])
  n = 5000
  levels = _drawn_levels(
      domain, bank, scripted.learnability_level_weights(planted, 0.1), n)
  share = np.bincount(levels, minlength=6)[1:] / n
  # p(1-p) = 0, .09, .25, .16, 0: level 3 > level 4 > level 2 > levels 1, 5.
  assert share[2] > share[3] > share[1] > max(share[0], share[4])
  expected = 0.9 * np.array([0, .09, .25, .16, 0]) / 0.5 + 0.02
  np.testing.assert_allclose(share, expected, atol=0.025)


def test_level_success_estimate_blends_measured_levels_only():
  before = jnp.array([pool_lib.UNKNOWN_SUCCESS, 0.5, 0.8, 0.3])
  # Tasks at levels 1, 1, 2 and an invalid one marked level 3; none at 4.
  difficulty = jnp.array([1, 1, 2, 3])
  task_success = jnp.array([0.2, 0.4, 1.0, 0.0])
  valid = jnp.array([True, True, True, False])
  after = scripted.update_level_success(before, difficulty, task_success,
                                        valid, rate=0.25)
  # Level 1 unknown: takes the step's 0.3; level 2: 0.75·0.5 + 0.25·1;
  # level 3 (its only task invalid) and level 4 unchanged.
  np.testing.assert_allclose(np.asarray(after), [0.3, 0.625, 0.8, 0.3],
                             rtol=1e-6)


def test_scripted_generation_needs_a_frozen_simulator_and_a_bank():
  config = default.get_config("smoke,uniform")
  config.simulator_update.method = "rwr"
  with pytest.raises(ValueError,
                     match=r"config\.coevolve\.generation='uniform'.*'rwr'"):
    config_validation.validate(config, 8)
  config = default.get_config("smoke,oracle_learnability")
  with pytest.raises(ValueError, match="level bank"):
    coevolve.make_step(config, get_domain(config.task), None)


def _smoke_start(arm, rl_seed=0):
  """(config, domain, players, step-0 state, its shardings, mesh, level
  bank) of a smoke-sized scripted arm with untrained players."""
  config = default.get_config(f"smoke,{arm}")
  config.coevolve.rl_seed = rl_seed
  domain = get_domain(config.task)
  players = build.build_players(config, domain)
  mesh = sharding.make_mesh({"data": 1}, devices=jax.devices()[:1])
  rows, difficulty = domain.random_tasks(np.random.default_rng(0), 256)
  bank = build.scripted_level_bank(config, domain,
                                  {"task": rows, "difficulty": difficulty})
  agent, simulator = (
      build.init_player_params(model, jax.random.PRNGKey(k), mesh, RULES)
      for k, model in enumerate((players.agent_model,
                                 players.simulator_model)))
  state, shardings = build.create_state(config, domain, players, agent,
                                       simulator, rows[:64], difficulty[:64],
                                       mesh)
  return config, domain, players, state, shardings, mesh, bank


@pytest.mark.parametrize("arm", ["uniform", "oracle_learnability"])
def test_scripted_arm_steps_compile_once_and_draw_from_the_bank(arm):
  config, domain, players, state, shardings, mesh, bank = _smoke_start(arm)
  simulator_before = jax.device_get(state.simulator.params)
  state, history, traces = step_runs.run_steps(
      config, domain, players, state, shardings, mesh, 3, level_bank=bank)
  assert traces == 1
  written = config.coevolve.num_seeds * config.coevolve.variations
  for metrics in history:
    assert metrics["env/valid_frac"] == 1.0  # bank rows are well-formed tasks
    assert metrics["env/difficulty_frac_d1"] + metrics[
        "env/difficulty_frac_d2"] == pytest.approx(1.0)
  assert int(state.pool.total_added) == 3 * written
  assert int(state.generation_pool.size) == 0  # nothing the simulator wrote
  jax.tree.map(np.testing.assert_array_equal, simulator_before,
               jax.device_get(state.simulator.params))
  # Both smoke levels were attempted, so both estimates are known.
  level_success = np.asarray(state.level_success)
  assert ((level_success >= 0) & (level_success <= 1)).all()
  assert history[-1]["agent/level_success_d1"] == pytest.approx(
      level_success[0])


def test_rl_seed_draws_other_tasks_from_the_same_start():
  added = []
  for rl_seed in (0, 1):
    config, domain, players, state, shardings, mesh, bank = _smoke_start(
        "uniform", rl_seed)
    start = int(state.pool.size)
    state, _, _ = step_runs.run_steps(config, domain, players, state,
                                      shardings, mesh, 1, level_bank=bank)
    added.append(np.asarray(state.pool.tasks[start:int(state.pool.size)]))
  assert added[0].shape == added[1].shape
  assert not np.array_equal(added[0], added[1])


def test_scripted_tasks_are_mazes_of_the_drawn_level():
  config = maze_config.get_config("smoke,uniform")
  domain = get_domain(config.task)
  train, _ = maze_data.maze_splits(domain, 0, 200, 1)
  bank = build.scripted_level_bank(config, domain, train)
  state = type("State", (), {"level_success": jnp.array(
      [1.0, 0.5, 0.0, pool_lib.UNKNOWN_SUCCESS])})
  for arm, expected in (("uniform", [.25, .25, .25, .25]),
                        ("oracle_learnability", [.025, .475, .025, .475])):
    config.coevolve.generation = arm
    config.coevolve.num_seeds, config.coevolve.variations = 1000, 2
    generation = jax.jit(lambda key, cfg=config: coevolve.write_tasks(
        cfg, domain, None, state, key, None, bank))(jax.random.PRNGKey(0))
    assert generation.out is None and bool(generation.tasks.valid.all())
    share = np.bincount(np.asarray(generation.tasks.difficulty),
                        minlength=5)[1:] / 2000
    np.testing.assert_allclose(share, expected, atol=0.04)
