"""What a maze simulator planned and what it drew: the kept generations in a
checkpoint's D_env, by seed level, plan and the grid's own level.

  python -m train.tools.maze_plans --config=configs/maze.py --workdir=DIR \
      [--step=N]

Each kept generation (its prompt holds the seed's row, its text the plan token
and the grid) is parsed again; one JSON line per (seed level, plan) pair and one
per (plan, level) pair, with how many kept generations have it:

  {"step": 120, "seed": 3, "plan": 4, "count": 132}
  {"step": 120, "plan": 4, "level": 3, "count": 97}

D_env holds only the generations the simulator update kept (config.curriculum.
keep), so these are the mazes it learned from, not all it wrote.
"""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np

from genenv_jax.domains import get_domain
from genenv_jax.domains.maze import domain as maze
from train.tools import run_checkpoints


def plan_counts(domain: maze.MazeDomain, generations: dict[str, np.ndarray]
                ) -> tuple[collections.Counter, collections.Counter]:
  """(Counter of (seed level, plan), Counter of (plan, the grid's level; 0 if
  invalid)) over the filled rows of a D_env {"prompt": int32[C, Pe], "task":
  int32[C, L], "task_mask": bool[C, L], "size"}."""
  n = int(generations["size"])
  prompt = generations["prompt"][:n]
  text = generations["task"][:n, :domain.task_len]
  mask = generations["task_mask"][:n, :domain.task_len]
  parsed = jax.jit(domain.parse)(jnp.asarray(text), jnp.asarray(mask))
  seed = prompt[:, 1] - domain.first_level + 1  # after BOS: the seed's level
  plan = text[:, 0] - domain.first_level + 1
  level = np.asarray(parsed.difficulty)
  return (collections.Counter(zip(seed.tolist(), plan.tolist())),
          collections.Counter(zip(plan.tolist(), level.tolist())))


def run(config, workdir: str, step: int | None) -> list[dict]:
  """The records of checkpoint `step` (None: latest)."""
  domain = get_domain(config.task)
  if not isinstance(domain, maze.MazeDomain):
    raise ValueError(f"config.task.name={config.task.name!r}: maze_plans "
                     "reads maze generations only.")
  step, generations = run_checkpoints.generation_pool(workdir, step)
  if not int(generations["size"]):
    raise ValueError(f"{workdir} step {step}: D_env holds no generation yet.")
  by_seed, by_plan = plan_counts(domain, generations)
  records = ([dict(step=step, seed=s, plan=p, count=c)
              for (s, p), c in sorted(by_seed.items())]
             + [dict(step=step, plan=p, level=l, count=c)
                for (p, l), c in sorted(by_plan.items())])
  return records


def main() -> None:
  run_checkpoints.checkpoint_tool_main(run, "D_env")


if __name__ == "__main__":
  main()
