"""Faults injected into the live smoke config, and what the run does about
each: divergence, corrupt checkpoints, a changed config, a second process,
kills in stage 1 and before checkpoint 0 (issue 23; docs/robustness.md).

The session's finished live run (tests/live_run.py; checkpoints 0, 2 and 4)
is shared; each case copies it or reads it. A case that reruns steps and
compares them with it first checks that they are live.
"""

import json
import logging
import os
import shutil
import socket
import subprocess
import time

from etils import epath
import jax
import numpy as np
import pytest

from configs import default
from train.checkpoints import state_checkpoint
from train import config_validation
from train import loop
from train import warmstart
from train.checkpoints import checkpointing
from train.checkpoints import workdir as workdir_lib
from train.outputs import metrics_log
from train.runtime import nonfinite

from tests import live_run as live


def _config(tfds_dir, arg=live.LIVE, **fields):
  config = live.live_config(tfds_dir, arg)
  for name, value in fields.items():
    node = config
    *parents, leaf = name.split(".")
    for parent in parents:
      node = node[parent]
    node[leaf] = value
  return config


def _records(workdir):
  """metrics.jsonl's records without timing figures; records that hold only
  timing figures are dropped (a resumed process writes its first one a step
  later)."""
  out = []
  for r in metrics_log.read_metrics(
      os.path.join(workdir, metrics_log.METRICS_FILE)):
    kept = {k: v for k, v in r.items() if not k.startswith("perf/")
            and k not in ("steps_per_sec", "uptime")}
    if len(kept) > 1:
      out.append(kept)
  return out


def _raw_checkpoint(workdir, step):
  return state_checkpoint.read_state(workdir, step)[1]


def _assert_same_players(workdir, other, step):
  again, first = _raw_checkpoint(workdir, step), _raw_checkpoint(other, step)
  for player in ("agent", "simulator"):
    for a, b in zip(*(jax.tree.leaves(x[player]["params"])
                      for x in (again, first))):
      np.testing.assert_array_equal(a, b, err_msg=player)


@pytest.fixture(scope="module")
def finished(live_run):
  """(tfds_dir, workdir) of the session's finished live run (4 steps)."""
  return live_run


LAST = 4  # the live run's last step and checkpoint; 2 is the one before


def _largest_data_file(step_dir: epath.Path) -> epath.Path:
  files = [p for p in checkpointing._files(step_dir)
           if "/d/" in str(p)]
  return max(files, key=lambda p: p.stat().length)


def _flip_bytes(path):
  data = bytearray(path.read_bytes())
  middle = len(data) // 2
  for i in range(middle, middle + 64):
    data[i] ^= 0xFF
  path.write_bytes(bytes(data))


def _truncate(path):
  path.write_bytes(path.read_bytes()[:-100])


def _delete_metadata(step_dir):
  (step_dir / "default" / "_METADATA").unlink()


def _drop_checksums(step_dir):
  """What a kill between orbax's commit and the checksum write leaves: no
  checksums.json (its write_atomic's partial file at most)."""
  sums = step_dir / checkpointing.CHECKSUM_FILE
  partial = step_dir / (checkpointing.CHECKSUM_FILE + ".partial")
  partial.write_text(sums.read_text()[:40])
  sums.unlink()


@pytest.mark.parametrize("fault", ["flipped_bytes", "truncated", "deleted"])
def test_each_checkpoint_corruption_is_detected_naming_the_file(
    finished, tmp_path, fault):
  _, workdir = finished
  step_dir = epath.Path(tmp_path / "2")
  shutil.copytree(os.path.join(workdir, "checkpoints", "2"), step_dir)
  assert checkpointing.verify(step_dir) is None
  if fault == "deleted":
    _delete_metadata(step_dir)
    expected = f"{step_dir / 'default' / '_METADATA'} is missing"
  else:
    data_file = _largest_data_file(step_dir)
    (_flip_bytes if fault == "flipped_bytes" else _truncate)(data_file)
    expected = str(data_file)
  problem = checkpointing.verify(step_dir)
  assert problem is not None and expected in problem
  if fault == "truncated":
    assert "bytes," in problem


