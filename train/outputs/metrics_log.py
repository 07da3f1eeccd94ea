"""`metrics.jsonl`: one JSON object per logged step, as a clu MetricWriter,
and the window that turns per-step metrics into the logged values.

On resume the file is cut back to the restored step, so a resumed run's file
reads exactly like an uninterrupted run's; a torn last line (a kill during a
write) is dropped first.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any, Mapping

from absl import logging
from clu.metric_writers import interface
from etils import epath
import jax
import jax.numpy as jnp

from train.checkpoints import checkpointing

METRICS_FILE = "metrics.jsonl"


# Metrics that describe the state after the step (sizes of the pools), logged
# as of the logged step rather than averaged over the window.
GAUGE_PREFIXES = ("pool/",)


@jax.jit
def _add(total, metrics):
  return jax.tree.map(jnp.add, total, metrics)


class StepMetricsWindow:
  """The exact mean of each step metric over the steps since the last log.

  Each step's metrics are `step_metrics.ratio`s, f32[2] (sum, count) device
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

  def save(self, workdir: str, step: int) -> None:
    """Writes the window's partial totals (the steps since the last log, up
    to `step`) beside the run's checkpoints, so that a run stopped at a step
    inside a log window (a preemption) resumes the window where it was: the
    logged means stay those of a run never stopped. Nothing when empty."""
    if not self._count:
      return
    total, latest = jax.device_get((self._total, self._latest))
    record = {"step": step, "count": self._count,
              "total": {k: [float(x) for x in v] for k, v in total.items()},
              "latest": {k: [float(x) for x in v] for k, v in latest.items()}}
    path = _window_path(workdir, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    checkpointing.write_atomic(path, json.dumps(record).encode())

  def resume(self, workdir: str, step: int) -> None:
    """Restores the window `save` wrote at `step` (the checkpoint the run
    resumes from), if any, and removes the windows of other steps."""
    directory = epath.Path(workdir) / WINDOW_DIR
    if not directory.exists():
      return
    path = _window_path(workdir, step)
    if path.exists():
      record = json.loads(path.read_text())
      as_arrays = lambda d: {k: jnp.asarray(v, jnp.float32)
                             for k, v in d.items()}
      self._total, self._latest = (as_arrays(record["total"]),
                                   as_arrays(record["latest"]))
      self._count = int(record["count"])
    for other in directory.iterdir():
      if other.name != path.name:
        other.unlink()


# Partial metrics windows of steps saved inside a log window
# (StepMetricsWindow.save), one JSON file a step.
WINDOW_DIR = "metrics_window"


def _window_path(workdir: str, step: int) -> epath.Path:
  return epath.Path(workdir) / WINDOW_DIR / f"{step}.json"


def drop_windows(workdir: str) -> None:
  """Removes every saved window: the run finished, nothing resumes one."""
  (epath.Path(workdir) / WINDOW_DIR).rmtree(missing_ok=True)


# The key of a record that lists its metrics whose value was not finite (JSON
# has no NaN or infinity: they are written as null, and named here).
NONFINITE_KEY = "nonfinite"


class JsonlWriter(interface.MetricWriter):
  """Keeps `{"step": s, name: value, ...}` lines in workdir/metrics.jsonl.

  On a local disk each record is appended as one line (a write's cost does
  not grow with the file); a kill mid-write can leave a torn last line, which
  the next run's writer drops with a warning. Object storage (gs://...) has
  no append: there the file is rewritten whole (beside it, then renamed over
  it) at `flush`, which the driver calls before every checkpoint save, and
  at most every `OBJECT_STORE_FLUSH_S` seconds otherwise.
  """

  OBJECT_STORE_FLUSH_S = 60.0

  def __init__(self, workdir: str):
    self.path = epath.Path(workdir) / METRICS_FILE
    self._appends = "://" not in str(self.path)
    records, torn = _parse(self.path)
    if torn is not None:
      logging.warning("%s: dropped its torn last line (%d characters, left "
                      "by a write that was cut off).", self.path, len(torn))
      self._rewrite(records)
    # Object storage: every line of the file, and whether some are unsaved.
    self._lines = ([] if self._appends
                   else [json.dumps(r) + "\n" for r in records])
    self._unsaved = False
    self._saved_at = time.monotonic()

  def truncate_after(self, step: int) -> None:
    """Drops records with step > `step` (written after the last checkpoint;
    -1: all, for a run that starts over)."""
    if self._appends:
      records, _ = _parse(self.path)
    else:
      records = [json.loads(line) for line in self._lines]
    kept = [r for r in records if r["step"] <= step]
    if not self._appends:
      self._lines = [json.dumps(r) + "\n" for r in kept]
    self._rewrite(kept)

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
    line = json.dumps(record) + "\n"
    if self._appends:
      with self.path.open("a") as f:
        f.write(line)
      return
    self._lines.append(line)
    self._unsaved = True
    if time.monotonic() - self._saved_at >= self.OBJECT_STORE_FLUSH_S:
      self.flush()

  def _rewrite(self, records: list[dict]) -> None:
    checkpointing.write_atomic(
        self.path, "".join(json.dumps(r) + "\n" for r in records).encode())
    self._unsaved = False
    self._saved_at = time.monotonic()

  def flush(self):
    """Object storage: writes the records not yet saved (a local file holds
    each record once written)."""
    if self._unsaved:
      checkpointing.write_atomic(self.path, "".join(self._lines).encode())
      self._unsaved = False
      self._saved_at = time.monotonic()

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

  def close(self):
    self.flush()


def _parse(path: epath.Path) -> tuple[list[dict], str | None]:
  """(records, torn last line or None) of a metrics.jsonl file; ([], None)
  when it does not exist. A record is complete once its newline is written:
  text after the last newline is a torn line (a write cut off). Any other
  line that is not JSON is an error naming the file and line."""
  if not path.exists():
    return [], None
  *lines, tail = path.read_text().split("\n")
  records = []
  for number, line in enumerate(lines, 1):
    if not line.strip():
      continue
    try:
      records.append(json.loads(line))
    except ValueError as e:
      raise ValueError(f"{path}:{number} is not a JSON record ({e}); only a "
                       "torn last line (one without its newline) is "
                       "dropped.") from e
  return records, (tail or None)


def read_metrics(path: str) -> list[dict]:
  """All records of a metrics.jsonl file (empty list if it does not exist),
  without a torn last line (one a running or killed writer left partial)."""
  records, _ = _parse(epath.Path(path))
  return records
