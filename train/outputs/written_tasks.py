"""What the simulator wrote, over a run: a sample of its valid tasks at each
logged step, read from D_train, kept in `written_tasks.jsonl` and shown in the
run report.

Each record: {"step": N, "tasks": [{"level": d, "success": p, "text": "..."}]},
the newest valid generated tasks added to D_train up to that step (at most
`per_log`; a task's success is the agent's latest success rate on it, -1 when
not attempted yet). The file is appended by the chief only; on resume records
past the restored step are dropped with the metrics (`truncate`).
"""

from __future__ import annotations

import json

from etils import epath
import jax
import numpy as np

from genenv_jax.domains.base import TaskDomain

FILE = "written_tasks.jsonl"


def newest_rows(pool, count: int) -> np.ndarray:
  """Indices int[k] (newest last, k <= count) of the D_train rows most
  recently written by generation: those before the cursor in the ring
  [base_size, capacity), no more than were ever added."""
  cursor, added = (int(x) for x in jax.device_get((pool.cursor, pool.total_added)))
  ring = pool.capacity - pool.base_size
  k = min(count, added, ring)
  return pool.base_size + (cursor - pool.base_size - np.arange(k, 0, -1)) % ring


def sample(domain: TaskDomain, pool, count: int) -> list[dict]:
  """The `count` newest generated rows of D_train as {"level", "success",
  "text"} (the row decoded, its EOS and pad dropped)."""
  rows = newest_rows(pool, count)
  if not len(rows):
    return []
  tasks, levels, success = jax.device_get(
      (pool.tasks[rows], pool.difficulty[rows], pool.success[rows]))
  texts = domain.decode(np.where(tasks == domain.eos_id, domain.pad_id, tasks))
  return [{"level": int(d), "success": round(float(p), 3), "text": t.strip()}
          for d, p, t in zip(levels, success, texts)]


def _write(workdir: str, records: list[dict]) -> None:
  """The file holding exactly `records` (written whole: the file is small,
  and a gs:// workdir has no append)."""
  (epath.Path(workdir) / FILE).write_text(
      "".join(json.dumps(r) + "\n" for r in records))


def read(workdir: str) -> list[dict]:
  """The workdir's records, in step order ([] without a file)."""
  path = epath.Path(workdir) / FILE
  if not path.exists():
    return []
  records = [json.loads(line) for line in path.read_text().splitlines()
             if line.strip()]
  return sorted(records, key=lambda r: r["step"])


def append(workdir: str, step: int, tasks: list[dict]) -> None:
  """Adds one step's record to the workdir's file."""
  _write(workdir, read(workdir) + [{"step": int(step), "tasks": tasks}])


def truncate(workdir: str, step: int) -> None:
  """Drops the records past `step` (a run resumed from that checkpoint;
  -1: all of them)."""
  if (epath.Path(workdir) / FILE).exists():
    _write(workdir, [r for r in read(workdir) if r["step"] <= step])


def markdown(records: list[dict], shown: int = 3) -> str:
  """The first, middle and last records that hold tasks as a Markdown list,
  per level ("" when none does)."""
  records = [r for r in records if r["tasks"]]
  if not records:
    return ""
  picks = sorted({0, len(records) // 2, len(records) - 1})
  lines = ["# What the simulator wrote", "",
           "The newest valid tasks it had written by each step shown, with "
           "the agent's latest success on each (-1: not attempted yet).", ""]
  for index in picks:
    record = records[index]
    lines.append(f"## Step {record['step']}")
    by_level: dict[int, list[dict]] = {}
    for task in record["tasks"]:
      by_level.setdefault(task["level"], []).append(task)
    for level in sorted(by_level):
      for task in by_level[level][-shown:]:
        lines.append(f"- level {level}, success {task['success']:.2f}: "
                     f"`{task['text']}`")
    lines.append("")
  return "\n".join(lines)
