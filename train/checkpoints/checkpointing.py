"""Checkpoints that are verified on restore, and the step-0 answers file.

Each step directory gets a `CHECKSUM_FILE` once its save has committed: the
digest and size of every file orbax wrote. On a local disk the digest is the
SHA-256 of the file's bytes; on gs:// it is the CRC32C that Cloud Storage
keeps for each object (read from a listing, so neither recording nor checking
downloads the checkpoint; an object cannot change in place, so a changed
file is a new object with a new CRC32C). Restoring checks the newest step's
files against it; a step whose files differ (flipped bytes, a truncated or
deleted file) or that has no checksum file is moved to `REJECTED_DIR` with a
warning naming the step, the file and what is wrong, and the next newer step
is tried. Saves run in the background; `poll` surfaces a failed save at the
next step, and every save waits for the one before it.

Only the chief process (process 0) writes, checks or moves files; the others
restore the step it settled on.
"""

from __future__ import annotations

import hashlib
import io
import json
import time

from absl import logging
from etils import epath
import jax
from jax.experimental import multihost_utils
import numpy as np
import orbax.checkpoint as ocp
from orbax.checkpoint import checkpoint_managers

from train import heldout
from train.checkpoints import object_store

CHECKSUM_FILE = "checksums.json"
REJECTED_DIR = "checkpoints_rejected"
STEP0_ANSWERS = "heldout_step0.npy"
STEP0_SAMPLED = "heldout_step0_sampled.npy"
_CHUNK = 1 << 22


class CorruptCheckpointError(RuntimeError):
  """No checkpoint of a directory that holds some passes its checksums."""


def workdir_path(workdir: str) -> epath.Path:
  """The workdir as a path: local (made absolute) or a cloud URI such as
  gs://bucket/run, which every host of a multi-host job can reach."""
  path = epath.Path(workdir)
  return path if "://" in workdir else path.absolute()


def write_atomic(path: epath.Path, data: bytes) -> None:
  """Writes `data` beside `path` and renames it over `path` (replacing any
  earlier file or leftover of a killed write), so `path` is never partial."""
  partial = path.parent / (path.name + ".partial")
  partial.write_bytes(data)
  partial.replace(path)


def _files(step_dir: epath.Path) -> list[epath.Path]:
  """Every file under step_dir but the checksum file, depth first."""
  files = []
  for p in sorted(step_dir.iterdir()):
    if p.is_dir():
      files.extend(_files(p))
    elif p.name != CHECKSUM_FILE:
      files.append(p)
  return files


def _sha256(path: epath.Path) -> str:
  digest = hashlib.sha256()
  with path.open("rb") as f:
    while chunk := f.read(_CHUNK):
      digest.update(chunk)
  return digest.hexdigest()


# A recorded digest with this prefix is the object store's CRC32C (base64);
# one without is a SHA-256 (hex).
_CRC32C = "crc32c:"


def _digests(step_dir: epath.Path) -> dict[str, tuple[str, int]]:
  """{path relative to step_dir: (digest, size)} of every file in it but the
  checksum file: object-store CRC32Cs on gs://, else SHA-256s."""
  if object_store.is_gcs(step_dir):
    return {name: (_CRC32C + crc, size) for name, (crc, size)
            in object_store.object_hashes(step_dir).items()
            if name != CHECKSUM_FILE}
  return {str(p.relative_to(step_dir)): (_sha256(p), p.stat().length)
          for p in _files(step_dir)}


def record_checksums(step_dir: epath.Path) -> None:
  """Writes step_dir/CHECKSUM_FILE: {relative path: [digest, size]} of every
  file in the (committed) step directory."""
  sums = {name: [digest, size]
          for name, (digest, size) in _digests(step_dir).items()}
  write_atomic(step_dir / CHECKSUM_FILE,
               json.dumps(sums, indent=0, sort_keys=True).encode())


def verify(step_dir: epath.Path) -> str | None:
  """None if every file of step_dir matches its recorded checksum, else what
  is wrong, naming the file."""
  sums_file = step_dir / CHECKSUM_FILE
  if not sums_file.exists():
    return (f"{sums_file} is missing (the save did not finish, or the "
            "checkpoint predates checksums)")
  try:
    sums = json.loads(sums_file.read_text())
  except ValueError as e:
    return f"{sums_file} is not valid JSON ({e})"
  if object_store.is_gcs(step_dir):
    found = _digests(step_dir)
  else:
    found = {str(p.relative_to(step_dir)): (None, p.stat().length)
             for p in _files(step_dir)}
  for name, (digest, size) in sorted(sums.items()):
    path = step_dir / name
    if name not in found:
      return f"{path} is missing"
    actual_digest, actual = found[name]
    if actual != size:
      return f"{path} has {actual} bytes, {size} were saved"
    if actual_digest is None:  # a local file: its bytes are read only now
      actual_digest = _sha256(path)
    if actual_digest != digest:
      kind = "CRC32C" if digest.startswith(_CRC32C) else "SHA-256"
      return f"{path} does not match its {kind} checksum"
  extra = sorted(set(found) - set(sums))
  if extra:
    return f"{step_dir / extra[0]} was not part of the saved checkpoint"
  return None


