"""Runs the runs of a sweep file (configs/sweeps/*.py) on this machine.

  python launch/sweep.py --sweep=configs/sweeps/arms.py --sweep_dir=runs/sweep
  python launch/sweep.py --sweep=configs/sweeps/arms.py --sweep_dir=runs/sweep \\
    --dry_run   # prints the command lines, runs nothing

Each run is one `python -m train.main` process with the workdir
SWEEP_DIR/[<config>_]<arm>_a<alpha>_s<seed>[r<rl_seed>][_<simulator start>]
(<config>: the run's own config file's name, when it has one; SWEEP_DIR may be
local or gs://...), its output appended to <workdir>/log.txt (for gs://, to
the same path under runs/sweep_logs/gs/ on this machine);
`--parallel` of them run at a time. A run whose report/summary.json reaches its
last step is finished and skipped; any other run is started with the same
command, which resumes it from its latest checkpoint. So re-running the sweep
after an interruption picks up where it stopped, and two sweeps pointed at one
SWEEP_DIR share the runs they have in common (same name, same config). A
workdir whose config.json differs from its run's config is reported as failed
and left untouched. Exits non-zero, naming them, when runs failed.

A sweep file with share_warmstart warm-starts once per seed, in
SWEEP_DIR/_warmstart/s<seed> (a run of 0 co-evolution steps), and starts every
run of that seed from those players once it has finished.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from typing import Any, Callable

from absl import app
from absl import flags
from etils import epath
import ml_collections
from ml_collections import config_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # sweep files import configs.*
  sys.path.insert(0, ROOT)

from configs import flatten  # pylint: disable=g-import-not-at-top
from train.checkpoints import workdir as workdir_lib  # pylint: disable=g-import-not-at-top

LOG_FILE = "log.txt"
# Runs' output for a sweep directory on object storage: <this>/<scheme>/<path>.
LOCAL_LOG_DIR = os.path.join(ROOT, "runs", "sweep_logs")


@dataclasses.dataclass(frozen=True)
class Run:
  """One run of a sweep.

  name: its workdir's name in the sweep directory.
  config_flag: the --config value, e.g. "configs/default.py:smoke,frozen_env".
  overrides: the --config.<field>=<value> flags after it.
  config: the run's config, as train.main parses those flags.
  requires: the name of the run whose output it starts from ("" = none).
  """
  name: str
  arm: str
  seed: int
  config_flag: str
  overrides: tuple[str, ...]
  config: ml_collections.ConfigDict
  requires: str = ""

  def command(self, sweep_dir: str, python: str = sys.executable) -> list[str]:
    """The command line that runs (or resumes) this run, from the repo root."""
    return [python, "-m", "train.main", f"--config={self.config_flag}",
            f"--workdir={os.path.join(sweep_dir, self.name)}", *self.overrides]


def _flag_value(value: Any) -> str:
  """A config value as config_flags parses it back from the command line."""
  if isinstance(value, (tuple, list)):
    return repr(tuple(value))
  return repr(value) if isinstance(value, float) else str(value)


def parse_config(config_flag: str, overrides: tuple[str, ...]
                 ) -> ml_collections.ConfigDict:
  """The config train.main builds from --config=config_flag and overrides
  (config file paths relative to the repository root)."""
  path, _, arg = config_flag.partition(":")
  argv = ["train.main", f"--config={os.path.join(ROOT, path)}"
          + (f":{arg}" if arg else ""), *overrides]
  flag_values = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, "run config",
                                  flag_values=flag_values, lock_config=True,
                                  sys_argv=argv)
  flag_values(argv)
  return flag_values.config


WARMSTART_DIR = "_warmstart"


def _make_run(sweep: ml_collections.ConfigDict, where: str, name_of, arm: str,
              seed: int, fields: dict[str, Any], requires: str = "",
              base_config: str = "") -> Run:
  """The Run of one config: base_config (default sweep.base_config) with
  variants base_arg + arm and the dotted `fields` set; `name_of(config)`
  names it."""
  arg = ",".join(a for a in (sweep.base_arg, arm) if a)
  overrides = tuple(f"--config.{name}={_flag_value(value)}"
                    for name, value in fields.items())
  base_config = base_config or sweep.base_config
  config_flag = f"{base_config}:{arg}" if arg else base_config
  try:
    config = parse_config(config_flag, overrides)
  except Exception as e:  # absl wraps a bad override in an IllegalFlagValue
    raise ValueError(f"{where} ({arm or 'warm-start'}, seed {seed}): "
                     f"{e}") from e
  return Run(name_of(config), arm, seed, config_flag, overrides, config,
             requires)


START_FIELD = "warmstart.simulator_start"


def run_name(arm: str, seed: int, config: ml_collections.ConfigDict,
             base_config: str = "") -> str:
  """<arm>_a<alpha>_s<seed>, plus r<rl_seed> for a stage-2 seed other than 0
  (config.coevolve.rl_seed) and _<start> for a simulator start other than
  "matched" (config.warmstart.simulator_start); a run with its own config
  file (base_config) is prefixed by that file's name: maze_<...>."""
  start = config.warmstart.simulator_start
  rl_seed = config.coevolve.get("rl_seed", 0)
  prefix = (os.path.splitext(os.path.basename(base_config))[0] + "_"
            if base_config else "")
  return (f"{prefix}{arm}_a{config.curriculum.alpha:g}_s{seed}"
          + (f"r{rl_seed}" if rl_seed else "")
          + ("" if start == "matched" else f"_{start}"))


