"""One co-evolution step as a single pure function, compiled once with jax.jit.

    seeds ~ D_train ─► simulator writes m tasks per seed ─► domain.parse
      ─► agent attempts each task G times ─► domain.verify (reward per attempt)
      ─► curriculum: p̂, R_env = exp(-β(p̂-α)²), band filter, RWR weights
      ─► agent: GRPO (+KL to its reference) │ simulator: RWR or PG
         (+KL to the initial simulator, KL cap per update) or frozen
      ─► valid tasks → D_train; kept generations → D_env; scalar metrics

Shapes: S seeds, m variations per seed, M = S·m generated tasks, Q replayed
pool tasks, T = M + Q agent tasks, G attempts per task, N = T·G attempts.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, NamedTuple

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import ml_collections
import optax

from genenv_jax import curriculum
from genenv_jax import losses
from genenv_jax import policy
from genenv_jax import pool as pool_lib
from genenv_jax import sharding
from genenv_jax.sampling import SamplingConfig, sample
from genenv_jax.tasks.base import ParsedTasks, TaskDomain
from models import decoder
from models.config import ModelConfig

ENV_UPDATES = ("rwr", "pg", "none")
GENERATIONS = ("online", "static")
KEEP_GENERATED = ("all", "latest")
SAMPLING_LAYOUTS = ("gathered", "training")


@flax.struct.dataclass
class PlayerState:
  """params and opt_state are trained; ref_params stay fixed (the agent's GRPO
  reference; the simulator's initial model for its KL penalty)."""
  params: Any
  opt_state: Any
  ref_params: Any


@flax.struct.dataclass
class CoevolveState:
  agent: PlayerState
  simulator: PlayerState
  pool: pool_lib.TaskPool
  generation_pool: pool_lib.GenerationPool
  rng: jax.Array
  step: jax.Array


@dataclasses.dataclass(frozen=True)
class Players:
  """What is static about the two players: architectures and optimisers."""
  agent_model: ModelConfig
  simulator_model: ModelConfig
  agent_opt: optax.GradientTransformation
  simulator_opt: optax.GradientTransformation


class AgentBatch(NamedTuple):
  """One GRPO batch of N attempts."""
  prompt: jax.Array       # int32[N, P]
  prompt_mask: jax.Array  # bool[N, P]
  response: jax.Array     # int32[N, R]
  mask: jax.Array         # bool[N, R]
  old_logp: jax.Array     # f32[N, R]
  ref_logp: jax.Array     # f32[N, R]
  advantages: jax.Array   # f32[N]


def _concat_parsed(a: ParsedTasks, b: ParsedTasks) -> ParsedTasks:
  return jax.tree.map(lambda x, y: jnp.concatenate([x, y], axis=0), a, b)


def _masked_mean(x, mask):
  mask = mask.astype(jnp.float32)
  return jnp.sum(x * mask) / jnp.maximum(mask.sum(), 1.0)


def grpo_batch(config, players: Players, agent: PlayerState,
               tasks: ParsedTasks, agent_out, rewards: jax.Array) -> AgentBatch:
  """The GRPO batch for T tasks' G attempts each.

  Args:
    tasks: ParsedTasks of the T tasks attempted (invalid ones are masked out).
    agent_out: the sampler's SampleOutput for the N = T·G attempts, grouped by
      task; its log-probs are the behaviour policy's (same params, same
      temperature), so only the reference needs a forward pass.
    rewards: f32[T, G] the verifier's reward per attempt.
  """
  attempts = rewards.shape[1]
  repeat = lambda x: jnp.repeat(x, attempts, axis=0)
  advantages = losses.group_advantages(
      rewards.reshape(-1), attempts, config.grpo.normalize_std,
      valid=tasks.valid)
  response_mask = agent_out.mask & repeat(tasks.valid)[:, None]
  prompt, prompt_mask = repeat(tasks.prompt), repeat(tasks.prompt_mask)
  ref_logp = jax.lax.stop_gradient(policy.response_logprobs(
      players.agent_model, agent.ref_params, prompt, prompt_mask,
      agent_out.tokens, response_mask, config.coevolve.agent_temperature,
      config.coevolve.get("logprob_chunk_size", policy.DEFAULT_CHUNK_SIZE)
      ).logp)
  old_logp = jnp.where(response_mask, agent_out.logprobs, 0.0)
  return AgentBatch(prompt, prompt_mask, agent_out.tokens, response_mask,
                    old_logp, ref_logp, advantages)


def agent_update(config, players: Players, agent: PlayerState,
                 batch: AgentBatch, rng):
  """GRPO epochs x minibatches over one batch of attempts."""
  cc = config.coevolve
  n = batch.response.shape[0]
  num_mb = cc.agent_minibatches
  if n % num_mb:
    raise ValueError(f"config.coevolve.agent_minibatches={num_mb} must divide "
                     f"the {n} agent attempts per step.")
  temperature = cc.agent_temperature

  def loss_fn(params, mb: AgentBatch):
    scores = policy.response_logprobs(players.agent_model, params, mb.prompt,
                                      mb.prompt_mask, mb.response, mb.mask,
                                      temperature, cc.get(
                                          "logprob_chunk_size",
                                          policy.DEFAULT_CHUNK_SIZE))
    entropy = scores.entropy if config.grpo.entropy_coef else None
    loss, metrics = losses.grpo_loss(scores.logp, mb.old_logp, mb.ref_logp, mb.mask,
                                     mb.advantages, config.grpo, entropy)
    mismatch = _masked_mean(jnp.abs(jax.lax.stop_gradient(scores.logp) - mb.old_logp),
                            mb.mask)
    return loss, dict(metrics, logp_mismatch=mismatch)

  def one_epoch(carry, epoch_rng):
    params, opt_state = carry
    perm = jax.random.permutation(epoch_rng, n).reshape(num_mb, n // num_mb)

    def one_minibatch(carry, idx):
      params, opt_state = carry
      mb = jax.tree.map(lambda x: x[idx], batch)
      (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(
          params, mb)
      updates, opt_state = players.agent_opt.update(grads, opt_state, params)
      params = optax.apply_updates(params, updates)
      metrics = dict(metrics, loss=loss, grad_norm=optax.tree.norm(grads))
      return (params, opt_state), metrics

    return jax.lax.scan(one_minibatch, (params, opt_state), perm)

  (params, opt_state), metrics = jax.lax.scan(
      one_epoch, (agent.params, agent.opt_state),
      jax.random.split(rng, cc.agent_epochs))
  # |sampler - trainer| log-prob where the trainer still has the sampler's
  # params: the first minibatch of the first epoch.
  mismatch = metrics.pop("logp_mismatch")[0, 0]
  metrics = dict(jax.tree.map(jnp.mean, metrics), logp_mismatch=mismatch)
  return agent.replace(params=params, opt_state=opt_state), metrics


def simulator_update(config, players: Players, simulator: PlayerState, prompt,
                     prompt_mask, task, task_mask, old_logp, ref_logp, valid,
                     reward, weights, num_seeds, variations):
  """One simulator update on its M = num_seeds * variations generations.

  Args: prompt int32[M, Pe] + prompt_mask; task int32[M, L] (what it wrote) +
  task_mask; old_logp, ref_logp f32[M, L] under the sampling and the initial
  simulator; valid bool[M]; reward f32[M] (R_env); weights f32[M] (RWR,
  zero outside the band). Rows are seed-major.

  RWR: weighted max-likelihood of kept generations + KL to the initial
  simulator; PG: GRPO over each seed's variations with R_env as reward. Either
  way the update is scaled back so its KL (pre- vs post-update policy, on these
  generations) stays within config.simulator_update.kl_cap. Batches with nothing to
  learn from (no kept generation for RWR) leave the simulator unchanged.
  """
  eu = config.simulator_update
  temperature = config.coevolve.simulator_temperature

  def scores(params):
    return policy.response_logprobs(players.simulator_model, params, prompt,
                                    prompt_mask, task, task_mask, temperature,
                                    config.coevolve.get(
                                        "logprob_chunk_size",
                                        policy.DEFAULT_CHUNK_SIZE))

  step_mask = task_mask & valid[:, None]

  def with_mismatch(loss_and_metrics, logp):
    # |sampler - trainer| log-prob under the pre-update params.
    loss, metrics = loss_and_metrics
    mismatch = _masked_mean(jnp.abs(jax.lax.stop_gradient(logp) - old_logp), step_mask)
    return loss, dict(metrics, logp_mismatch=mismatch)

  if eu.method == "rwr":
    def loss_fn(params):
      logp = scores(params).logp
      return with_mismatch(losses.rwr_loss(logp, ref_logp, task_mask, weights,
                                           eu.kl_coef, eu.kl_estimator), logp)
    learn = jnp.any(weights > 0)
  else:  # "pg"
    pg_cfg = ml_collections.ConfigDict(config.grpo.to_dict())
    pg_cfg.kl_coef, pg_cfg.kl_estimator = eu.kl_coef, eu.kl_estimator

    def loss_fn(params):
      logp = scores(params).logp
      return with_mismatch(losses.simulator_pg_loss(
          logp, old_logp, ref_logp, task_mask, reward, num_seeds, variations,
          pg_cfg, valid), logp)
    learn = jnp.any(valid)

  (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(
      simulator.params)
  updates, opt_state = players.simulator_opt.update(grads, simulator.opt_state,
                                              simulator.params)
  candidate = optax.apply_updates(simulator.params, updates)
  step_kl = _masked_mean(
      losses.kl_estimate(old_logp, scores(candidate).logp, "k3"), step_mask)
  scale = losses.kl_cap_scale(step_kl, eu.kl_cap)
  params = losses.scale_update(simulator.params, candidate, scale)
  params = jax.tree.map(lambda new, old: jnp.where(learn, new, old), params,
                        simulator.params)
  opt_state = jax.tree.map(lambda new, old: jnp.where(learn, new, old),
                           opt_state, simulator.opt_state)
  metrics = dict(metrics, loss=loss, update_kl=step_kl * scale**2,
                 kl_scale=scale, updated=learn.astype(jnp.float32))
  return simulator.replace(params=params, opt_state=opt_state), metrics


@functools.lru_cache(maxsize=16)
def _logical_names(model: ModelConfig):
  return sharding.logical_names(functools.partial(decoder.init_boxed, model),
                                jax.random.PRNGKey(0))


def params_for_sampling(model: ModelConfig, params, layout: str = "gathered"):
  """A player's weights laid out for decoding, inside a function traced in a
  mesh context: "gathered" makes them whole over the fsdp mesh axis (one
  gather per call, none inside the decode loop), "training" leaves them as
  trained."""
  if layout == "training":
    return params
  rules = sharding.without_mesh_axis(nn.get_logical_axis_rules(), "fsdp")
  return sharding.constrain(params, _logical_names(model), rules)


def sampling_configs(config, domain: TaskDomain
                     ) -> tuple[SamplingConfig, SamplingConfig]:
  """(simulator, agent) sampling settings of the step: the simulator writes
  up to simulator_len tokens, the agent answers in up to response_len."""
  cc = config.coevolve
  stop = dict(eos_ids=(domain.eos_id,), pad_id=domain.pad_id)
  return (SamplingConfig(max_new_tokens=domain.simulator_len,
                         temperature=cc.simulator_temperature, **stop),
          SamplingConfig(max_new_tokens=domain.response_len,
                         temperature=cc.agent_temperature, **stop))


def make_step(config, domain: TaskDomain, players: Players
              ) -> Callable[[CoevolveState], tuple[CoevolveState, dict]]:
  """Builds the pure co-evolution step `state -> (state, metrics)`.

  `config` is the run's ConfigDict (fields coevolve, curriculum, grpo,
  simulator_update, pool); all of it is static.
  """
  cc = config.coevolve
  if config.simulator_update.method not in ENV_UPDATES:
    raise ValueError(f"config.simulator_update.method={config.simulator_update.method!r};"
                     f" expected one of {ENV_UPDATES}.")
  if cc.generation not in GENERATIONS:
    raise ValueError(f"config.coevolve.generation={cc.generation!r}; expected "
                     f"one of {GENERATIONS}.")
  if cc.generation == "static" and config.simulator_update.method != "none":
    raise ValueError(
        "config.coevolve.generation='static' takes its tasks from the frozen "
        "warm-started simulator; it needs config.simulator_update.method='none', "
        f"not {config.simulator_update.method!r}.")
  if not 0.0 <= cc.seed_trim < 0.5:
    raise ValueError(f"config.coevolve.seed_trim={cc.seed_trim} must lie in "
                     "[0, 0.5).")
  if config.pool.keep_generated not in KEEP_GENERATED:
    raise ValueError(
        f"config.pool.keep_generated={config.pool.keep_generated!r}; expected "
        f"one of {KEEP_GENERATED}.")
  if cc.sampling_layout not in SAMPLING_LAYOUTS:
    raise ValueError(f"config.coevolve.sampling_layout={cc.sampling_layout!r};"
                     f" expected one of {SAMPLING_LAYOUTS}.")
  static = cc.generation == "static"

  def for_sampling(model, params):
    return params_for_sampling(model, params, cc.sampling_layout)

  num_seeds, variations, attempts = cc.num_seeds, cc.variations, cc.attempts
  num_replay = config.pool.replay_tasks
  simulator_sampling, agent_sampling = sampling_configs(config, domain)

  def step(state: CoevolveState) -> tuple[CoevolveState, dict]:
    keys = jax.random.split(jax.random.fold_in(state.rng, state.step), 6)
    seed_key, simulator_key, replay_key, agent_key, update_key, _ = keys

    # 1. The simulator writes `variations` tasks per seed task. Static
    # generation: seeds from the base data only and no summary signal, so with
    # the simulator frozen, step t's tasks are a function of t alone: batch t
    # of one fixed dataset, whatever the agent does.
    if static:
      seed_idx = pool_lib.sample_base_indices(state.pool, seed_key, num_seeds)
      seed_success = jnp.full((num_seeds,), pool_lib.UNKNOWN_SUCCESS)
    else:
      seed_idx = pool_lib.sample_indices(state.pool, seed_key, num_seeds,
                                         cc.seed_trim)
      seed_success = state.pool.success[seed_idx]
    simulator_prompt, simulator_prompt_mask = domain.simulator_prompt(
        state.pool.tasks[seed_idx], seed_success)
    simulator_out = sample(players.simulator_model,
                     for_sampling(players.simulator_model, state.simulator.params),
                     simulator_prompt, simulator_prompt_mask, simulator_key, simulator_sampling,
                     variations)
    # 2. Parse what it wrote.
    fresh = domain.parse(simulator_out.tokens, simulator_out.mask)
    num_fresh = fresh.valid.shape[0]

    # 3. The agent attempts fresh tasks and tasks replayed from D_train.
    if num_replay:
      replay_idx = pool_lib.sample_indices(state.pool, replay_key, num_replay)
      replay_rows = state.pool.tasks[replay_idx]
      replay = domain.parse(replay_rows, replay_rows != domain.pad_id)
      tasks = _concat_parsed(fresh, replay)
    else:
      tasks = fresh
    agent_out = sample(players.agent_model,
                       for_sampling(players.agent_model, state.agent.params),
                       tasks.prompt, tasks.prompt_mask, agent_key,
                       agent_sampling, attempts)

    # 4. Verify the responses (only the responses) against the references.
    repeat = lambda x: jnp.repeat(x, attempts, axis=0)
    rewards = domain.verify(agent_out.tokens, agent_out.mask,
                            repeat(tasks.reference),
                            repeat(tasks.reference_mask))
    rewards = rewards.reshape(-1, attempts)  # [T, G]

    # 5. Curriculum signals on the fresh tasks.
    cur = curriculum.compute(rewards[:num_fresh], fresh.valid,
                             config.curriculum,
                             jnp.arange(num_fresh) // variations, num_seeds)

    # 6. Agent: GRPO on every valid task's attempts.
    attempt_valid = repeat(tasks.valid)
    batch = grpo_batch(config, players, state.agent, tasks, agent_out, rewards)
    agent, agent_metrics = agent_update(config, players, state.agent, batch,
                                        update_key)

    # 7. Simulator update, from its own and its initial model's log-probs.
    gen_prompt = jnp.repeat(simulator_prompt, variations, axis=0)
    gen_prompt_mask = jnp.repeat(simulator_prompt_mask, variations, axis=0)
    simulator_old_logp = simulator_out.logprobs
    simulator_ref_logp = jax.lax.stop_gradient(policy.response_logprobs(
        players.simulator_model, state.simulator.ref_params, gen_prompt, gen_prompt_mask,
        simulator_out.tokens, simulator_out.mask, cc.simulator_temperature,
        cc.get("logprob_chunk_size", policy.DEFAULT_CHUNK_SIZE)).logp)
    simulator_kl = _masked_mean(
        losses.kl_estimate(simulator_old_logp, simulator_ref_logp, "k3"),
        simulator_out.mask & fresh.valid[:, None])
    if config.simulator_update.method == "none":
      # Frozen: its params are its initial (reference) ones.
      simulator, simulator_metrics = state.simulator, {"logp_mismatch": _masked_mean(
          jnp.abs(simulator_ref_logp - simulator_old_logp),
          simulator_out.mask & fresh.valid[:, None])}
    else:
      simulator, simulator_metrics = simulator_update(
          config, players, state.simulator, gen_prompt, gen_prompt_mask,
          simulator_out.tokens, simulator_out.mask, simulator_old_logp, simulator_ref_logp,
          fresh.valid, cur.reward, cur.weights, num_seeds, variations)

    # 8. Pools (with the agent's success rate on each task attempted) and
    # metrics.
    task_success = curriculum.success_rate(
        rewards, tasks.valid, threshold=config.curriculum.success_threshold)
    new_pool = state.pool
    if num_replay:
      new_pool = pool_lib.record_success(new_pool, replay_idx,
                                         task_success[num_fresh:],
                                         tasks.valid[num_fresh:])
    if config.pool.keep_generated == "latest":
      new_pool = pool_lib.drop_generated(new_pool)
    new_pool = pool_lib.add_tasks(new_pool, fresh.task, fresh.difficulty,
                                  fresh.valid, task_success[:num_fresh])
    new_generation_pool = pool_lib.add_generations(
        state.generation_pool, gen_prompt, gen_prompt_mask, simulator_out.tokens,
        simulator_out.mask, cur.reward, cur.keep)

    valid_f = fresh.valid.astype(jnp.float32)
    num_valid = valid_f.sum()
    metrics = {
        "env/success_rate": _masked_mean(cur.p_hat, fresh.valid),
        "env/in_band_frac": cur.keep.sum() / jnp.maximum(num_valid, 1.0),
        "env/valid_frac": num_valid / num_fresh,
        "env/invalid_count": num_fresh - num_valid,
        "env/difficulty_mean": _masked_mean(fresh.difficulty, fresh.valid),
        "env/reward_mean": _masked_mean(cur.reward, fresh.valid),
        "env/kl": simulator_kl,
        "agent/reward_mean": _masked_mean(rewards.reshape(-1), attempt_valid),
        "agent/fresh_reward_mean": _masked_mean(
            rewards[:num_fresh].reshape(-1), repeat(fresh.valid)),
        # Generated tasks whose attempts disagree: the only ones whose
        # group-relative advantages are nonzero, i.e. that teach the agent.
        "env/informative_frac": _masked_mean(
            rewards[:num_fresh].max(axis=1) > rewards[:num_fresh].min(axis=1),
            fresh.valid),
        "agent/kl": agent_metrics["kl"],
        "agent/loss": agent_metrics["loss"],
        "agent/clip_frac": agent_metrics["clip_frac"],
        "agent/grad_norm": agent_metrics["grad_norm"],
        "agent/response_len": _masked_mean(agent_out.lengths, attempt_valid),
        "agent/logp_mismatch": agent_metrics["logp_mismatch"],
        "env/logp_mismatch": simulator_metrics.pop("logp_mismatch"),
        "pool/size": state.pool.size,
        "pool/env_size": state.generation_pool.size,
    }
    if fresh.delimiter is not None:  # tasks opened by another delimiter spelling
      metrics["env/delimiter_variant_frac"] = _masked_mean(fresh.delimiter > 0,
                                                           fresh.valid)
    for level in range(1, domain.max_difficulty + 1):
      metrics[f"env/difficulty_frac_d{level}"] = _masked_mean(
          fresh.difficulty == level, fresh.valid)
    for name, value in simulator_metrics.items():
      metrics[f"env_update/{name}"] = value
    metrics = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), metrics)

    new_state = CoevolveState(agent=agent, simulator=simulator, pool=new_pool,
                              generation_pool=new_generation_pool, rng=state.rng,
                              step=state.step + 1)
    return new_state, metrics

  return step


class CompiledStep(NamedTuple):
  fn: Callable[[CoevolveState], tuple[CoevolveState, dict]]
  trace_count: Callable[[], int]


def jit_step(step: Callable, state_shardings, mesh, rules) -> CompiledStep:
  """jax.jit with state in/out shardings, the state donated, metrics replicated.

  trace_count() tells how often the step has been traced (= compiled).
  """
  traces = [0]

  def traced(state):
    traces[0] += 1
    return step(state)

  fn = jax.jit(sharding.in_mesh(mesh, rules)(traced),
               in_shardings=(state_shardings,),
               out_shardings=(state_shardings, sharding.replicated(mesh)),
               donate_argnums=0)
  return CompiledStep(fn, lambda: traces[0])
