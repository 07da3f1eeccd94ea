"""Every leaf of the state gets a derived sharding, the abstract state matches
the real one, and host callbacks run per device on their own rows."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec

from configs import default
from genenv_jax import sharding
from genenv_jax.domains import get_domain
from train import build
from train import main
from train.checkpoints import state_layout

RULES = sharding.DEFAULT_RULES


@pytest.fixture(scope="module")
def setup():
  config = default.get_config("smoke")
  for player in (config.agent, config.simulator):
    player.model_overrides.num_kv_heads = 2  # divisible by tensor=2
  mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  domain = get_domain(config.task)
  players = build.build_players(config, domain)
  agent = build.init_player_params(players.agent_model, jax.random.PRNGKey(0),
                                  mesh, RULES)
  simulator = build.init_player_params(players.simulator_model,
                                      jax.random.PRNGKey(1), mesh, RULES)
  rows, difficulty = domain.random_tasks(np.random.default_rng(0), 64)
  return config, mesh, domain, players, agent, simulator, rows, difficulty


def test_abstract_state_has_the_real_states_shapes_and_shardings(setup):
  config, mesh, domain, players, agent, simulator, rows, difficulty = setup
  state, shardings = build.create_state(config, domain, players, agent,
                                       simulator, rows, difficulty, mesh)
  target, target_shardings = state_layout.abstract_state(
      config, domain, players, rows, difficulty, mesh, RULES)
  assert (jax.tree.structure(target) == jax.tree.structure(state))
  for x, t, s, ts in zip(jax.tree.leaves(state), jax.tree.leaves(target),
                         jax.tree.leaves(shardings),
                         jax.tree.leaves(target_shardings)):
    assert (x.shape, x.dtype) == (t.shape, t.dtype)
    assert x.sharding == s == ts == t.sharding
  # Adam's moments are split like their parameters, not replicated.
  moments = state.agent.opt_state[1][0].mu
  for m, p in zip(jax.tree.leaves(moments), jax.tree.leaves(agent)):
    assert m.sharding == p.sharding
  assert any(p.sharding.spec != PartitionSpec()
             for p in jax.tree.leaves(agent))


def test_a_parameter_without_a_named_sharding_is_named(setup):
  config, mesh, domain, players, agent, simulator, rows, difficulty = setup
  unplaced = jax.tree.map(np.asarray, agent)
  with pytest.raises(ValueError, match=r"agent/params/.*not a NamedSharding"):
    build.create_state(config, domain, players, unplaced, simulator, rows,
                      difficulty, mesh)


def test_host_callback_scores_each_devices_rows_on_that_device():
  mesh = sharding.make_mesh({"data": 4, "fsdp": 1, "tensor": 2})
  seen = []

  def row_sums(x):
    seen.append(x.shape[0])
    return x.sum(axis=1).astype(np.float32)

  def callback(x):
    return jax.pure_callback(
        row_sums, jax.ShapeDtypeStruct((x.shape[0],), jnp.float32), x,
        vmap_method="sequential")

  fn = jax.jit(sharding.in_mesh(mesh, RULES)(
      lambda x: sharding.rows_per_device(callback, x)))
  x = np.arange(30, dtype=np.int32).reshape(10, 3)  # 10 rows: padded to 12
  np.testing.assert_array_equal(np.asarray(fn(x)), x.sum(axis=1))
  # The batch axes (data x fsdp = 4) split the 12 rows; each of the 8 devices
  # scores its 3 (tensor replicas score the same rows).
  assert seen == [3] * 8


def test_named_job_reads_flags_then_variables_and_names_what_is_missing():
  env = {"JAX_COORDINATOR_ADDRESS": "h0:1", "JAX_NUM_PROCESSES": "2",
         "JAX_PROCESS_ID": "1"}
  assert main.named_job(environ={}) == {}
  assert main.named_job(environ=env) == {
      "coordinator_address": "h0:1", "num_processes": 2, "process_id": 1}
  assert main.named_job("127.0.0.1:5", 4, 0, environ=env) == {
      "coordinator_address": "127.0.0.1:5", "num_processes": 4,
      "process_id": 0}
  with pytest.raises(ValueError, match="--process_id=2"):
    main.named_job("127.0.0.1:5", 2, 2, environ={})
  with pytest.raises(ValueError, match="--coordinator_address=''"):
    main.named_job("", 2, 0, environ={})
  calls = []
  assert main.maybe_initialize_distributed(
      "auto", {}, lambda **job: calls.append(job),
      job={"coordinator_address": "h0:1", "num_processes": 2,
           "process_id": 0})
  assert calls == [{"coordinator_address": "h0:1", "num_processes": 2,
                    "process_id": 0}]
  # The timeout flags reach jax.distributed.initialize, checked first.
  calls.clear()
  main.maybe_initialize_distributed(
      "true", {}, lambda **job: calls.append(job),
      timeouts=main.job_timeouts(30, 200))
  assert calls == [{"heartbeat_timeout_seconds": 30,
                    "initialization_timeout": 200}]
  with pytest.raises(ValueError, match="--heartbeat_timeout_s=0"):
    main.job_timeouts(0, 200)
  assert main.compilation_cache_dir("none", "/w") is None
  assert main.compilation_cache_dir("auto", "/w/") == "/w/xla_cache"
  assert main.compilation_cache_dir("auto", "gs://b/r") == "gs://b/r/xla_cache"
  # A multi-process CPU job compiles in every process (gloo's 30 s).
  assert main.compilation_cache_dir("auto", "/w", gloo_job=True) is None
  assert main.compilation_cache_dir("none", "/w", gloo_job=True) is None
  with pytest.raises(ValueError, match="--compilation_cache_dir=/c: a "
                     "multi-process job on CPU"):
    main.compilation_cache_dir("/c", "/w", gloo_job=True)
  assert main.compilation_cache_dir("/c", "/w") == "/c"
  with pytest.raises(ValueError, match="--lost_host_timeout_s=3"):
    main.job_timeouts(120, 300, lost_host_s=3)
  assert main.job_timeouts(120, 300, lost_host_s=0) == main.job_timeouts(
      120, 300)
