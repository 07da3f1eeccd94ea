"""`metrics.jsonl`: one JSON object per logged step, as a clu MetricWriter,
and the window that turns per-step metrics into the logged values.

On resume the file is cut back to the restored step, so a resumed run's file
reads exactly like an uninterrupted run's.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

from absl import logging
from clu.metric_writers import interface
from etils import epath
import jax
import jax.numpy as jnp

from train import checkpointing

METRICS_FILE = "metrics.jsonl"


# Metrics that describe the state after the step (sizes of the pools), logged
# as of the logged step rather than averaged over the window.
GAUGE_PREFIXES = ("pool/",)


@jax.jit
def _add(total, metrics):
  return jax.tree.map(jnp.add, total, metrics)


class StepMetricsWindow:
  """The exact mean of each step metric over the steps since the last log.

  Each step's metrics are `coevolve.ratio`s, f32[2] (sum, count) device
  arrays; the window adds them on the device, so the host does not wait for a
  step to finish to record it, and `mean` fetches the totals once per log and
  divides once: sum of sums over sum of counts. Names starting with a
  GAUGE_PREFIXES entry keep the latest step's value instead.
  """

  def __init__(self):
    self._reset()

  def _reset(self) -> None:
    self._total = None
    self._latest = None
    self._count = 0

  def add(self, metrics: Mapping[str, jax.Array]) -> None:
    metrics = dict(metrics)
    self._total = metrics if self._total is None else _add(self._total,
                                                           metrics)
    self._latest = metrics
    self._count += 1

  def __len__(self) -> int:
    return self._count

  def mean(self) -> dict[str, float]:
    """{name: window mean (latest value for gauges)}; empties the window.
    A metric whose count is 0 over the whole window (e.g. a success rate
    with no valid task) logs 0."""
    if not self._count:
      raise ValueError("StepMetricsWindow.mean: no step was added since the "
                       "last log.")
    total, latest = jax.device_get((self._total, self._latest))
    out = {}
    for name, value in total.items():
      numerator, count = (latest if name.startswith(GAUGE_PREFIXES)
                          else total)[name]
      out[name] = float(numerator) / float(count) if count else 0.0
    self._reset()
    return out


# The key of a record that lists its metrics whose value was not finite (JSON
# has no NaN or infinity: they are written as null, and named here).
NONFINITE_KEY = "nonfinite"


class JsonlWriter(interface.MetricWriter):
  """Keeps `{"step": s, name: value, ...}` lines in workdir/metrics.jsonl.

  Each write replaces the file with a complete new version (written beside it,
  then renamed over it), so the file is never half-written and the workdir may
  be on object storage (gs://...) that cannot append.
  """

  def __init__(self, workdir: str):
    self.path = epath.Path(workdir) / METRICS_FILE
    self._records = read_metrics(self.path)

  def truncate_after(self, step: int) -> None:
    """Drops records with step > `step` (written after the last checkpoint;
    -1: all, for a run that starts over)."""
    self._records = [r for r in self._records if r["step"] <= step]
    self._save()

  def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
    """Appends a record; a value that is not finite is written as null, its
    name listed under NONFINITE_KEY and logged as a warning."""
    record = {"step": int(step)}
    nonfinite = []
    for name, value in sorted(scalars.items()):
      value = float(value)
      if not math.isfinite(value):
        nonfinite.append(name)
        value = None
      record[name] = value
    if nonfinite:
      record[NONFINITE_KEY] = nonfinite
      logging.warning("Step %d: metrics not finite (written as null in %s): "
                      "%s", step, self.path, ", ".join(nonfinite))
    self._records.append(record)
    self._save()

  def _save(self) -> None:
    checkpointing.write_atomic(
        self.path,
        "".join(json.dumps(r) + "\n" for r in self._records).encode())

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
  path = epath.Path(path)
  if not path.exists():
    return []
  return [json.loads(line) for line in path.read_text().splitlines()
          if line.strip()]
