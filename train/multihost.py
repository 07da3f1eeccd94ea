"""What the processes of one multi-process job agree on outside the step."""

from __future__ import annotations

import sys
import threading
from typing import Callable, TypeVar

import jax
from jax._src import distributed  # the coordination service's client

T = TypeVar("T")

# How long a process waits at a barrier for the others (preparing a large
# dataset can take a while); train.main's --barrier_timeout_s sets it.
BARRIER_TIMEOUT_MS = 3_600_000
# How long `failure_report` waits for the coordination service's answer:
# longer than its heartbeat timeout, after which it declares a silent process
# lost (train.main sets it from --heartbeat_timeout_s).
LIVENESS_TIMEOUT_S = 150


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


def lost_processes(timeout_s: float | None = None) -> list[int] | None:
  """The job's processes that the coordination service no longer counts as
  alive, asked by every surviving process (the service answers once each
  live process has asked or has been declared lost, i.e. silent for its
  heartbeat timeout). [0] when the service, which runs in process 0, cannot
  be reached; None when no answer came within `timeout_s` (default
  LIVENESS_TIMEOUT_S).

  When the service declares a process lost it also tells every other one,
  and JAX ends each at once (SIGABRT) with its own message naming the lost
  processes ("The following tasks are unhealthy (stopped sending
  heartbeats): 1"); that may come before this answer does.
  """
  count = jax.process_count()
  answer = {}

  def ask():
    try:
      answer["live"] = distributed.global_state.client.get_live_nodes(
          list(range(count)))
    except Exception as e:  # pylint: disable=broad-except
      answer["error"] = e
  thread = threading.Thread(target=ask, daemon=True)
  thread.start()
  thread.join(LIVENESS_TIMEOUT_S if timeout_s is None else timeout_s)
  if "live" in answer:
    return sorted(set(range(count)) - set(answer["live"]))
  if "error" in answer:
    return [0]
  return None


def failure_report() -> str:
  """A line for a process that stopped on an error in a multi-process job:
  which processes were lost (`lost_processes`), and how to resume."""
  me, count = jax.process_index(), jax.process_count()
  print(f"Process {me} of {count} stopped on the error above; asking the "
        "coordination service which processes of the job are lost (up to "
        f"{LIVENESS_TIMEOUT_S:.0f} s).", file=sys.stderr, flush=True)
  lost = [p for p in (lost_processes() or []) if p != me]
  if lost:
    what = (f"the job lost process{'es' if len(lost) > 1 else ''} "
            f"{', '.join(map(str, lost))} of {count}"
            + (" (process 0 runs the job's coordination service)"
               if 0 in lost else ""))
  else:
    what = "no other process of the job is known to be lost"
  return (f"Process {me} of {count} stopped: {what}. Once every host is "
          "back, rerun the same command on each to resume from the last "
          "checkpoint.")
