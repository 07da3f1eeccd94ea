"""One co-evolution step as a single pure function, compiled once with jax.jit.

`make_step` chains the stage functions below:

    write_tasks         1-2  seeds ~ D_train ─► simulator writes m tasks per
                             seed ─► domain.parse; or scripted: M tasks
                             drawn from a level bank by a fixed rule
                             (genenv_jax/scripted.py), no simulator
    replay_tasks, attempt 3-4  + Q tasks from D_train ─► agent attempts each
                             G times ─► domain.verify (reward per attempt);
                             play_episodes instead for episodic domains: G
                             multi-turn episodes per task in the domain's
                             environment (genenv_jax/episodes.py)
    curriculum_signals  5    p̂, R_env = exp(-β(p̂-α)²), band filter, RWR weights
    grpo_batch ─► agent_update           6  GRPO (+KL to its reference)
    simulator_batch ─► simulator_update  7  RWR (D_env optionally replayed)
                             or PG (+KL to the initial simulator, KL cap per
                             update), or frozen; skipped when scripted
    update_pools, step_metrics  8  valid tasks → D_train; kept generations →
                             D_env; per-level success estimate; metrics as
                             (sum, count) pairs

Shapes: S seeds, m variations per seed, M = S·m generated tasks, Q replayed
pool tasks, T = M + Q agent tasks, G attempts per task, N = T·G attempts.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax

from genenv_jax import curriculum
from genenv_jax import episodes as episodes_lib
from genenv_jax import losses
from genenv_jax import policy
from genenv_jax import pool as pool_lib
from genenv_jax import replay as generation_replay
from genenv_jax import scripted
from genenv_jax import sharding
from genenv_jax.coevolve_state import (AgentBatch, Attempts, CoevolveState,
                                       Generation, Players, PlayerState,
                                       new_player_state,
                                       SimulatorBatch)
from genenv_jax.domains.base import ParsedTasks, TaskDomain
from genenv_jax.sampling import SampleOutput, SamplingConfig, sample
from genenv_jax.step_metrics import (level_success_metrics, masked_ratio,
                                     ratio, step_metrics)
from models import decoder
from models import lora
from models.config import ModelConfig

SIMULATOR_UPDATES = ("rwr", "pg", "none")
GENERATIONS = ("online", "static") + scripted.SCRIPTED_GENERATIONS
KEEP_GENERATED = ("all", "latest")
ADMIT_GENERATED = ("valid", "informative")
SAMPLING_LAYOUTS = ("gathered", "training")
SEED_LEVEL_ESTIMATES = ("attempted", "offspring")


def _concat_parsed(a: ParsedTasks, b: ParsedTasks) -> ParsedTasks:
  return jax.tree.map(lambda x, y: jnp.concatenate([x, y], axis=0), a, b)


def _masked_mean(x, mask):
  mask = mask.astype(jnp.float32)
  return jnp.sum(x * mask) / jnp.maximum(mask.sum(), 1.0)


def _chunk_size(config) -> int:
  return config.coevolve.get("logprob_chunk_size", policy.DEFAULT_CHUNK_SIZE)


# ------------------------------------------------------------------- stages


def seed_level_estimate(config, state: CoevolveState) -> jax.Array:
  """f32[D] the per-level success the level-based seed selections read
  (config.coevolve.seed_level_estimate): "attempted", the agent's success
  on tasks of each level; or "offspring", its success on the tasks written
  from seeds of each level, falling back to "attempted" at a level no seed
  has yet been drawn from. A variation does not keep its seed's level
  exactly (edits that shorten a maze's path outnumber those that lengthen
  it), so the offspring estimate is what a seed of that level yields."""
  if config.coevolve.seed_level_estimate == "attempted":
    return state.level_success
  return jnp.where(state.offspring_success >= 0, state.offspring_success,
                   state.level_success)


def write_tasks(config, domain: TaskDomain, players: Players,
                state: CoevolveState, seed_key, sample_key,
                level_bank: scripted.LevelBank | None = None) -> Generation:
  """Stages 1-2: the simulator writes `variations` tasks per seed task, and
  the domain parses them.

  Online generation draws seeds from D_train (uniformly, or by learnability
  p(1 - p) of the agent's success: config.coevolve.seed_selection) with the
  agent's success on each as the summary signal. Static generation draws them
  from the base data with no signal, so with the simulator frozen, step t's
  tasks are a function of t alone: batch t of one fixed dataset, whatever the
  agent does. Scripted
  generation ("uniform", "oracle_learnability"; genenv_jax/scripted.py) has
  no simulator: it draws the M = num_seeds·variations tasks from
  `level_bank`, each of a level drawn by its rule.
  """
  cc = config.coevolve
  if cc.generation in scripted.SCRIPTED_GENERATIONS:
    num_tasks = cc.num_seeds * cc.variations
    if cc.generation == "uniform":
      weights = scripted.uniform_level_weights(domain.max_difficulty)
    else:
      weights = scripted.learnability_level_weights(state.level_success,
                                                    cc.oracle_explore)
    rows, bank_idx = scripted.draw_tasks(level_bank, seed_key, weights,
                                         num_tasks)
    return Generation(bank_idx, None, None, None,
                      domain.parse(rows, rows != domain.pad_id))
  if cc.generation == "static":
    seed_idx = pool_lib.sample_base_indices(state.pool, seed_key, cc.num_seeds)
    seed_success = jnp.full((cc.num_seeds,), pool_lib.UNKNOWN_SUCCESS)
  else:
    seed_idx = pool_lib.draw_indices(state.pool, seed_key, cc.num_seeds,
                                     cc.seed_selection,
                                     config.pool.learnability_floor,
                                     cc.seed_trim, seed_level_estimate(
                                         config, state),
                                     config.curriculum.alpha,
                                     config.curriculum.beta)
    seed_success = state.pool.success[seed_idx]
  prompt, prompt_mask = domain.simulator_prompt(state.pool.tasks[seed_idx],
                                                seed_success)
  simulator_sampling, _ = sampling_configs(config, domain)
  out = sample(players.simulator_model,
               params_for_sampling(players.simulator_model,
                                   state.simulator.params, cc.sampling_layout),
               prompt, prompt_mask, sample_key, simulator_sampling,
               cc.variations)
  repeat = lambda x: jnp.repeat(x, cc.variations, axis=0)
  return Generation(seed_idx, repeat(prompt), repeat(prompt_mask), out,
                    domain.parse(domain.canonical_stops(out.tokens, out.mask),
                                 out.mask))


def replay_tasks(config, domain: TaskDomain, pool: pool_lib.TaskPool, key,
                 level_success: jax.Array | None = None
                 ) -> tuple[jax.Array, ParsedTasks]:
  """Stage 3's replay: Q = config.pool.replay_tasks tasks drawn from D_train
  (uniformly, or by learnability: config.pool.replay_selection; the level
  estimate f32[D] `level_success` for "level_learnability"). Returns
  (int32[Q] their pool rows, their ParsedTasks)."""
  idx = pool_lib.draw_indices(pool, key, config.pool.replay_tasks,
                              config.pool.replay_selection,
                              config.pool.learnability_floor,
                              level_success=level_success,
                              alpha=config.curriculum.alpha,
                              beta=config.curriculum.beta)
  rows = pool.tasks[idx]
  return idx, domain.parse(rows, rows != domain.pad_id)


def attempt(config, domain: TaskDomain, players: Players, agent: PlayerState,
            tasks: ParsedTasks, key) -> Attempts:
  """Stages 3-4: the agent attempts each task G times and the domain scores
  each response (only the response) against the task's reference."""
  cc = config.coevolve
  _, agent_sampling = sampling_configs(config, domain)
  out = sample(players.agent_model,
               params_for_sampling(players.agent_model, agent.params,
                                   cc.sampling_layout),
               tasks.prompt, tasks.prompt_mask, key, agent_sampling,
               cc.attempts)
  repeat = lambda x: jnp.repeat(x, cc.attempts, axis=0)
  rewards = domain.verify(domain.canonical_stops(out.tokens, out.mask),
                          out.mask, repeat(tasks.reference),
                          repeat(tasks.reference_mask))
  rewards = rewards.reshape(-1, cc.attempts)
  return Attempts(tasks, out, rewards, rewards)


def play_episodes(config, domain: TaskDomain, players: Players,
                  agent: PlayerState, tasks: ParsedTasks, key) -> Attempts:
  """Stages 3-4 of an episodic domain: G episodes per task in the domain's
  environment, reset from each task's spec row, scored by it
  (config.episodes: the reward and what a truncated episode scores)."""
  cc = config.coevolve
  env = domain.environment
  _, agent_sampling = sampling_configs(config, domain)
  episodes = episodes_lib.rollout_episodes(
      players.agent_model,
      params_for_sampling(players.agent_model, agent.params,
                          cc.sampling_layout),
      env, tasks.prompt, tasks.prompt_mask,
      env.reset(jnp.repeat(tasks.task, cc.attempts, axis=0)), key,
      agent_sampling, cc.attempts)
  rewards, kept = episodes_lib.episode_rewards(
      episodes, config.episodes.reward, config.episodes.truncated)
  out = SampleOutput(episodes.tokens, episodes.logprobs, episodes.mask,
                     episodes.lengths)
  group = lambda x: x.reshape(-1, cc.attempts)
  return Attempts(tasks, out, group(rewards),
                  group(episodes.success.astype(jnp.float32)),
                  attend=episodes.attend, kept=kept, episodes=episodes)


def attempt_stage(domain: TaskDomain) -> Callable[..., Attempts]:
  """Stages 3-4 as the domain has them: `play_episodes` for an episodic
  domain, `attempt` otherwise (same arguments, same result type)."""
  return attempt if domain.environment is None else play_episodes


def curriculum_signals(config, domain: TaskDomain, fresh: ParsedTasks,
                       success: jax.Array) -> curriculum.CurriculumOutput:
  """Stage 5: p̂, R_env, the band and the RWR weights of the M fresh tasks
  from their attempts' success f32[M, G] (`Attempts.success`; seed-major:
  row i is seed i // m); their written rows `fresh.task` (pad after the
  task) for the repetition penalty."""
  num_fresh = fresh.valid.shape[0]
  return curriculum.compute(
      success, fresh.valid, config.curriculum,
      jnp.arange(num_fresh) // config.coevolve.variations,
      config.coevolve.num_seeds, fresh.task, fresh.task != domain.pad_id)


def grpo_batch(config, players: Players, agent: PlayerState,
               attempts: Attempts) -> AgentBatch:
  """Stage 6's batch: GRPO advantages of every valid task's attempts, and the
  reference's log-probs. The sampler's log-probs are the behaviour policy's
  (same params, same temperature), so only the reference needs a forward
  pass; invalid tasks are masked out.

  With config.grpo.dynamic_sampling_groups = K > 0 (DAPO's dynamic
  sampling, `losses.informative_groups_first`) the batch holds K of the T
  task groups, K·G rows rather than T·G: those whose attempts disagree
  first; the rest of the K, if any, are masked out."""
  tasks, agent_out, rewards = attempts.tasks, attempts.out, attempts.rewards
  group = rewards.shape[1]
  repeat = lambda x: jnp.repeat(x, group, axis=0)
  row_valid = repeat(tasks.valid)
  if attempts.kept is not None:
    row_valid = row_valid & attempts.kept
  advantages = losses.group_advantages(
      rewards.reshape(-1), group, config.grpo.normalize_std,
      valid=row_valid)
  prompt, prompt_mask = tasks.prompt, tasks.prompt_mask
  tokens, mask = agent_out.tokens, agent_out.mask
  logprobs, body = agent_out.logprobs, attempts.attend
  if config.grpo.dynamic_sampling_groups:
    groups, informative = losses.informative_groups_first(
        rewards.reshape(-1), group, config.grpo.dynamic_sampling_groups,
        valid=row_valid)
    rows = (groups[:, None] * group + jnp.arange(group)).reshape(-1)
    prompt, prompt_mask = prompt[groups], prompt_mask[groups]
    tokens, mask, logprobs, advantages = (
        x[rows] for x in (tokens, mask, logprobs, advantages))
    body = None if body is None else body[rows]
    row_valid = row_valid[rows] & repeat(informative)
  prompt, prompt_mask = repeat(prompt), repeat(prompt_mask)
  response_mask = mask & row_valid[:, None]
  attend = (response_mask if body is None else body & row_valid[:, None])
  old_logp = jnp.where(response_mask, logprobs, 0.0)
  if config.grpo.kl_coef:
    # Scored in as many passes as the update has minibatches: no pass holds
    # more rows' activations than one minibatch's forward.
    ref_logp = jax.lax.stop_gradient(policy.response_logprobs_by_rows(
        players.agent_model, agent.reference(), prompt, prompt_mask,
        tokens, attend, config.coevolve.agent_temperature,
        _chunk_size(config), config.coevolve.agent_minibatches).logp)
    ref_logp = jnp.where(response_mask, ref_logp, 0.0)
  else:  # no KL term (DAPO, Dr. GRPO): no reference pass
    ref_logp = old_logp
  return AgentBatch(prompt, prompt_mask, tokens, response_mask,
                    old_logp, ref_logp, advantages,
                    None if body is None else attend)


def grpo_minibatch_loss(config, scores: policy.ResponseScores,
                        minibatch: AgentBatch) -> tuple[jax.Array, dict]:
  """Stage 6's loss of one minibatch from the trainer's scores of its rows
  (log-probs and entropies f32[n, R] at every attended position): GRPO on
  the agent's own tokens only, so an observation token's log-prob has
  exactly zero gradient. Returns (loss, metrics incl. logp_mismatch)."""
  logp = jnp.where(minibatch.mask, scores.logp, 0.0)
  entropy = (jnp.where(minibatch.mask, scores.entropy, 0.0)
             if config.grpo.entropy_coef else None)
  loss, metrics = losses.grpo_loss(logp, minibatch.old_logp,
                                   minibatch.ref_logp, minibatch.mask,
                                   minibatch.advantages, config.grpo, entropy)
  mismatch = masked_ratio(
      jnp.abs(jax.lax.stop_gradient(logp) - minibatch.old_logp),
      minibatch.mask)
  return loss, dict(metrics, logp_mismatch=mismatch)


def agent_update(config, players: Players, agent: PlayerState,
                 batch: AgentBatch, rng):
  """Stage 6: GRPO epochs x minibatches over one batch of attempts. Returns
  (the updated agent, its metrics averaged over the minibatches)."""
  cc = config.coevolve
  n = batch.response.shape[0]
  num_minibatches = cc.agent_minibatches
  if n % num_minibatches:
    raise ValueError(f"config.coevolve.agent_minibatches={num_minibatches} "
                     f"must divide the {n} agent attempts per step.")

  trainable, frozen = lora.split(agent.params)

  def loss_fn(trainable, minibatch: AgentBatch):
    scores = policy.response_logprobs(
        players.agent_model, lora.join(trainable, frozen), minibatch.prompt,
        minibatch.prompt_mask,
        minibatch.response,
        minibatch.mask if minibatch.attend is None else minibatch.attend,
        cc.agent_temperature,
        _chunk_size(config))
    return grpo_minibatch_loss(config, scores, minibatch)

  def one_epoch(carry, epoch_rng):
    perm = jax.random.permutation(epoch_rng, n).reshape(num_minibatches, -1)

    def one_minibatch(carry, idx):
      trainable, opt_state = carry
      minibatch = jax.tree.map(lambda x: x[idx], batch)
      (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(
          trainable, minibatch)
      updates, new_opt_state = players.agent_opt.update(grads, opt_state,
                                                        trainable)
      grad_norm = optax.tree.norm(grads)
      # A non-finite loss, gradient or update skips the update (counted).
      finite = (jnp.isfinite(loss) & jnp.isfinite(grad_norm)
                & jnp.isfinite(optax.tree.norm(updates)))
      trainable, opt_state = jax.tree.map(
          lambda new, old: jnp.where(finite, new, old),
          (optax.apply_updates(trainable, updates), new_opt_state),
          (trainable, opt_state))
      metrics = dict(metrics, loss=loss, grad_norm=grad_norm,
                     skipped_updates=1.0 - finite.astype(jnp.float32))
      return (trainable, opt_state), metrics

    return jax.lax.scan(one_minibatch, carry, perm)

  (trainable, opt_state), metrics = jax.lax.scan(
      one_epoch, (trainable, agent.opt_state),
      jax.random.split(rng, cc.agent_epochs))
  skipped = metrics.pop("skipped_updates").sum()
  # |sampler - trainer| log-prob where the trainer still has the sampler's
  # params: the first minibatch of the first epoch, a `ratio` (sum, count).
  mismatch = metrics.pop("logp_mismatch")[0, 0]
  metrics = dict(jax.tree.map(jnp.mean, metrics), skipped_updates=skipped,
                 logp_mismatch=mismatch)
  return agent.replace(params=lora.join(trainable, frozen),
                       opt_state=opt_state), metrics


def simulator_batch(config, players: Players, simulator: PlayerState,
                    generation: Generation,
                    signals: curriculum.CurriculumOutput) -> SimulatorBatch:
  """Stage 7's batch: the simulator's generations with the initial
  simulator's log-probs and their curriculum reward and weights."""
  out = generation.out
  ref_logp = jax.lax.stop_gradient(policy.response_logprobs(
      players.simulator_model, simulator.reference(), generation.prompt,
      generation.prompt_mask, out.tokens, out.mask,
      config.coevolve.simulator_temperature, _chunk_size(config)).logp)
  return SimulatorBatch(generation.prompt, generation.prompt_mask, out.tokens,
                        out.mask, out.logprobs, ref_logp,
                        generation.tasks.valid, signals.reward,
                        signals.weights)


def simulator_pg_config(config) -> ml_collections.ConfigDict:
  """The settings of the simulator's policy-gradient loss: the agent's GRPO
  block (clipping, aggregation, entropy) with the simulator's own KL
  coefficient and estimator, advantage normalisation and policy-gradient
  normaliser (config.simulator_update)."""
  update_cfg = config.simulator_update
  pg_cfg = ml_collections.ConfigDict(config.grpo.to_dict())
  pg_cfg.update(kl_coef=update_cfg.kl_coef,
                kl_estimator=update_cfg.kl_estimator,
                normalize_std=update_cfg.pg_normalize_std,
                pg_normalizer=update_cfg.pg_normalizer)
  return pg_cfg


def simulator_update(config, players: Players, simulator: PlayerState,
                     batch: SimulatorBatch):
  """Stage 7: one simulator update on its M = num_seeds * variations
  generations. Returns (the updated simulator, its metrics).

  RWR: weighted max-likelihood of kept generations + KL to the initial
  simulator; PG: GRPO-style on R_env, the baseline per seed or per batch
  (config.simulator_update.pg_baseline). Either
  way the update is scaled back so its KL (pre- vs post-update policy, on these
  generations) stays within config.simulator_update.kl_cap. Batches with
  nothing to learn from (no kept generation for RWR) leave the simulator
  unchanged.
  """
  update_cfg = config.simulator_update
  trainable, frozen = lora.split(simulator.params)

  def scores(trainable):
    return policy.response_logprobs(
        players.simulator_model, lora.join(trainable, frozen), batch.prompt,
        batch.prompt_mask,
        batch.task, batch.task_mask, config.coevolve.simulator_temperature,
        _chunk_size(config))

  step_mask = batch.task_mask & batch.valid[:, None]

  def with_mismatch(loss_and_metrics, logp):
    # |sampler - trainer| log-prob under the pre-update params.
    loss, metrics = loss_and_metrics
    mismatch = masked_ratio(
        jnp.abs(jax.lax.stop_gradient(logp) - batch.old_logp), step_mask)
    return loss, dict(metrics, logp_mismatch=mismatch)

  if update_cfg.method == "rwr":
    def loss_fn(params):
      logp = scores(params).logp
      return with_mismatch(losses.rwr_loss(
          logp, batch.ref_logp, batch.task_mask, batch.weights,
          update_cfg.kl_coef, update_cfg.kl_estimator), logp)
    learn = jnp.any(batch.weights > 0)
  else:  # "pg"
    pg_cfg = simulator_pg_config(config)

    def loss_fn(params):
      logp = scores(params).logp
      return with_mismatch(losses.simulator_pg_loss(
          logp, batch.old_logp, batch.ref_logp, batch.task_mask, batch.reward,
          config.coevolve.num_seeds, config.coevolve.variations, pg_cfg,
          batch.valid, update_cfg.pg_baseline), logp)
    learn = jnp.any(batch.valid)

  (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(
      trainable)
  updates, opt_state = players.simulator_opt.update(
      grads, simulator.opt_state, trainable)
  candidate = optax.apply_updates(trainable, updates)
  step_kl = _masked_mean(
      losses.kl_estimate(batch.old_logp, scores(candidate).logp, "k3"),
      step_mask)
  scale = losses.kl_cap_scale(step_kl, update_cfg.kl_cap)
  params = losses.scale_update(trainable, candidate, scale)
  # A non-finite loss, gradient, update or update KL skips the update
  # (counted).
  finite = (jnp.isfinite(loss) & jnp.isfinite(optax.tree.norm(grads))
            & jnp.isfinite(optax.tree.norm(updates)) & jnp.isfinite(step_kl))
  skipped = learn & ~finite
  learn = learn & finite
  params = jax.tree.map(lambda new, old: jnp.where(learn, new, old), params,
                        trainable)
  opt_state = jax.tree.map(lambda new, old: jnp.where(learn, new, old),
                           opt_state, simulator.opt_state)
  metrics = dict(metrics, loss=loss, update_kl=step_kl * scale**2,
                 kl_scale=scale, updated=learn.astype(jnp.float32),
                 skipped_updates=skipped.astype(jnp.float32))
  return simulator.replace(params=lora.join(params, frozen),
                           opt_state=opt_state), metrics


def update_pools(config, state: CoevolveState, generation: Generation,
                 attempts: Attempts, replay_idx: jax.Array | None,
                 signals: curriculum.CurriculumOutput
                 ) -> tuple[pool_lib.TaskPool, pool_lib.GenerationPool,
                            jax.Array, jax.Array]:
  """Stage 8's pools: fresh tasks (the valid ones, or with pool.admit =
  "informative" those whose attempts disagree), with the agent's success on
  each, into D_train, replayed tasks' success recorded, kept generations into
  D_env, the per-level success estimate f32[D] updated from every
  attempted task (genenv_jax/scripted.py) and the offspring estimate f32[D]
  from the valid fresh tasks, each under its seed's level. Returns (D_train,
  D_env, the level estimate, the offspring estimate)."""
  fresh = generation.tasks
  num_fresh = fresh.valid.shape[0]
  task_success = curriculum.success_rate(
      attempts.success, attempts.tasks.valid,
      threshold=config.curriculum.success_threshold)
  pool = state.pool
  if replay_idx is not None:
    pool = pool_lib.record_success(pool, replay_idx, task_success[num_fresh:],
                                   attempts.tasks.valid[num_fresh:])
  if config.pool.keep_generated == "latest":
    pool = pool_lib.drop_generated(pool)
  admit = fresh.valid
  if config.pool.admit == "informative":
    fresh_success = task_success[:num_fresh]
    admit = admit & (fresh_success > 0) & (fresh_success < 1)
  pool = pool_lib.add_tasks(pool, fresh.task, fresh.difficulty, admit,
                            task_success[:num_fresh])
  out = generation.out
  generation_pool = state.generation_pool
  if out is not None:  # scripted tasks are no simulator's generations
    generation_pool = pool_lib.add_generations(
        generation_pool, generation.prompt, generation.prompt_mask,
        out.tokens, out.mask, signals.reward, signals.keep)
  level_success = scripted.update_level_success(
      state.level_success, attempts.tasks.difficulty, task_success,
      attempts.tasks.valid, config.coevolve.level_success_ema)
  offspring_success = state.offspring_success
  if out is not None:
    seed_level = jnp.repeat(state.pool.difficulty[generation.seed_idx],
                            config.coevolve.variations)
    offspring_success = scripted.update_level_success(
        offspring_success, seed_level, task_success[:num_fresh], fresh.valid,
        config.coevolve.level_success_ema)
  return pool, generation_pool, level_success, offspring_success


# --------------------------------------------------------------------- step


@functools.lru_cache(maxsize=16)
def _logical_names(model: ModelConfig):
  return sharding.logical_names(functools.partial(decoder.init_boxed, model),
                                jax.random.PRNGKey(0))


def params_for_sampling(model: ModelConfig, params, layout: str = "gathered"):
  """A player's weights laid out for decoding, inside a function traced in a
  mesh context: "gathered" makes them whole over the fsdp mesh axis (one
  gather per call, none inside the decode loop), "training" leaves them as
  trained. Either way floating weights are cast to the model's compute dtype
  first (a bfloat16 copy of float32 master weights: half the memory and the
  gather's traffic). Adapters are folded into their kernels first
  (models/lora.py): the sampler decodes with base-shaped weights."""
  params = lora.fold(params, model)
  model = lora.base_config(model)
  params = jax.tree.map(
      lambda x: x.astype(model.dtype)
      if jnp.issubdtype(x.dtype, jnp.floating) else x, params)
  if layout == "training":
    return params
  rules = sharding.without_mesh_axis(nn.get_logical_axis_rules(), "fsdp")
  return sharding.constrain(params, _logical_names(model), rules)


def sampling_configs(config, domain: TaskDomain
                     ) -> tuple[SamplingConfig, SamplingConfig]:
  """(simulator, agent) sampling settings of the step: the simulator writes
  up to simulator_len tokens, the agent answers in up to response_len."""
  cc = config.coevolve
  stop = dict(eos_ids=domain.stop_ids, pad_id=domain.pad_id,
              share_prompt=cc.share_prompt_cache)
  return (SamplingConfig(max_new_tokens=domain.simulator_len,
                         temperature=cc.simulator_temperature,
                         decode_windows=min(cc.decode_windows,
                                            domain.simulator_len), **stop),
          SamplingConfig(max_new_tokens=domain.response_len,
                         temperature=cc.agent_temperature,
                         decode_windows=min(cc.decode_windows,
                                            domain.response_len), **stop))


class StepKeys(NamedTuple):
  """The random keys of one step, one per stage that draws: seeds, the
  simulator's sampling, replayed tasks, the agent's attempts, the GRPO
  minibatch order, and the D_env rows replayed into the simulator's batch."""
  seed: jax.Array
  simulator: jax.Array
  replay: jax.Array
  agent: jax.Array
  update: jax.Array
  generation: jax.Array


def step_keys(config, state: CoevolveState) -> StepKeys:
  """The keys of the step from `state`: its rng (folded with
  config.coevolve.rl_seed when nonzero) folded with the step number, so a
  stage rerun from the same state (a test, a probe) draws what the step
  drew."""
  rl_seed = config.coevolve.rl_seed
  rng = jax.random.fold_in(state.rng, rl_seed) if rl_seed else state.rng
  return StepKeys(*jax.random.split(jax.random.fold_in(rng, state.step), 6))


def make_step(config, domain: TaskDomain, players: Players,
              level_bank: scripted.LevelBank | None = None
              ) -> Callable[[CoevolveState], tuple[CoevolveState, dict]]:
  """Builds the pure co-evolution step `state -> (state, metrics)`: the
  stages above, chained. Metrics are `ratio`s (f32[2] sum, count).

  `config` is the run's ConfigDict (fields coevolve, curriculum, grpo,
  simulator_update, pool), checked by train/config_validation.py; all of it is
  static. `level_bank`: the seed tasks by level that scripted generation
  draws from (scripted.level_bank), bound into the step as constants;
  required by, and only read by, config.coevolve.generation "uniform" and
  "oracle_learnability".
  """
  script = config.coevolve.generation in scripted.SCRIPTED_GENERATIONS
  if script and level_bank is None:
    raise ValueError(
        f"config.coevolve.generation={config.coevolve.generation!r} draws "
        "its tasks from a level bank: pass make_step(..., level_bank="
        "scripted.level_bank(...)) built from the seed train split.")
  num_replay = config.pool.replay_tasks
  num_replayed = generation_replay.num_replayed_generations(config)
  attempts_of = attempt_stage(domain)
  frozen = config.simulator_update.method == "none"

  def step(state: CoevolveState) -> tuple[CoevolveState, dict]:
    keys = step_keys(config, state)

    # 1-2. The simulator writes tasks; the domain parses them.
    generation = write_tasks(config, domain, players, state, keys.seed,
                             keys.simulator, level_bank)
    fresh = generation.tasks
    # 3-4. The agent attempts fresh and replayed tasks; responses are scored.
    replay_idx, tasks = None, fresh
    if num_replay:
      replay_idx, replay = replay_tasks(config, domain, state.pool,
                                        keys.replay, state.level_success)
      tasks = _concat_parsed(fresh, replay)
    attempts = attempts_of(config, domain, players, state.agent, tasks,
                           keys.agent)
    # 5. Curriculum signals on the fresh tasks.
    signals = curriculum_signals(config, domain, fresh,
                                 attempts.success[:fresh.valid.shape[0]])
    # 6. Agent: GRPO on every valid task's attempts.
    agent, agent_metrics = agent_update(
        config, players, state.agent,
        grpo_batch(config, players, state.agent, attempts), keys.update)
    # 7. Simulator: RWR (optionally with D_env replayed) or PG, from its own
    # and its initial model's log-probs.
    if script:  # the simulator wrote nothing: it stays as it is, unscored
      simulator, simulator_kl = state.simulator, ratio(0.0, 0.0)
      simulator_metrics = {"logp_mismatch": ratio(0.0, 0.0)}
    else:
      batch = simulator_batch(config, players, state.simulator, generation,
                              signals)
      simulator_kl = masked_ratio(
          losses.kl_estimate(batch.old_logp, batch.ref_logp, "k3"),
          batch.task_mask & batch.valid[:, None])
      if frozen:  # its params are its initial (reference) ones
        simulator, simulator_metrics = state.simulator, {
            "logp_mismatch": masked_ratio(
                jnp.abs(batch.ref_logp - batch.old_logp),
                batch.task_mask & batch.valid[:, None])}
      else:
        if num_replayed:  # D_env's kept generations join the RWR batch
          batch = generation_replay.with_replayed_generations(
              config, players.simulator_model, state.simulator.reference(),
              state.generation_pool, batch, signals.keep, keys.generation,
              num_replayed)
        simulator, simulator_metrics = simulator_update(
            config, players, state.simulator, batch)
    # 8. Pools and metrics.
    pool, generation_pool, level_success, offspring_success = update_pools(
        config, state, generation, attempts, replay_idx, signals)
    metrics = step_metrics(config, domain, state, generation, attempts,
                           signals, agent_metrics, simulator_kl,
                           simulator_metrics)
    metrics.update(level_success_metrics(level_success))
    metrics.update(level_success_metrics(offspring_success, "offspring"))
    new_state = CoevolveState(agent=agent, simulator=simulator, pool=pool,
                              generation_pool=generation_pool, rng=state.rng,
                              step=state.step + 1, level_success=level_success,
                              offspring_success=offspring_success)
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