@pytest.mark.parametrize("fault", ["flipped_bytes", "checksums_missing"])
def test_corrupt_latest_checkpoint_falls_back_to_the_previous_one(
    finished, tmp_path, capsys, fault):
  tfds_dir, workdir = finished
  copy = str(tmp_path / "run")
  shutil.copytree(workdir, copy)
  step_dir = epath.Path(copy) / "checkpoints" / str(LAST)
  if fault == "flipped_bytes":
    why = str(_largest_data_file(step_dir))
    _flip_bytes(_largest_data_file(step_dir))
  else:
    why = f"{step_dir / checkpointing.CHECKSUM_FILE} is missing"
    _drop_checksums(step_dir)
  loop.train_and_evaluate(_config(tfds_dir), copy)
  assert f"Checkpoint step {LAST} skipped: {why}" in capsys.readouterr().out
  rejected = os.listdir(os.path.join(copy, checkpointing.REJECTED_DIR))
  assert [name.split("-")[0] for name in rejected] == [str(LAST)]
  # Steps 3-4 were run again from step 2, both players learning: the same
  # metrics and parameters.
  live.assert_run_live(live.records(copy), 3, LAST)
  assert _records(copy) == _records(workdir)
  _assert_same_players(copy, workdir, LAST)


@pytest.mark.parametrize("fault", ["missing", "partial_write", "not_json"])
def test_latest_checkpoint_without_readable_checksums_is_skipped(
    finished, tmp_path, fault):
  _, workdir = finished
  directory = epath.Path(tmp_path / "checkpoints")
  shutil.copytree(os.path.join(workdir, "checkpoints"), directory)
  sums = directory / str(LAST) / checkpointing.CHECKSUM_FILE
  if fault == "missing":
    sums.unlink()
    expected = f"{sums} is missing"
  elif fault == "partial_write":
    _drop_checksums(directory / str(LAST))
    expected = f"{sums} is missing"
  else:
    sums.write_text(sums.read_text()[:40])  # cut mid-record
    expected = f"{sums} is not valid JSON"
  checkpoints = checkpointing.Checkpoints(directory, 2)
  assert checkpoints.latest_step() == LAST - 2
  assert [step for step, _ in checkpoints.skipped] == [LAST]
  assert expected in checkpoints.skipped[0][1]
  rejected = os.listdir(tmp_path / checkpointing.REJECTED_DIR)
  assert [name.split("-")[0] for name in rejected] == [str(LAST)]


def test_no_intact_checkpoint_is_an_error_naming_the_files(finished,
                                                          tmp_path):
  _, workdir = finished
  directory = epath.Path(tmp_path / "checkpoints")
  shutil.copytree(os.path.join(workdir, "checkpoints"), directory)
  _delete_metadata(directory / str(LAST))
  (directory / "2" / checkpointing.CHECKSUM_FILE).unlink()
  _truncate(_largest_data_file(directory / "0"))
  with pytest.raises(checkpointing.CorruptCheckpointError) as info:
    checkpointing.Checkpoints(directory, 2)
  message = str(info.value)
  assert (f"step {LAST}: {directory / str(LAST) / 'default' / '_METADATA'} "
          "is missing") in message
  assert (f"step 2: {directory / '2' / checkpointing.CHECKSUM_FILE} is "
          "missing") in message
  assert "step 0: " in message and "bytes," in message


@pytest.mark.parametrize("field,value,conflict", [
    ("curriculum.alpha", 0.3, "curriculum.alpha: 0.1 != 0.3"),
    ("agent.model_overrides.hidden_size", 64,
     "agent.model_overrides.hidden_size: 32 != 64"),
])
def test_rerun_with_a_changed_config_is_refused_naming_the_field(
    finished, tmp_path, field, value, conflict):
  tfds_dir, workdir = finished
  copy = str(tmp_path / "run")
  shutil.copytree(workdir, copy)
  saved = (epath.Path(copy) / "config.json").read_text()
  with pytest.raises(ValueError, match="another config") as info:
    loop.train_and_evaluate(_config(tfds_dir, **{field: value}), copy)
  assert conflict in str(info.value)
  assert (epath.Path(copy) / "config.json").read_text() == saved
  assert not os.path.exists(os.path.join(copy, workdir_lib.LOCK_FILE))


def test_fields_listed_as_resumable_may_change():
  config = default.get_config("smoke")
  saved = json.loads(config.to_json_best_effort())
  config.coevolve.num_steps = 100
  config.eval.every_steps = 10
  config.mesh.data = 4
  assert workdir_lib.config_conflicts(config, saved) == []
  config.seed = 1  # the seed data follows the seed
  assert workdir_lib.config_conflicts(config, saved) == ["data.seed: 0 != 1",
                                                         "seed: 0 != 1"]


