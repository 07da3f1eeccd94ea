"""What the processes of one multi-process job agree on outside the step."""

from __future__ import annotations

from typing import Callable, TypeVar

import jax
from jax.experimental import multihost_utils

T = TypeVar("T")


def chief_first(fn: Callable[[], T], name: str) -> T:
  """fn() on process 0, then on the others once it has returned there.

  For work that writes shared files the first time and reads them after
  (the seed datasets in a shared workdir): process 0 writes them, the others
  wait at a barrier named `name` and then only read.
  """
  if jax.process_count() == 1:
    return fn()
  if jax.process_index() == 0:
    out = fn()
    multihost_utils.sync_global_devices(name)
    return out
  multihost_utils.sync_global_devices(name)
  return fn()
