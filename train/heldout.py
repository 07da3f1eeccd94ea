"""Held-out evaluation of the agent by difficulty level (greedy decoding)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from genenv_jax import sharding
from genenv_jax.sampling import SamplingConfig, sample
from genenv_jax.tasks.base import TaskDomain
from models.config import ModelConfig


class HeldoutEval:
  """Scores the agent on fixed held-out tasks: accuracy overall and per level.

  Args:
    domain: the task domain.
    agent_model: the agent's architecture.
    rows: int32[n, task_len] held-out written tasks; difficulty: int32[n].
    mesh, rules: the layout the evaluation runs in.
    success_threshold: an answer counts as correct when its reward reaches it
      (partial-credit rewards do not count as accuracy).
  """

  def __init__(self, domain: TaskDomain, agent_model: ModelConfig,
               rows: np.ndarray, difficulty: np.ndarray, mesh, rules,
               success_threshold: float = 1.0):
    self._levels = sorted(int(d) for d in np.unique(difficulty))
    self._difficulty = jnp.asarray(difficulty)
    self._rows = jnp.asarray(rows)
    greedy = SamplingConfig(max_new_tokens=domain.answer_len, temperature=0.0,
                            eos_ids=(domain.eos_id,), pad_id=domain.pad_id)

    @jax.jit
    @sharding.in_mesh(mesh, rules)
    def accuracy_by_level(params, rows, difficulty):
      parsed = domain.parse(rows, rows != domain.pad_id)
      out = sample(agent_model, params, parsed.prompt, parsed.prompt_mask,
                   jax.random.PRNGKey(0), greedy)
      reward = domain.verify(out.tokens, out.mask, parsed.reference,
                             parsed.reference_mask)
      reward = ((reward >= success_threshold) & parsed.valid).astype(
          jnp.float32)
      per_level = jnp.stack([
          jnp.sum(reward * (difficulty == d)) / jnp.maximum(
              jnp.sum(difficulty == d), 1) for d in self._levels])
      return jnp.mean(reward), per_level, jnp.mean(out.lengths)

    self._fn = accuracy_by_level

  def __call__(self, params) -> dict[str, float]:
    overall, per_level, length = jax.device_get(
        self._fn(params, self._rows, self._difficulty))
    metrics = {"eval/accuracy": float(overall),
               "eval/response_len": float(length)}
    for level, acc in zip(self._levels, per_level):
      metrics[f"eval/accuracy_d{level}"] = float(acc)
    return metrics
