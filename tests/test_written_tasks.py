"""The run's log of what the simulator wrote: the newest generated rows of
D_train (across the ring's wrap), decoded, kept per logged step, truncated on
resume, and shown first / middle / last in the report's Markdown."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from genenv_jax import pool as pool_lib
from train.outputs import written_tasks


class _Digits:
  """A domain stand-in whose rows are digits: pad 0, EOS 1."""
  pad_id, eos_id = 0, 1

  def decode(self, rows):
    return ["".join(str(t - 2) for t in row if t > 1) for row in np.atleast_2d(rows)]


def _pool_with(added: list[int], capacity: int = 6):
  """A pool of 2 base rows and the rows `added` (token t + 2 each, one a
  step), each with success t / 10."""
  pool = pool_lib.create_task_pool(np.zeros((2, 3), np.int32), np.ones(2, np.int32),
                                   capacity)
  for t in added:
    pool = pool_lib.add_tasks(pool, jnp.asarray([[t + 2, 1, 0]], jnp.int32),
                              jnp.asarray([t % 3 + 1]), jnp.asarray([True]),
                              jnp.asarray([t / 10]))
  return pool


def test_the_newest_generated_rows_are_read_across_the_rings_wrap():
  assert written_tasks.sample(_Digits(), _pool_with([]), 3) == []
  pool = _pool_with([1, 2])  # fewer than asked: both, newest last
  assert [t["text"] for t in written_tasks.sample(_Digits(), pool, 3)] == ["1", "2"]
  pool = _pool_with([1, 2, 3, 4, 5, 6])  # ring of 4: 5 and 6 overwrote 1 and 2
  sample = written_tasks.sample(_Digits(), pool, 3)
  assert [t["text"] for t in sample] == ["4", "5", "6"]
  assert [t["level"] for t in sample] == [2, 3, 1]
  assert [t["success"] for t in sample] == [0.4, 0.5, 0.6]


def test_records_append_truncate_and_render(tmp_path):
  workdir = str(tmp_path)
  for step in (5, 10, 15, 20):
    written_tasks.append(workdir, step, [{"level": 1, "success": 0.5,
                                          "text": f"What is {step} + 1?"}])
  written_tasks.truncate(workdir, 12)  # resumed from checkpoint 12
  assert [r["step"] for r in written_tasks.read(workdir)] == [5, 10]
  written_tasks.append(workdir, 15, [{"level": 2, "success": -1.0,
                                      "text": "What is 6 × 7?"}])
  text = written_tasks.markdown(written_tasks.read(workdir))
  assert "## Step 5" in text and "## Step 10" in text and "## Step 15" in text
  assert "- level 2, success -1.00: `What is 6 × 7?`" in text
  written_tasks.append(workdir, 20, [])  # nothing valid written: not shown
  assert written_tasks.markdown(written_tasks.read(workdir)) == text
  written_tasks.truncate(workdir, -1)
  assert written_tasks.read(workdir) == [] and written_tasks.markdown([]) == ""
