"""One run per workdir: a lock against a second process, and one config.

`WorkdirLock` keeps `LOCK_FILE` (the holder's PID and host) in the workdir
while a run is in it; a second run is refused with the holder named, and a
lock left by a dead process on this host is taken over. The lock is created
only if absent: exclusively on a local disk, and on gs:// with a
generation-match precondition that Cloud Storage checks, so of two runs
started at once exactly one gets it; a takeover or release deletes only the
version of the lock it read.

`check_config` compares a rerun's config with the workdir's config.json and
refuses it if any field that changes the run differs; the fields that may
change on resume are `RESUMABLE_FIELDS`. `write_config` writes config.json,
and is called only after the check passed.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

from absl import logging
import ml_collections

from configs import flatten
from train.checkpoints import checkpointing
from train.checkpoints import object_store

LOCK_FILE = "LOCK"
CONFIG_FILE = "config.json"

# Fields (dotted names; a trailing "." covers a block) that a rerun of a
# workdir may change: how long it runs, how often it logs, evaluates, saves
# and profiles, where the seed-data cache lives, how many non-finite updates
# it tolerates, and the device mesh (a run may resume on another slice; the
# restored state is laid out for the new one). Every other field shapes what
# the run computes, so a rerun must keep it.
RESUMABLE_FIELDS = (
    "coevolve.num_steps", "log_every", "eval.every_steps", "checkpoint_every",
    "max_checkpoints", "profile_first_step", "data.tfds_dir",
    "max_skipped_updates", "warmstart.checkpoint_every", "mesh.",
)
# Fields added to the config after runs were made, each with the value a run
# whose config.json lacks it ran with.
ADDED_FIELDS = {"task.pad_operands": False,
                "coevolve.seed_selection": "uniform",
                "pool.replay_selection": "uniform",
                "pool.learnability_floor": 0.01,
                "grpo.pg_normalizer": "all",
                "simulator_update.pg_normalize_std": True,
                "simulator_update.pg_normalizer": "all",
                "warmstart.simulator_lessons": "drawn"}


def _resumable(field: str) -> bool:
  return any(field == p or (p.endswith(".") and field.startswith(p))
             for p in RESUMABLE_FIELDS)


def config_conflicts(config: ml_collections.ConfigDict,
                     saved: dict[str, Any]) -> list[str]:
  """Fields outside RESUMABLE_FIELDS on which the saved config (a parsed
  config.json) and `config` differ, each as "field: saved != new"."""
  theirs = flatten(saved)
  ours = flatten(json.loads(config.to_json_best_effort()))
  for field, value in ADDED_FIELDS.items():
    if field in ours:
      theirs.setdefault(field, value)
  # JSON turns tuples into lists: compare both as JSON values.
  norm = lambda v: json.loads(json.dumps(v))
  return [f"{k}: {theirs.get(k)!r} != {ours.get(k)!r}"
          for k in sorted(theirs.keys() | ours.keys())
          if not _resumable(k) and norm(theirs.get(k)) != norm(ours.get(k))]


def read_saved_config(workdir: str) -> dict[str, Any] | None:
  """The config a run in `workdir` (a local path or gs:// URI) was started
  with, as parsed from its config.json; None when the workdir has none.
  Raises ValueError naming the file when it is not valid JSON."""
  path = checkpointing.workdir_path(workdir) / CONFIG_FILE
  if not path.exists():
    return None
  try:
    return json.loads(path.read_text())
  except ValueError as e:
    raise ValueError(f"{path} is not valid JSON ({e}); it records the run in "
                     "this workdir. Restore it or use another workdir.") from e


def read_run_config(workdir: str) -> ml_collections.ConfigDict:
  """The config of the run in `workdir` (`read_saved_config`) as a
  ConfigDict; raises FileNotFoundError when it has no config.json (not a
  run directory)."""
  saved = read_saved_config(workdir)
  if saved is None:
    raise FileNotFoundError(
        f"{checkpointing.workdir_path(workdir) / CONFIG_FILE} does not exist: "
        f"{workdir} is not a training run's workdir.")
  return ml_collections.ConfigDict(saved)


def check_config(config: ml_collections.ConfigDict, workdir: str) -> None:
  """Raises ValueError naming every field on which `config` differs from
  the workdir's config.json (if there is one) outside RESUMABLE_FIELDS."""
  saved = read_saved_config(workdir)
  if saved is None:
    return
  path = checkpointing.workdir_path(workdir) / CONFIG_FILE
  conflicts = config_conflicts(config, saved)
  if conflicts:
    raise ValueError(
        f"{path}: this workdir holds a run made with another config "
        f"({'; '.join(conflicts)}). Rerun with the saved values or use a new "
        "workdir; fields that may change on resume: "
        f"{', '.join(RESUMABLE_FIELDS)}.")


def write_config(config: ml_collections.ConfigDict, workdir: str) -> None:
  checkpointing.write_atomic(
      checkpointing.workdir_path(workdir) / CONFIG_FILE,
      config.to_json_best_effort(indent=2).encode())


class WorkdirLockedError(RuntimeError):
  """Another live process holds the workdir's lock."""


def _alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  return True


class WorkdirLock:
  """`with WorkdirLock(workdir):` holds workdir/LOCK ({"pid", "host",
  "time"}) for the run. A lock held by a live process, or by any process on
  another host (whose liveness this host cannot see), is refused naming its
  PID and host; one left by a dead process on this host is taken over."""

  def __init__(self, workdir: str):
    self.path = checkpointing.workdir_path(workdir) / LOCK_FILE
    self.me = {"pid": os.getpid(), "host": socket.gethostname()}
    self._gcs = object_store.is_gcs(self.path)

  def _holder(self) -> tuple[dict | None, int | None]:
    """(the lock's record, its gs:// generation); (None, None) if there is
    no lock."""
    if self._gcs:
      found = object_store.read(self.path)
      if found is None:
        return None, None
      data, generation = found
    else:
      try:
        data, generation = self.path.read_bytes(), None
      except FileNotFoundError:
        return None, None
    try:
      return json.loads(data), generation
    except ValueError:
      return {}, generation  # being written, or garbage: not ours

  def _create(self, replacing: int | None = None) -> bool:
    """Creates the lock file unless one exists, atomically: exclusive
    create on a local disk, a generation-match precondition on gs://. Other
    object stores have neither: there the last writer wins, and the re-read
    in __enter__ tells. `replacing`: None, or when taking over a stale lock
    its gs:// generation (the lock is replaced only if still that version;
    on a local disk any value: the stale file is removed first)."""
    record = json.dumps(dict(self.me, time=time.time())).encode()
    if self._gcs:
      return object_store.write_if_generation(self.path, record,
                                              replacing or 0) is not None
    if "://" in str(self.path):
      checkpointing.write_atomic(self.path, record)
      return True
    if replacing is not None:
      self.path.unlink(missing_ok=True)
    try:
      fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
      return False
    with os.fdopen(fd, "wb") as f:
      f.write(record)
    return True

  def _refuse(self, holder: dict | None) -> WorkdirLockedError:
    holder = holder or {}
    return WorkdirLockedError(
        f"{self.path}: the workdir is in use by process {holder.get('pid')} "
        f"on host {holder.get('host')!r}. Wait for it to finish; if that "
        "process is gone (e.g. on another host), delete the file.")

  def __enter__(self) -> "WorkdirLock":
    holder, generation = self._holder()
    replacing = None
    if holder is not None:
      pid, host = holder.get("pid"), holder.get("host")
      if not (host == self.me["host"] and isinstance(pid, int)
              and pid != self.me["pid"] and not _alive(pid)):
        raise self._refuse(holder)
      logging.warning("%s: taking over the lock of process %d on %s, which "
                      "is no longer running.", self.path, pid, host)
      replacing = generation if self._gcs else 0
    if not self._create(replacing):
      raise self._refuse(self._holder()[0])
    holder, _ = self._holder()
    if {k: (holder or {}).get(k) for k in self.me} != self.me:
      raise self._refuse(holder)
    return self

  def __exit__(self, *exc) -> None:
    holder, generation = self._holder()
    if holder and {k: holder.get(k) for k in self.me} == self.me:
      if self._gcs:  # only the version this run wrote
        object_store.delete_generation(self.path, generation)
      else:
        self.path.unlink()
