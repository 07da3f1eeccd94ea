"""The co-evolution step on the 8-device mesh from the live run's
warm-started players (tests/live_run.py), the PG arm's step, and the
simulator update alone."""

import functools

from etils import epath
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import default
from genenv_jax import coevolve
from genenv_jax import curriculum
from genenv_jax import policy
from genenv_jax import sharding
from genenv_jax.domains import get_domain
from genenv_jax.domains.arithmetic import data as datasets
from genenv_jax.sampling import SamplingConfig, sample
from train import build
from train import config_validation
from train import warmstart
from train.checkpoints import init_from
from train.checkpoints import state_layout

from tests import live_run as live
from tests import step_runs

RULES = sharding.DEFAULT_RULES


def _smoke_config():
  config = default.get_config("smoke")
  for player in (config.agent, config.simulator):
    player.model_overrides.num_kv_heads = 2  # divisible by tensor=2
  return config


def _warm_started(live_run, config, mesh):
  """(domain, players, the live run's step-0 state laid out on `mesh`, its
  shardings): both players warm-started, the pool its base data."""
  tfds_dir, workdir = live_run
  domain = get_domain(config.task)
  players = build.build_players(config, domain)
  train = datasets.load_split(datasets.builder_config_from(config), "train",
                              tfds_dir)
  base = build.base_row_indices(config, train["difficulty"])
  target, shardings = state_layout.abstract_state(
      config, domain, players, train["task"][base], train["difficulty"][base],
      mesh, RULES)
  state, _ = init_from.restore_step0(config, target, epath.Path(workdir))
  return domain, players, state, shardings


def _run(live_run, config, mesh, num_steps):
  domain, players, state, shardings = _warm_started(live_run, config, mesh)
  return step_runs.run_steps(config, domain, players, state, shardings, mesh,
                             num_steps)


@pytest.fixture(scope="module")
def sharded_run(live_run):
  config = live.live_config(live_run[0])
  mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  return _run(live_run, config, mesh, 3)


def test_step_compiles_once_and_metrics_are_finite(sharded_run):
  state, history, traces = sharded_run
  live.assert_steps_live(history)
  assert traces == 1
  assert int(state.step) == 3
  names = {"env/success_rate", "env/in_band_frac", "env/valid_frac",
           "env/difficulty_mean", "env/reward_mean", "env/kl",
           "agent/reward_mean", "agent/kl", "agent/loss", "agent/logp_mismatch",
           "env/logp_mismatch"}
  for metrics in history:
    assert names <= set(metrics)
    for name, value in metrics.items():
      assert np.isfinite(value), name
    # f32 players: the sampler's and the trainer's log-probs agree.
    assert 0.0 <= metrics["agent/logp_mismatch"] < 1e-3
    assert 0.0 <= metrics["env/logp_mismatch"] < 1e-3
  # Parameters stay laid out as the rules say.
  q = state.agent.params["layers_0"]["attn"]["q_proj"]["kernel"]
  assert q.sharding.spec == jax.sharding.PartitionSpec("fsdp", "tensor", None)
  # Valid generated tasks entered the pool; invalid ones were counted.
  added = sum(m["env/valid_frac"] for m in history) * 8
  assert int(state.pool.total_added) == round(added) > 0
  for m in history:
    assert m["env/invalid_count"] == pytest.approx(8 * (1 - m["env/valid_frac"]))


def test_sharded_step_matches_single_device(live_run, sharded_run):
  state, history, _ = sharded_run
  live.assert_steps_live(history)
  config = live.live_config(live_run[0])
  single = sharding.make_mesh({"data": 1}, devices=jax.devices()[:1])
  ref_state, ref_history, _ = _run(live_run, config, single, 3)
  assert len(history) == len(ref_history) == 3
  for got, want in zip(history, ref_history):
    for name in want:
      np.testing.assert_allclose(got[name], want[name], rtol=2e-4, atol=2e-5,
                                 err_msg=name)
  # Same generations, same attempts: the pools are identical.
  np.testing.assert_array_equal(np.asarray(state.pool.tasks),
                                np.asarray(ref_state.pool.tasks))
  # Both players' updates: the same parameters on either mesh.
  for player in ("agent", "simulator"):
    for got, want in zip(*(jax.tree.leaves(getattr(s, player).params)
                           for s in (state, ref_state))):
      np.testing.assert_allclose(np.asarray(got), np.asarray(want),
                                 rtol=2e-4, atol=2e-5, err_msg=player)


