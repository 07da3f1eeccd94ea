"""Soak: a run killed at random points and resumed each time ends as the
same run never killed; host memory and workdir size over a long run.

  python -m train.bench.soak [--config=configs/default.py:smoke] [--steps=300]
      [--kills=12] [--seed=0] [--workdir=DIR] [--out=FILE.json]

Runs `train.main` (each a fresh process, one compilation cache shared by
all) twice over:
1. uninterrupted, to --steps, sampling the process's resident memory (RSS,
   /proc) every second and the workdir's size every 5 s;
2. in another workdir, --kills times started and killed at a random point
   (`soaked`: some in start-up and stage 1, most mid stage 2, spread over
   the run), alternately by SIGKILL and SIGTERM (a preemption notice: the
   run saves a step and exits with status 75), then rerun to the end.
Prints, and writes to --out as JSON: each kill (signal, seconds, exit
status, the step the workdir's metrics reached); whether the soaked run's
metrics (wall-clock figures aside) and final checkpoint equal the
uninterrupted run's; RSS at the first logged stage-2 step and at the end,
its peak and its growth per 1000 steps (least squares over the last three
quarters of the stage-2 samples: the first hold the compilation's memory);
the workdir's size at the end and its growth per 1000 steps.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags
import jax
import numpy as np

from train.checkpoints import state_checkpoint
from train.outputs import metrics_log
from train.runtime import cpu_flags

_CONFIG = flags.DEFINE_string("config", "configs/default.py:smoke",
                              "Config file[:variants] of the runs.")
_STEPS = flags.DEFINE_integer("steps", 300, "Co-evolution steps of each run.")
_KILLS = flags.DEFINE_integer("kills", 12, "Random kills of the soaked run.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the kills' times and "
                             "signals.")
_WORKDIR = flags.DEFINE_string("workdir", "", "Where the runs go (default: "
                               "a temporary directory).")
_OUT = flags.DEFINE_string("out", "", "Also write the figures here (JSON).")
_COMPARE_ONLY = flags.DEFINE_bool(
    "compare_only", False, "Run nothing: compare the soaked and the "
    "uninterrupted run already in --workdir.")
# Fields of the runs beyond the config file's: a checkpoint every 10 steps,
# the last 2 kept, a held-out evaluation every 50.
_FIELDS = ("--config.checkpoint_every=10", "--config.max_checkpoints=2",
           "--config.eval.every_steps=50", "--config.log_every=1")
# Metrics that depend on wall-clock time, not on the computation.
_TIMING = ("steps_per_sec", "uptime")


def _command(workdir: str, cache_dir: str) -> list[str]:
  return [sys.executable, "-m", "train.main", f"--config={_CONFIG.value}",
          f"--workdir={workdir}", f"--compilation_cache_dir={cache_dir}",
          f"--config.coevolve.num_steps={_STEPS.value}",
          f"--config.data.tfds_dir={os.path.dirname(workdir)}/tfds",
          *_FIELDS]


def _rss_bytes(pid: int) -> int | None:
  try:
    with open(f"/proc/{pid}/status") as f:
      for line in f:
        if line.startswith("VmRSS:"):
          return int(line.split()[1]) * 1024
  except OSError:
    return None
  return None


def _size_bytes(path: str) -> int:
  total = 0
  for root, _, files in os.walk(path):
    for name in files:
      try:
        total += os.path.getsize(os.path.join(root, name))
      except OSError:
        pass
  return total


def _last_step(workdir: str) -> int:
  records = metrics_log.read_metrics(os.path.join(workdir,
                                                  metrics_log.METRICS_FILE))
  return max((r["step"] for r in records), default=-1)


def _records(workdir: str) -> list[dict]:
  kept = [{k: v for k, v in r.items()
           if not k.startswith("perf/") and k not in _TIMING}
          for r in metrics_log.read_metrics(
              os.path.join(workdir, metrics_log.METRICS_FILE))]
  return [r for r in kept if len(r) > 1]


def _checkpoint(workdir: str, step: int) -> list[np.ndarray]:
  return jax.tree.leaves(state_checkpoint.read_state(workdir, step)[1])


def _growth_per_1000(samples: list[tuple[int, int]]) -> float:
  """Least-squares slope of (step, bytes) samples, per 1000 steps."""
  if len(samples) < 2 or len({s for s, _ in samples}) < 2:
    return float("nan")
  steps, values = np.array(samples, dtype=np.float64).T
  return float(np.polyfit(steps, values, 1)[0] * 1000)


def uninterrupted(workdir: str, cache_dir: str, log) -> dict:
  """Runs to the end, sampling RSS (1 s) and workdir size (5 s)."""
  tick = time.monotonic()
  proc = subprocess.Popen(_command(workdir, cache_dir), stdout=log,
                          stderr=subprocess.STDOUT)
  rss, sizes, last_size = [], [], 0.0
  while proc.poll() is None:
    now = time.monotonic()
    step = _last_step(workdir)
    value = _rss_bytes(proc.pid)
    if value is not None and step >= 1:
      rss.append((step, value))
    if now - last_size >= 5 and step >= 1:
      sizes.append((step, _size_bytes(workdir)))
      last_size = now
    time.sleep(1.0)
  if proc.returncode:
    raise RuntimeError(f"the uninterrupted run exited {proc.returncode}")
  sizes.append((_last_step(workdir), _size_bytes(workdir)))
  return {"wall_s": time.monotonic() - tick,
          "rss_first_mb": rss[0][1] / 2**20 if rss else None,
          "rss_last_mb": rss[-1][1] / 2**20 if rss else None,
          "rss_peak_mb": max(v for _, v in rss) / 2**20 if rss else None,
          # Over the last three quarters of the samples: the first hold the
          # compilation's memory, which is released after it.
          "rss_growth_mb_per_1000_steps": (
              _growth_per_1000(rss[len(rss) // 4:]) / 2**20),
          "rss_mb_by_step": [(step, round(value / 2**20, 1))
                             for step, value in rss[::max(1, len(rss) // 40)]],
          "rss_samples": len(rss),
          "workdir_mb": sizes[-1][1] / 2**20,
          "workdir_growth_mb_per_1000_steps": (
              _growth_per_1000(sizes) / 2**20)}


def _kill_when(proc, workdir: str, step: int | None, delay_s: float) -> bool:
  """Waits until the workdir's metrics reach `step` (None: at once), then
  `delay_s` more seconds; returns False when the run ended first."""
  while step is not None and _last_step(workdir) < step:
    if proc.poll() is not None:
      return False
    time.sleep(0.1)
  try:
    proc.wait(timeout=delay_s)
    return False
  except subprocess.TimeoutExpired:
    return True


def soaked(workdir: str, cache_dir: str, log) -> dict:
  """Kills the run --kills times at random points, then lets it finish.

  Every fourth kill lands in start-up or stage 1 (a random 0-30 s after the
  start); the others a random 0-2 s after a random stage-2 step is logged,
  the steps spread so that the kills cover the whole run.
  """
  rng = random.Random(_SEED.value)
  kills = []
  for i in range(_KILLS.value):
    signum = signal.SIGKILL if i % 2 == 0 else signal.SIGTERM
    last = max(_last_step(workdir), 0)
    left = _KILLS.value - i
    if i % 4 == 3:
      step, delay = None, rng.uniform(0, 30)
    else:
      step = last + rng.randint(1, max(1, (_STEPS.value - last) // (left + 1)))
      delay = rng.uniform(0, 2)
    proc = subprocess.Popen(_command(workdir, cache_dir), stdout=log,
                            stderr=subprocess.STDOUT)
    killed = _kill_when(proc, workdir, step, delay)
    if killed:
      proc.send_signal(signum)
    tick = time.monotonic()
    proc.wait()
    kills.append({"signal": signal.Signals(signum).name if killed else None,
                  "at_step": step, "after_s": round(delay, 2),
                  "exit": proc.returncode,
                  "exit_after_signal_s": round(time.monotonic() - tick, 2),
                  "metrics_step": _last_step(workdir)})
    print(f"kill {i + 1}: {kills[-1]}", flush=True)
    if proc.returncode == 0:
      break  # finished before the kill: nothing left to interrupt
  final = subprocess.run(_command(workdir, cache_dir), stdout=log,
                         stderr=subprocess.STDOUT, check=False)
  return {"kills": kills, "final_exit": final.returncode}


def compare(run: str, reference: str) -> dict:
  """Whether the soaked run's metrics (wall-clock figures aside) and final
  checkpoint equal the uninterrupted run's, and its workdir's size."""
  got, want = _checkpoint(run, _STEPS.value), _checkpoint(reference,
                                                          _STEPS.value)
  return {"metrics_equal": _records(run) == _records(reference),
          "checkpoint_arrays": len(want),
          "checkpoint_equal": len(got) == len(want) and all(
              np.array_equal(a, b) for a, b in zip(got, want)),
          "soaked_workdir_mb": _size_bytes(run) / 2**20}


def main(argv):
  del argv
  # The devices train.main runs with, so that its checkpoints restore here.
  cpu_flags.use_project_settings()
  root = _WORKDIR.value or tempfile.mkdtemp(prefix="soak_")
  reference = os.path.join(root, "uninterrupted")
  run = os.path.join(root, "soaked")
  if _COMPARE_ONLY.value:
    print(json.dumps(compare(run, reference), indent=1))
    return
  cache_dir = os.path.join(root, "xla_cache")
  os.makedirs(root, exist_ok=True)
  with open(os.path.join(root, "log.txt"), "a") as log:
    figures = {"config": _CONFIG.value, "steps": _STEPS.value,
               "fields": list(_FIELDS)}
    figures["uninterrupted"] = uninterrupted(reference, cache_dir, log)
    print(json.dumps(figures["uninterrupted"]), flush=True)
    figures["soaked"] = soaked(run, cache_dir, log)
  figures["soaked"]["interrupted_runs"] = sum(
      k["exit"] != 0 for k in figures["soaked"]["kills"])
  figures.update(compare(run, reference))
  print(json.dumps(figures, indent=1))
  if _OUT.value:
    with open(_OUT.value, "w") as f:
      json.dump(figures, f, indent=1)


if __name__ == "__main__":
  app.run(main)
