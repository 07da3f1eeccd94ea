"""Preemption in one process (train/runtime/preemption.py): SIGTERM in stage 1, mid
stage 2 and during a checkpoint save each stop the run at a saved step with
`Preempted` naming it; the reruns resume to the metrics and parameters of a
run never interrupted. Ctrl-C is the same notice; a second one stops at once.
"""

import os
import signal

from etils import epath
import jax
import numpy as np
import pytest

from configs import default
from train.checkpoints import state_checkpoint
from train import loop
from train import warmstart
from train.checkpoints import checkpointing
from train.outputs import metrics_log
from train.runtime import preemption


def _config(tfds_dir):
  config = default.get_config("smoke")  # 4 steps, saved every 2, logged each
  config.data.tfds_dir = tfds_dir
  return config


def _records(workdir):
  """metrics.jsonl without wall-clock figures (records holding only those,
  which a resumed process starts afresh, dropped)."""
  kept = [{k: v for k, v in r.items() if not k.startswith("perf/")
           and k not in ("steps_per_sec", "uptime")}
          for r in metrics_log.read_metrics(
              os.path.join(workdir, metrics_log.METRICS_FILE))]
  return [r for r in kept if len(r) > 1]


def _state(workdir, step):
  """Every array of checkpoint `step`: both players' parameters and
  optimiser states, the pools, the rng and the step."""
  return jax.tree.leaves(state_checkpoint.read_state(workdir, step)[1])


def _sigterm():
  os.kill(os.getpid(), signal.SIGTERM)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
  """(tfds_dir, workdir) of the smoke run, never interrupted."""
  tfds_dir = str(tmp_path_factory.getbasetemp() / "tfds")
  workdir = str(tmp_path_factory.mktemp("reference"))
  loop.train_and_evaluate(_config(tfds_dir), workdir)
  return tfds_dir, workdir


def test_sigterm_in_stage1_mid_stage2_and_during_a_save_resume_bit_exact(
    reference, tmp_path, monkeypatch, capsys):
  tfds_dir, want = reference
  config = _config(tfds_dir)
  workdir = str(tmp_path)
  # 1. SIGTERM while the agent's warm-start computes its step 1: step 1 is
  # saved (a step its schedule, every 2, would not save) and the run stops.
  shard_batch = warmstart.sharding.shard_batch
  calls = []

  def shard_batch_then_sigterm(*args, **kwargs):
    calls.append(1)
    if len(calls) == 1:
      _sigterm()
    return shard_batch(*args, **kwargs)

  monkeypatch.setattr(warmstart.sharding, "shard_batch",
                      shard_batch_then_sigterm)
  with pytest.raises(preemption.Preempted,
                     match=r"saved stage 1's warmstart/agent step 1 in "):
    loop.train_and_evaluate(config, workdir)
  monkeypatch.setattr(warmstart.sharding, "shard_batch", shard_batch)
  assert "Received SIGTERM" in capsys.readouterr().out
  assert os.listdir(tmp_path / warmstart.CHECKPOINT_DIR / "agent") == ["1"]
  assert not os.listdir(tmp_path / "checkpoints")  # no step 0 yet

  # 2. The rerun resumes stage 1; SIGTERM during stage 2's step 1: the step
  # is finished, saved, and the run stops there.
  add = metrics_log.StepMetricsWindow.add
  steps_added = []

  def add_then_sigterm_at(step):
    def fake_add(self, metrics):
      steps_added.append(1)
      if len(steps_added) == step:
        _sigterm()
      add(self, metrics)
    return fake_add

  monkeypatch.setattr(metrics_log.StepMetricsWindow, "add",
                      add_then_sigterm_at(1))
  with pytest.raises(preemption.Preempted, match=r"saved step 1 in "):
    loop.train_and_evaluate(config, workdir)
  monkeypatch.setattr(metrics_log.StepMetricsWindow, "add", add)
  assert sorted(os.listdir(tmp_path / "checkpoints")) == ["0", "1"]
  assert _records(workdir) == [r for r in _records(want) if r["step"] <= 1]
  assert checkpointing.verify(epath.Path(tmp_path, "checkpoints", "1")) is None

  # 3. The rerun resumes from step 1; SIGTERM while step 2's checkpoint is
  # being written: that save completes, and the run stops at step 3, saved.
  save = checkpointing.Checkpoints.save

  def save_then_sigterm(self, step, state):
    save(self, step, state)
    if step == 2:
      _sigterm()

  monkeypatch.setattr(checkpointing.Checkpoints, "save", save_then_sigterm)
  with pytest.raises(preemption.Preempted, match=r"saved step 3 in "):
    loop.train_and_evaluate(config, workdir)
  monkeypatch.setattr(checkpointing.Checkpoints, "save", save)
  for step in (2, 3):
    assert checkpointing.verify(
        epath.Path(tmp_path, "checkpoints", str(step))) is None

  # 4. The last rerun finishes: the same run as one never interrupted.
  loop.train_and_evaluate(config, workdir)
  assert _records(workdir) == _records(want)
  got, expected = _state(workdir, 4), _state(want, 4)
  assert len(got) == len(expected)
  for a, b in zip(got, expected):
    np.testing.assert_array_equal(a, b)


def test_sigterm_inside_a_log_window_saves_that_step_and_resumes_the_window(
    reference, tmp_path, monkeypatch):
  """Logged every 2 steps: SIGTERM during stage 2's step 1 saves step 1 at
  once (not at the next logged step) with the window's partial totals; the
  rerun logs step 2's window mean as a run never stopped does."""
  tfds_dir, _ = reference
  config = _config(tfds_dir)
  config.log_every = 2
  want = str(tmp_path / "want")
  loop.train_and_evaluate(config, want)
  workdir = str(tmp_path / "stopped")
  add = metrics_log.StepMetricsWindow.add
  steps_added = []

  def add_then_sigterm(self, metrics):
    steps_added.append(1)
    if len(steps_added) == 1:
      _sigterm()
    add(self, metrics)

  monkeypatch.setattr(metrics_log.StepMetricsWindow, "add", add_then_sigterm)
  with pytest.raises(preemption.Preempted, match=r"saved step 1 in "):
    loop.train_and_evaluate(config, workdir)
  monkeypatch.setattr(metrics_log.StepMetricsWindow, "add", add)
  assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["0", "1"]
  assert os.listdir(os.path.join(workdir, metrics_log.WINDOW_DIR)) == [
      "1.json"]
  loop.train_and_evaluate(config, workdir)
  assert _records(workdir) == _records(want)
  assert not os.path.exists(os.path.join(workdir, metrics_log.WINDOW_DIR))
  for a, b in zip(_state(workdir, 4), _state(want, 4)):
    np.testing.assert_array_equal(a, b)


def test_ctrl_c_is_a_notice_and_a_second_one_stops_at_once(capsys):
  before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
  with preemption.Watch() as watch:
    assert not preemption.reached()
    os.kill(os.getpid(), signal.SIGINT)
    assert watch.notified and preemption.reached()
    assert "Received SIGINT" in capsys.readouterr().out
    with pytest.raises(KeyboardInterrupt):
      os.kill(os.getpid(), signal.SIGINT)
  # Outside a run: the handlers from before it again, and nothing to reach.
  assert {s: signal.getsignal(s) for s in before} == before
  assert not preemption.reached()