def test_pg_arm_step_updates_the_simulator_within_its_kl_cap(live_run):
  """The genenv_pg arm's step (make_step -> simulator_update's PG branch)
  from the warm-started players: the simulator is updated at each step with
  well-formed tasks, by a nonzero advantage, within the KL cap."""
  config = live.live_config(live_run[0], f"{live.LIVE},genenv_pg")
  mesh = sharding.make_mesh({"data": 1}, devices=jax.devices()[:1])
  domain, players, state, shardings = _warm_started(live_run, config, mesh)
  before = jax.device_get(state.simulator.params)
  state, history, _ = step_runs.run_steps(config, domain, players, state,
                                          shardings, mesh, 2)
  live.assert_steps_live(history)
  cap = config.simulator_update.kl_cap
  for m in history:
    assert m["env_update/updated"] == float(m["env/valid_frac"] > 0), m
    assert m["env_update/update_kl"] <= cap * (1 + 1e-4), m
    assert np.isfinite(m["env_update/loss"])
  # Seeds whose R_env differ from the batch's mean: a policy gradient.
  assert max(m["env_update/adv_abs_mean"] for m in history) > 0
  moved = [np.abs(np.asarray(a) - b).max() for a, b in zip(
      jax.tree.leaves(state.simulator.params), jax.tree.leaves(before))]
  assert max(moved) > 0


def _rwr_config(alpha):
  """The smoke config of the scripted RWR runs, at curriculum α `alpha`."""
  config = _smoke_config()
  config.task.max_digits = 3
  config.curriculum.alpha = alpha
  config.curriculum.per_seed = False  # p̂ per task: the scripted success is per level
  config.coevolve.update(num_seeds=16, variations=4, attempts=10)
  config.simulator.learning_rate = 3e-3
  config.simulator.model_overrides.update(hidden_size=64, intermediate_size=128)
  config.simulator_update.update(kl_coef=0.0, kl_cap=0.0)
  return config


@functools.cache
def _rwr_warm_start():
  """(4096 drawn task rows, the tiny simulator warm-started on them): what
  every α's scripted run starts from (α plays no part in the warm-start)."""
  config = _rwr_config(0.5)
  domain = get_domain(config.task)
  players = build.build_players(config, domain)
  mesh = sharding.make_mesh({"data": -1})
  rng = np.random.default_rng(0)
  rows, difficulty = domain.random_tasks(rng, 4096)
  params = build.init_player_params(players.simulator_model,
                                   jax.random.PRNGKey(1), mesh, RULES)
  params, _ = warmstart.train_supervised(
      players.simulator_model, params,
      warmstart.simulator_data(domain, rows, difficulty, rng, 64 * 300, -1),
      steps=300, batch_size=64, learning_rate=3e-3, seed=0, mesh=mesh,
      rules=RULES)
  return rows, params


