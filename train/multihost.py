"""What the processes of one multi-process job agree on outside the step."""

from __future__ import annotations

import re
import sys
from typing import Callable, TypeVar

import jax
from jax._src import distributed  # the coordination service's client

T = TypeVar("T")

# How long a process waits at a barrier for the others (preparing a large
# dataset can take a while); train.main's --barrier_timeout_s sets it.
BARRIER_TIMEOUT_MS = 3_600_000
# How long a process that stopped on an error waits for the job's other
# processes at the failure barrier (`failure_report`) before it names those
# that did not come as lost.
FAILURE_BARRIER_S = 30


def barrier(name: str) -> None:
  """Waits until every process of the job reaches the barrier `name`.

  Through jax.distributed's coordination service rather than a collective
  over the devices: XLA:CPU's gloo collectives give up after 30 s when a
  process arrives that much later.
  """
  distributed.global_state.client.wait_at_barrier(name, BARRIER_TIMEOUT_MS)


def chief_first(fn: Callable[[], T], name: str) -> T:
  """fn() on process 0, then on the others once it has returned there.

  For work that writes shared files the first time and reads them after
  (the seed datasets in a shared workdir): process 0 writes them, the others
  wait at a `barrier` named `name` and then only read.
  """
  if jax.process_count() == 1:
    return fn()
  if jax.process_index() == 0:
    out = fn()
    barrier(name)
    return out
  barrier(name)
  return fn()


def unresponsive_processes(timeout_s: float | None = None) -> list[int]:
  """The processes that did not reach the failure barrier within
  `timeout_s` (default FAILURE_BARRIER_S). Every process that stops on an
  error calls it, so when a collective fails for all because one process
  died, the survivors meet there and the dead one is missing. [0] when the
  coordination service, which runs in process 0, cannot be reached.

  On a pod the survivors of a lost host do not get here (their collectives
  over the chips' interconnect wait instead of failing): there the
  coordination service declares a process silent for --heartbeat_timeout_s
  lost, and JAX ends every other one with its own message naming it ("The
  following tasks are unhealthy (stopped sending heartbeats): 1").
  """
  timeout_s = FAILURE_BARRIER_S if timeout_s is None else timeout_s
  try:
    distributed.global_state.client.wait_at_barrier(
        "genenv_failure", int(timeout_s * 1000))
  except Exception as e:  # pylint: disable=broad-except
    message = str(e)
    missing = re.search(r"timed out task names:\s*([\d\s,]+)", message)
    if "Barrier timed out" in message and missing:
      return sorted(int(i) for i in re.findall(r"\d+", missing.group(1)))
    return [0]
  return []


def failure_report() -> str:
  """A line for a process that stopped on an error in a multi-process job:
  which processes did not answer (`unresponsive_processes`), and how to
  resume."""
  me, count = jax.process_index(), jax.process_count()
  print(f"Process {me} of {count} stopped on the error above; waiting up to "
        f"{FAILURE_BARRIER_S:.0f} s for the job's other processes to report.",
        file=sys.stderr, flush=True)
  lost = [p for p in unresponsive_processes() if p != me]
  if lost:
    what = (f"the job lost process{'es' if len(lost) > 1 else ''} "
            f"{', '.join(map(str, lost))} of {count} (no answer within "
            f"{FAILURE_BARRIER_S:.0f} s: gone, or too busy to answer"
            + ("; process 0 runs the job's coordination service"
               if 0 in lost else "") + ")")
  else:
    what = "every other process of the job stopped on an error too"
  return (f"Process {me} of {count} stopped: {what}. Once every host is "
          "back, rerun the same command on each to resume from the last "
          "checkpoint.")
