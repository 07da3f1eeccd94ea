"""What the persistent compilation cache saves a resumed run.

  python -m train.bench.resume_compile [--config=configs/default.py:smoke]
      [--steps=2] [--workdir=DIR]

Runs `train.main` three times, each a fresh process: a new run to the step
--steps checkpoint (its compilation cache, <workdir>/xla_cache, starts
empty), then that run resumed to 2 x --steps twice, once with its cache and
once from a copy of the run without any (--compilation_cache_dir=none). Prints
each run's `perf/step_compile_s` (the seconds the first co-evolution step
call took to return: tracing plus compiling, or reading the cache) and its
whole wall time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

from train.outputs import metrics_log

_CONFIG = flags.DEFINE_string("config", "configs/default.py:smoke",
                              "Config file[:variants] of the runs.")
_STEPS = flags.DEFINE_integer("steps", 2, "Steps of the first run (a "
                              "multiple of the config's checkpoint_every).")
_WORKDIR = flags.DEFINE_string("workdir", "", "Where the runs go (default: a "
                               "temporary directory, removed after).")


def _run(workdir: str, steps: int, *extra: str) -> tuple[float, float]:
  """(perf/step_compile_s, wall seconds) of one train.main run."""
  tick = time.perf_counter()
  subprocess.run(
      [sys.executable, "-m", "train.main", f"--config={_CONFIG.value}",
       f"--workdir={workdir}", f"--config.coevolve.num_steps={steps}",
       *extra], check=True, capture_output=True)
  wall = time.perf_counter() - tick
  records = metrics_log.read_metrics(os.path.join(workdir,
                                                  metrics_log.METRICS_FILE))
  compile_s = [r["perf/step_compile_s"] for r in records
               if r.get("perf/step_compile_s") is not None]
  return compile_s[-1], wall


def main(argv):
  del argv
  root = _WORKDIR.value or tempfile.mkdtemp(prefix="resume_compile_")
  try:
    run = os.path.join(root, "run")
    uncached = os.path.join(root, "run_uncached")
    steps = _STEPS.value
    rows = [("new run, empty cache", *_run(run, steps))]
    shutil.copytree(run, uncached,
                    ignore=shutil.ignore_patterns("xla_cache"))
    rows.append(("resumed, with the cache", *_run(run, 2 * steps)))
    rows.append(("resumed, no cache",
                 *_run(uncached, 2 * steps, "--compilation_cache_dir=none")))
    print(f"{'run':28s} {'step_compile_s':>14s} {'wall_s':>8s}")
    for name, compile_s, wall in rows:
      print(f"{name:28s} {compile_s:14.2f} {wall:8.1f}")
  finally:
    if not _WORKDIR.value:
      shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
  app.run(main)
