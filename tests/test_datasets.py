"""Seed data: the arithmetic_tasks tfds builder and `load_split`."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import jax
import ml_collections
import numpy as np
import pytest

from genenv_jax import domains
from genenv_jax.domains.arithmetic import data as datasets
from genenv_jax.domains.arithmetic.domain import PAD, ArithmeticDomain

CONFIG = datasets.ArithmeticTasksConfig(max_digits=3, seed=7, train_size=300, test_per_level=60)
# Level 1's test set is the whole 100-fact addition table.
TEST_PER_LEVEL = [100, 60, 60]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
  data_dir = str(tmp_path_factory.mktemp("tfds"))
  splits = {split: datasets.load_split(CONFIG, split, data_dir) for split in ("train", "test")}
  return data_dir, splits


def _pairs(arrays: dict[str, np.ndarray]) -> list[tuple[int, int]]:
  return list(zip(arrays["a"].tolist(), arrays["b"].tolist()))


def test_split_sizes_and_difficulty_coverage(built):
  _, splits = built
  train, test = splits["train"], splits["test"]
  task_len = ArithmeticDomain(max_digits=CONFIG.max_digits).task_len
  assert train["task"].shape == (CONFIG.train_size, task_len) and train["task"].dtype == np.int32
  assert test["task"].shape == (sum(TEST_PER_LEVEL), task_len)
  assert train["difficulty"].dtype == np.int32 and train["a"].dtype == np.int64
  np.testing.assert_array_equal(np.bincount(train["difficulty"], minlength=4)[1:], [100, 100, 100])
  np.testing.assert_array_equal(np.bincount(test["difficulty"], minlength=4)[1:], TEST_PER_LEVEL)


def test_test_split_is_distinct_and_disjoint_from_train_above_level_1(built):
  _, splits = built
  test_pairs = _pairs(splits["test"])
  assert len(set(test_pairs)) == len(test_pairs)
  table = {(x, y) for x in range(10) for y in range(10)}
  level1 = splits["test"]["difficulty"] == 1
  assert {tuple(p) for p in np.array(test_pairs)[level1].tolist()} == table
  harder = {p for p, d in zip(test_pairs, splits["test"]["difficulty"]) if d > 1}
  assert not harder & set(_pairs(splits["train"]))


def test_rows_parse_as_valid_tasks_of_their_difficulty(built):
  _, splits = built
  domain = ArithmeticDomain(max_digits=CONFIG.max_digits)
  for arrays in splits.values():
    rows = arrays["task"]
    parsed = jax.jit(domain.parse)(rows, rows != PAD)
    np.testing.assert_array_equal(parsed.valid, True)
    np.testing.assert_array_equal(parsed.difficulty, arrays["difficulty"])
    np.testing.assert_array_equal(parsed.task, rows)
    np.testing.assert_array_equal(rows, domain.encode_tasks(arrays["a"], arrays["b"]))


def test_builds_are_deterministic_and_names_load_the_same_data(built, tmp_path):
  data_dir, splits = built
  rebuilt = datasets.load_split(CONFIG, "train", str(tmp_path))
  by_name = datasets.load_split(f"arithmetic_tasks/{CONFIG.name}", "test", data_dir)
  for key in ("task", "difficulty", "a", "b"):
    np.testing.assert_array_equal(rebuilt[key], splits["train"][key])
    np.testing.assert_array_equal(by_name[key], splits["test"][key])


def test_seed_changes_the_data():
  first = datasets.arithmetic_splits(CONFIG)
  other = datasets.arithmetic_splits(dataclasses.replace(CONFIG, seed=8))
  assert _pairs(first["train"]) != _pairs(other["train"])


def test_unknown_split_is_named(built):
  data_dir, _ = built
  with pytest.raises(ValueError, match="split 'validation'"):
    datasets.load_split(CONFIG, "validation", data_dir)


def test_import_does_not_load_tensorflow():
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  code = "import sys, genenv_jax.domains.arithmetic.data; print('tensorflow' in sys.modules)"
  result = subprocess.run(
      [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True,
      env={**os.environ, "PYTHONPATH": root},
  )
  assert result.stdout.strip() == "False"


def test_builder_config_from_run_config():
  config = ml_collections.ConfigDict({
      "task": {"name": "arithmetic", "max_digits": 3, "reverse_answer": True},
      "data": {"seed": 7, "num_train": 300, "num_test_per_level": 60},
  })
  assert datasets.builder_config_from(config) == CONFIG
  # An unknown domain has no seed data: the registry names it.
  config.task.name = "sudoku"
  with pytest.raises(ValueError, match="config.task.name='sudoku'"):
    domains.seed_splits(config, None, "")