def expand(sweep: ml_collections.ConfigDict, sweep_dir: str = ""
           ) -> list[Run]:
  """The runs of a sweep config (see configs/sweeps/__init__.py), in order.

  With sweep.share_warmstart, one warm-start-only run per seed
  (SWEEP_DIR/_warmstart/s<seed>: the base config with the sweep's overrides,
  no arm, no per-run overrides) comes first, and every run of that seed
  starts co-evolution from its players (config.warmstart.init_from), so
  sweep_dir must be given. A run whose own overrides set another simulator
  start (warmstart.simulator_start) starts from
  SWEEP_DIR/_warmstart/s<seed>_<start>: a 0-step run that takes its seed's
  warm-start and moves the simulator once for all runs of that start. A run whose own overrides change its step 0 is
  refused by train.main, naming the fields.

  Raises ValueError when two runs get the same name or a run's overrides do
  not fit the base config.
  """
  share = sweep.get("share_warmstart", False)
  if share and not sweep_dir:
    raise ValueError("sweep.share_warmstart: expand() needs the sweep_dir "
                     "that holds the shared warm-start runs.")
  warmstarts, runs = {}, []
  names = {}
  for i, spec in enumerate(sweep.runs):
    fields = flatten(sweep.overrides)
    fields.update(flatten(spec.overrides))
    fields["seed"] = spec.seed
    requires = ""
    if share:
      requires = os.path.join(WARMSTART_DIR, f"s{spec.seed}")
      common = dict(flatten(sweep.overrides), seed=spec.seed,
                    **{"coevolve.num_steps": 0})
      if requires not in warmstarts:  # the sweep's common fields only
        warmstarts[requires] = _make_run(
            sweep, f"sweep.runs[{i}]'s warm-start", lambda _: requires, "",
            spec.seed, common)
      start = fields.get(START_FIELD, "matched")
      if start != common.get(START_FIELD, "matched"):
        # The seed's warm-start with the simulator moved to this start, once.
        moved = f"{requires}_{start}"
        if moved not in warmstarts:
          warmstarts[moved] = _make_run(
              sweep, f"sweep.runs[{i}]'s {start} warm-start",
              lambda _, m=moved: m, "", spec.seed,
              dict(common, **{START_FIELD: start, "warmstart.init_from":
                              os.path.join(sweep_dir, requires)}), requires)
        requires = moved
      fields["warmstart.init_from"] = os.path.join(sweep_dir, requires)
    own_config = spec.get("base_config", "")
    run = _make_run(sweep, f"sweep.runs[{i}]", functools.partial(
        run_name, spec.arm, spec.seed, base_config=own_config), spec.arm,
                    spec.seed, fields, requires, own_config)
    if run.name in names:
      raise ValueError(f"sweep.runs[{i}] and sweep.runs[{names[run.name]}] "
                       f"are both named {run.name!r}; runs need distinct "
                       "arm, alpha or seed.")
    names[run.name] = i
    runs.append(run)
  return list(warmstarts.values()) + runs


def is_finished(workdir: str, num_steps: int) -> bool:
  """Whether workdir/report/summary.json shows a run that reached num_steps."""
  path = epath.Path(workdir) / "report" / "summary.json"
  if not path.exists():
    return False
  return json.loads(path.read_text()).get("last_step", -1) >= num_steps


def config_conflicts(workdir: str, config: ml_collections.ConfigDict
                     ) -> list[str]:
  """Fields whose value in workdir/config.json (written by the run) differs
  from `config`; empty when they agree or the run has not written it yet."""
  saved = workdir_lib.read_saved_config(workdir)
  if saved is None:
    return []
  saved = flatten(saved)
  expected = flatten(json.loads(config.to_json_best_effort()))
  return sorted(k for k in saved.keys() | expected.keys()
                if saved.get(k) != expected.get(k))


