"""The α-curriculum: success rates, environment rewards, band filter, RWR weights.

The agent attempts every generated task G times. From those attempts this module
computes, per task (or pooled over the variations of one seed task):

  p̂       the agent's success rate,
  R_env    the simulator's reward for having written the task, by default the
           α-curriculum reward exp(-β (p̂ - α)²) (GenEnv, arXiv 2512.19682);
           any reward of REWARDS (config.curriculum.reward), optionally less
           R-Zero's repetition penalty on near-duplicate tasks of the batch,
  keep     the tasks that enter the simulator's update (curriculum.keep):
           by default the difficulty filter |p̂ - α| <= k_min (and valid),
           applied under every reward,
  weights  reward-weighted-regression weights ∝ exp(λ R_env) over kept tasks.

All functions are pure and jit-safe; configuration values are static Python
values read from the `config.curriculum` block, whose fields and defaults are
documented in configs/default.py (the one source of defaults).
"""

from __future__ import annotations

from typing import Any, Callable

import flax
import jax
import jax.numpy as jnp

# Which valid tasks enter the simulator update (config.curriculum.keep).
KEEPS = ("band", "informative", "valid")

# Slack on the band edge so that float rounding keeps e.g. p̂ = 0.6 inside
# alpha = 0.5, band = 0.1 (0.6 - 0.5 = 0.09999999999999998 or 0.10000002).
BAND_TOLERANCE = 1e-6


@flax.struct.dataclass
class CurriculumOutput:
  """Per-task curriculum signals, all of shape [M] (one entry per generated task).

  Attributes:
    p_hat: f32[M] success rate (0 for invalid tasks).
    reward: f32[M] R_env(p̂) (0 for invalid tasks).
    keep: bool[M] valid and chosen by config.curriculum.keep (by default
      inside the difficulty band).
    weights: f32[M] RWR weights, summing to 1 over kept tasks, 0 elsewhere.
  """

  p_hat: jax.Array
  reward: jax.Array
  keep: jax.Array
  weights: jax.Array


def success_rate(rewards: jax.Array, valid: jax.Array,
                 group_ids: jax.Array | None = None,
                 num_groups: int | None = None,
                 threshold: float = 1.0) -> jax.Array:
  """Fraction of successful attempts per task, optionally pooled per seed group.

  Args:
    rewards: f32[M, G] agent reward of G attempts on each of M generated tasks.
    valid: bool[M] whether each task is valid (parses, is checkable).
    group_ids: optional int32[M] seed id of each task, in [0, num_groups).
      When given, p̂ of a task is successes / attempts summed over all valid
      tasks sharing its seed id.
    num_groups: number of seed groups (static); required with group_ids.
    threshold: an attempt succeeds when its reward >= threshold.

  Returns:
    p_hat: f32[M]; 0 for invalid tasks (callers exclude them through `valid`).
  """
  if rewards.ndim != 2:
    raise ValueError(f"rewards must be f32[M, G]; got shape {rewards.shape}.")
  num_tasks, group_size = rewards.shape
  if valid.shape != (num_tasks,):
    raise ValueError(f"valid must be bool[{num_tasks}] to match rewards "
                     f"{rewards.shape}; got shape {valid.shape}.")
  valid = valid.astype(bool)
  successes = jnp.sum(rewards >= threshold, axis=1).astype(jnp.float32)
  successes = jnp.where(valid, successes, 0.0)
  attempts = jnp.where(valid, float(group_size), 0.0)
  if group_ids is not None:
    if num_groups is None:
      raise ValueError("success_rate: num_groups is required with group_ids.")
    if group_ids.shape != (num_tasks,):
      raise ValueError(f"group_ids must be int32[{num_tasks}]; got shape "
                       f"{group_ids.shape}.")
    group_successes = jax.ops.segment_sum(successes, group_ids, num_groups)
    group_attempts = jax.ops.segment_sum(attempts, group_ids, num_groups)
    successes = group_successes[group_ids]
    attempts = group_attempts[group_ids]
  p_hat = successes / jnp.maximum(attempts, 1.0)
  return jnp.where(valid, p_hat, 0.0)


def alpha_reward(p_hat: jax.Array, alpha: float, beta: float) -> jax.Array:
  """GenEnv's α-curriculum reward exp(-β (p̂ - α)²); p_hat: f32[...]."""
  return jnp.exp(-beta * jnp.square(p_hat - alpha))


def uncertainty_reward(p_hat: jax.Array) -> jax.Array:
  """1 - 2|p̂ - ½|: 1 at p̂ = ½, 0 at p̂ ∈ {0, 1}; p_hat: f32[...]."""
  return 1.0 - 2.0 * jnp.abs(p_hat - 0.5)


