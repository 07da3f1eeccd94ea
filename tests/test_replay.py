"""D_env replay in the simulator's RWR batch (genenv_jax/replay.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import default
from genenv_jax import coevolve
from genenv_jax import curriculum
from genenv_jax import losses
from genenv_jax import pool as pool_lib
from genenv_jax import replay
from genenv_jax import sharding
from genenv_jax.domains import get_domain
from train import build

RULES = sharding.DEFAULT_RULES


def test_replayed_rows_follow_the_share_and_only_rwr_replays():
  config = default.get_config("smoke")  # M = 4 seeds x 2 variations = 8
  assert replay.num_replayed_generations(config) == 0
  config.simulator_update.replay_share = 0.5
  assert replay.num_replayed_generations(config) == 8
  config.simulator_update.replay_share = 0.2
  assert replay.num_replayed_generations(config) == 2
  config.simulator_update.replay_share = 1.0
  with pytest.raises(ValueError, match=r"replay_share=1\.0 must lie in"):
    replay.num_replayed_generations(config)
  config = default.get_config("smoke,genenv_pg")
  config.simulator_update.replay_share = 0.5
  with pytest.raises(ValueError, match=r"method='rwr', not 'pg'"):
    coevolve.make_step(config, None, None)


@pytest.fixture(scope="module")
def setup():
  """Smoke config, its simulator, a step's 8 generations and a D_env of 3."""
  config = default.get_config("smoke")
  config.simulator_update.update(replay_share=0.5, kl_cap=0.0)
  domain = get_domain(config.task)
  players = build.build_players(config, domain)
  mesh = sharding.make_mesh({"data": -1})
  params = build.init_player_params(players.simulator_model,
                                   jax.random.PRNGKey(0), mesh, RULES)
  simulator = coevolve.PlayerState(
      params=params, opt_state=players.simulator_opt.init(params),
      ref_params=params)
  rng = np.random.default_rng(0)
  seeds, _ = domain.random_tasks(rng, 8)
  tasks, _ = domain.random_tasks(rng, 8)
  prompt, prompt_mask = domain.simulator_prompt(jnp.asarray(seeds))
  task, task_mask = jnp.asarray(tasks), jnp.asarray(tasks != domain.pad_id)
  logp = jnp.where(task_mask, -1.0, 0.0)
  reward = jnp.array([0.9, 0.2, 1.0, 0.5, 0.85, 0.1, 0.3, 0.95])
  keep = jnp.array([True, False, True, False, True, False, False, True])
  batch = coevolve.SimulatorBatch(
      prompt, prompt_mask, task, task_mask, logp, logp, jnp.ones(8, bool),
      reward, curriculum.rwr_weights(reward, keep, 1.0))
  empty = pool_lib.create_generation_pool(16, prompt.shape[1], task.shape[1])
  stored = pool_lib.add_generations(
      empty, prompt[::-1], prompt_mask[::-1], task[::-1], task_mask[::-1],
      jnp.array([0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0]),
      jnp.array([True, True, True] + [False] * 5))
  return dict(config=config, players=players, mesh=mesh, simulator=simulator,
              batch=batch, keep=keep, empty=empty, stored=stored)


def _replayed(s, generation_pool):
  fn = s.get("replay_fn")
  if fn is None:
    fn = s["replay_fn"] = jax.jit(sharding.in_mesh(s["mesh"], RULES)(
        lambda pool: replay.with_replayed_generations(
            s["config"], s["players"].simulator_model,
            s["simulator"].ref_params, pool, s["batch"], s["keep"],
            jax.random.PRNGKey(3), 8)))
  return fn(generation_pool)


def test_batch_holds_the_step_rows_then_stored_rows_with_their_weights(setup):
  out = _replayed(setup, setup["stored"])
  batch = setup["batch"]
  assert out.task.shape[0] == 16
  for name in ("prompt", "task", "task_mask", "ref_logp", "reward"):
    np.testing.assert_array_equal(getattr(out, name)[:8], getattr(batch, name))
  # Each replayed row is one of the 3 stored rows, with its stored reward.
  stored = setup["stored"]
  for row in range(8, 16):
    match = [i for i in range(3)
             if np.array_equal(out.task[row], stored.task[i])]
    assert match and float(out.reward[row]) == pytest.approx(
        float(stored.reward[match[0]]))
  assert not np.any(out.valid[8:]) and np.all(out.valid[:8])
  expected = curriculum.rwr_weights(
      out.reward, jnp.concatenate([setup["keep"], jnp.ones(8, bool)]), 1.0)
  np.testing.assert_allclose(out.weights, expected, rtol=1e-6)
  assert float(out.weights[8:].sum()) > 0.4  # 8 of the 12 weighted rows
  assert np.all(np.isfinite(out.ref_logp))


def _rwr(batch, logp):
  return losses.rwr_loss(logp, batch.ref_logp, batch.task_mask, batch.weights,
                         1.0)[0]


def test_empty_pool_leaves_the_rwr_loss_as_without_replay(setup):
  """The simulator update sees its batch through the RWR loss (and, for the
  KL cap, the valid rows): with D_env empty, both are today's."""
  out = _replayed(setup, setup["empty"])
  batch = setup["batch"]
  np.testing.assert_array_equal(out.weights[8:], 0.0)
  np.testing.assert_allclose(out.weights[:8], batch.weights)
  np.testing.assert_array_equal(out.valid[8:], False)
  logp = jnp.where(batch.task_mask, -0.5, 0.0)
  logp16 = jnp.concatenate([logp, jnp.full_like(logp, -3.0)])
  today, today_grad = jax.value_and_grad(_rwr, argnums=1)(batch, logp)
  replayed, grad = jax.value_and_grad(_rwr, argnums=1)(out, logp16)
  assert float(replayed) == pytest.approx(float(today), rel=1e-6)
  np.testing.assert_allclose(grad[:8], today_grad, rtol=1e-6)
  np.testing.assert_array_equal(grad[8:], 0.0)
  # With stored generations, the replayed rows carry gradient too.
  _, grad = jax.value_and_grad(_rwr, argnums=1)(
      _replayed(setup, setup["stored"]), logp16)
  assert float(jnp.abs(grad[8:]).sum()) > 0
