"""Mazes: an episodic domain whose simulator draws the environment.

The simulator first names a difficulty level (its plan), then writes a W×W
grid row by row, one token per cell (open, wall, start, goal), then EOS.
`parse` executes that spec: it is a valid task iff the plan is a level token,
every cell token is a cell, there is exactly one start and one goal, and the
goal is reachable from the start in at most `level_width · max_difficulty`
moves; its difficulty is the shortest path's length d in levels of
`level_width` moves (level ceil(d / level_width)). Nothing is trusted from the
simulator's text but the grid itself: the plan may miss, and the written task
row carries the level the grid has. The plan puts the simulator's choice of
difficulty into one token, which its update can move; without it the level
is spread over the W² cells.

The agent sees the map, the goal's row and column, and where it stands with
what lies next to it; each turn it writes one move and EOS, and the
environment answers with the move's outcome, the new position and its four
neighbours. Reaching the goal within `max_turns` moves ends the episode with
reward 1.

With `summary_signals`, the simulator's prompt also carries the agent's
latest success rate on the seed, rounded to 10% (a "?" token before any
attempt), so that it can learn to write harder variations of the seeds the
agent solves and easier ones of those it fails.

Vocabulary (16 + 2W + levels + 12 ids):

  id     0    1    2    3  4  5  6  7  8  9  10 11  12    13    14    15
  token  pad  bos  eos  .  #  S  G  >  U  D  L  R   moved bump  goal  bad

  16 + r: row r;  16 + W + c: column c;  16 + 2W + k - 1: level k;
  16 + 2W + levels + b: success rate b/10 (b = 0..10);  the last id: "?".

Written task (W² + 2):        level cells EOS
Agent prompt (P = W² + 11):  BOS cells > row(goal) col(goal) > row col nU nD nL nR
Observation (O = 7):          status row col nU nD nL nR
Action (A = 2):               move EOS
Simulator prompt (W² + 4):    BOS <seed's level and cells> rate >
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from genenv_jax import config_fields as fields
from genenv_jax import episodes as episodes_lib
from genenv_jax.envs.base import Environment, EnvStep
from genenv_jax.domains.base import (RATE_BUCKETS, ParsedTasks, TaskDomain,
                                   success_buckets)

PAD, BOS, EOS = 0, 1, 2
OPEN, WALL, START, GOAL = 3, 4, 5, 6
SEP = 7
UP, DOWN, LEFT, RIGHT = 8, 9, 10, 11
MOVED, BUMP, REACHED, BAD = 12, 13, 14, 15
FIRST_COORDINATE = 16
MOVES = (UP, DOWN, LEFT, RIGHT)
_STEPS = ((-1, 0), (1, 0), (0, -1), (0, 1))  # (row, column) per move
_TEXT = {PAD: "", BOS: "<bos>", EOS: "<eos>", OPEN: ".", WALL: "#",
         START: "S", GOAL: "G", SEP: ">", UP: "U", DOWN: "D", LEFT: "L",
         RIGHT: "R", MOVED: "moved", BUMP: "bump", REACHED: "goal",
         BAD: "bad"}
UNREACHABLE = 10_000
ACTION_LEN = 2
OBSERVATION_LEN = 7


def distances_to_goal(cells: jax.Array, size: int) -> jax.Array:
  """Shortest-path lengths to the goal over open cells, by W² rounds of
  relaxation (4-neighbour moves, walls impassable).

  Args:
    cells: int32[B, W*W] cell tokens (row-major).

  Returns:
    int32[B, W*W]: moves from each cell to the (first) goal; UNREACHABLE for
    walls, cells cut off from it, and every cell of a grid with no goal.
  """
  grid = cells.reshape(-1, size, size)
  passable = grid != WALL
  dist = jnp.where(grid == GOAL, 0, UNREACHABLE).astype(jnp.int32)
  big = jnp.full((grid.shape[0], 1, size), UNREACHABLE, jnp.int32)
  big_col = jnp.full((grid.shape[0], size, 1), UNREACHABLE, jnp.int32)

  def relax(_, dist):
    up = jnp.concatenate([big, dist[:, :-1]], axis=1)
    down = jnp.concatenate([dist[:, 1:], big], axis=1)
    left = jnp.concatenate([big_col, dist[:, :, :-1]], axis=2)
    right = jnp.concatenate([dist[:, :, 1:], big_col], axis=2)
    best = jnp.minimum(jnp.minimum(up, down), jnp.minimum(left, right)) + 1
    return jnp.where(passable, jnp.minimum(dist, best), UNREACHABLE)

  dist = jax.lax.fori_loop(0, size * size, relax, dist)
  return jnp.minimum(dist, UNREACHABLE).reshape(-1, size * size)


class MazeState(NamedTuple):
  """B episodes: cells int32[B, W*W], position int32[B] (cell index)."""
  cells: jax.Array
  position: jax.Array


@dataclasses.dataclass(frozen=True)
class MazeEnv(Environment):
  """The maze as a pure-JAX environment (see the module docstring)."""
  size: int
  max_turns: int
  action_len: int = ACTION_LEN
  observation_len: int = OBSERVATION_LEN

  def reset(self, spec: jax.Array) -> MazeState:
    """spec: int32[B, >= W²+1] written-task rows (level, cells, ...)."""
    cells = spec[:, 1:1 + self.size * self.size].astype(jnp.int32)
    return MazeState(cells, jnp.argmax(cells == START, axis=1).astype(
        jnp.int32))

  def view(self, cells: jax.Array, position: jax.Array) -> jax.Array:
    """int32[B, 6]: row, column and the four neighbours (off-grid: wall)."""
    w = self.size
    row, col = position // w, position % w
    neighbours = []
    for dr, dc in _STEPS:
      r, c = row + dr, col + dc
      inside = (r >= 0) & (r < w) & (c >= 0) & (c < w)
      index = jnp.clip(r, 0, w - 1) * w + jnp.clip(c, 0, w - 1)
      cell = jnp.take_along_axis(cells, index[:, None], axis=1)[:, 0]
      neighbours.append(jnp.where(inside, cell, WALL))
    return jnp.stack([FIRST_COORDINATE + row, FIRST_COORDINATE + w + col]
                     + neighbours, axis=1).astype(jnp.int32)

  def step(self, state: MazeState, action: jax.Array, action_mask: jax.Array
           ) -> EnvStep:
    w = self.size
    move = action[:, 0]
    readable = (action_mask[:, 0] & action_mask[:, 1] & (action[:, 1] == EOS)
                & (move >= UP) & (move <= RIGHT))
    if action.shape[1] > 2:
      readable &= ~jnp.any(action_mask[:, 2:], axis=1)
    steps = jnp.asarray(_STEPS, jnp.int32)[jnp.clip(move - UP, 0, 3)]
    row = state.position // w + steps[:, 0]
    col = state.position % w + steps[:, 1]
    inside = (row >= 0) & (row < w) & (col >= 0) & (col < w)
    target = jnp.clip(row, 0, w - 1) * w + jnp.clip(col, 0, w - 1)
    target_cell = jnp.take_along_axis(state.cells, target[:, None], axis=1)[:, 0]
    moves = readable & inside & (target_cell != WALL)
    position = jnp.where(moves, target, state.position)
    reached = moves & (target_cell == GOAL)
    status = jnp.where(~readable, BAD, jnp.where(
        ~moves, BUMP, jnp.where(reached, REACHED, MOVED)))
    observation = jnp.concatenate(
        [status[:, None].astype(jnp.int32), self.view(state.cells, position)],
        axis=1)
    batch = action.shape[0]
    return EnvStep(
        state=MazeState(state.cells, position), observation=observation,
        observation_mask=jnp.ones((batch, OBSERVATION_LEN), bool),
        reward=reached.astype(jnp.float32), done=reached, success=reached,
        invalid_action=~readable, error=jnp.zeros((batch,), bool))


@dataclasses.dataclass(frozen=True)
class MazeDomain(TaskDomain):
  """W×W mazes (see the module docstring).

  Attributes:
    size: W, the grid's side.
    max_turns: K, moves per episode.
    level_width: moves of shortest path per difficulty level.
    levels: number of difficulty levels; a maze whose shortest path is longer
      than level_width · levels moves is invalid.
    summary_signals: the simulator's prompt carries the agent's success rate
      on its seed (else always "?").
  """
  size: int = 5
  max_turns: int = 12
  level_width: int = 2
  levels: int = 5
  summary_signals: bool = False

  pad_id = PAD
  bos_id = BOS
  eos_id = EOS
  answer_len = 1

  def __post_init__(self):
    if not 2 <= self.size <= 16:
      raise ValueError(f"config.task.size={self.size} must be in 2..16.")
    if self.level_width < 1 or self.levels < 1:
      raise ValueError(f"config.task.level_width={self.level_width} and "
                       f"config.task.levels={self.levels} must be >= 1.")
    if self.max_turns < self.longest_path:
      raise ValueError(
          f"config.task.max_turns={self.max_turns} is below the longest valid "
          f"shortest path, level_width * levels = {self.longest_path}: some "
          "valid mazes could not be solved within the turn limit.")

  @classmethod
  def from_config(cls, config: Any) -> MazeDomain:
    return cls(size=int(config.size), max_turns=int(config.max_turns),
               level_width=int(config.level_width), levels=int(config.levels),
               summary_signals=bool(config.summary_signals))

  @staticmethod
  def check_config(config: Any) -> None:
    fields.integer(config, "task.size", low=2, high=16)
    fields.integer(config, "task.level_width", low=1)
    fields.integer(config, "task.levels", low=1)
    fields.integer(config, "task.max_turns",
                   low=config.task.level_width * config.task.levels)
    fields.boolean(config, "task.summary_signals")
    fields.integer(config, "data.num_train", low=1)
    fields.integer(config, "data.num_test_per_level", low=1)
    fields.choice(config, "episodes.reward", episodes_lib.EPISODE_REWARDS)
    fields.choice(config, "episodes.truncated", episodes_lib.TRUNCATED)
    fields.integer(config, "eval.samples", low=0)
    fields.level_weights(config, "task.levels")

  @property
  def longest_path(self) -> int:
    return self.level_width * self.levels

  @property
  def first_level(self) -> int:
    """The token id of level 1 (level k is first_level + k - 1)."""
    return FIRST_COORDINATE + 2 * self.size

  @property
  def first_rate(self) -> int:
    """The token id of success rate 0 (rate b/10 is first_rate + b; the
    unknown rate is first_rate + 11)."""
    return self.first_level + self.levels

  @property
  def vocab_size(self) -> int:
    return self.first_rate + RATE_BUCKETS + 1

  @property
  def max_difficulty(self) -> int:
    return self.levels

  @property
  def num_cells(self) -> int:
    return self.size * self.size

  @property
  def task_len(self) -> int:
    """Level, W² cells, EOS."""
    return self.num_cells + 2

  @property
  def simulator_prompt_len(self) -> int:
    return self.num_cells + 4

  @property
  def agent_prompt_len(self) -> int:
    return self.num_cells + 4 + OBSERVATION_LEN

  @property
  def environment(self) -> MazeEnv:
    return MazeEnv(size=self.size, max_turns=self.max_turns)

  def simulator_prompt(self, seed_tasks, success_rate=None):
    """`BOS level cells rate >` per seed: int32[M, W²+4] and its all-true
    mask. success_rate f32[M] (outside [0, 1] or None: unknown) is written
    with summary_signals only."""
    m = seed_tasks.shape[0]
    bucket = success_buckets(success_rate if self.summary_signals else None,
                             m)
    tokens = jnp.concatenate([
        jnp.full((m, 1), BOS, jnp.int32),
        seed_tasks[:, :1 + self.num_cells].astype(jnp.int32),
        (self.first_rate + bucket)[:, None],
        jnp.full((m, 1), SEP, jnp.int32)], axis=1)
    return tokens, jnp.ones_like(tokens, bool)

  def parse(self, simulator_tokens, simulator_mask) -> ParsedTasks:
    tokens = jnp.asarray(simulator_tokens, jnp.int32)
    mask = jnp.asarray(simulator_mask, bool)
    if tokens.ndim != 2 or tokens.shape[1] < self.task_len:
      raise ValueError(f"simulator_tokens must have shape [M, >= "
                       f"{self.task_len}], got {tuple(tokens.shape)}")
    m, n = self.num_cells, tokens.shape[0]
    plan, cells = tokens[:, 0], tokens[:, 1:m + 1]
    well_formed = ((plan >= self.first_level) & (plan < self.first_rate)
                   & jnp.all((cells >= OPEN) & (cells <= GOAL), axis=1)
                   & jnp.all(mask[:, :m + 2], axis=1)
                   & (tokens[:, m + 1] == EOS))
    one_each = ((jnp.sum(cells == START, axis=1) == 1)
                & (jnp.sum(cells == GOAL, axis=1) == 1))
    start = jnp.argmax(cells == START, axis=1).astype(jnp.int32)
    goal = jnp.argmax(cells == GOAL, axis=1).astype(jnp.int32)
    dist = jnp.take_along_axis(distances_to_goal(cells, self.size),
                               start[:, None], axis=1)[:, 0]
    valid = well_formed & one_each & (dist <= self.longest_path)
    difficulty = jnp.where(valid, -(-dist // self.level_width), 0).astype(
        jnp.int32)
    task = jnp.where(valid[:, None], self.written_rows(cells, difficulty), PAD)
    w = self.size
    env = self.environment
    prompt = jnp.concatenate([
        jnp.full((n, 1), BOS, jnp.int32), jnp.clip(cells, 0, self.vocab_size - 1),
        jnp.full((n, 1), SEP, jnp.int32),
        (FIRST_COORDINATE + goal // w)[:, None],
        (FIRST_COORDINATE + w + goal % w)[:, None],
        jnp.full((n, 1), SEP, jnp.int32), env.view(cells, start)], axis=1)
    return ParsedTasks(
        prompt=prompt.astype(jnp.int32), prompt_mask=jnp.ones_like(prompt, bool),
        reference=jnp.full((n, 1), EOS, jnp.int32),
        reference_mask=jnp.ones((n, 1), bool), valid=valid,
        difficulty=difficulty, task=task.astype(jnp.int32))

  def verify(self, response, response_mask, reference, reference_mask):
    raise NotImplementedError(
        "The maze domain is episodic: its environment scores the agent "
        "(genenv_jax.episodes.rollout_episodes), not verify.")

  def best_moves(self, dist: jax.Array, position: jax.Array) -> jax.Array:
    """int32[B] a move along a shortest path from position (UP for cells
    with none), given dist int32[B, W*W] (`distances_to_goal`)."""
    here = jnp.take_along_axis(dist, position[:, None], axis=1)[:, 0]
    w = self.size
    choice = jnp.full(position.shape, UP, jnp.int32)
    found = jnp.zeros(position.shape, bool)
    for move, (dr, dc) in zip(MOVES, _STEPS):
      r, c = position // w + dr, position % w + dc
      inside = (r >= 0) & (r < w) & (c >= 0) & (c < w)
      index = jnp.clip(r, 0, w - 1) * w + jnp.clip(c, 0, w - 1)
      there = jnp.take_along_axis(dist, index[:, None], axis=1)[:, 0]
      better = inside & (there == here - 1) & ~found
      choice = jnp.where(better, move, choice)
      found |= better
    return choice

  def agent_demonstration(self, parsed: ParsedTasks
                          ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Shortest-path episodes in the rollout's body layout: (tokens
    int32[M, W], attend bool[M, W], loss mask bool[M, W]) for the agent's
    warm start (valid tasks only: the path fits the turn limit)."""
    env = self.environment
    state = env.reset(parsed.task)
    n = parsed.task.shape[0]
    done = ~parsed.valid
    dist = distances_to_goal(state.cells, self.size)
    acts, act_masks, observations, observation_masks = [], [], [], []
    for _ in range(env.max_turns):
      live = ~done
      action = jnp.stack([self.best_moves(dist, state.position),
                          jnp.full((n,), EOS, jnp.int32)], axis=1)
      action_mask = jnp.broadcast_to(live[:, None], action.shape)
      stepped = env.step(state, action, action_mask)
      state = jax.tree.map(
          lambda new, old: jnp.where(
              live.reshape(live.shape + (1,) * (new.ndim - 1)), new, old),
          stepped.state, state)
      done = done | stepped.done
      obs, obs_mask = episodes_lib.right_align(
          stepped.observation, stepped.observation_mask & ~done[:, None], PAD)
      acts.append(jnp.where(action_mask, action, PAD))
      act_masks.append(action_mask)
      observations.append(obs)
      observation_masks.append(obs_mask)
    stack = lambda xs: jnp.stack(xs[:-1])
    tokens = episodes_lib.assemble_body(stack(acts), stack(observations),
                                        acts[-1])
    attend = episodes_lib.assemble_body(stack(act_masks),
                                        stack(observation_masks),
                                        act_masks[-1])
    loss = episodes_lib.assemble_body(
        stack(act_masks), jnp.zeros_like(stack(observation_masks)),
        act_masks[-1])
    return tokens, attend, loss

  def written_rows(self, cells: jax.Array, level: jax.Array) -> jax.Array:
    """int32[N, W²+2] written-task rows `level cells EOS` of cells int[N, W²]
    and levels int[N] (1..levels)."""
    cells = jnp.asarray(cells, jnp.int32)
    level = jnp.clip(jnp.asarray(level, jnp.int32), 1, self.levels)
    return jnp.concatenate([(self.first_level + level - 1)[:, None], cells,
                            jnp.full((cells.shape[0], 1), EOS, jnp.int32)],
                           axis=1)

  def decode(self, tokens) -> list[str]:
    rows = np.atleast_2d(np.asarray(tokens))
    w = self.size

    def word(t: int) -> str:
      if t in _TEXT:
        return _TEXT[t]
      if FIRST_COORDINATE <= t < FIRST_COORDINATE + w:
        return f"r{t - FIRST_COORDINATE}"
      if FIRST_COORDINATE + w <= t < self.first_level:
        return f"c{t - FIRST_COORDINATE - w}"
      if self.first_level <= t < self.first_rate:
        return f"L{t - self.first_level + 1}"
      if self.first_rate <= t < self.first_rate + RATE_BUCKETS:
        return f"p{(t - self.first_rate) / 10:.1f}"
      if t == self.first_rate + RATE_BUCKETS:
        return "p?"
      return f"<{t}>"
    return [" ".join(word(int(t)) for t in row if t != PAD) for row in rows]

  def encode_tasks(self, grids, plan: int = 1) -> np.ndarray:
    """Written-task rows int32[N, W²+2] from grids given as lists of W
    strings over '.#SG', each planned as level `plan` (parse rewrites the
    plan of a valid grid to its level)."""
    lookup = {".": OPEN, "#": WALL, "S": START, "G": GOAL}
    rows = []
    for grid in grids:
      if len(grid) != self.size or any(len(r) != self.size for r in grid):
        raise ValueError(f"A grid must be {self.size} strings of {self.size} "
                         f"cells; got {grid!r}.")
      rows.append([self.first_level + plan - 1]
                  + [lookup[ch] for r in grid for ch in r] + [EOS])
    return np.asarray(rows, np.int32)
