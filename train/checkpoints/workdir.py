"""One run per workdir: a lock against a second process, and one config.

`WorkdirLock` keeps `LOCK_FILE` (the holder's PID and host, and a lease) in
the workdir while a run is in it; a second run is refused with the holder
named. The holder renews its lease every third of `LEASE_S` from a
background thread; a lock whose lease has lapsed (its holder gone: a lost VM,
a killed process on another host) is taken over with a warning naming the
holder, and one left by a dead process on this host at once. The lock is
created only if absent: exclusively on a local disk, and on gs:// with a
generation-match precondition that Cloud Storage checks, so of two runs
started at once exactly one gets it; a renewal, takeover or release replaces
or deletes only the version of the lock it read.

`check_config` compares a rerun's config with the workdir's config.json and
refuses it if any field that changes the run differs; the fields that may
change on resume are `RESUMABLE_FIELDS`. `write_config` writes config.json,
and is called only after the check passed.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from typing import Any

from absl import logging
import ml_collections

from configs import flatten
from train.checkpoints import checkpointing
from train.checkpoints import object_store

LOCK_FILE = "LOCK"
CONFIG_FILE = "config.json"
# Seconds a lock stays its holder's after the holder last renewed it. The
# holder renews every LEASE_S / 3, so a live run's lease never lapses; a
# rerun after a lost host waits at most this long (clocks of the hosts that
# share a workdir are assumed to agree to well within it).
LEASE_S = 300.0

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
                "warmstart.simulator_lessons": "drawn",
                "eval.rows_per_pass": 0}


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
  """`with WorkdirLock(workdir):` holds workdir/LOCK ({"pid", "host", "time",
  "renewed", "lease_s"}) for the run, renewing its lease every lease_s / 3
  seconds. A lock whose holder is alive on this host, or whose lease is
  live, is refused naming its PID and host; one left by a dead process on
  this host, or whose lease lapsed, is taken over with a warning."""

  def __init__(self, workdir: str, lease_s: float = LEASE_S):
    if not lease_s > 0:
      raise ValueError(f"WorkdirLock: lease_s={lease_s!r}; expected > 0.")
    self.path = checkpointing.workdir_path(workdir) / LOCK_FILE
    self.me = {"pid": os.getpid(), "host": socket.gethostname()}
    self.lease_s = float(lease_s)
    self._gcs = object_store.is_gcs(self.path)
    self._acquired = 0.0
    self._generation: int | None = None  # gs://: the version this run wrote
    self._stop = threading.Event()
    self._renewer: threading.Thread | None = None

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

  def _record(self) -> bytes:
    return json.dumps(dict(self.me, time=self._acquired, renewed=time.time(),
                           lease_s=self.lease_s)).encode()

  def _create(self, replacing: int | None = None) -> bool:
    """Creates the lock file unless one exists, atomically: exclusive
    create on a local disk, a generation-match precondition on gs://. Other
    object stores have neither: there the last writer wins, and the re-read
    in __enter__ tells. `replacing`: None, or when taking over a stale lock
    its gs:// generation (the lock is replaced only if still that version;
    on a local disk any value: the stale file is removed first)."""
    self._acquired = time.time()
    record = self._record()
    if self._gcs:
      self._generation = object_store.write_if_generation(
          self.path, record, replacing or 0)
      return self._generation is not None
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

  def _renew(self) -> bool:
    """Rewrites the lock with a fresh `renewed` time if it is still this
    run's. Returns False (and logs an error) when it is not: another run
    took it over after this one's lease lapsed."""
    if self._gcs:
      generation = object_store.write_if_generation(
          self.path, self._record(), self._generation or 0)
      if generation is not None:
        self._generation = generation
        return True
    else:
      holder, _ = self._holder()
      if holder and {k: holder.get(k) for k in self.me} == self.me:
        checkpointing.write_atomic(self.path, self._record())
        return True
    logging.error("%s: the lock is no longer this run's (its lease lapsed "
                  "and another run took it over); stopped renewing it.",
                  self.path)
    return False

  def _renew_until_released(self) -> None:
    while not self._stop.wait(self.lease_s / 3):
      try:
        if not self._renew():
          return
      except Exception as e:  # pylint: disable=broad-except
        # A store hiccup: the next renewal, well inside the lease, retries.
        logging.warning("%s: renewing the lock failed (%s: %s); retrying.",
                        self.path, type(e).__name__, e)

  def _lapsed_for(self, holder: dict) -> float | None:
    """Seconds since the holder's lease lapsed (negative: it is live), or
    None when the record has no lease to read."""
    renewed = holder.get("renewed", holder.get("time"))
    lease = holder.get("lease_s", self.lease_s)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool)
               for v in (renewed, lease)):
      return None
    return time.time() - renewed - lease

  def _refuse(self, holder: dict | None) -> WorkdirLockedError:
    holder = holder or {}
    lapsed = self._lapsed_for(holder)
    when = ("" if lapsed is None else
            f" Its lease lapses in {max(-lapsed, 0):.0f} s unless its holder "
            "renews it; a rerun after that takes the workdir over.")
    return WorkdirLockedError(
        f"{self.path}: the workdir is in use by process {holder.get('pid')} "
        f"on host {holder.get('host')!r}. Wait for it to finish.{when}")

  def __enter__(self) -> "WorkdirLock":
    holder, generation = self._holder()
    replacing = None
    if holder is not None:
      pid, host = holder.get("pid"), holder.get("host")
      dead_here = (host == self.me["host"] and isinstance(pid, int)
                   and pid != self.me["pid"] and not _alive(pid))
      lapsed = self._lapsed_for(holder)
      if dead_here:
        logging.warning("%s: taking over the lock of process %d on %s, "
                        "which is no longer running.", self.path, pid, host)
      elif (lapsed is not None and lapsed > 0
            and (host, pid) != (self.me["host"], self.me["pid"])):
        logging.warning("%s: taking over the lock of process %s on host %r, "
                        "whose lease lapsed %.0f s ago (the holder is gone).",
                        self.path, pid, host, lapsed)
      else:
        raise self._refuse(holder)
      replacing = generation if self._gcs else 0
    if not self._create(replacing):
      raise self._refuse(self._holder()[0])
    holder, _ = self._holder()
    if {k: (holder or {}).get(k) for k in self.me} != self.me:
      raise self._refuse(holder)
    self._stop.clear()
    self._renewer = threading.Thread(target=self._renew_until_released,
                                     name="workdir-lock-lease", daemon=True)
    self._renewer.start()
    return self

  def __exit__(self, *exc) -> None:
    self._stop.set()
    if self._renewer is not None:
      self._renewer.join()
    holder, generation = self._holder()
    if holder and {k: holder.get(k) for k in self.me} == self.me:
      if self._gcs:  # only the version this run wrote
        object_store.delete_generation(self.path, generation)
      else:
        self.path.unlink()
