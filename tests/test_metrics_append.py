"""metrics.jsonl on a local disk is append-only, and a line torn by a kill
mid-write is dropped on resume (train/outputs/metrics_log.py)."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from train.checkpoints import checkpointing
from train.outputs import metrics_log

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_each_record_is_appended_not_the_file_rewritten(tmp_path,
                                                       monkeypatch):
  writer = metrics_log.JsonlWriter(str(tmp_path))
  writer.write_scalars(1, {"a": 1.0})
  path = tmp_path / metrics_log.METRICS_FILE
  inode = path.stat().st_ino

  def no_rewrite(*args):
    raise AssertionError("metrics.jsonl was rewritten")

  monkeypatch.setattr(checkpointing, "write_atomic", no_rewrite)
  for step in range(2, 50):
    writer.write_scalars(step, {"a": float(step)})
  writer.flush()
  assert path.stat().st_ino == inode  # never replaced
  assert [r["step"] for r in metrics_log.read_metrics(path)] == list(
      range(1, 50))


def test_a_torn_last_line_is_dropped_on_resume(tmp_path, caplog):
  writer = metrics_log.JsonlWriter(str(tmp_path))
  for step in (1, 2, 3):
    writer.write_scalars(step, {"a": float(step)})
  path = tmp_path / metrics_log.METRICS_FILE
  with open(path, "a") as f:
    f.write('{"step": 4, "a": 4.')  # a write cut off by a kill
  # A reader (a report of a live run) skips it; a writer drops it.
  assert [r["step"] for r in metrics_log.read_metrics(path)] == [1, 2, 3]
  resumed = metrics_log.JsonlWriter(str(tmp_path))
  assert "dropped its torn last line (19 characters" in caplog.text
  resumed.truncate_after(3)
  resumed.write_scalars(4, {"a": 5.0})
  lines = path.read_text().splitlines()
  assert [json.loads(line) for line in lines] == [
      {"step": 1, "a": 1.0}, {"step": 2, "a": 2.0}, {"step": 3, "a": 3.0},
      {"step": 4, "a": 5.0}]


def test_a_record_without_its_newline_counts_as_torn(tmp_path):
  path = tmp_path / metrics_log.METRICS_FILE
  path.write_text('{"step": 1}\n{"step": 2}')  # cut before the newline
  metrics_log.JsonlWriter(str(tmp_path)).write_scalars(2, {"a": 1.0})
  assert metrics_log.read_metrics(path) == [{"step": 1},
                                            {"step": 2, "a": 1.0}]


def test_a_bad_line_before_the_last_is_an_error_naming_it(tmp_path):
  path = tmp_path / metrics_log.METRICS_FILE
  path.write_text('{"step": 1}\n{"step": \n{"step": 3}\n')
  with pytest.raises(ValueError, match=f"{path}:2 is not a JSON record"):
    metrics_log.JsonlWriter(str(tmp_path))


WRITER = """
import sys
from train.outputs import metrics_log
writer = metrics_log.JsonlWriter(sys.argv[1])
step = 0
while True:
  step += 1
  writer.write_scalars(step, {f"m{i}": step * 0.5 for i in range(400)})
"""


def test_writer_killed_at_random_leaves_a_file_that_resumes(tmp_path):
  """SIGKILL a process writing long records as fast as it can, three times,
  once it has written some; each reopen keeps complete records only, in
  order, and appends after them."""
  env = dict(os.environ, PYTHONPATH=ROOT)
  path = tmp_path / metrics_log.METRICS_FILE
  rng = random.Random(0)
  last = 0
  for _ in range(3):
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)],
                            env=env, cwd=ROOT)
    deadline = time.monotonic() + 300
    while not (path.exists() and path.stat().st_size > last + 100_000):
      assert proc.poll() is None and time.monotonic() < deadline
      time.sleep(0.05)
    time.sleep(rng.uniform(0, 0.1))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    last = path.stat().st_size
    writer = metrics_log.JsonlWriter(str(tmp_path))
    steps = [r["step"] for r in metrics_log.read_metrics(path)]
    # Each run restarts its steps at 1: the file holds run after run.
    assert steps[0] == 1
    assert all(b == a + 1 or b == 1 for a, b in zip(steps, steps[1:]))
    writer.truncate_after(10**9)  # what a resumed run does
    assert path.read_text().endswith("\n")
    last = path.stat().st_size
