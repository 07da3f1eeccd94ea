"""One job as two JAX processes (launch/multiprocess.sh) against one process
with the same 8 CPU devices and mesh: the live smoke config's metrics (the
one-process run is the session's live run, tests/live_run.py), and a
checkpoint the two processes write resumed by one."""

import json
import os
import subprocess
import sys

import pytest

from train import loop
from train.outputs import metrics_log

from tests import live_run as live

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Metrics that depend on wall-clock time, not on the computation.
_TIMING = ("steps_per_sec", "uptime")
# Both jobs run the same XLA programs over the same (data=8) mesh; only the
# collectives between the processes' devices go through gloo instead of
# XLA:CPU's in-process ones, which may sum in another order. A float32
# reduction in another order differs in its last bits (relative 1e-7 per
# add); 1e-5 relative leaves room for that through a few steps of training
# while any real difference (a row scored twice or not at all, another
# sample drawn) moves a metric by far more.
_RTOL = 1e-5


def _computed(workdir):
  records = metrics_log.read_metrics(os.path.join(workdir, "metrics.jsonl"))
  out = {}
  for r in records:
    kept = {k: v for k, v in r.items()
            if k != "step" and k not in _TIMING and not k.startswith("perf/")}
    if kept:
      out.setdefault(r["step"], {}).update(kept)
  return out


def _largest_difference(got, want):
  """max |got - want| over every metric of every step, after checking both
  hold the same steps and names."""
  assert sorted(got) == sorted(want)
  largest = 0.0
  for step in want:
    assert sorted(got[step]) == sorted(want[step]), step
    for name, value in want[step].items():
      if value is None or got[step][name] is None:
        assert value == got[step][name], (step, name)
        continue
      assert got[step][name] == pytest.approx(value, rel=_RTOL, abs=1e-6), (
          step, name, got[step][name], value)
      largest = max(largest, abs(got[step][name] - value))
  return largest


def _two_processes(workdir, *flags):
  env = dict(os.environ, GENENV_PYTHON=sys.executable,
             GENENV_LOG_DIR=os.path.join(workdir, "logs"),
             PYTHONPATH=ROOT,
             XLA_FLAGS="--xla_force_host_platform_device_count=8")
  result = subprocess.run(
      [os.path.join(ROOT, "launch", "multiprocess.sh"), "2",
       f"--config={os.path.join(ROOT, 'configs', 'default.py')}:{live.LIVE}",
       f"--workdir={workdir}", "--compilation_cache_dir=none", *flags],
      env=env, capture_output=True, text=True, timeout=900, check=False)
  logs = os.path.join(workdir, "logs", "process_1.log")
  other = open(logs).read()[-3000:] if os.path.exists(logs) else ""
  assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:],
                                  other)
  return result


@pytest.fixture(scope="module")
def one_process(live_run):
  tfds_dir, workdir = live_run
  return live.live_config(tfds_dir), workdir


def test_two_processes_match_one_and_their_checkpoint_resumes_in_one(
    one_process, tmp_path):
  config, reference = one_process
  workdir = str(tmp_path / "two")
  # The two processes prepare the seed data in their shared workdir (process
  # 0 writes it, process 1 waits), restore the one-process run's step 0 (its
  # warm-started players: 400 warm-start steps in two processes drift from
  # one process's by reduction order, 1.3e-5 relative in env_update/loss at
  # step 1, past _RTOL), run to the step-2 checkpoint and stop.
  _two_processes(workdir, "--config.coevolve.num_steps=2",
                 f"--config.warmstart.init_from={reference}")
  want = _computed(reference)
  got = _computed(workdir)
  assert sorted(got) == [0, 1, 2]
  live.assert_run_live(live.records(workdir), 1, 2)
  largest = _largest_difference(got, {s: want[s] for s in got})
  # One process resumes the two processes' step-2 checkpoint.
  resumed = live.live_config(config.data.tfds_dir)
  resumed.warmstart.init_from = reference
  loop.train_and_evaluate(resumed, workdir)
  live.assert_run_live(live.records(workdir), 3, config.coevolve.num_steps)
  largest = max(largest, _largest_difference(_computed(workdir), want))
  print(f"largest metric difference, 2 processes vs 1: {largest:.3g}")
  with open(os.path.join(workdir, "report", "summary.json")) as f:
    assert json.load(f)["last_step"] == config.coevolve.num_steps


def test_launcher_stops_the_others_and_fails_when_one_process_fails(
    tmp_path):
  # A stand-in for Python: process 1 fails after 3 s, process 0 would run for
  # minutes (and records that it started); the launcher's other calls go to
  # the real interpreter.
  fake = tmp_path / "python"
  fake.write_text(f"""#!/usr/bin/env bash
case "$*" in
  *--process_id=1*) sleep 3; exit 7 ;;
  *--process_id=0*) echo $$ > {tmp_path}/pid0; exec sleep 300 ;;
  *) exec {sys.executable} "$@" ;;
esac
""")
  fake.chmod(0o755)
  env = dict(os.environ, GENENV_PYTHON=str(fake), PYTHONPATH=ROOT,
             XLA_FLAGS="--xla_force_host_platform_device_count=8")
  result = subprocess.run(
      [os.path.join(ROOT, "launch", "multiprocess.sh"), "2",
       f"--workdir={tmp_path}"],
      env=env, capture_output=True, text=True, timeout=120, check=False)
  assert result.returncode == 7, result.stderr
  assert "process 1 (pid " in result.stderr
  assert "exited with status 7" in result.stderr
  pid0 = int((tmp_path / "pid0").read_text())
  assert not os.path.exists(f"/proc/{pid0}"), "process 0 was left running"
  # 8 devices do not split over 3 processes: refused before any starts.
  result = subprocess.run(
      [os.path.join(ROOT, "launch", "multiprocess.sh"), "3",
       f"--workdir={tmp_path}"],
      env=env, capture_output=True, text=True, timeout=120, check=False)
  assert result.returncode != 0
  assert "do not split evenly over 3 processes" in result.stderr