def log_path(sweep_dir: str, name: str) -> str:
  """Where run `name`'s output goes: <sweep_dir>/<name>/log.txt, or for a
  sweep directory on object storage (which cannot append), the same path
  under LOCAL_LOG_DIR on this machine."""
  if "://" in sweep_dir:
    scheme, _, rest = sweep_dir.partition("://")
    return os.path.join(LOCAL_LOG_DIR, scheme, rest, name, LOG_FILE)
  return os.path.join(sweep_dir, name, LOG_FILE)


def run_sweep(runs: list[Run], sweep_dir: str, parallel: int,
              dry_run: bool = False, echo: Callable[[str], None] = print
              ) -> list[str]:
  """Runs the unfinished runs, `parallel` at a time, each once the run it
  requires has finished; returns the names of the failed ones (a run whose
  required run failed fails too). With dry_run, echoes their command lines
  instead."""
  todo, failed, done = [], [], set()
  for run in runs:
    workdir = os.path.join(sweep_dir, run.name)
    conflicts = config_conflicts(workdir, run.config)
    if conflicts:
      echo(f"# {run.name}: {workdir}/config.json differs from the sweep's "
           f"config in {conflicts}; not run (move the workdir away to rerun).")
      failed.append(run.name)
    elif is_finished(workdir, run.config.coevolve.num_steps):
      echo(f"# {run.name}: finished, skipped")
      done.add(run.name)
    else:
      todo.append(run)
  echo(f"# {len(todo)} of {len(runs)} runs to run, from {ROOT}:")
  if dry_run:
    for run in todo:
      echo(shlex.join(run.command(sweep_dir)))
    return failed

  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join(
      p for p in (ROOT, env.get("PYTHONPATH")) if p)
  pending = list(todo)
  active = {}  # name -> (Popen, log file)

  def next_ready() -> Run | None:
    """The first pending run that can start (failing those that never can)."""
    for run in list(pending):
      if run.requires in failed:
        pending.remove(run)
        failed.append(run.name)
        echo(f"FAILED {run.name}: it starts from {run.requires}, which failed")
      elif not run.requires or run.requires in done:
        pending.remove(run)
        return run
    return None

  try:
    while pending or active:
      while len(active) < parallel and (run := next_ready()) is not None:
        epath.Path(sweep_dir, run.name).mkdir(parents=True, exist_ok=True)
        cmd = run.command(sweep_dir)
        os.makedirs(os.path.dirname(log_path(sweep_dir, run.name)),
                    exist_ok=True)
        log = open(log_path(sweep_dir, run.name), "a")
        log.write(f"\n=== {datetime.datetime.now().isoformat(timespec='seconds')}"
                  f" {shlex.join(cmd)}\n")
        log.flush()
        active[run.name] = (subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT), log)
        echo(f"started {run.name}")
      if pending and not active:  # requires a run that is not in this sweep
        for run in pending:
          failed.append(run.name)
          echo(f"FAILED {run.name}: it starts from {run.requires}, which is "
               "neither finished nor in this sweep")
        break
      time.sleep(1.0)
      for name, (proc, log) in list(active.items()):
        if proc.poll() is None:
          continue
        log.close()
        del active[name]
        if proc.returncode:
          failed.append(name)
          echo(f"FAILED {name} (exit {proc.returncode}); see "
               f"{log_path(sweep_dir, name)}")
        else:
          done.add(name)
          echo(f"finished {name}")
  finally:
    for proc, log in active.values():  # interrupted: stop what this started
      proc.terminate()
      proc.wait()
      log.close()
  return failed


_SWEEP = config_flags.DEFINE_config_file(
    "sweep", None, "A sweep file, e.g. configs/sweeps/arms.py.",
    lock_config=True)
_SWEEP_DIR = flags.DEFINE_string(
    "sweep_dir", None, "Directory that holds one workdir per run.")
_PARALLEL = flags.DEFINE_integer(
    "parallel", max(1, (os.cpu_count() or 1) // 2),
    "Runs at a time (default: half the cores).", lower_bound=1)
_DRY_RUN = flags.DEFINE_bool(
    "dry_run", False, "Print the command lines of the runs to run; run none.")
flags.mark_flags_as_required(["sweep", "sweep_dir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  # Stopped by SIGTERM too, run_sweep stops the runs it started; rerunning
  # the sweep resumes them.
  signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
  sweep_dir = (_SWEEP_DIR.value if "://" in _SWEEP_DIR.value
               else os.path.abspath(_SWEEP_DIR.value))
  failed = run_sweep(expand(_SWEEP.value, sweep_dir), sweep_dir, _PARALLEL.value,
                     _DRY_RUN.value)
  if failed:
    print(f"failed runs: {', '.join(failed)}", file=sys.stderr)
    sys.exit(1)
  if not _DRY_RUN.value:
    print(f"report: python -m train.tools.sweep_report --sweep_dir={_SWEEP_DIR.value}")


if __name__ == "__main__":
  app.run(main)
