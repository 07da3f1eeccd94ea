"""`metrics.jsonl`: one JSON object per logged step, as a clu MetricWriter.

On resume the file is cut back to the restored step, so a resumed run's file
reads exactly like an uninterrupted run's.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Mapping

from clu.metric_writers import interface

METRICS_FILE = "metrics.jsonl"


def _clean(value: Any):
  value = float(value)
  return value if math.isfinite(value) else None


class JsonlWriter(interface.MetricWriter):
  """Appends `{"step": s, name: value, ...}` lines to workdir/metrics.jsonl."""

  def __init__(self, workdir: str):
    self.path = os.path.join(workdir, METRICS_FILE)

  def truncate_after(self, step: int) -> None:
    """Drops records with step > `step` (written after the last checkpoint)."""
    records = [r for r in read_metrics(self.path) if r["step"] <= step]
    tmp = self.path + ".tmp"
    with open(tmp, "w") as f:
      for record in records:
        f.write(json.dumps(record) + "\n")
    os.replace(tmp, self.path)

  def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
    record = {"step": int(step)}
    record.update({k: _clean(v) for k, v in sorted(scalars.items())})
    with open(self.path, "a") as f:
      f.write(json.dumps(record) + "\n")

  def write_summaries(self, step, values, metadata=None):
    pass

  def write_images(self, step, images):
    pass

  def write_videos(self, step, videos):
    pass

  def write_audios(self, step, audios, *, sample_rate):
    pass

  def write_texts(self, step, texts):
    pass

  def write_histograms(self, step, arrays, num_buckets=None):
    pass

  def write_hparams(self, hparams):
    pass

  def flush(self):
    pass

  def close(self):
    pass


def read_metrics(path: str) -> list[dict]:
  """All records of a metrics.jsonl file (empty list if it does not exist)."""
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]
