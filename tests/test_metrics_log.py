"""metrics.jsonl: writing and reopening (appends on a local disk: tests/test_metrics_append.py),
truncation on resume, the window that averages step metrics, and the workdir
path helper."""
import json

import jax.numpy as jnp
import numpy as np
import pytest

from configs import default

from train import loop
from train.checkpoints import checkpointing
from train.outputs import metrics_log


def test_writer_rewrites_whole_file_and_reopens(tmp_path):
  writer = metrics_log.JsonlWriter(str(tmp_path))
  writer.write_scalars(1, {"a": 1.0, "b": np.float32(2.0)})
  writer.write_scalars(2, {"a": float("nan")})
  lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
  assert [json.loads(line) for line in lines] == [
      {"step": 1, "a": 1.0, "b": 2.0},
      {"step": 2, "a": None, metrics_log.NONFINITE_KEY: ["a"]}]
  assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]

  reopened = metrics_log.JsonlWriter(str(tmp_path))  # a resumed run
  reopened.truncate_after(1)
  reopened.write_scalars(2, {"a": 3.0})
  assert metrics_log.read_metrics(str(tmp_path / "metrics.jsonl")) == [
      {"step": 1, "a": 1.0, "b": 2.0}, {"step": 2, "a": 3.0}]


def test_window_divides_summed_sums_by_summed_counts_and_keeps_latest_gauges():
  ratio = lambda total, count: jnp.array([total, count], jnp.float32)
  window = metrics_log.StepMetricsWindow()
  # Success sums and valid-task counts of three steps: 1/5, 6/10, 0/0.
  for (total, count), size in (((1.0, 5), 10), ((6.0, 10), 20),
                               ((0.0, 0), 30)):
    window.add({"env/success_rate": ratio(total, count),
                "pool/size": ratio(size, 1)})
  assert len(window) == 3
  logged = window.mean()
  # Exact: 7 successes in 15 tasks, not the mean of the per-step means (0.4).
  assert logged["env/success_rate"] == pytest.approx(7 / 15)
  assert logged["pool/size"] == 30
  assert len(window) == 0  # the next window starts empty
  window.add({"env/success_rate": ratio(0.0, 0), "pool/size": ratio(7, 1)})
  assert window.mean() == {"env/success_rate": 0.0, "pool/size": 7}
  with pytest.raises(ValueError, match="no step was added"):
    window.mean()


def test_checkpoints_off_the_log_windows_are_refused(tmp_path):
  config = default.get_config("smoke")
  config.log_every, config.checkpoint_every = 2, 3
  with pytest.raises(ValueError, match="checkpoint_every=3: expected a multiple "
                     "of config.log_every=2"):
    loop.train_and_evaluate(config, str(tmp_path))


def test_read_metrics_of_missing_file_is_empty(tmp_path):
  assert metrics_log.read_metrics(str(tmp_path / "none.jsonl")) == []


def test_workdir_path_keeps_uris_and_makes_local_paths_absolute(tmp_path,
                                                                monkeypatch):
  monkeypatch.chdir(tmp_path)
  assert str(checkpointing.workdir_path("runs/a")) == str(tmp_path / "runs" / "a")
  assert str(checkpointing.workdir_path("gs://bucket/run")) == "gs://bucket/run"