def _sync(name: str) -> None:
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(name)


class Checkpoints:
  """The run's checkpoints in <workdir>/checkpoints: the latest
  `config.max_checkpoints` steps, and step 0 (the warm-started players) for
  good: stage 2 can be rerun from it with other settings, and
  `train.tools.agent_probe` trains the agent alone from it.

  Constructing it checks the newest steps (chief only) and moves those that
  fail their checksums aside, so `latest_step()` is the newest intact step.
  """

  def __init__(self, directory: epath.Path, max_to_keep: int | None,
               keep_steps=(0,), chief: bool = True):
    self.directory = directory
    self.chief = chief
    self.skipped: list[tuple[int, str]] = []  # (step, why) moved aside
    if chief and directory.exists():
      self._reject_corrupt_steps()
    _sync(f"checkpoints verified: {directory}")
    policies = [checkpoint_managers.CustomSteps(list(keep_steps))]
    if max_to_keep is not None:
      policies.append(checkpoint_managers.LatestN(max_to_keep))
    self.manager = ocp.CheckpointManager(
        directory, options=ocp.CheckpointManagerOptions(
            preservation_policy=checkpoint_managers.AnyPreservationPolicy(
                policies),
            create=True, cleanup_tmp_directories=True))
    self._pending: int | None = None

  def _step_dirs(self) -> dict[int, epath.Path]:
    return {int(p.name): p for p in self.directory.iterdir()
            if p.name.isdigit() and p.is_dir()}

  def _reject_corrupt_steps(self) -> None:
    for step, step_dir in sorted(self._step_dirs().items(), reverse=True):
      problem = verify(step_dir)
      if problem is None:
        return
      rejected = self.directory.parent / REJECTED_DIR
      rejected.mkdir(parents=True, exist_ok=True)
      target = rejected / f"{step}-{int(time.time())}"
      if object_store.is_gcs(step_dir):  # no directories to rename there
        object_store.move_tree(step_dir, target)
      else:
        step_dir.rename(target)
      logging.warning("Checkpoint step %d skipped and moved to %s: %s.", step,
                      target, problem)
      self.skipped.append((step, problem))
    if self.skipped:
      raise CorruptCheckpointError(
          f"No intact checkpoint in {self.directory}; each was moved to "
          f"{self.directory.parent / REJECTED_DIR}: "
          + "; ".join(f"step {s}: {why}" for s, why in self.skipped))

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def restore(self, step: int, target):
    """The state of checkpoint `step` in the layout of `target`."""
    try:
      return self.manager.restore(step, args=ocp.args.StandardRestore(target))
    except Exception as e:
      raise RuntimeError(f"{self.directory / str(step)}: the checkpoint could "
                         f"not be restored: {type(e).__name__}: {e}") from e

  def save(self, step: int, state) -> None:
    """Starts saving `state` as `step` in the background, after the previous
    save finished (its errors raised, its checksums recorded)."""
    self.finish()
    self.manager.save(step, args=ocp.args.StandardSave(state))
    self._pending = step

  def poll(self) -> None:
    """Finishes a background save that is done: raises its error, if any,
    and records its checksums. Cheap while it is still running."""
    if self._pending is not None and not self.manager.is_saving_in_progress():
      self.finish()

  def finish(self) -> None:
    """Waits for the background save; raises its error, with the step
    directory named; records its checksums."""
    if self._pending is None:
      return
    step, self._pending = self._pending, None
    try:
      self.manager.wait_until_finished()
      self.manager.check_for_errors()
    except Exception as e:
      raise RuntimeError(f"{self.directory / str(step)}: saving the checkpoint "
                         f"failed: {type(e).__name__}: {e}") from e
    if self.chief:
      record_checksums(self.directory / str(step))
    _sync(f"checksums recorded: {self.directory} {step}")

  def close(self) -> None:
    self.finish()
    self.manager.close()


def save_step0_answers(workdir: str, answers) -> None:
  """The step-0 agent's held-out `heldout.Answers`: which tasks it answers
  right (bool[n], STEP0_ANSWERS) and, when the evaluation samples, its
  sampled success per task (f32[n], STEP0_SAMPLED), each written whole
  (replacing what a killed earlier attempt left)."""
  arrays = {STEP0_ANSWERS: answers.correct}
  if answers.sampled is not None:
    arrays[STEP0_SAMPLED] = answers.sampled
  for name, array in arrays.items():
    buffer = io.BytesIO()
    np.save(buffer, array)
    write_atomic(workdir_path(workdir) / name, buffer.getvalue())


def load_step0_answers(workdir: str):
  """The `heldout.Answers` save_step0_answers wrote (sampled None when the
  run's evaluation samples none), or None when the workdir has none."""
  path = workdir_path(workdir) / STEP0_ANSWERS
  if not path.exists():
    logging.warning("%s is missing (a run from before it was kept): "
                    "evaluations will not compare with the step-0 agent.", path)
    return None
  sampled_path = workdir_path(workdir) / STEP0_SAMPLED
  sampled = (np.load(io.BytesIO(sampled_path.read_bytes()))
             if sampled_path.exists() else None)
  return heldout.Answers(np.load(io.BytesIO(path.read_bytes())), sampled)
