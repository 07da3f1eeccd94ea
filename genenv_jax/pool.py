"""Fixed-capacity device pools: the agent's task pool D_train and the simulator's generation pool D_env.

Both are ring buffers of fixed shape with a write cursor, so the jitted step
reads and writes them without recompiling. D_train keeps its base data (the
seed dataset) in a protected prefix and cycles generated tasks through the
rest, with the agent's latest success rate on each row; D_env keeps the
simulator's kept generations with their curriculum reward.
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np


def _ring_write(buffers, rows, keep, cursor, size, start: int, capacity: int):
  """Writes the rows with keep=True into `buffers` at the cursor.

  Args:
    buffers: pytree of arrays [C, ...]; rows: matching pytree [M, ...].
    keep: bool[M]. cursor, size: int32 scalars. start: first writable row.
    capacity: C.

  Returns:
    (buffers, cursor, size, number written).
  """
  m = keep.shape[0]
  order = jnp.argsort(~keep, stable=True)  # kept rows first, in order
  num = jnp.minimum(keep.sum(), capacity - start).astype(jnp.int32)
  ring = capacity - start
  slots = start + (cursor - start + jnp.arange(m)) % ring
  write = jnp.arange(m) < num
  # Rows beyond `num` are sent out of bounds and dropped.
  slots = jnp.where(write, slots, capacity)

  def put(buf, new):
    return buf.at[slots].set(new[order], mode="drop")

  buffers = jax.tree.map(put, buffers, rows)
  cursor = start + (cursor - start + num) % ring
  size = jnp.minimum(size + num, capacity)
  return buffers, cursor.astype(jnp.int32), size.astype(jnp.int32), num


def _uniform_rows(rng, size, n):
  """n row indices drawn uniformly (with replacement) from [0, size)."""
  return jax.random.randint(rng, (n,), 0, jnp.maximum(size, 1))


UNKNOWN_SUCCESS = -1.0


@flax.struct.dataclass
class TaskPool:
  """D_train. tasks: int32[C, L] written-task rows; difficulty: int32[C];
  success: f32[C] the agent's success rate at its latest attempts at the row,
  UNKNOWN_SUCCESS before any.

  Rows [0, base_size) hold the base data and are never overwritten; generated
  tasks cycle through [base_size, C). size counts filled rows.
  """
  tasks: jax.Array
  difficulty: jax.Array
  success: jax.Array
  cursor: jax.Array
  size: jax.Array
  total_added: jax.Array
  base_size: int = flax.struct.field(pytree_node=False)

  @property
  def capacity(self) -> int:
    return self.tasks.shape[0]


def create_task_pool(base_tasks: np.ndarray, base_difficulty: np.ndarray,
                     capacity: int) -> TaskPool:
  """A pool holding `base_tasks` int32[Nb, L] with room for capacity - Nb more."""
  nb, width = base_tasks.shape
  if capacity <= nb:
    raise ValueError(
        f"config.pool.capacity={capacity} must exceed the base data's "
        f"{nb} rows so generated tasks have room.")
  tasks = np.zeros((capacity, width), np.int32)
  tasks[:nb] = base_tasks
  difficulty = np.zeros((capacity,), np.int32)
  difficulty[:nb] = base_difficulty
  return TaskPool(tasks=jnp.asarray(tasks), difficulty=jnp.asarray(difficulty),
                  success=jnp.full((capacity,), UNKNOWN_SUCCESS, jnp.float32),
                  cursor=jnp.int32(nb), size=jnp.int32(nb),
                  total_added=jnp.int32(0), base_size=nb)


def add_tasks(pool: TaskPool, tasks: jax.Array, difficulty: jax.Array,
              keep: jax.Array, success: jax.Array | None = None) -> TaskPool:
  """Appends the rows of tasks int32[M, L] where keep bool[M], with the agent's
  success rate f32[M] on each (UNKNOWN_SUCCESS when not given)."""
  if success is None:
    success = jnp.full(keep.shape, UNKNOWN_SUCCESS, jnp.float32)
  (new_tasks, new_diff, new_success), cursor, size, num = _ring_write(
      (pool.tasks, pool.difficulty, pool.success),
      (tasks, difficulty, success.astype(jnp.float32)), keep, pool.cursor,
      pool.size, pool.base_size, pool.capacity)
  return pool.replace(tasks=new_tasks, difficulty=new_diff,
                      success=new_success, cursor=cursor, size=size,
                      total_added=pool.total_added + num)


def sample_indices(pool: TaskPool, rng: jax.Array, n: int,
                   trim: float = 0.0) -> jax.Array:
  """int32[n] indices of rows drawn uniformly from the filled rows.

  trim > 0 first sets aside, among the filled rows whose success rate is
  known, the floor(trim·k) lowest- and the floor(trim·k) highest-scoring of
  those k rows (ties broken at random); rows not yet attempted stay eligible.
  With fewer than 1/trim scored rows nothing is set aside.
  """
  if not trim:
    return _uniform_rows(rng, pool.size, n)
  tie_key, draw_key = jax.random.split(rng)
  rows = jnp.arange(pool.capacity)
  filled = rows < pool.size
  known = filled & (pool.success >= 0)
  num_known = known.sum()
  num_drop = jnp.floor(trim * num_known).astype(jnp.int32)
  # Rank the scored rows by success, ties in random order; the rest rank last.
  ties = jax.random.uniform(tie_key, (pool.capacity,))
  order = jnp.lexsort((ties, jnp.where(known, pool.success, jnp.inf)))
  rank = jnp.zeros((pool.capacity,), jnp.int32).at[order].set(rows)
  tail = (rank < num_drop) | (rank >= num_known - num_drop)
  eligible = filled & ~(known & tail)
  return jax.random.categorical(
      draw_key, jnp.where(eligible, 0.0, -jnp.inf), shape=(n,)
  ).astype(jnp.int32)


SELECTIONS = ("uniform", "learnability", "level_learnability", "level_alpha",
              "level_target")


def _learnability(pool: TaskPool, success: jax.Array, floor: float
                  ) -> jax.Array:
  """f32[C] p(1 - p) of each row's success estimate f32[C] (negative:
  unknown, weighing 0) plus `floor`, on filled rows; 0 on empty ones."""
  p = jnp.clip(success, 0.0, 1.0)
  weight = jnp.where(success >= 0, p * (1.0 - p), 0.0) + floor
  return jnp.where(jnp.arange(pool.capacity) < pool.size, weight, 0.0)


def learnability_weights(pool: TaskPool, floor: float) -> jax.Array:
  """f32[C] each row's draw weight under learnability selection: p(1 - p)
  of its recorded success p, plus `floor`; rows never attempted weigh
  `floor` alone, empty rows 0.

  p(1 - p) is the expected squared policy-gradient norm of a binary reward
  at success rate p (the quantity the α-curriculum targets), so the draw
  favours the tasks GRPO learns most from: "No Regrets" / learnability
  sampling (Rutherford et al., 2024).
  """
  return _learnability(pool, pool.success, floor)


def level_learnability_weights(pool: TaskPool, level_success: jax.Array,
                               floor: float) -> jax.Array:
  """f32[C] each row's draw weight under level learnability selection:
  p_l(1 - p_l) of the agent's recent success p_l at the row's level l
  (level_success f32[D] for levels 1..D, UNKNOWN_SUCCESS before any
  attempt; genenv_jax/scripted.py keeps it), plus `floor`; empty rows 0.

  Unlike a row's own recorded success, measured once when it was written,
  the level estimate follows the agent as it learns (an average over the
  last few steps), at the cost of treating a level's tasks alike.
  """
  return _learnability(pool, _row_level_success(pool, level_success), floor)


def _row_level_success(pool: TaskPool, level_success: jax.Array
                       ) -> jax.Array:
  """f32[C] the success estimate f32[D] of each row's level (UNKNOWN_SUCCESS
  for a level out of 1..D)."""
  levels = level_success.shape[0]
  in_range = (pool.difficulty >= 1) & (pool.difficulty <= levels)
  return jnp.where(
      in_range, level_success[jnp.clip(pool.difficulty - 1, 0, levels - 1)],
      UNKNOWN_SUCCESS)


def level_alpha_weights(pool: TaskPool, level_success: jax.Array,
                        floor: float, alpha: float, beta: float
                        ) -> jax.Array:
  """f32[C] each row's draw weight under α selection: a level l is drawn ∝
  the α-curriculum reward exp(-β (p_l - α)²) of the agent's recent success
  p_l at it, plus `floor` (a level not yet attempted weighs `floor` alone),
  and a row uniformly among the filled rows of that level; so a row weighs
  (reward + floor) / (its level's row count). Empty rows and rows of no
  level in 1..D weigh 0.

  Seeds drawn so sit at the levels where the agent succeeds about α of the
  time, whatever share of the pool each level holds, and a variation keeps
  about its seed's level, so the mean success on what the simulator writes
  follows α as the agent learns: ACCEL's curate-then-edit, curated by the
  simulator's own reward. Sharper than p(1 - p) (β = 20: a level at 0.85
  weighs 0.09 against 1 at 0.5, where p(1 - p) gives 0.13 against 0.25).
  """
  p = jnp.clip(level_success, 0.0, 1.0)
  level_weight = jnp.where(level_success >= 0,
                           jnp.exp(-beta * (p - alpha) ** 2), 0.0) + floor
  return _rows_of_levels(pool, level_weight)


def level_target_weights(pool: TaskPool, level_success: jax.Array,
                         floor: float, alpha: float) -> jax.Array:
  """f32[C] each row's draw weight under targeted level selection: levels
  mixed so that the expected success is α. Of the known levels (level_success
  >= 0), a is the one whose success is lowest among those at or above α and
  b the one whose success is highest among those below; they are drawn with
  probabilities w_a = (α - p_b) / (p_a - p_b) and 1 - w_a, so that
  w_a p_a + (1 - w_a) p_b = α. With no known level below α the hardest known
  one (lowest success) is drawn, with none at or above α the easiest; every
  level also weighs `floor` (so an unknown one gets measured), and a row
  is drawn uniformly among its level's filled rows (as in
  `level_alpha_weights`).

  Where `level_alpha_weights` weighs each level by its own distance to α, so
  that levels on one side of α can outweigh the other (with levels at 0.8
  and 0.45, the mix's success is above α), this rule aims the mix's mean at
  α exactly, given the estimates.
  """
  levels = level_success.shape[0]
  known = level_success >= 0
  p = jnp.clip(level_success, 0.0, 1.0)
  above, below = known & (p >= alpha), known & (p < alpha)
  # The bracketing levels (argmin over a masked array: the first of ties).
  a = jnp.argmin(jnp.where(above, p, jnp.inf))
  b = jnp.argmax(jnp.where(below, p, -jnp.inf))
  span = jnp.maximum(p[a] - p[b], 1e-6)
  w_a = jnp.clip((alpha - p[b]) / span, 0.0, 1.0)
  one_hot = lambda i: jax.nn.one_hot(i, levels, dtype=jnp.float32)
  mix = jnp.where(
      above.any() & below.any(), w_a * one_hot(a) + (1.0 - w_a) * one_hot(b),
      jnp.where(above.any(), one_hot(jnp.argmin(jnp.where(known, p, jnp.inf))),
                one_hot(jnp.argmax(jnp.where(known, p, -jnp.inf)))))
  level_weight = jnp.where(known.any(), mix, 0.0) + floor
  return _rows_of_levels(pool, level_weight)


def _rows_of_levels(pool: TaskPool, level_weight: jax.Array) -> jax.Array:
  """f32[C] level weights f32[D] spread over each level's filled rows: a row
  weighs its level's weight / its level's row count; empty rows and rows of
  no level in 1..D weigh 0."""
  levels = level_weight.shape[0]
  filled = jnp.arange(pool.capacity) < pool.size
  in_range = filled & (pool.difficulty >= 1) & (pool.difficulty <= levels)
  level = jnp.clip(pool.difficulty - 1, 0, levels - 1)
  count = jnp.zeros((levels,), jnp.float32).at[level].add(
      in_range.astype(jnp.float32))
  return jnp.where(in_range,
                   level_weight[level] / jnp.maximum(count[level], 1.0), 0.0)


def draw_indices(pool: TaskPool, rng: jax.Array, n: int, selection: str,
                 floor: float, trim: float = 0.0,
                 level_success: jax.Array | None = None,
                 alpha: float = 0.5, beta: float = 20.0) -> jax.Array:
  """int32[n] rows of D_train drawn (with replacement) by `selection`:
  "uniform" (`sample_indices`, with its `trim`), "learnability" (∝
  `learnability_weights`), "level_learnability" (∝
  `level_learnability_weights` of level_success f32[D]), "level_alpha"
  (∝ `level_alpha_weights` at the curriculum's alpha and beta) or
  "level_target" (∝ `level_target_weights` at alpha); floor > 0
  keeps every filled row drawable."""
  if selection == "uniform":
    return sample_indices(pool, rng, n, trim)
  if selection in ("level_learnability", "level_alpha", "level_target") and (
      level_success is None):
    raise ValueError(f"{selection} selection needs level_success.")
  if selection == "learnability":
    weight = learnability_weights(pool, floor)
  elif selection == "level_learnability":
    weight = level_learnability_weights(pool, level_success, floor)
  elif selection == "level_alpha":
    weight = level_alpha_weights(pool, level_success, floor, alpha, beta)
  elif selection == "level_target":
    weight = level_target_weights(pool, level_success, floor, alpha)
  else:
    raise ValueError(f"selection {selection!r} is not one of {SELECTIONS}.")
  return jax.random.categorical(
      rng, jnp.where(weight > 0, jnp.log(jnp.maximum(weight, 1e-30)),
                     -jnp.inf), shape=(n,)).astype(jnp.int32)


def sample_base_indices(pool: TaskPool, rng: jax.Array, n: int) -> jax.Array:
  """int32[n] indices of rows drawn uniformly from the base data."""
  return _uniform_rows(rng, pool.base_size, n)


def drop_generated(pool: TaskPool) -> TaskPool:
  """The pool with only its base data: the next add_tasks starts the
  generated rows afresh (a pool of base data + the latest generation)."""
  base = jnp.int32(pool.base_size)
  return pool.replace(cursor=base, size=base)


def sample_tasks(pool: TaskPool, rng: jax.Array, n: int):
  """n tasks drawn uniformly from the filled rows: (int32[n, L], int32[n])."""
  idx = sample_indices(pool, rng, n)
  return pool.tasks[idx], pool.difficulty[idx]


def record_success(pool: TaskPool, idx: jax.Array, success: jax.Array,
                   measured: jax.Array) -> TaskPool:
  """Sets the success rate f32[n] of rows idx int32[n] where measured bool[n].

  A row drawn twice takes one of its values."""
  rows = jnp.where(measured, idx, pool.capacity)  # out of bounds: dropped
  return pool.replace(success=pool.success.at[rows].set(
      success.astype(jnp.float32), mode="drop"))


@flax.struct.dataclass
class GenerationPool:
  """D_env: the simulator's kept generations (context -> written task).

  prompt: int32[C, Pe] with prompt_mask; task: int32[C, L] with task_mask;
  reward: f32[C], the curriculum reward the generation earned.
  """
  prompt: jax.Array
  prompt_mask: jax.Array
  task: jax.Array
  task_mask: jax.Array
  reward: jax.Array
  cursor: jax.Array
  size: jax.Array

  @property
  def capacity(self) -> int:
    return self.task.shape[0]


def create_generation_pool(capacity: int, prompt_len: int,
                           task_len: int) -> GenerationPool:
  return GenerationPool(
      prompt=jnp.zeros((capacity, prompt_len), jnp.int32),
      prompt_mask=jnp.zeros((capacity, prompt_len), bool),
      task=jnp.zeros((capacity, task_len), jnp.int32),
      task_mask=jnp.zeros((capacity, task_len), bool),
      reward=jnp.zeros((capacity,), jnp.float32),
      cursor=jnp.int32(0), size=jnp.int32(0))


def add_generations(pool: GenerationPool, prompt, prompt_mask, task, task_mask,
                    reward, keep) -> GenerationPool:
  """Appends the generations (rows of [M, ...] arrays) where keep bool[M]."""
  rows = (prompt, prompt_mask, task, task_mask, reward)
  buffers = (pool.prompt, pool.prompt_mask, pool.task, pool.task_mask,
             pool.reward)
  buffers, cursor, size, _ = _ring_write(buffers, rows, keep, pool.cursor,
                                         pool.size, 0, pool.capacity)
  return pool.replace(prompt=buffers[0], prompt_mask=buffers[1],
                      task=buffers[2], task_mask=buffers[3], reward=buffers[4],
                      cursor=cursor, size=size)


def sample_generations(pool: GenerationPool, rng: jax.Array, n: int):
  """n stored generations drawn uniformly, and bool[n]: whether any exist.

  Returns (prompt, prompt_mask, task, task_mask, reward, present).
  """
  idx = _uniform_rows(rng, pool.size, n)
  present = jnp.broadcast_to(pool.size > 0, (n,))
  return (pool.prompt[idx], pool.prompt_mask[idx], pool.task[idx],
          pool.task_mask[idx], pool.reward[idx], present)