def _scripted_simulator_training(alpha, steps):
  """Warm-started tiny simulator, trained by RWR against a scripted agent.

  The scripted agent solves a task of difficulty d with probability
  SUCCESS[d]. Returns the simulator's difficulty shares before training (5
  rounds of sampling from the warm-started simulator, not updated) and after
  (the last 5 of `steps` training rounds).
  """
  success = jnp.array([0.0, 0.95, 0.5, 0.05])  # indexed by difficulty 0..3
  config = _rwr_config(alpha)
  domain = get_domain(config.task)
  players = build.build_players(config, domain)
  rows, params = _rwr_warm_start()
  simulator_state = coevolve.PlayerState(
      params=params, opt_state=players.simulator_opt.init(params),
      ref_params=jax.tree.map(jnp.copy, params))
  seeds = jnp.asarray(rows[:16])
  prompt, prompt_mask = domain.simulator_prompt(seeds)
  sampling = SamplingConfig(max_new_tokens=domain.task_len,
                            eos_ids=(domain.eos_id,), pad_id=domain.pad_id)
  cc = config.coevolve

  @jax.jit
  def round_(simulator_state, key):
    simulator_key, agent_key = jax.random.split(key)
    out = sample(players.simulator_model, simulator_state.params, prompt, prompt_mask,
                 simulator_key, sampling, cc.variations)
    parsed = domain.parse(out.tokens, out.mask)
    rewards = jax.random.bernoulli(
        agent_key, success[parsed.difficulty][:, None],
        (parsed.valid.shape[0], cc.attempts)).astype(jnp.float32)
    cur = curriculum.compute(rewards, parsed.valid, config.curriculum)
    gen_prompt = jnp.repeat(prompt, cc.variations, axis=0)
    gen_mask = jnp.repeat(prompt_mask, cc.variations, axis=0)
    batch = coevolve.SimulatorBatch(
        gen_prompt, gen_mask, out.tokens, out.mask, out.logprobs, out.logprobs,
        parsed.valid, cur.reward, cur.weights)
    simulator_state, _ = coevolve.simulator_update(config, players,
                                                   simulator_state, batch)
    shares = jnp.stack([jnp.sum(parsed.valid & (parsed.difficulty == d))
                        for d in (1, 2, 3)]) / jnp.maximum(parsed.valid.sum(), 1)
    return simulator_state, shares

  before = [np.asarray(round_(simulator_state, jax.random.PRNGKey(i))[1])
            for i in range(5)]
  shares = []
  for i in range(steps):
    simulator_state, s = round_(simulator_state, jax.random.PRNGKey(100 + i))
    shares.append(np.asarray(s))
  return np.mean(before, axis=0), np.mean(shares[-5:], axis=0)


@pytest.mark.parametrize("alpha, target_level", [(0.5, 2), (0.1, 3)])
def test_rwr_moves_simulator_to_difficulty_where_success_is_near_alpha(
    alpha, target_level):
  before, after = _scripted_simulator_training(alpha, steps=40)
  i = target_level - 1
  assert after[i] > before[i] + 0.2, (before, after)
  assert after[i] == after.max(), (before, after)


def _step_directions(config, domain, players, state, shardings, mesh):
  """One jitted step from `state`, and what it did to each player on its own
  batch: (the state after it, Σ over the agent's attempts of the group-relative advantage times
  the change in the attempt's log-prob, Σ over the simulator's generations
  of the RWR weight times the change in the generation's log-prob, the RWR
  weights). The attempts and generations are rerun from the state with the
  step's keys (coevolve.step_keys), the advantages taken from the verifier's
  rewards, not from the step's batch."""
  cc = config.coevolve

  @jax.jit
  @sharding.in_mesh(mesh, RULES)
  def rerun(state):
    keys = coevolve.step_keys(config, state)
    generation = coevolve.write_tasks(config, domain, players, state,
                                      keys.seed, keys.simulator)
    _, replay = coevolve.replay_tasks(config, domain, state.pool, keys.replay,
                                      state.level_success)
    attempts = coevolve.attempt_stage(domain)(
        config, domain, players, state.agent,
        coevolve._concat_parsed(generation.tasks, replay), keys.agent)  # pylint: disable=protected-access
    signals = coevolve.curriculum_signals(
        config, domain, generation.tasks,
        attempts.success[:generation.tasks.valid.shape[0]])
    return generation, attempts, signals

  def logp(model, params, prompt, prompt_mask, tokens, mask, temperature):
    return jax.jit(sharding.in_mesh(mesh, RULES)(
        lambda p: policy.response_logprobs(model, p, prompt, prompt_mask,
                                           tokens, mask, temperature).logp.sum(
                                               axis=1)))(params)

  generation, attempts, signals = rerun(state)
  tasks, out = attempts.tasks, attempts.out
  repeat = lambda x: jnp.repeat(x, cc.attempts, axis=0)
  agent_args = (repeat(tasks.prompt), repeat(tasks.prompt_mask), out.tokens,
                out.mask, cc.agent_temperature)
  sim_args = (generation.prompt, generation.prompt_mask,
              generation.out.tokens, generation.out.mask,
              cc.simulator_temperature)
  agent_before = logp(players.agent_model, state.agent.params, *agent_args)
  sim_before = logp(players.simulator_model, state.simulator.params,
                    *sim_args)
  state, _, _ = step_runs.run_steps(config, domain, players, state,
                                    shardings, mesh, 1)
  agent_change = logp(players.agent_model, state.agent.params,
                      *agent_args) - agent_before
  sim_change = logp(players.simulator_model, state.simulator.params,
                    *sim_args) - sim_before
  rewards = np.asarray(attempts.rewards)
  advantages = (rewards - rewards.mean(axis=1, keepdims=True)) * np.asarray(
      tasks.valid)[:, None]
  weights = np.asarray(signals.weights)
  return (state, float(np.sum(advantages.reshape(-1)
                             * np.asarray(agent_change))),
          float(np.sum(weights * np.asarray(sim_change))), weights,
          advantages)