def learnability_reward(p_hat: jax.Array) -> jax.Array:
  """1 - p̂ for 0 < p̂ < 1, else 0 (never solved or always solved); f32[...].

  Absolute Zero's proposer reward (Zhao et al., 2025, arXiv 2505.03335)."""
  return jnp.where((p_hat > 0.0) & (p_hat < 1.0), 1.0 - p_hat, 0.0)


def variance_reward(p_hat: jax.Array) -> jax.Array:
  """p̂ (1 - p̂): the variance of a task's binary success, ¼ at p̂ = ½, 0 at
  p̂ ∈ {0, 1}; f32[...].

  The learnability score of "No Regrets" (Rutherford et al., 2024, arXiv
  2408.15099) and of learnability sampling (Foster & Foerster, 2025); the
  expected squared policy-gradient norm of a binary reward. Its peak is ¼,
  not 1: at one RWR temperature its weights are 4× flatter than those of
  `uncertainty_reward` (scale curriculum.rwr_temperature to compare).
  """
  return p_hat * (1.0 - p_hat)


# The simulator's rewards by name (config.curriculum.reward): each maps p̂
# f32[...] and the config.curriculum block to R_env f32[...]. A new reward is
# one entry here (train/config_validation.py reads the names).
RewardFn = Callable[[jax.Array, Any], jax.Array]
REWARDS: dict[str, RewardFn] = {
    "alpha": lambda p_hat, cfg: alpha_reward(p_hat, cfg.alpha, cfg.beta),
    "uncertainty": lambda p_hat, cfg: uncertainty_reward(p_hat),
    "learnability": lambda p_hat, cfg: learnability_reward(p_hat),
    "variance": lambda p_hat, cfg: variance_reward(p_hat),
}


def curriculum_reward(p_hat: jax.Array, cfg: Any) -> jax.Array:
  """R_env(p̂) chosen by cfg.reward (a name of REWARDS); p_hat: f32[...]."""
  if cfg.reward not in REWARDS:
    raise ValueError(f"config.curriculum.reward = {cfg.reward!r} is not one "
                     f"of {tuple(REWARDS)}.")
  return REWARDS[cfg.reward](p_hat, cfg)


# Buckets of the hashed token-bigram counts `task_similarity` compares.
SIMILARITY_BUCKETS = 4096


def task_similarity(tasks: jax.Array, mask: jax.Array) -> jax.Array:
  """f32[M, M] token overlap between M written tasks: the Jaccard index of
  their token-bigram multisets, Σ_b min(c_i(b), c_j(b)) / Σ_b max(c_i(b),
  c_j(b)) over bigram counts c (hashed into SIMILARITY_BUCKETS buckets); 1
  for identical token rows, 0 for tasks sharing no bigram or with none.

  Args:
    tasks: int32[M, T] written-task tokens.
    mask: bool[M, T] true on the task's tokens (pad excluded).
  """
  num_tasks = tasks.shape[0]
  tokens = tasks.astype(jnp.uint32)
  # A bigram (a, b) at positions (t, t + 1), both inside the task.
  bigram = tokens[:, :-1] * jnp.uint32(1_000_003) + tokens[:, 1:]
  present = (mask[:, :-1] & mask[:, 1:]).astype(jnp.float32)
  bucket = (bigram % SIMILARITY_BUCKETS).astype(jnp.int32)
  counts = jnp.zeros((num_tasks, SIMILARITY_BUCKETS), jnp.float32).at[
      jnp.arange(num_tasks)[:, None], bucket].add(present)
  both = jnp.minimum(counts[:, None, :], counts[None, :, :]).sum(-1)
  either = jnp.maximum(counts[:, None, :], counts[None, :, :]).sum(-1)
  return jnp.where(either > 0, both / jnp.maximum(either, 1.0), 0.0)


def repetition_penalty(tasks: jax.Array, mask: jax.Array, valid: jax.Array,
                       penalty: float, threshold: float) -> jax.Array:
  """f32[M] R-Zero's repetition penalty λ |C_i| / B (Huang et al., 2025,
  arXiv 2508.05004, §3.2): C_i the valid tasks of the batch near task i
  (itself included), B the number of valid tasks, λ = `penalty`; 0 on
  invalid tasks.

  R-Zero clusters a batch's questions by BLEU distance; here task j is near
  task i when their `task_similarity` is >= `threshold` (no transitive
  closure: each task counts its own neighbours). So a task written once in a
  batch of B costs λ / B, and k copies of one question cost λ k / B each.

  Args:
    tasks: int32[M, T] written-task tokens; mask: bool[M, T] their tokens.
    valid: bool[M] the tasks that count (an invalid one is near nothing).
  """
  valid = valid.astype(bool)
  near = (task_similarity(tasks, mask) >= threshold) & valid[None, :]
  cluster = jnp.sum(near, axis=1).astype(jnp.float32)
  batch = jnp.maximum(jnp.sum(valid).astype(jnp.float32), 1.0)
  return jnp.where(valid, penalty * cluster / batch, 0.0)


