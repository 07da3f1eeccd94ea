"""The live smoke run (configs/default.py:live): made once per test session,
shared by every test that compares a run with it, and the checks that a
stretch of a run is live (both players learned in it) before it is compared.

Under pytest-xdist each worker is its own process: the first to need the run
makes it under a file lock in the session's shared temporary directory, the
others wait for it and then read it. Tests only read or copy it.
"""

from __future__ import annotations

import os

import filelock

from configs import default
from train import loop
from train.outputs import metrics_log

LIVE = "live"
_DONE = "live_run.done"


def live_config(tfds_dir: str, arg: str = LIVE):
  """configs/default.py:<arg> reading its seed data from tfds_dir."""
  config = default.get_config(arg)
  config.data.tfds_dir = tfds_dir
  return config


def shared_run(root) -> tuple[str, str]:
  """(tfds_dir, workdir) of the finished live run under `root` (a directory
  every worker of the session sees), made by the first caller."""
  tfds_dir = os.path.join(root, "live_tfds")
  workdir = os.path.join(root, "live_run")
  with filelock.FileLock(os.path.join(root, "live_run.lock")):
    if not os.path.exists(os.path.join(root, _DONE)):
      # A worker that failed half-way left a checkpoint: this resumes it.
      loop.train_and_evaluate(live_config(tfds_dir), workdir)
      with open(os.path.join(root, _DONE), "w") as f:
        f.write(workdir)
  return tfds_dir, workdir


def records(workdir: str) -> list[dict]:
  return metrics_log.read_metrics(os.path.join(workdir,
                                               metrics_log.METRICS_FILE))


def assert_steps_live(step_metrics: list[dict]) -> None:
  """Both players learned in these co-evolution steps' metrics (dicts with
  agent/grad_norm, env_update/updated, env/valid_frac): the simulator wrote
  well-formed tasks, the agent's GRPO update had a nonzero gradient (some
  attempts at a task differed) and the simulator was updated."""
  assert step_metrics, "no co-evolution step to check"
  for name in ("env/valid_frac", "agent/grad_norm", "env_update/updated"):
    values = [m[name] for m in step_metrics]
    assert max(values) > 0, (
        f"{name} is {values} at every step: nothing was learned, so a "
        "comparison of these steps would compare nothing")


def assert_run_live(run_records: list[dict], first: int, last: int) -> None:
  """Steps first..last of a run's metrics.jsonl records are live
  (assert_steps_live), and an evaluation among them found held-out tasks the
  agent now answers differently from the step-0 agent (fixed + broken > 0)."""
  steps = [r for r in run_records
           if first <= r["step"] <= last and "agent/grad_norm" in r]
  assert sorted(r["step"] for r in steps) == list(range(first, last + 1))
  assert_steps_live(steps)
  changed = [sum(v for k, v in r.items()
                 if k.startswith(("eval/fixed_d", "eval/broken_d")))
             for r in run_records
             if first <= r["step"] <= last and "eval/accuracy" in r]
  assert changed and max(changed) > 0, (
      f"evaluations of steps {first}..{last} flip no held-out answer "
      f"(fixed + broken per evaluation: {changed})")