def test_workdir_held_by_a_live_process_is_refused_naming_it(finished,
                                                             tmp_path):
  tfds_dir, _ = finished
  holder = subprocess.Popen(["sleep", "60"])
  try:
    (tmp_path / workdir_lib.LOCK_FILE).write_text(json.dumps(
        {"pid": holder.pid, "host": socket.gethostname()}))
    with pytest.raises(workdir_lib.WorkdirLockedError,
                       match=f"process {holder.pid} on host "
                       f"'{socket.gethostname()}'"):
      loop.train_and_evaluate(_config(tfds_dir), str(tmp_path))
    # A lock from another host is refused too: its holder cannot be seen.
    (tmp_path / workdir_lib.LOCK_FILE).write_text(json.dumps(
        {"pid": 1, "host": "elsewhere"}))
    with pytest.raises(workdir_lib.WorkdirLockedError, match="'elsewhere'"):
      workdir_lib.WorkdirLock(str(tmp_path)).__enter__()
  finally:
    holder.kill()
    holder.wait()
  assert not (tmp_path / "config.json").exists()


def test_stale_lock_of_a_dead_process_is_taken_over(tmp_path):
  dead = subprocess.Popen(["true"])
  dead.wait()
  lock_file = tmp_path / workdir_lib.LOCK_FILE
  lock_file.write_text(json.dumps({"pid": dead.pid,
                                   "host": socket.gethostname()}))
  with workdir_lib.WorkdirLock(str(tmp_path)):
    assert json.loads(lock_file.read_text())["pid"] == os.getpid()
    with pytest.raises(workdir_lib.WorkdirLockedError):  # not twice
      workdir_lib.WorkdirLock(str(tmp_path)).__enter__()
  assert not lock_file.exists()


def test_lock_of_another_host_is_refused_while_its_lease_is_live_then_taken_over(
    tmp_path, caplog):
  lock_file = tmp_path / workdir_lib.LOCK_FILE
  now = time.time()
  lock_file.write_text(json.dumps({"pid": 7, "host": "lost-vm", "time": now,
                                   "renewed": now - 50, "lease_s": 60.0}))
  with pytest.raises(workdir_lib.WorkdirLockedError,
                     match=r"process 7 on host 'lost-vm'.*lapses in 1\d s"):
    workdir_lib.WorkdirLock(str(tmp_path)).__enter__()
  # Its holder renewed it 61 s ago with a 60 s lease: gone, taken over.
  lock_file.write_text(json.dumps({"pid": 7, "host": "lost-vm", "time": now,
                                   "renewed": now - 61, "lease_s": 60.0}))
  with caplog.at_level(logging.WARNING):
    with workdir_lib.WorkdirLock(str(tmp_path)):
      assert json.loads(lock_file.read_text())["pid"] == os.getpid()
  assert "process 7 on host 'lost-vm', whose lease lapsed" in caplog.text
  assert not lock_file.exists()


def test_a_held_lock_is_renewed_so_its_lease_never_lapses(tmp_path):
  lock_file = tmp_path / workdir_lib.LOCK_FILE
  with workdir_lib.WorkdirLock(str(tmp_path), lease_s=0.6):
    first = json.loads(lock_file.read_text())
    time.sleep(1.5)  # 2.5 leases: lapsed, had it not been renewed
    later = json.loads(lock_file.read_text())
    assert later["renewed"] > first["renewed"] + 0.6
    assert later["time"] == first["time"] and later["pid"] == os.getpid()
    # Seen from another host, it is live.
    other = workdir_lib.WorkdirLock(str(tmp_path), lease_s=0.6)
    other.me = {"pid": 1, "host": "elsewhere"}
    with pytest.raises(workdir_lib.WorkdirLockedError):
      other.__enter__()
  assert not lock_file.exists()


def test_diverging_run_stops_before_its_next_checkpoint(finished, tmp_path,
                                                        monkeypatch):
  tfds_dir, workdir = finished
  # An infinite learning rate makes every update non-finite. The validator
  # refuses it as a config value, so it is let through here: what is tried is
  # a run whose updates diverge, whatever makes them.
  monkeypatch.setattr(loop.config_validation, "validate",
                      lambda config, num_devices: None)
  config = _config(tfds_dir, **{"agent.learning_rate": float("inf"),
                                "simulator.learning_rate": float("inf"),
                                "max_skipped_updates": 0,
                                "warmstart.init_from": workdir})
  with pytest.raises(nonfinite.NonFiniteUpdateError,
                     match=r"Step 1: agent/skipped_updates counts 2 "):
    loop.train_and_evaluate(config, str(tmp_path))
  assert os.listdir(tmp_path / "checkpoints") == ["0"]
  step1 = [r for r in metrics_log.read_metrics(
      tmp_path / metrics_log.METRICS_FILE) if r["step"] == 1]
  assert step1 and step1[0]["agent/skipped_updates"] == 2


