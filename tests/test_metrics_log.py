"""metrics.jsonl: complete rewrites (no appends, no partial files), reopening,
truncation on resume, and the workdir path helper."""
import json

import numpy as np

from train import loop
from train import metrics_log


def test_writer_rewrites_whole_file_and_reopens(tmp_path):
  writer = metrics_log.JsonlWriter(str(tmp_path))
  writer.write_scalars(1, {"a": 1.0, "b": np.float32(2.0)})
  writer.write_scalars(2, {"a": float("nan")})
  lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
  assert [json.loads(line) for line in lines] == [
      {"step": 1, "a": 1.0, "b": 2.0}, {"step": 2, "a": None}]
  assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]

  reopened = metrics_log.JsonlWriter(str(tmp_path))  # a resumed run
  reopened.truncate_after(1)
  reopened.write_scalars(2, {"a": 3.0})
  assert metrics_log.read_metrics(str(tmp_path / "metrics.jsonl")) == [
      {"step": 1, "a": 1.0, "b": 2.0}, {"step": 2, "a": 3.0}]


def test_read_metrics_of_missing_file_is_empty(tmp_path):
  assert metrics_log.read_metrics(str(tmp_path / "none.jsonl")) == []


def test_workdir_path_keeps_uris_and_makes_local_paths_absolute(tmp_path,
                                                                monkeypatch):
  monkeypatch.chdir(tmp_path)
  assert str(loop.workdir_path("runs/a")) == str(tmp_path / "runs" / "a")
  assert str(loop.workdir_path("gs://bucket/run")) == "gs://bucket/run"
