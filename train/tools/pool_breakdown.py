"""What the agent was trained on: the generated tasks in a checkpoint's agent
pool D_train, per difficulty level (and operand layout, for arithmetic).

  python -m train.tools.pool_breakdown --config=configs/default.py --workdir=DIR \
      [--step=N]

Reads D_train from checkpoint `--step` (default: the latest) and prints one
JSON line for all its generated rows, one per level and one per layout within
a level (the base data is left out; once more tasks were generated than the
pool has room for, these are the latest ones):

  tasks: how many rows; share: their fraction of the generated rows;
  success: mean of each row's success rate at the agent's latest attempts at
  it (G attempts); mixed: fraction of rows whose latest attempts disagreed
  (0 < success < 1), which under the exact reward are the only rows whose
  GRPO advantages were nonzero.

Read beside `train.tools.agent_breakdown`: a level's held-out accuracy can only
follow the training tasks if they cover its layouts. The per-seed success rate
(config.curriculum.per_seed) can meet α on average with a mix of tasks the
agent always solves and tasks it almost never does; this shows that mix.
"""

from __future__ import annotations

import os

import numpy as np

from genenv_jax import domains
from genenv_jax import pool as pool_lib
from genenv_jax.domains import ArithmeticDomain, get_domain
from train import build
from train.tools import run_checkpoints


def generated_rows(config, domain, workdir: str, pool: dict[str, np.ndarray]
                   ) -> dict[str, np.ndarray]:
  """The generated rows of a checkpoint's D_train: {"task": int32[n, L],
  "difficulty": int32[n], "success": f32[n]}, rows [base_size, size)."""
  data_dir = config.data.tfds_dir or os.path.join(workdir, "tfds")
  train, _ = domains.seed_splits(config, domain, data_dir)
  base_size = build.base_row_indices(config, train["difficulty"]).size
  rows = slice(base_size, int(pool["size"]))
  return {"task": pool["tasks"][rows], "difficulty": pool["difficulty"][rows],
          "success": pool["success"][rows]}


def breakdown(domain, rows: dict[str, np.ndarray]) -> list[dict]:
  """One record over all rows (level and layout "all"), one per level
  (layout "all") and, for arithmetic, one per operand layout within a level:
  tasks, share, success, mixed (see the module doc)."""
  total = len(rows["task"])
  if not total:
    raise ValueError("The pool holds no generated task yet (step 0, or no "
                     "valid generation): nothing to break down.")
  # Every generated row is attempted the step it is written; a row's success
  # is unknown only before any attempt.
  known = rows["success"] != pool_lib.UNKNOWN_SUCCESS
  layout = None
  if isinstance(domain, ArithmeticDomain):
    layout = np.array([f"{a}+{b}"
                       for a, b in domain.operand_digits(rows["task"])])
  groups = [("all", "all", np.ones(total, bool))]
  for level in sorted(int(d) for d in np.unique(rows["difficulty"])):
    at_level = rows["difficulty"] == level
    groups.append((level, "all", at_level))
    if layout is not None:
      groups += [(level, name, at_level & (layout == name))
                 for name in sorted(set(layout[at_level]))]
  records = []
  for level, name, chosen in groups:
    success = rows["success"][chosen & known]
    records.append(dict(
        level=level, layout=name, tasks=int(chosen.sum()),
        share=round(float(chosen.sum() / total), 4),
        success=round(float(success.mean()), 4) if success.size else None,
        mixed=(round(float(np.mean((success > 0) & (success < 1))), 4)
               if success.size else None)))
  return records


def run(config, workdir: str, step: int | None) -> list[dict]:
  """The records of checkpoint `step` (None: latest)."""
  domain = get_domain(config.task)
  step, pool = run_checkpoints.task_pool(workdir, step)
  records = [dict(step=step, **r) for r in
             breakdown(domain, generated_rows(config, domain, workdir, pool))]
  return records


def main() -> None:
  run_checkpoints.checkpoint_tool_main(run, "pool")


if __name__ == "__main__":
  main()