def test_diverging_warm_start_stops_before_its_checkpoint(finished, tmp_path):
  tfds_dir, _ = finished
  config = _config(tfds_dir, "smoke", **{"warmstart.learning_rate": 1e6,
                                         "max_skipped_updates": 0})
  with pytest.raises(nonfinite.NonFiniteUpdateError,
                     match=r"warmstart/agent/skipped_updates") as info:
    loop.train_and_evaluate(config, str(tmp_path))
  stopped = int(str(info.value).split(":")[0].removeprefix("Step "))
  saved = os.listdir(tmp_path / warmstart.CHECKPOINT_DIR / "agent")
  assert all(int(step) < stopped for step in saved)
  assert not (tmp_path / "checkpoints" / "0").exists()


class _Killed(BaseException):
  """Stands for the process being killed at that point."""


def test_kills_in_warm_start_and_before_checkpoint0_resume_to_the_same_run(
    finished, tmp_path, monkeypatch):
  tfds_dir, workdir = finished
  config = _config(tfds_dir)
  save = checkpointing.Checkpoints.save

  def kill_at(directory_name, step):
    def fake_save(self, s, state):
      if self.directory.name == directory_name and s == step:
        raise _Killed()
      save(self, s, state)
    monkeypatch.setattr(checkpointing.Checkpoints, "save", fake_save)

  # 1. Killed at the agent warm-start's last save: the checkpoint before it
  # holds; the rerun trains the steps after it only.
  ws = config.warmstart
  kill_at("agent", ws.agent_steps)
  with pytest.raises(_Killed):
    loop.train_and_evaluate(config, str(tmp_path))
  assert os.listdir(tmp_path / warmstart.CHECKPOINT_DIR / "agent") == [
      str(ws.agent_steps - ws.checkpoint_every)]
  # 2. Killed after the step-0 answers and metrics, before checkpoint 0.
  kill_at("checkpoints", 0)
  with pytest.raises(_Killed):
    loop.train_and_evaluate(config, str(tmp_path))
  assert (tmp_path / checkpointing.STEP0_ANSWERS).exists()
  assert not (tmp_path / "checkpoints" / "0").exists()
  # 3. A clean rerun: the same run as one never killed, no duplicate lines.
  monkeypatch.setattr(checkpointing.Checkpoints, "save", save)
  loop.train_and_evaluate(config, str(tmp_path))
  live.assert_run_live(live.records(str(tmp_path)), 1, LAST)
  assert _records(str(tmp_path)) == _records(workdir)
  _assert_same_players(str(tmp_path), workdir, LAST)
  assert not (tmp_path / warmstart.CHECKPOINT_DIR).exists()
  np.testing.assert_array_equal(
      np.load(tmp_path / checkpointing.STEP0_ANSWERS),
      np.load(os.path.join(workdir, checkpointing.STEP0_ANSWERS)))


def test_nonfinite_metric_is_named_in_its_record(tmp_path):
  writer = metrics_log.JsonlWriter(str(tmp_path))
  writer.write_scalars(3, {"agent/loss": float("nan"), "env/kl": 0.5})
  assert metrics_log.read_metrics(tmp_path / metrics_log.METRICS_FILE) == [
      {"step": 3, "agent/loss": None, "env/kl": 0.5,
       metrics_log.NONFINITE_KEY: ["agent/loss"]}]


def test_config_validation_rows_of_issue_23():
  config = default.get_config("smoke")
  for field, value in (("curriculum.alpha", 1.5), ("coevolve.attempts", 0),
                       ("coevolve.num_seeds", 0)):
    bad = _config("", **{field: value})
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
      config_validation.validate(bad, 8)
  config_validation.validate(config, 8)


def test_a_failed_background_save_stops_the_run_naming_the_step(tmp_path,
                                                                 monkeypatch):
  """A save that fails in the background surfaces at the next poll (each
  step polls) or finish, naming the step directory, and records no
  checksums for it."""
  ckpt = checkpointing.Checkpoints(epath.Path(tmp_path) / "checkpoints", 2)
  state = {"w": np.arange(4, dtype=np.float32)}

  def failing():
    raise OSError("disk full")

  monkeypatch.setattr(ckpt.manager, "check_for_errors", failing)
  ckpt.save(3, state)
  with pytest.raises(RuntimeError, match=r"checkpoints/3: saving the checkpoint "
                     r"failed: OSError: disk full"):
    ckpt.finish()
  assert not (tmp_path / "checkpoints" / "3" / checkpointing.CHECKSUM_FILE).exists()
