"""Seed and held-out tasks of the TravelPlanner domain, from TravelPlanner's files.

  python -m genenv_jax.domains.travelplanner.data --config=configs/travelplanner.py \
      --config.task.tokenizer_dir=DIR --config.task.data_dir=DATA   # sizes, drops, levels

Seeds: each query of the train split (45 in TravelPlanner's) written as it is
(`spec_of`), kept when the domain reads it back (its annotated plan passes it)
and its prompt fits `max_prompt_tokens`. Held out: each query of the validation
split (180), written as it is, kept when its prompt fits. A train query whose
text is a validation query's is dropped (the official splits share none). Both
counts of dropped queries are logged; a split with no query that fits is an
error naming the widths.
"""

from __future__ import annotations

import dataclasses

from absl import logging
import numpy as np

from genenv_jax.domains.seed_data import SeedData
from genenv_jax.domains.travelplanner.domain import SPLITS, TravelPlannerDomain, spec_of


@dataclasses.dataclass(frozen=True)
class Split:
  """rows int32[n, task_len]; difficulty int32[n]; ids the queries' row
  numbers; num_dropped the split's other queries (not read back, too wide,
  or a held-out query's text)."""
  rows: np.ndarray
  difficulty: np.ndarray
  ids: tuple[int, ...]
  num_dropped: int


# Where the train queries (seeds) and the validation queries (held out)
# come from (genenv_jax/domains/seed_data.py).
SEED_FILES = tuple(f"{split}{suffix}" for split in SPLITS
                   for suffix in (".csv", "_ref_info.jsonl"))
SEED_DATA = SeedData(
    field="task.data_dir",
    expected=lambda config: (
        "TravelPlanner's train split (seeds) and validation split (held out): "
        f"{', '.join(SEED_FILES)} (python -m train.tools.bench_download "
        "travelplanner fetches them)"),
    missing=lambda config, names: [n for n in SEED_FILES if n not in names])


def travelplanner_splits(domain: TravelPlannerDomain) -> dict[str, Split]:
  """{"train": Split, "test": Split} (module docstring).

  Raises:
    ValueError: the domain's data directory has no validation split.
  """
  if "validation" not in domain.queries:
    raise ValueError("config.task.data_dir has no validation.csv: the TravelPlanner "
                     "domain holds out TravelPlanner's validation split")
  held_out = {q.query.strip() for q in domain.queries["validation"]}
  splits = {}
  for name, split in (("train", "train"), ("test", "validation")):
    queries = [q for q in domain.queries[split]
               if split != "train" or q.query.strip() not in held_out]
    rows, levels, ids = [], [], []
    for query in queries:
      seed = domain.seed_row(spec_of(query, split).text())
      if seed is not None:
        rows.append(seed[0])
        levels.append(seed[1])
        ids.append(query.id)
    splits[name] = Split(np.asarray(rows, np.int32).reshape(-1, domain.task_len),
                         np.asarray(levels, np.int32), tuple(ids),
                         len(domain.queries[split]) - len(rows))
  return splits


def seed_splits(domain: TravelPlannerDomain, config, data_dir: str
                ) -> tuple[dict, dict]:
  """The run's seed data (the registry's `seed_splits`): `travelplanner_splits`
  of config.task.data_dir's files; `data_dir` is unused."""
  del config, data_dir
  splits = travelplanner_splits(domain)
  for name, split in splits.items():
    if not len(split.rows):
      raise ValueError(f"TravelPlanner: no {name} query fits the domain's widths "
                       f"({split.num_dropped} dropped; widen config.task."
                       "max_prompt_tokens or max_written_tokens).")
    logging.info("TravelPlanner seeds: %d %s queries, %d dropped, per level %s.",
                 len(split.rows), name, split.num_dropped,
                 np.bincount(split.difficulty).tolist())
  return tuple({"task": splits[name].rows, "difficulty": splits[name].difficulty}
               for name in ("train", "test"))


def main(argv) -> None:
  """Prints each split's size, drops and levels for --config."""
  del argv
  from absl import flags  # pylint: disable=import-outside-toplevel
  config = flags.FLAGS.config
  domain = TravelPlannerDomain.from_config(config.task)
  for name, split in travelplanner_splits(domain).items():
    levels = np.bincount(split.difficulty, minlength=config.task.max_difficulty + 1)
    print(f"{name}: {len(split.rows)} queries, {split.num_dropped} dropped, "
          f"per level {levels[1:].tolist()}")


if __name__ == "__main__":
  from absl import app  # pylint: disable=g-import-not-at-top
  from ml_collections import config_flags  # pylint: disable=g-import-not-at-top
  config_flags.DEFINE_config_file("config", None, "A travelplanner config.")
  app.run(main)
