"""D_train and D_env ring buffers: protected base data, cursor, wrap-around, sampling."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import default
from genenv_jax import coevolve
from genenv_jax import pool as pool_lib
from genenv_jax.domains.base import ParsedTasks


def _rows(values, width=3):
  return np.stack([np.full((width,), v, np.int32) for v in values])


def test_task_pool_keeps_base_and_appends_kept_rows_in_order():
  pool = pool_lib.create_task_pool(_rows([1, 2]), np.array([1, 1]), capacity=6)
  new = _rows([10, 11, 12, 13])
  keep = jnp.array([True, False, True, True])
  pool = jax.jit(pool_lib.add_tasks)(pool, jnp.asarray(new),
                                     jnp.array([2, 3, 4, 5]), keep)
  np.testing.assert_array_equal(np.asarray(pool.tasks[:, 0]),
                                [1, 2, 10, 12, 13, 0])
  np.testing.assert_array_equal(np.asarray(pool.difficulty),
                                [1, 1, 2, 4, 5, 0])
  assert int(pool.size) == 5 and int(pool.cursor) == 5
  assert int(pool.total_added) == 3


def test_task_pool_wraps_around_without_touching_base():
  pool = pool_lib.create_task_pool(_rows([1, 2]), np.array([1, 1]), capacity=5)
  add = jax.jit(pool_lib.add_tasks)
  all_true = jnp.ones((2,), bool)
  pool = add(pool, jnp.asarray(_rows([10, 11])), jnp.array([3, 3]), all_true)
  pool = add(pool, jnp.asarray(_rows([12, 13])), jnp.array([4, 4]), all_true)
  # Ring [2, 5): 10, 11, 12 fill it, 13 overwrites the oldest (10).
  np.testing.assert_array_equal(np.asarray(pool.tasks[:, 0]),
                                [1, 2, 13, 11, 12])
  assert int(pool.size) == 5 and int(pool.cursor) == 3
  assert int(pool.total_added) == 4


def test_task_pool_write_larger_than_ring_keeps_the_first_rows_that_fit():
  pool = pool_lib.create_task_pool(_rows([1]), np.array([1]), capacity=3)
  pool = pool_lib.add_tasks(pool, jnp.asarray(_rows([10, 11, 12])),
                            jnp.array([2, 2, 2]), jnp.ones((3,), bool))
  np.testing.assert_array_equal(np.asarray(pool.tasks[:, 0]), [1, 10, 11])
  assert int(pool.size) == 3


def test_task_pool_samples_only_filled_rows():
  pool = pool_lib.create_task_pool(_rows([7, 8, 9]), np.array([1, 2, 3]),
                                   capacity=64)
  tasks, difficulty = jax.jit(pool_lib.sample_tasks, static_argnums=2)(
      pool, jax.random.PRNGKey(0), 300)
  assert set(np.asarray(tasks[:, 0]).tolist()) == {7, 8, 9}
  np.testing.assert_array_equal(np.asarray(difficulty),
                                np.asarray(tasks[:, 0]) - 6)


def test_task_pool_tracks_the_agents_success_per_row():
  unknown = pool_lib.UNKNOWN_SUCCESS
  pool = pool_lib.create_task_pool(_rows([1, 2]), np.array([1, 1]), capacity=6)
  np.testing.assert_array_equal(np.asarray(pool.success), [unknown] * 6)
  pool = jax.jit(pool_lib.add_tasks)(
      pool, jnp.asarray(_rows([10, 11, 12])), jnp.array([2, 2, 2]),
      jnp.array([True, False, True]), jnp.array([0.3, 0.9, 0.7]))
  pool = pool_lib.add_tasks(pool, jnp.asarray(_rows([13])), jnp.array([2]),
                            jnp.array([True]))  # no rate given: unknown
  np.testing.assert_allclose(np.asarray(pool.success),
                             [unknown, unknown, 0.3, 0.7, unknown, unknown])
  # Re-measured rows take their new rate; unmeasured draws leave theirs.
  pool = jax.jit(pool_lib.record_success)(
      pool, jnp.array([0, 3, 2]), jnp.array([0.5, 0.1, 0.0]),
      jnp.array([True, True, False]))
  np.testing.assert_allclose(np.asarray(pool.success),
                             [0.5, unknown, 0.3, 0.1, unknown, unknown])


def test_sample_indices_match_sample_tasks():
  pool = pool_lib.create_task_pool(_rows([7, 8, 9]), np.array([1, 2, 3]),
                                   capacity=64)
  key = jax.random.PRNGKey(3)
  idx = pool_lib.sample_indices(pool, key, 50)
  tasks, _ = pool_lib.sample_tasks(pool, key, 50)
  assert set(np.asarray(idx).tolist()) <= {0, 1, 2}
  np.testing.assert_array_equal(np.asarray(pool.tasks[idx]), np.asarray(tasks))


def _scored_pool(success):
  """A pool of base rows 0..n-1 (row i holds value i) with these success
  rates (UNKNOWN_SUCCESS for unscored rows), and 4 empty rows."""
  n = len(success)
  pool = pool_lib.create_task_pool(_rows(range(n)), np.ones(n, np.int32),
                                   capacity=n + 4)
  return pool.replace(success=pool.success.at[:n].set(jnp.array(success)))


def _drawn(pool, trim, n=4000, seed=0):
  idx = jax.jit(pool_lib.sample_indices, static_argnums=(2, 3))(
      pool, jax.random.PRNGKey(seed), n, trim)
  return set(np.asarray(idx).tolist())


def test_trimmed_sampling_sets_aside_the_lowest_and_highest_scored_rows():
  unknown = pool_lib.UNKNOWN_SUCCESS
  # 20 scored rows with distinct rates (row 3 lowest, row 4 highest), 2 not
  # yet attempted: a 10% trim sets aside 2 rows at each end.
  rates = [0.5 + 0.01 * i for i in range(22)]
  rates[3], rates[4], rates[5], rates[6] = 0.0, 1.0, 0.01, 0.99
  rates[20], rates[21] = unknown, unknown
  drawn = _drawn(_scored_pool(rates), 0.1)
  assert drawn == set(range(22)) - {3, 4, 5, 6}
  assert _drawn(_scored_pool(rates), 0.0) == set(range(22))


def test_trimmed_sampling_breaks_ties_and_keeps_small_pools_whole():
  # Ten rows with one rate: one of them at each end is set aside per draw.
  drawn = _drawn(_scored_pool([0.5] * 10), 0.1)
  assert len(drawn) == 8 and drawn < set(range(10))
  # Nine scored rows: floor(0.9) = 0 set aside.
  assert _drawn(_scored_pool([0.1 * i for i in range(9)]), 0.1) == set(range(9))


def test_learnability_weights_by_hand():
  unknown = pool_lib.UNKNOWN_SUCCESS
  pool = _scored_pool([0.5, 0.1, 1.0, 0.0, unknown])
  weights = np.asarray(pool_lib.learnability_weights(pool, 0.01))
  # p(1 - p) + floor on scored rows, the floor alone on the unscored one,
  # 0 on the 4 empty rows.
  np.testing.assert_allclose(weights, [0.26, 0.1, 0.01, 0.01, 0.01, 0, 0, 0, 0],
                             rtol=1e-6)


def test_level_learnability_weights_follow_the_level_estimate():
  unknown = pool_lib.UNKNOWN_SUCCESS
  pool = pool_lib.create_task_pool(_rows(range(4)), np.array([1, 2, 3, 2]),
                                   capacity=6)
  # Levels 1..3 at recent success 0.9, 0.5 and not yet attempted.
  level_success = jnp.array([0.9, 0.5, unknown])
  weights = pool_lib.level_learnability_weights(pool, level_success, 0.01)
  np.testing.assert_allclose(np.asarray(weights),
                             [0.1, 0.26, 0.01, 0.26, 0, 0], rtol=1e-6)
  idx = np.asarray(pool_lib.draw_indices(
      pool, jax.random.PRNGKey(0), 2000, "level_learnability", 0.01,
      level_success=level_success))
  assert set(idx.tolist()) == {0, 1, 2, 3}
  with pytest.raises(ValueError, match="level_success"):
    pool_lib.draw_indices(pool, jax.random.PRNGKey(0), 4, "level_learnability",
                          0.01)


def test_level_alpha_weights_by_hand():
  unknown = pool_lib.UNKNOWN_SUCCESS
  pool = pool_lib.create_task_pool(_rows(range(4)), np.array([1, 2, 3, 2]),
                                   capacity=6)
  # Levels 1..3 at recent success 0.9, 0.5 and not yet attempted; α = 0.5,
  # β = 20: level 1 weighs exp(-20 · 0.16) + 0.01 = 0.0508, level 2
  # exp(0) + 0.01 = 1.01, shared by its two rows, level 3 the floor.
  level_success = jnp.array([0.9, 0.5, unknown])
  weights = pool_lib.level_alpha_weights(pool, level_success, 0.01, 0.5, 20.0)
  np.testing.assert_allclose(np.asarray(weights),
                             [0.0508, 0.505, 0.01, 0.505, 0, 0], rtol=1e-3)
  # Another α moves the weight: at α = 0.9 level 1 is the target.
  weights = pool_lib.level_alpha_weights(pool, level_success, 0.01, 0.9, 20.0)
  np.testing.assert_allclose(
      np.asarray(weights)[:2], [1.01, (np.exp(-20 * 0.16) + 0.01) / 2],
      rtol=1e-3)
  # A level's share does not grow with its rows: two more level-1 rows
  # split level 1's weight three ways.
  pool = pool_lib.add_tasks(pool, _rows([7, 8]), jnp.array([1, 1]),
                            jnp.array([True, True]))
  weights = np.asarray(pool_lib.level_alpha_weights(pool, level_success, 0.01,
                                                    0.5, 20.0))
  np.testing.assert_allclose(weights[[0, 4, 5]].sum(), 0.0508, rtol=1e-3)
  n = 20000
  idx = np.asarray(pool_lib.draw_indices(
      pool, jax.random.PRNGKey(0), n, "level_alpha", 0.01,
      level_success=level_success, alpha=0.5, beta=20.0))
  counts = np.bincount(idx, minlength=pool.capacity)
  np.testing.assert_allclose(counts / n, weights / weights.sum(),
                             atol=4 * np.sqrt(0.25 / n))
  with pytest.raises(ValueError, match="level_success"):
    pool_lib.draw_indices(pool, jax.random.PRNGKey(0), 4, "level_alpha", 0.01)


def test_level_target_weights_mix_the_bracketing_levels_to_alpha():
  unknown = pool_lib.UNKNOWN_SUCCESS
  # Rows of levels 1, 2, 3, 4, 3 (level 3 has two rows).
  pool = pool_lib.create_task_pool(_rows(range(5)), np.array([1, 2, 3, 4, 3]),
                                   capacity=6)
  # Success 0.95, 0.8, 0.4, 0.1 at α = 0.5: levels 2 (0.8) and 3 (0.4)
  # bracket α, mixed w = (0.5 - 0.4) / (0.8 - 0.4) = 0.25 and 0.75, so the
  # mean is 0.25 · 0.8 + 0.75 · 0.4 = 0.5; level 3's 0.75 + floor is split
  # over its two rows.
  level_success = jnp.array([0.95, 0.8, 0.4, 0.1])
  weights = pool_lib.level_target_weights(pool, level_success, 0.01, 0.5)
  np.testing.assert_allclose(
      np.asarray(weights), [0.01, 0.26, 0.38, 0.01, 0.38, 0], rtol=1e-5)
  # Every known level above α: the hardest is drawn (level 4 at 0.6);
  # the unknown level 3 weighs the floor.
  weights = pool_lib.level_target_weights(
      pool, jnp.array([0.95, 0.8, unknown, 0.6]), 0.01, 0.5)
  np.testing.assert_allclose(
      np.asarray(weights), [0.01, 0.01, 0.005, 1.01, 0.005, 0], rtol=1e-5)
  # Every known level below α: the easiest (level 1 at 0.3).
  weights = pool_lib.level_target_weights(
      pool, jnp.array([0.3, 0.2, 0.1, 0.0]), 0.01, 0.5)
  np.testing.assert_allclose(np.asarray(weights)[:2], [1.01, 0.01], rtol=1e-5)
  # Nothing known: the floor alone, shared within levels.
  weights = pool_lib.level_target_weights(
      pool, jnp.full((4,), unknown), 0.01, 0.5)
  np.testing.assert_allclose(np.asarray(weights),
                             [0.01, 0.01, 0.005, 0.01, 0.005, 0], rtol=1e-5)
  n = 20000
  idx = np.asarray(pool_lib.draw_indices(
      pool, jax.random.PRNGKey(0), n, "level_target", 0.01,
      level_success=level_success, alpha=0.5))
  drawn_level = np.asarray(pool.difficulty)[idx]
  share = np.bincount(drawn_level, minlength=5)[1:] / n
  np.testing.assert_allclose(share, np.array([0.01, 0.26, 0.76, 0.01]) / 1.04,
                             atol=4 * np.sqrt(0.25 / n))


def test_learnability_draws_follow_the_weights():
  pool = _scored_pool([0.5, 0.1, 1.0, pool_lib.UNKNOWN_SUCCESS])
  n = 20000
  idx = np.asarray(jax.jit(pool_lib.draw_indices, static_argnums=(2, 3, 4))(
      pool, jax.random.PRNGKey(0), n, "learnability", 0.01))
  counts = np.bincount(idx, minlength=pool.capacity)
  expected = np.array([0.26, 0.1, 0.01, 0.01, 0, 0, 0, 0]) / 0.38
  # Never an empty row; each share within 4 binomial standard errors.
  assert counts[4:].sum() == 0
  np.testing.assert_allclose(counts / n, expected,
                             atol=4 * np.sqrt(0.25 / n))
  uniform = np.asarray(pool_lib.draw_indices(pool, jax.random.PRNGKey(0), n,
                                             "uniform", 0.01))
  assert set(uniform.tolist()) == {0, 1, 2, 3}
  with pytest.raises(ValueError, match="selection"):
    pool_lib.draw_indices(pool, jax.random.PRNGKey(0), 4, "greedy", 0.01)


def test_base_sampling_and_drop_generated_keep_to_the_base_data():
  pool = pool_lib.create_task_pool(_rows([1, 2]), np.array([1, 1]), capacity=8)
  pool = pool_lib.add_tasks(pool, jnp.asarray(_rows([10, 11, 12])),
                            jnp.array([2, 2, 2]), jnp.ones(3, bool))
  idx = pool_lib.sample_base_indices(pool, jax.random.PRNGKey(0), 200)
  assert set(np.asarray(idx).tolist()) == {0, 1}
  # Base + latest generation only: the next write starts at the base's end.
  pool = jax.jit(pool_lib.add_tasks)(
      pool_lib.drop_generated(pool), jnp.asarray(_rows([20, 21])),
      jnp.array([2, 2]), jnp.ones(2, bool))
  assert int(pool.size) == 4
  np.testing.assert_array_equal(np.asarray(pool.tasks[:4, 0]), [1, 2, 20, 21])
  tasks, _ = pool_lib.sample_tasks(pool, jax.random.PRNGKey(1), 300)
  assert set(np.asarray(tasks[:, 0]).tolist()) == {1, 2, 20, 21}


def test_task_pool_capacity_must_exceed_base():
  with pytest.raises(ValueError, match="config.pool.capacity"):
    pool_lib.create_task_pool(_rows([1, 2]), np.array([1, 1]), capacity=2)


def test_generation_pool_stores_kept_generations_with_rewards():
  pool = pool_lib.create_generation_pool(capacity=3, prompt_len=2, task_len=3)
  present = pool_lib.sample_generations(pool, jax.random.PRNGKey(0), 4)[-1]
  assert not bool(present.any())
  prompt = jnp.asarray(_rows([1, 2, 3, 4], width=2))
  task = jnp.asarray(_rows([5, 6, 7, 8]))
  pool = pool_lib.add_generations(
      pool, prompt, prompt > 0, task, task > 0,
      jnp.array([0.1, 0.2, 0.3, 0.4]), jnp.array([False, True, True, False]))
  assert int(pool.size) == 2
  np.testing.assert_array_equal(np.asarray(pool.task[:2, 0]), [6, 7])
  np.testing.assert_allclose(np.asarray(pool.reward[:2]), [0.2, 0.3])
  got = pool_lib.sample_generations(pool, jax.random.PRNGKey(1), 50)
  assert bool(got[-1].all())
  assert set(np.asarray(got[2][:, 0]).tolist()) == {6, 7}
  np.testing.assert_allclose(np.asarray(got[4]),
                             (np.asarray(got[2][:, 0]) - 4) / 10, rtol=1e-6)


@pytest.mark.parametrize("admit, added", [("valid", [10, 11, 12]),
                                          ("informative", [11])])
def test_fresh_tasks_admitted_to_d_train(admit, added):
  """coevolve.update_pools: pool.admit="informative" admits only the fresh
  tasks whose attempts disagree (0 < p̂ < 1); invalid ones never enter."""
  config = default.get_config("smoke")
  config.pool.admit = admit
  fresh = ParsedTasks(
      prompt=jnp.ones((4, 2), jnp.int32), prompt_mask=jnp.ones((4, 2), bool),
      reference=jnp.ones((4, 1), jnp.int32),
      reference_mask=jnp.ones((4, 1), bool),
      valid=jnp.array([True, True, True, False]),
      difficulty=jnp.array([1, 2, 2, 0]),
      task=jnp.asarray(_rows([10, 11, 12, 13])))
  # p̂ = 1, 1/2, 0 and 1/2 (the last task invalid).
  success = jnp.array([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
  state = types.SimpleNamespace(
      pool=pool_lib.create_task_pool(_rows([1, 2]), np.array([1, 1]), 8),
      generation_pool=None, level_success=jnp.full((2,), -1.0),
      offspring_success=jnp.full((2,), -1.0))
  pool, _, _, _ = coevolve.update_pools(
      config, state, coevolve.Generation(jnp.zeros((2,), jnp.int32), None,
                                         None, None, fresh),
      coevolve.Attempts(fresh, None, success, success), None, None)
  np.testing.assert_array_equal(np.asarray(pool.tasks[2:int(pool.size), 0]),
                                added)


def test_offspring_estimate_keys_fresh_tasks_by_their_seeds_level():
  """coevolve.update_pools: the offspring estimate averages the valid fresh
  tasks' success under their seed's level (not their own), and
  seed_level_estimate reads it, falling back to the attempted estimate at a
  level no seed has yet come from."""
  config = default.get_config("smoke")
  config.coevolve.variations = 2
  config.coevolve.level_success_ema = 0.5
  # Two seeds: pool rows 0 (level 3) and 1 (level 1), two variations each,
  # written at levels 2, 2 (seed of level 3) and 1, 0 (invalid).
  fresh = ParsedTasks(
      prompt=jnp.ones((4, 2), jnp.int32), prompt_mask=jnp.ones((4, 2), bool),
      reference=jnp.ones((4, 1), jnp.int32),
      reference_mask=jnp.ones((4, 1), bool),
      valid=jnp.array([True, True, True, False]),
      difficulty=jnp.array([2, 2, 1, 0]),
      task=jnp.asarray(_rows([10, 11, 12, 13])))
  success = jnp.array([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0], [1.0, 1.0]])
  state = types.SimpleNamespace(
      pool=pool_lib.create_task_pool(_rows([1, 2]), np.array([3, 1]), 8),
      generation_pool=pool_lib.create_generation_pool(8, 2, 3),
      level_success=jnp.array([-1.0, 0.9, 0.2]),
      offspring_success=jnp.array([-1.0, -1.0, 0.6]))
  out = types.SimpleNamespace(tokens=fresh.task, mask=fresh.task > 0)
  signals = types.SimpleNamespace(reward=jnp.zeros((4,)),
                                  keep=jnp.zeros((4,), bool))
  _, _, level, offspring = coevolve.update_pools(
      config, state, coevolve.Generation(
          jnp.array([0, 1]), fresh.prompt, fresh.prompt_mask, out, fresh),
      coevolve.Attempts(fresh, None, success, success), None, signals)
  # Levels by the written task: level 1 <- 1.0 (unknown before), level 2
  # <- 0.5·0.9 + 0.5·0.25.
  np.testing.assert_allclose(np.asarray(level), [1.0, 0.575, 0.2])
  # By the seed's level: level 1 <- 1.0 (its invalid variation left out),
  # level 3 <- 0.5·0.6 + 0.5·0.25; level 2 had no seed.
  np.testing.assert_allclose(np.asarray(offspring), [1.0, -1.0, 0.425])
  config.coevolve.seed_level_estimate = "offspring"
  after = types.SimpleNamespace(level_success=level,
                                offspring_success=offspring)
  np.testing.assert_allclose(
      np.asarray(coevolve.seed_level_estimate(config, after)),
      [1.0, 0.575, 0.425])
  config.coevolve.seed_level_estimate = "attempted"
  np.testing.assert_allclose(
      np.asarray(coevolve.seed_level_estimate(config, after)),
      [1.0, 0.575, 0.2])
