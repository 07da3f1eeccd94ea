"""Seed and held-out tasks of the BFCL multi-turn domain, from the bfcl_eval wheel.

  python -m genenv_jax.domains.bfcl_multi_turn.data --config=configs/text.py:bfcl_multi_turn \
      --config.task.tokenizer_dir=DIR   # split sizes, drops, levels

Each entry of the chosen categories (`multi_turn_base`, `multi_turn_miss_param`)
becomes a written variation (`bfcl_variations.from_entry`, its first
`max_seed_turns` turns), read back by the domain's own parser: rows that do not
parse (ground truth with an execution error, a ground-truth episode longer than
max_turns) or do not fit the widths are dropped and counted.

The split is by entry number: BFCL's categories are variants of one set of
scenarios (`multi_turn_miss_param_12` is `multi_turn_base_12` with a turn that
leaves out a parameter), so the numbers drawn for the held-out set
(`test_fraction` of them, by a generator seeded with `seed`) are held out in every
category, and the simulator, which only ever sees train rows and its own
generations, never writes a variation of a held-out entry.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Sequence

from absl import logging
import numpy as np

from genenv_jax.domains.seed_data import SeedData
from genenv_jax.scoring import InputError
from genenv_jax.scoring import bfcl_multi_turn as mt
from genenv_jax.scoring import bfcl_prompt
from genenv_jax.scoring import bfcl_variations as bv
from genenv_jax.domains.bfcl_multi_turn.domain import (CATEGORIES,
                                                       BfclMultiTurnDomain)



@dataclasses.dataclass(frozen=True)
class Split:
  """rows int32[n, task_len]; difficulty int32[n]; ids the entries' ids;
  num_dropped entries that did not parse or fit."""
  rows: np.ndarray
  difficulty: np.ndarray
  ids: tuple[str, ...]
  num_dropped: int


def entry_number(entry_id: str) -> int:
  """The scenario number of an id, e.g. 12 of `multi_turn_miss_param_12`."""
  return int(entry_id.rsplit("_", 1)[1])


def held_out_numbers(numbers: Sequence[int], test_fraction: float, seed: int
                     ) -> set[int]:
  """The entry numbers held out: round(test_fraction · n) of the n distinct ones."""
  distinct = sorted(set(numbers))
  count = int(round(test_fraction * len(distinct)))
  order = np.random.default_rng(seed).permutation(len(distinct))
  return {distinct[i] for i in order[:count]}


def _missing_files(config, names: Sequence[str]) -> list[str]:
  """What a BFCL data directory lacks for config.data.categories (SEED_DATA)."""
  lacking = []
  for category in config.data.categories:
    pattern = re.compile(rf"BFCL_v\d+_{re.escape(category)}\.json")
    found = [n for n in names if pattern.fullmatch(n)]
    if len(found) != 1:
      lacking.append(f"one BFCL_v<N>_{category}.json (found {len(found)})")
    elif f"possible_answer/{found[0]}" not in names:
      lacking.append(f"possible_answer/{found[0]}")
  if not any(n.startswith(mt.FUNC_DOC_DIR + "/") for n in names):
    lacking.append(f"{mt.FUNC_DOC_DIR}/ (the classes' function docs)")
  return lacking


# Where the seed entries come from (genenv_jax/domains/seed_data.py): a BFCL
# data directory in config.task.data_dir, else the bfcl_eval wheel's own.
SEED_DATA = SeedData(
    field="task.data_dir",
    expected=lambda config: (
        "BFCL's data directory: BFCL_v<N>_<category>.json for each of "
        f"config.data.categories {list(config.data.categories)}, its "
        f"possible_answer/ file and {mt.FUNC_DOC_DIR}/ (\"\" reads the "
        "bfcl_eval wheel's)"),
    missing=_missing_files, required=False)


def bfcl_splits(domain: BfclMultiTurnDomain, categories: Sequence[str],
                test_fraction: float, seed: int, max_seed_turns: int = 0,
                data_dir: str = "") -> dict[str, Split]:
  """{"train": Split, "test": Split} (module docstring).

  Raises:
    InputError: a category is not one of CATEGORIES.
  """
  unknown = [c for c in categories if c not in CATEGORIES]
  if unknown or not categories:
    raise InputError(f"config.data.categories={list(categories)}: expected some "
                     f"of {CATEGORIES}")
  data_dir = data_dir or bfcl_prompt.wheel_data_dir()
  entries = [e for c in categories for e in mt.load_category(data_dir, c)]
  held_out = held_out_numbers([entry_number(e.id) for e in entries], test_fraction,
                              seed)
  splits = {}
  for name, chosen in (("train", [e for e in entries
                                  if entry_number(e.id) not in held_out]),
                       ("test", [e for e in entries
                                 if entry_number(e.id) in held_out])):
    rows, levels, ids = [], [], []
    for entry in chosen:
      seed = domain.seed_row(bv.from_entry(entry, max_seed_turns).text())
      if seed is not None:
        rows.append(seed[0])
        levels.append(seed[1])
        ids.append(entry.id)
    splits[name] = Split(
        np.asarray(rows, np.int32).reshape(-1, domain.task_len),
        np.asarray(levels, np.int32), tuple(ids), len(chosen) - len(rows))
  return splits


def seed_splits(domain: BfclMultiTurnDomain, config, data_dir: str
                ) -> tuple[dict, dict]:
  """The run's seed data (the registry's `seed_splits`): BFCL's
  multi-turn entries of config.data.categories split into seeds and a
  held-out set (`bfcl_splits`); `data_dir` is unused."""
  del data_dir
  splits = bfcl_splits(
      domain, tuple(config.data.categories), config.data.test_fraction,
      config.data.seed, config.data.max_seed_turns, config.task.data_dir)
  for name, split in splits.items():
    if not len(split.rows):
      raise ValueError(f"BFCL multi-turn: no {name} entry fits the domain's widths "
                       f"({split.num_dropped} dropped; widen config.task's widths "
                       "or lower config.data.max_seed_turns).")
    logging.info("BFCL multi-turn seeds: %d %s entries, %d dropped.",
                 len(split.rows), name, split.num_dropped)
  return tuple({"task": splits[name].rows, "difficulty": splits[name].difficulty}
               for name in ("train", "test"))


def main(argv) -> None:
  """Prints each split's size, drops and levels for --config (its task's
  widths and its data section)."""
  del argv
  from absl import flags  # pylint: disable=import-outside-toplevel
  config = flags.FLAGS.config
  splits = bfcl_splits(BfclMultiTurnDomain.from_config(config.task), tuple(config.data.categories),
                       config.data.test_fraction, config.data.seed,
                       config.data.max_seed_turns, config.task.data_dir)
  for name, split in splits.items():
    levels = np.bincount(split.difficulty, minlength=config.task.max_difficulty + 1)
    print(f"{name}: {len(split.rows)} entries, {split.num_dropped} dropped, "
          f"per level {levels[1:].tolist()}")


if __name__ == "__main__":
  from absl import app  # pylint: disable=g-import-not-at-top
  from ml_collections import config_flags  # pylint: disable=g-import-not-at-top
  config_flags.DEFINE_config_file("config", None, "A bfcl_multi_turn config.")
  app.run(main)
