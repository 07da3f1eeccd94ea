"""Stopping a run whose updates keep going non-finite.

The co-evolution step and the warm-start skip an update whose loss or
gradient norm is not finite (parameters and optimiser state unchanged) and
count it. `SkippedUpdates` adds those counts up on the host and raises
`NonFiniteUpdateError`, naming the step and the metric, once one of them
passes `config.max_skipped_updates`. The driver checks it before every
checkpoint save, so a diverged state is never saved.
"""

from __future__ import annotations

from typing import Mapping

import jax
import numpy as np

# The step metrics that count skipped updates: per step, the agent's skipped
# minibatch updates and whether the simulator's update was skipped.
STEP_METRICS = ("agent/skipped_updates", "env_update/skipped_updates")


class NonFiniteUpdateError(FloatingPointError):
  """More updates were skipped as non-finite than the config allows."""


class SkippedUpdates:
  """Totals of skipped updates per metric, counted over this process's part
  of the run (a resumed run counts from its restored step).

  `add` keeps a step's counts (device scalars; no wait for the step);
  `check` fetches them and raises once a total passes `limit`.
  """

  def __init__(self, limit: int, names=STEP_METRICS,
               field: str = "config.max_skipped_updates"):
    self.limit = limit
    self.names = names
    self.field = field
    self.totals = {name: 0 for name in names}
    self._pending: list[tuple[int, dict]] = []

  def add(self, step: int, metrics: Mapping[str, jax.Array]) -> None:
    self._pending.append(
        (step, {n: metrics[n] for n in self.names if n in metrics}))

  def check(self) -> None:
    """Raises NonFiniteUpdateError at the first step where a total passes
    the limit."""
    pending, self._pending = jax.device_get(self._pending), []
    for step, counts in pending:
      for name, count in counts.items():
        # A step metric is a (sum, count) ratio whose sum is the skip count.
        count = np.asarray(count).reshape(-1)[0]
        self.totals[name] += int(round(float(count)))
        if self.totals[name] > self.limit:
          raise NonFiniteUpdateError(
              f"Step {step}: {name} counts {self.totals[name]} updates "
              "skipped because their loss or gradient norm was not finite, "
              f"more than {self.field}={self.limit}. The run stops here "
              "without saving a checkpoint; lower the learning rate or "
              "resume from the last checkpoint with other settings.")