def test_the_step_moves_the_agent_toward_rewarded_attempts_and_the_simulator_toward_kept_tasks(
    live_run):
  """The step itself, from the live run's warm-started players: its GRPO
  update raises the log-prob of the attempts that scored above their group's
  mean against those below (a sign error in the advantages reverses it), and
  its RWR update raises the log-prob of the generations the curriculum kept
  (a sign error in the weights or the loss reverses it)."""
  config = live.live_config(live_run[0])
  mesh = sharding.make_mesh({"data": 1}, devices=jax.devices()[:1])
  domain, players, state, shardings = _warm_started(live_run, config, mesh)
  agent_checked = simulator_checked = False
  for _ in range(config.coevolve.num_steps):
    state, agent_direction, simulator_direction, weights, advantages = (
        _step_directions(config, domain, players, state, shardings, mesh))
    if np.abs(advantages).sum() > 0:  # some attempts at a task disagreed
      assert agent_direction > 0, agent_direction
      agent_checked = True
    if weights.sum() > 0:  # the curriculum kept some generations
      assert simulator_direction > 0, simulator_direction
      simulator_checked = True
  assert agent_checked and simulator_checked, (
      "no step had something to learn from: no check of its direction")


def test_no_reference_pass_without_a_kl_term(live_run, monkeypatch):
  # At grpo.kl_coef 0 (DAPO, Dr. GRPO) the agent's reference is never scored:
  # the traced step holds one reference pass fewer, and trains the same.
  config = live.live_config(live_run[0])
  mesh = sharding.make_mesh({"data": -1, "fsdp": 1, "tensor": 1})
  domain, players, state, _ = _warm_started(live_run, config, mesh)
  scored = []
  by_rows = policy.response_logprobs_by_rows
  def counted(*args, **kwargs):
    scored.append(args[1])
    return by_rows(*args, **kwargs)
  monkeypatch.setattr(policy, "response_logprobs_by_rows", counted)
  passes = {}
  for kl_coef in (0.0, 0.05):
    config.grpo.kl_coef = kl_coef
    scored.clear()
    jax.eval_shape(sharding.in_mesh(mesh, RULES)(
        coevolve.make_step(config, domain, players)), state)
    passes[kl_coef] = len(scored)
  assert passes[0.05] - passes[0.0] == 1


def test_dynamic_sampling_trains_on_k_groups_and_compiles_once(live_run,
                                                                monkeypatch):
  # DAPO's dynamic sampling at fixed shapes: 12 task groups of 4 attempts are
  # sampled, the update and the reference pass see the K = 4 groups whose
  # attempts disagree first (16 rows), and the step compiles once.
  config = live.live_config(live_run[0])
  config.grpo.dynamic_sampling_groups = 4
  config.coevolve.agent_minibatches = 2
  config_validation.validate(config, 8)
  mesh = sharding.make_mesh({"data": -1, "fsdp": 1, "tensor": 1})
  domain, players, state, shardings = _warm_started(live_run, config, mesh)
  rows = []
  by_rows = policy.response_logprobs_by_rows
  def counted(*args, **kwargs):
    rows.append(args[2].shape[0])  # the prompt rows scored
    return by_rows(*args, **kwargs)
  monkeypatch.setattr(policy, "response_logprobs_by_rows", counted)
  state, history, traces = step_runs.run_steps(
      config, domain, players, state, shardings, mesh, 2)
  assert traces == 1
  assert 16 in rows and 48 not in rows  # the agent's reference pass: K·G rows
  for metrics in history:
    assert 0.0 <= metrics["agent/dynamic_sampling_fill"] <= 1.0
    assert np.isfinite(metrics["agent/loss"])
  # Where some group disagreed, the update moved the agent.
  assert all(m["agent/grad_norm"] > 0 for m in history
             if m["agent/dynamic_sampling_fill"] > 0)
  assert any(m["agent/dynamic_sampling_fill"] > 0 for m in history)
