"""The co-evolution step's metrics (stage 8), each a `ratio` (sum, count) so
that a log window's mean is exact: the sum of sums over the sum of counts
(train/outputs/metrics_log.py adds them up). Names are stable: the run report,
the sweep report and the tests read them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from genenv_jax import curriculum
from genenv_jax import episodes as episodes_lib
from genenv_jax import losses
from genenv_jax.coevolve_state import Attempts, CoevolveState, Generation
from genenv_jax.domains.base import TaskDomain


def ratio(total, count) -> jax.Array:
  """A metric as f32[2] (sum, count): windows add both and divide once."""
  return jnp.stack([jnp.asarray(total, jnp.float32),
                    jnp.asarray(count, jnp.float32)])


def masked_ratio(x, mask) -> jax.Array:
  """(sum of x where mask, number of such entries) as a `ratio`."""
  mask = mask.astype(jnp.float32)
  return ratio(jnp.sum(x * mask), mask.sum())


def per_step(x) -> jax.Array:
  """A per-step scalar as a `ratio` that averages over the window's steps."""
  return ratio(x, 1.0)


def metric_values(metrics: dict) -> dict[str, float]:
  """{name: sum / count} of one step's metrics (0 where count is 0), read
  to the host in one transfer (not one device program per metric)."""
  return {name: float(total / count) if count > 0 else 0.0
          for name, (total, count) in jax.device_get(metrics).items()}


def step_metrics(config, domain: TaskDomain, state: CoevolveState,
                 generation: Generation, attempts: Attempts,
                 signals: curriculum.CurriculumOutput, agent_metrics: dict,
                 simulator_kl: jax.Array, simulator_metrics: dict) -> dict:
  """Stage 8's metrics, each a `ratio` (sum, count) so that a log window's
  mean is exact: sum of sums over sum of counts. Names are stable."""
  fresh = generation.tasks
  num_fresh = fresh.valid.shape[0]
  rewards = attempts.rewards
  group = rewards.shape[1]
  fresh_rewards = rewards[:num_fresh]
  attempt_valid = jnp.repeat(attempts.tasks.valid, group)
  valid_f = fresh.valid.astype(jnp.float32)
  metrics = {
      "env/success_rate": masked_ratio(signals.p_hat, fresh.valid),
      "env/in_band_frac": ratio(curriculum.in_band(
          signals.p_hat, fresh.valid, config.curriculum.alpha,
          config.curriculum.band).sum(), valid_f.sum()),
      # Valid tasks that enter the simulator update (config.curriculum.keep).
      "env/kept_frac": ratio(signals.keep.sum(), valid_f.sum()),
      "env/valid_frac": ratio(valid_f.sum(), num_fresh),
      "env/invalid_count": per_step(num_fresh - valid_f.sum()),
      "env/difficulty_mean": masked_ratio(fresh.difficulty, fresh.valid),
      "env/reward_mean": masked_ratio(signals.reward, fresh.valid),
      "env/kl": simulator_kl,
      "agent/reward_mean": masked_ratio(rewards.reshape(-1), attempt_valid),
      "agent/fresh_reward_mean": masked_ratio(
          fresh_rewards.reshape(-1), jnp.repeat(fresh.valid, group)),
      # Generated tasks whose attempts disagree: the only ones whose
      # group-relative advantages are nonzero, i.e. that teach the agent.
      "env/informative_frac": masked_ratio(
          fresh_rewards.max(axis=1) > fresh_rewards.min(axis=1), fresh.valid),
      "agent/response_len": masked_ratio(attempts.out.lengths, attempt_valid),
      "pool/size": per_step(state.pool.size),
      "pool/env_size": per_step(state.generation_pool.size),
  }
  if config.grpo.dynamic_sampling_groups:
    # The share of the update's K groups that carry a signal: min(informative
    # groups sampled, K) / K (losses.informative_groups_first).
    _, kept_informative = losses.informative_groups_first(
        rewards.reshape(-1), group, config.grpo.dynamic_sampling_groups,
        valid=(attempt_valid if attempts.kept is None
               else attempt_valid & attempts.kept))
    metrics["agent/dynamic_sampling_fill"] = ratio(
        kept_informative.sum(), kept_informative.shape[0])
  for name in ("kl", "loss", "clip_frac", "grad_norm", "skipped_updates"):
    metrics[f"agent/{name}"] = per_step(agent_metrics[name])
  # Mean |sampler - trainer| log-prob over the tokens measured (a ratio).
  metrics["agent/logp_mismatch"] = agent_metrics["logp_mismatch"]
  simulator_metrics = dict(simulator_metrics)
  metrics["env/logp_mismatch"] = simulator_metrics.pop("logp_mismatch")
  if fresh.delimiter is not None:  # tasks opened by another delimiter spelling
    metrics["env/delimiter_variant_frac"] = masked_ratio(fresh.delimiter > 0,
                                                         fresh.valid)
  if attempts.episodes is not None:
    metrics.update(episode_metrics(attempts.episodes, attempt_valid))
  for level in range(1, domain.max_difficulty + 1):
    metrics[f"env/difficulty_frac_d{level}"] = masked_ratio(
        fresh.difficulty == level, fresh.valid)
  for name, value in simulator_metrics.items():
    metrics[f"env_update/{name}"] = per_step(value)
  return metrics


def level_success_metrics(level_success: jax.Array, name: str = "level"
                          ) -> dict:
  """A per-level success estimate f32[D] after the step, as `ratio`s
  "agent/<name>_success_d<l>" (count 0 while a level is unknown)."""
  return {f"agent/{name}_success_d{level + 1}": ratio(
              jnp.maximum(level_success[level], 0.0), level_success[level] >= 0)
          for level in range(level_success.shape[0])}


def episode_metrics(episodes: episodes_lib.Episodes, valid: jax.Array
                    ) -> dict:
  """The rollout's statistics over the valid tasks' episodes (bool[N]
  valid), as `ratio`s: turns per episode, the share of actions the
  environment could not read, of episodes truncated at the turn limit, of
  observation tokens among the bodies' real tokens, and environment errors
  per episode."""
  return {
      "episode/turns": masked_ratio(episodes.turns, valid),
      "episode/invalid_action_frac": ratio(
          jnp.sum(episodes.invalid_actions * valid),
          jnp.sum(episodes.turns * valid)),
      "episode/truncated_frac": masked_ratio(episodes.truncated, valid),
      "episode/success_rate": masked_ratio(episodes.success, valid),
      "episode/observation_token_frac": ratio(
          jnp.sum(episodes.observation_tokens * valid),
          jnp.sum((episodes.observation_tokens + episodes.lengths) * valid)),
      "episode/errors": masked_ratio(episodes.errors, valid),
  }
