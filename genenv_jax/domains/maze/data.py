"""Seed mazes for the maze domain: random grids with a start, a goal and a path.

`maze_splits` draws grids (walls with a random density per grid, start and
goal on distinct open cells), keeps those whose shortest path fits the
domain's levels, and fills equal quotas per level: a train split of
`num_train` mazes and a held-out test split of `test_per_level` per level,
with no grid in both. Deterministic in `seed`; nothing is downloaded.
Difficulty is computed here with numpy and agrees with the domain's JAX
parser (tests/test_maze.py checks both on every row).
"""

from __future__ import annotations

import numpy as np

from genenv_jax.domains.maze import domain as maze

_BATCH = 4096


def shortest_paths(grids: np.ndarray) -> np.ndarray:
  """int64[B] moves from start to goal (maze.UNREACHABLE if none) of
  int[B, W, W] cell grids with one start and one goal each."""
  size = grids.shape[1]
  dist = np.where(grids == maze.GOAL, 0, maze.UNREACHABLE)
  passable = grids != maze.WALL
  for _ in range(size * size):
    best = np.full_like(dist, maze.UNREACHABLE)
    best[:, 1:] = np.minimum(best[:, 1:], dist[:, :-1])
    best[:, :-1] = np.minimum(best[:, :-1], dist[:, 1:])
    best[:, :, 1:] = np.minimum(best[:, :, 1:], dist[:, :, :-1])
    best[:, :, :-1] = np.minimum(best[:, :, :-1], dist[:, :, 1:])
    new = np.where(passable, np.minimum(dist, best + 1), maze.UNREACHABLE)
    if np.array_equal(new, dist):
      break
    dist = new
  start = (grids == maze.START).reshape(len(grids), -1).argmax(axis=1)
  return np.minimum(dist.reshape(len(grids), -1)[np.arange(len(grids)), start],
                    maze.UNREACHABLE)


def random_grids(rng: np.random.Generator, count: int, size: int
                 ) -> np.ndarray:
  """int32[count, W, W] grids: walls at a density drawn per grid from
  [0, 0.5), start and goal on two distinct cells (made open)."""
  density = rng.uniform(0.0, 0.5, (count, 1, 1))
  grids = np.where(rng.uniform(size=(count, size, size)) < density,
                   maze.WALL, maze.OPEN).astype(np.int32)
  cells = size * size
  start = rng.integers(0, cells, count)
  goal = (start + rng.integers(1, cells, count)) % cells
  flat = grids.reshape(count, cells)
  flat[np.arange(count), start] = maze.START
  flat[np.arange(count), goal] = maze.GOAL
  return grids


def maze_splits(domain: maze.MazeDomain, seed: int, num_train: int,
                test_per_level: int) -> tuple[dict, dict]:
  """(train, test) as {"task": int32[n, W²+2] written-task rows,
  "difficulty": int32[n]}, levels in equal shares (train counts differ by at
  most one)."""
  rng = np.random.default_rng(seed)
  levels = domain.levels
  train_quota = np.full(levels, num_train // levels)
  train_quota[:num_train % levels] += 1
  quotas = {"test": np.full(levels, test_per_level), "train": train_quota}
  found = {name: [[] for _ in range(levels)] for name in quotas}
  seen: set[bytes] = set()
  while any(len(found[n][l]) < quotas[n][l] for n in quotas
            for l in range(levels)):
    grids = random_grids(rng, _BATCH, domain.size)
    dist = shortest_paths(grids)
    level = -(-dist // domain.level_width)
    for grid, lv in zip(grids, level):
      if not 1 <= lv <= levels:
        continue
      key = grid.tobytes()
      if key in seen:
        continue
      for name in ("test", "train"):  # test first: held-out sets fill early
        if len(found[name][lv - 1]) < quotas[name][lv - 1]:
          found[name][lv - 1].append(grid)
          seen.add(key)
          break
  out = []
  for name in ("train", "test"):
    grids = np.stack([g for per_level in found[name] for g in per_level])
    difficulty = np.concatenate([np.full(len(per_level), lv + 1, np.int32)
                                 for lv, per_level in enumerate(found[name])])
    order = rng.permutation(len(grids))
    rows = np.asarray(domain.written_rows(grids.reshape(len(grids), -1),
                                          difficulty))
    out.append({"task": rows[order].astype(np.int32),
                "difficulty": difficulty[order]})
  return out[0], out[1]


def edited_variations(domain: maze.MazeDomain, seed_rows: np.ndarray,
                      wanted: np.ndarray, rng: np.random.Generator,
                      tries: int = 64) -> np.ndarray:
  """Variations of seed mazes: each seed's grid with one to three cells
  changed (a wall opened or an open cell walled) and, one time in four, its
  goal moved to another open cell; of `tries` such edits, one whose level is
  the wanted one, else the valid edit nearest it (the seed itself if no edit
  was valid).

  Args:
    seed_rows: int32[n, W²+2] written-task rows.
    wanted: int[n] levels (1..levels).

  Returns:
    int32[n, W²+2] written-task rows of the variations.
  """
  n, cells = len(seed_rows), domain.num_cells
  seeds = seed_rows[:, 1:1 + cells].astype(np.int32)
  wanted = np.asarray(wanted)
  best = seeds.copy()
  best_level = _levels(domain, seeds)
  never = np.iinfo(np.int32).max  # no valid edit found yet: the seed stands
  best_gap = np.full(n, never)
  for _ in range(tries):
    todo = np.flatnonzero(best_gap > 0)
    if not todo.size:
      break
    grids = seeds[todo].copy()
    at = np.arange(todo.size)
    for edit in range(3):
      cell = rng.integers(0, cells, todo.size)
      apply = (edit == 0) | (rng.uniform(size=todo.size) < 0.5)
      old = grids[at, cell]
      grids[at, cell] = np.where(apply & (old == maze.OPEN), maze.WALL,
                                 np.where(apply & (old == maze.WALL),
                                          maze.OPEN, old))
    cell = rng.integers(0, cells, todo.size)
    move = (rng.uniform(size=todo.size) < 0.25) & (grids[at, cell] == maze.OPEN)
    goal = (grids == maze.GOAL).argmax(axis=1)
    grids[at[move], goal[move]] = maze.OPEN
    grids[at[move], cell[move]] = maze.GOAL
    level = _levels(domain, grids)
    gap = np.where(level > 0, np.abs(level - wanted[todo]), never)
    better = gap < best_gap[todo]
    best[todo[better]] = grids[better]
    best_level[todo[better]] = level[better]
    best_gap[todo[better]] = gap[better]
  return np.asarray(domain.written_rows(best, best_level))


def _levels(domain: maze.MazeDomain, cells: np.ndarray) -> np.ndarray:
  """int[n] levels of flat grids int[n, W²] with one start and one goal (0:
  no path within the levels)."""
  dist = shortest_paths(cells.reshape(-1, domain.size, domain.size))
  level = -(-dist // domain.level_width)
  return np.where(dist <= domain.longest_path, level, 0)


def seed_splits(domain: maze.MazeDomain, config, data_dir: str
                ) -> tuple[dict, dict]:
  """The run's seed data (the registry's `seed_splits`): random grids in
  equal shares per level (`maze_splits`); nothing is downloaded, `data_dir`
  is unused."""
  del data_dir
  return maze_splits(domain, config.data.seed, config.data.num_train,
                     config.data.num_test_per_level)
