"""train/runtime/multihost.py's chief_first: process 0 does the work before the others
pass the barrier and read its result (the barrier itself is the coordination
service's, tried by tests/test_multiprocess.py's two-process run)."""

import jax
import pytest

from train.runtime import multihost


def _order(monkeypatch, process_index: int, process_count: int):
  """(what chief_first returned, the events in order) on one process of a
  job, with the barrier recorded instead of waited at."""
  events = []
  monkeypatch.setattr(jax, "process_count", lambda: process_count)
  monkeypatch.setattr(jax, "process_index", lambda: process_index)
  monkeypatch.setattr(multihost, "barrier",
                      lambda name: events.append(f"barrier {name}"))

  def work():
    events.append("work")
    return process_index * 10 + 1

  return multihost.chief_first(work, "seed data prepared"), events


@pytest.mark.parametrize("process_index, expected", [
    (0, ["work", "barrier seed data prepared"]),   # writes, then releases
    (1, ["barrier seed data prepared", "work"]),   # waits, then reads
    (3, ["barrier seed data prepared", "work"]),
])
def test_chief_works_before_the_barrier_and_the_others_after_it(
    monkeypatch, process_index, expected):
  out, events = _order(monkeypatch, process_index, process_count=4)
  assert events == expected
  assert out == process_index * 10 + 1  # each process's own result


def test_one_process_works_without_a_barrier(monkeypatch):
  out, events = _order(monkeypatch, process_index=0, process_count=1)
  assert (out, events) == (1, ["work"])