def in_band(p_hat: jax.Array, valid: jax.Array, alpha: float,
            band: float) -> jax.Array:
  """bool[...]: valid and |p̂ - α| <= band (edges included, up to 1e-6)."""
  return (jnp.abs(p_hat - alpha) <= band + BAND_TOLERANCE) & valid.astype(bool)


def rwr_weights(reward: jax.Array, keep: jax.Array,
                temperature: float) -> jax.Array:
  """Reward-weighted-regression weights over kept entries.

  Args:
    reward: f32[...] R_env per entry.
    keep: bool[...] entries that take part.
    temperature: λ.

  Returns:
    f32[...] exp(λ R) / Σ_kept exp(λ R) on kept entries, 0 elsewhere; all zeros
    when nothing is kept.
  """
  keep = keep.astype(bool)
  logits = temperature * reward
  top = jnp.max(jnp.where(keep, logits, -jnp.inf))
  top = jnp.where(jnp.isfinite(top), top, 0.0)
  unnormalised = jnp.where(keep, jnp.exp(jnp.where(keep, logits - top, 0.0)),
                           0.0)
  total = jnp.sum(unnormalised)
  return unnormalised / jnp.where(total > 0, total, 1.0)


def compute(rewards: jax.Array, valid: jax.Array, cfg: Any,
            group_ids: jax.Array | None = None,
            num_groups: int | None = None,
            tasks: jax.Array | None = None,
            task_mask: jax.Array | None = None) -> CurriculumOutput:
  """All curriculum signals for one generated batch.

  Args:
    rewards: f32[M, G] agent reward of G attempts per generated task.
    valid: bool[M] task validity.
    cfg: the `config.curriculum` block (configs/default.py). cfg.keep
      chooses the valid tasks kept: "band" (|p̂ - α| <= cfg.band),
      "informative" (0 < p̂ < 1: some attempts succeed and some fail) or
      "valid" (all). cfg.repetition_penalty > 0 lowers each reward by
      `repetition_penalty` (floored at 0, as R-Zero's).
    group_ids: int32[M] seed id per task; required when cfg.per_seed and
      ignored otherwise.
    num_groups: number of seeds (static); required when cfg.per_seed.
    tasks, task_mask: int32[M, T] / bool[M, T] the written tasks' tokens;
      required when cfg.repetition_penalty > 0.

  Returns:
    CurriculumOutput with p̂, R_env (0 for invalid tasks), the kept tasks and
    the RWR weights, each of shape [M].
  """
  if cfg.per_seed:
    if group_ids is None or num_groups is None:
      raise ValueError("config.curriculum.per_seed is True: compute needs "
                       "group_ids and num_groups.")
    p_hat = success_rate(rewards, valid, group_ids, num_groups,
                         cfg.success_threshold)
  else:
    p_hat = success_rate(rewards, valid, threshold=cfg.success_threshold)
  valid = valid.astype(bool)
  reward = jnp.where(valid, curriculum_reward(p_hat, cfg), 0.0)
  if cfg.repetition_penalty > 0:
    if tasks is None or task_mask is None:
      raise ValueError("config.curriculum.repetition_penalty > 0: compute "
                       "needs the written tasks (tasks, task_mask).")
    reward = jnp.maximum(reward - repetition_penalty(
        tasks, task_mask, valid, cfg.repetition_penalty,
        cfg.repetition_similarity), 0.0)
  if cfg.keep == "band":
    keep = in_band(p_hat, valid, cfg.alpha, cfg.band)
  elif cfg.keep == "informative":
    keep = valid & (p_hat > 0.0) & (p_hat < 1.0)
  elif cfg.keep == "valid":
    keep = valid
  else:
    raise ValueError(f"config.curriculum.keep = {cfg.keep!r} is not one of "
                     f"{KEEPS}.")
  weights = rwr_weights(reward, keep, cfg.rwr_temperature)
  return CurriculumOutput(p_hat=p_hat, reward=reward, keep=keep,
                          weights=weights)
