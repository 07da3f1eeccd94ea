"""D_env replay: earlier kept generations in the simulator's RWR batch.

D_env (`pool.GenerationPool`) holds the simulator's kept generations with the
curriculum reward each earned. With config.simulator_update.replay_share > 0,
each RWR update trains on the step's own M generations plus
round(M·share / (1 - share)) rows drawn uniformly from D_env, every kept row
weighted by exp(λ R_env) normalised over the whole batch: the paper's
"weighted generations, accumulated" as the simulator's training data.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from genenv_jax import curriculum
from genenv_jax import policy
from genenv_jax import pool as pool_lib
from models.config import ModelConfig


def num_replayed_generations(config) -> int:
  """Rows of D_env added to the RWR batch: round(M·share / (1 - share)) for
  config.simulator_update.replay_share (0 for none), M = S·m."""
  eu, cc = config.simulator_update, config.coevolve
  share = eu.replay_share
  if not 0.0 <= share < 1.0:
    raise ValueError(f"config.simulator_update.replay_share={share} must lie "
                     "in [0, 1).")
  if share and eu.method != "rwr":
    raise ValueError(
        f"config.simulator_update.replay_share={share} replays earlier "
        "generations into the RWR batch; it needs "
        f"config.simulator_update.method='rwr', not {eu.method!r}.")
  return round(cc.num_seeds * cc.variations * share / (1.0 - share))


def with_replayed_generations(config, model: ModelConfig, ref_params,
                              generation_pool: pool_lib.GenerationPool,
                              batch, keep: jax.Array, rng, num: int):
  """The RWR batch of the step's M generations plus `num` drawn uniformly
  from D_env, each weighted by its stored R_env.

  Args:
    model, ref_params: the simulator's architecture and its initial weights
      (the KL reference), for the replayed rows' ref_logp.
    batch: the step's own M rows (a coevolve.SimulatorBatch); keep: bool[M]
      the rows the curriculum keeps.

  Returns:
    M + num rows: batch's rows first, unchanged but for weights, which become
    exp(λ R) normalised over the kept rows and the replayed rows (none
    replayed while D_env is empty).
  """
  prompt, prompt_mask, task, task_mask, reward, present = (
      pool_lib.sample_generations(generation_pool, rng, num))
  ref_logp = jax.lax.stop_gradient(policy.response_logprobs(
      model, ref_params, prompt, prompt_mask, task,
      task_mask, config.coevolve.simulator_temperature,
      config.coevolve.get("logprob_chunk_size", policy.DEFAULT_CHUNK_SIZE)
      ).logp)
  cat = lambda a, b: jnp.concatenate([a, b], axis=0)
  all_reward = cat(batch.reward, reward)
  weights = curriculum.rwr_weights(all_reward, cat(keep, present),
                                   config.curriculum.rwr_temperature)
  return batch._replace(
      prompt=cat(batch.prompt, prompt),
      prompt_mask=cat(batch.prompt_mask, prompt_mask),
      task=cat(batch.task, task), task_mask=cat(batch.task_mask, task_mask),
      old_logp=cat(batch.old_logp, jnp.zeros_like(ref_logp)),
      ref_logp=cat(batch.ref_logp, ref_logp),
      valid=cat(batch.valid, jnp.zeros((num,), bool)), reward=all_reward,
      weights=weights)
