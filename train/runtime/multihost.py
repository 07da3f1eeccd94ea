"""What the processes of one multi-process job agree on outside the step."""

from __future__ import annotations

from typing import Callable, TypeVar

import jax
from jax._src import distributed  # the coordination service's client

T = TypeVar("T")

# How long a process waits at a barrier for the others (preparing a large
# dataset can take a while); train.main's --barrier_timeout_s sets it.
BARRIER_TIMEOUT_MS = 3_600_000


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
