"""Scripted curricula: tasks drawn by a fixed rule instead of written by the
simulator, the controls of the claim's experiment.

`config.coevolve.generation` names the rule:

- "uniform": each of the step's M tasks is of a level drawn uniformly over
  1..D (domain.max_difficulty), independent of the agent (domain
  randomisation).
- "oracle_learnability": the level is drawn ∝ p_l(1 − p_l), p_l the agent's
  recent success at level l (`CoevolveState.level_success`, below), mixed
  with the uniform draw at share `coevolve.oracle_explore`, so every level
  keeps being measured. A level not yet measured counts as p(1 − p) = ¼ (the
  largest value: it is worth trying); when every measured weight is 0 (all
  levels solved always or never) the draw is uniform. This is the curriculum
  the learned simulator is trying to find, given for free.

Tasks of the drawn level come from a `LevelBank`: up to
`coevolve.scripted_bank_per_level` tasks of each level taken from the seed
dataset's train split. Every domain has such a split with its levels (the
simulator's warm-start lessons come from it), so the rule is the same for
arithmetic tasks, mazes and text tasks, and a bank row is a written task in
the domain's row format, parsed like a D_train row. The bank is fixed data,
rebuilt from `config.data` on every start, and so bound into the step rather
than kept in checkpoints. The step's curriculum signals (p̂, R_env, the band;
with `curriculum.per_seed`, over groups of `variations` consecutive draws)
are computed as for written tasks and feed only the metrics: no simulator
learns from them.

The per-level success estimate, kept in the state for every generation mode
(a mechanism figure of every arm): after each step, for each level l with
n_l > 0 valid attempted tasks (fresh and replayed) this step,
p_l <- s_l when p_l is unknown, else (1 - eta) p_l + eta s_l, where s_l is the
mean success of those tasks' attempts (by `curriculum.success_threshold`) and
eta = `coevolve.level_success_ema`. Levels not attempted keep their value;
unknown is `pool.UNKNOWN_SUCCESS`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from genenv_jax import pool as pool_lib

SCRIPTED_GENERATIONS = ("uniform", "oracle_learnability")


class LevelBank(NamedTuple):
  """Seed tasks bucketed by level.

  Attributes:
    tasks: int32[D, K, L] written-task rows; row k of level d + 1 is real
      when k < count[d] (the rest repeat real rows).
    count: int32[D] real rows per level (≥ 1).
  """
  tasks: np.ndarray
  count: np.ndarray


def level_bank(rows: np.ndarray, difficulty: np.ndarray, num_levels: int,
               per_level: int, seed: int) -> LevelBank:
  """A LevelBank of up to `per_level` rows of each level 1..num_levels,
  drawn without replacement with numpy seed `seed`.

  Args:
    rows: int32[n, L] the seed train split's written-task rows.
    difficulty: int[n] their levels.

  Raises:
    ValueError naming the level when the split has no task of it.
  """
  rng = np.random.default_rng(seed)
  picked = []
  for level in range(1, num_levels + 1):
    of_level = np.flatnonzero(np.asarray(difficulty) == level)
    if not len(of_level):
      raise ValueError(
          f"Scripted generation (config.coevolve.generation): the seed "
          f"dataset's train split has no task of level {level} of "
          f"1..{num_levels} to draw from; config.data must provide every "
          "level.")
    picked.append(rng.permutation(of_level)[:per_level])
  width = max(len(p) for p in picked)
  tasks = np.stack([np.asarray(rows)[np.resize(p, width)] for p in picked])
  return LevelBank(tasks.astype(np.int32),
                   np.array([len(p) for p in picked], np.int32))


def uniform_level_weights(num_levels: int) -> jax.Array:
  """f32[D] equal probabilities of the levels."""
  return jnp.full((num_levels,), 1.0 / num_levels)


def learnability_level_weights(level_success: jax.Array, explore: float
                               ) -> jax.Array:
  """f32[D] level probabilities ∝ p_l(1 − p_l) of level_success f32[D]
  (unknown levels count ¼), mixed with the uniform draw at share `explore`;
  uniform when every weight is 0."""
  num_levels = level_success.shape[0]
  known = level_success >= 0
  p = jnp.clip(level_success, 0.0, 1.0)
  weight = jnp.where(known, p * (1.0 - p), 0.25)
  total = weight.sum()
  uniform = uniform_level_weights(num_levels)
  learnable = jnp.where(total > 0, weight / jnp.maximum(total, 1e-30),
                        uniform)
  return (1.0 - explore) * learnable + explore * uniform


def draw_tasks(bank: LevelBank, key: jax.Array, weights: jax.Array, n: int
               ) -> tuple[jax.Array, jax.Array]:
  """n tasks from `bank`, each of a level drawn from `weights` f32[D] and a
  row drawn uniformly among that level's real rows. Returns (int32[n, L]
  rows, int32[n] their bank index level·K + row)."""
  level_key, row_key = jax.random.split(key)
  tasks = jnp.asarray(bank.tasks)
  level = jax.random.categorical(level_key, jnp.log(weights), shape=(n,))
  row = jax.random.randint(row_key, (n,), 0, jnp.asarray(bank.count)[level])
  return tasks[level, row], (level * tasks.shape[1] + row).astype(jnp.int32)


def initial_level_success(num_levels: int) -> np.ndarray:
  """f32[D]: every level unknown."""
  return np.full((num_levels,), pool_lib.UNKNOWN_SUCCESS, np.float32)


def update_level_success(level_success: jax.Array, difficulty: jax.Array,
                         task_success: jax.Array, valid: jax.Array,
                         rate: float) -> jax.Array:
  """The per-level success estimate after one step (module docstring).

  Args:
    level_success: f32[D] the estimate before the step.
    difficulty: int32[T] the attempted tasks' levels (1..D for valid ones).
    task_success: f32[T] each task's share of successful attempts (every
      task has the same G attempts, so the mean over a level's tasks is the
      mean over its attempts).
    valid: bool[T] the tasks that count.
    rate: η, the newest step's weight.
  """
  num_levels = level_success.shape[0]
  one_hot = ((difficulty[:, None] == jnp.arange(1, num_levels + 1)[None])
             & valid[:, None]).astype(jnp.float32)          # [T, D]
  tasks = one_hot.sum(axis=0)
  step_success = (one_hot * task_success[:, None]).sum(axis=0) / (
      jnp.maximum(tasks, 1.0))
  blended = jnp.where(level_success >= 0,
                      (1.0 - rate) * level_success + rate * step_success,
                      step_success)
  return jnp.where(tasks > 0, blended, level_success)
