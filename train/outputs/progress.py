"""Console progress of a stage: steps done, rate and time left, every few seconds."""

from __future__ import annotations

import time
from typing import Callable

import jax


def say(line: str) -> None:
  """Prints a console line from process 0 only (every host runs the driver)."""
  if jax.process_index() == 0:
    print(line, flush=True)


def _duration(seconds: float) -> str:
  seconds = int(round(seconds))
  if seconds >= 3600:
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
  if seconds >= 60:
    return f"{seconds // 60}m{seconds % 60:02d}s"
  return f"{seconds}s"


class Progress:
  """Prints `label step k/n (p%)  r steps/s  t left` for a loop of n steps.

  `update(step)` prints when `every_secs` have passed since the last line (or
  when forced, or at the last step); the rate counts the steps done since the
  first update, so compilation before it does not skew the time left.
  """

  def __init__(self, label: str, total: int, every_secs: float = 10.0,
               clock: Callable[[], float] = time.monotonic,
               write: Callable[[str], None] | None = None):
    self.label, self.total, self.every_secs = label, total, every_secs
    self._clock = clock
    self._write = write or say
    self._first_step = self._first_time = self._last_line = None

  def update(self, step: int, extra: str = "", force: bool = False) -> bool:
    """Records that `step` (1-based) is done; returns whether it printed."""
    now = self._clock()
    if self._first_time is None:
      self._first_step, self._first_time, self._last_line = step, now, now
    due = now - self._last_line >= self.every_secs
    if not (force or due or step >= self.total):
      return False
    self._last_line = now
    line = f"{self.label} step {step}/{self.total} ({100 * step // max(self.total, 1)}%)"
    elapsed, done = now - self._first_time, step - self._first_step
    if done > 0 and elapsed > 0:
      rate = done / elapsed
      line += f"  {rate:.2f} steps/s  {_duration((self.total - step) / rate)} left"
    self._write(line + (f"  {extra}" if extra else ""))
    return True
