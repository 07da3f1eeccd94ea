"""Preemption: SIGTERM (a Cloud TPU VM's maintenance or Spot preemption
notice) or Ctrl-C stops a run at a step every process agrees on, saved.

`Watch` is entered for the run. In one process it turns SIGTERM and SIGINT
into a flag; in a multi-process job SIGTERM is left to JAX's preemption
service (jax.distributed's coordination service: the process that receives it
tells the others, and together they pick the call after the furthest one any
of them has made) and SIGINT is passed to it as a SIGTERM. The driver calls
`reached()` at each point where the run's state can be saved (each stage-1
step, each stage-2 step); every process makes the same calls, so all answer
True at the same one, at most one step after the notice. There the driver saves that step and raises
`Preempted`, which `train.main` turns into exit status `EXIT_STATUS`:
rerunning the same command resumes from the saved step.

A second Ctrl-C in one process stops it at once (KeyboardInterrupt).
"""

from __future__ import annotations

import signal
import threading

import jax
from jax.experimental import multihost_utils

# Exit status of a run that stopped on a preemption notice after saving
# (sysexits.h's EX_TEMPFAIL: try again).
EXIT_STATUS = 75


class Preempted(Exception):
  """The run stopped on a preemption notice; `where` names the saved step."""

  def __init__(self, where: str):
    super().__init__(f"Preempted: saved {where}. Rerun the same command to "
                     f"resume from it (exit status {EXIT_STATUS}).")
    self.where = where


class Watch:
  """`with Watch():` listens for a preemption notice during a run, and makes
  itself the one `reached()` asks.

  Signal handlers can only be set from the main thread; elsewhere the watch
  only answers what JAX's preemption service says.
  """

  def __init__(self):
    self.notified = False
    self._multi_process = jax.process_count() > 1
    self._calls = 0
    self._previous: dict[int, object] = {}
    self._outer: Watch | None = None

  def __enter__(self) -> "Watch":
    global _active
    self._outer, _active = _active, self
    if threading.current_thread() is threading.main_thread():
      signals = ((signal.SIGINT,) if self._multi_process
                 else (signal.SIGTERM, signal.SIGINT))
      for signum in signals:
        self._previous[signum] = signal.signal(signum, self._on_signal)
    return self

  def __exit__(self, *exc) -> None:
    global _active
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)
    self._previous = {}
    _active = self._outer

  def _on_signal(self, signum, frame) -> None:
    del frame
    if self._multi_process:
      # JAX's preemption service listens for SIGTERM; Python's handler for
      # SIGINT runs instead of it, so pass the notice on.
      signal.raise_signal(signal.SIGTERM)
      return
    if self.notified and signum == signal.SIGINT:
      raise KeyboardInterrupt
    self.notified = True
    print(f"Received {signal.Signals(signum).name}: saving at the next "
          "checkpointable step (Ctrl-C again to stop at once).", flush=True)

  def reached(self) -> bool:
    """Whether to save now and stop. Every process of a job calls it at the
    same points of the run (an agreement between them in a multi-process
    job, cheap until a notice arrives)."""
    self._calls += 1
    if self._multi_process:
      return multihost_utils.reached_preemption_sync_point(self._calls)
    return self.notified


# The watch of the run in progress in this process (None outside a run).
_active: Watch | None = None


def reached() -> bool:
  """`Watch.reached` of the run in progress; False outside a run."""
  return _active is not None and _active.reached()
