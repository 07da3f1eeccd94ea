"""Seed task data as tensorflow-datasets builders.

Each data source is a plain frozen dataclass config (importable without TensorFlow)
plus a `tfds.core.GeneratorBasedBuilder` made on first use, so `import genenv_jax.domains.arithmetic.data`
stays cheap. `load_split` prepares any of them into a data directory and returns a
split as numpy arrays; a new source (for example local JSONL or parquet text tasks)
is one more config class, one more builder factory, one entry in `_BUILDER_FACTORIES`
and one branch in `builder_config_from`.

`ArithmeticTasks` generates addition tasks in the arithmetic domain's written-task
format; nothing is downloaded. Splits:

- `train`: `train_size` seed tasks, difficulty levels 1..max_digits in equal shares
  (the counts differ by at most one).
- `test`: held-out evaluation, `test_per_level` distinct tasks per level (capped at half
  of the level's distinct (a, b) pairs: level 1 has only 100), and no (a, b) pair of
  `test` appears in `train`.

Features: `task` int32[task_len], `difficulty` int32, `a` int64, `b` int64.
Example (`data_dir` receives the prepared files):

  arrays = load_split(ArithmeticTasksConfig(max_digits=3), "test", "/tmp/tfds")
  arrays["task"]  # int32[num_examples, 9]
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import numpy as np

from genenv_jax.domains.base import library_console
from genenv_jax.domains.arithmetic.domain import ArithmeticDomain


@dataclasses.dataclass(frozen=True)
class ArithmeticTasksConfig:
  """What the `arithmetic_tasks` builder generates; the data is a function of these fields.

  Attributes:
    max_digits: longest operand, also the number of difficulty levels.
    seed: seed of the numpy generator that draws the tasks.
    train_size: number of train examples.
    test_per_level: held-out test examples per difficulty level (before the cap).
  """

  max_digits: int = 5
  seed: int = 0
  train_size: int = 20_000
  test_per_level: int = 200

  @property
  def name(self) -> str:
    """The tfds config name; it spells out every field, so distinct configs never share files."""
    return (
        f"digits{self.max_digits}_seed{self.seed}"
        f"_train{self.train_size}_test{self.test_per_level}"
    )


ARITHMETIC_PRESETS = (
    ArithmeticTasksConfig(max_digits=5),
    ArithmeticTasksConfig(max_digits=3),
    ArithmeticTasksConfig(max_digits=8),
)


def _pairs_at_level(level: int) -> int:
  """Number of ordered (a, b) pairs whose longer operand has exactly `level` digits."""
  return 100 if level == 1 else 100**level - 100 ** (level - 1)


def arithmetic_splits(config: ArithmeticTasksConfig) -> dict[str, dict[str, np.ndarray]]:
  """Generates both splits of `config` (deterministic: one numpy generator seeded by `config.seed`).

  Returns:
    {"train": arrays, "test": arrays}, each with task int32[N, task_len],
    difficulty int32[N], a int64[N], b int64[N].
  """
  domain = ArithmeticDomain(max_digits=config.max_digits)
  rng = np.random.default_rng(config.seed)

  # Level 1 is the 100-fact addition table: a fact cannot be inferred from the
  # others, so its test set is the whole table and is not held out of train.
  # Every other level's test tasks never appear in train.
  table = np.array([(x, y) for x in range(10) for y in range(10)], np.int64)
  held_out: dict[tuple[int, int], int] = {}  # insertion-ordered: level by level
  for level in range(2, config.max_digits + 1):
    count = min(config.test_per_level, _pairs_at_level(level) // 2)
    target = len(held_out) + count
    while len(held_out) < target:
      a, b = domain.random_operands(rng, np.full(2 * count, level))
      for pair in zip(a.tolist(), b.tolist()):
        if len(held_out) < target:
          held_out.setdefault(pair, level)
  test_pairs = np.concatenate(
      [table, np.array(list(held_out), np.int64).reshape(-1, 2)])
  test_difficulty = np.concatenate(
      [np.ones(len(table), np.int32), np.array(list(held_out.values()), np.int32)])

  train_difficulty = rng.permutation(np.arange(config.train_size) % config.max_digits + 1)
  train_a, train_b = domain.random_operands(rng, train_difficulty)

  def held_out_mask(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.array([pair in held_out for pair in zip(a.tolist(), b.tolist())], bool)

  clash = held_out_mask(train_a, train_b)
  while clash.any():
    redrawn = np.flatnonzero(clash)
    train_a[redrawn], train_b[redrawn] = domain.random_operands(rng, train_difficulty[redrawn])
    clash[redrawn] = held_out_mask(train_a[redrawn], train_b[redrawn])

  def split(a: np.ndarray, b: np.ndarray, difficulty: np.ndarray) -> dict[str, np.ndarray]:
    return {
        "task": domain.encode_tasks(a, b),
        "difficulty": difficulty.astype(np.int32),
        "a": a.astype(np.int64),
        "b": b.astype(np.int64),
    }

  return {
      "train": split(train_a, train_b, train_difficulty),
      "test": split(test_pairs[:, 0], test_pairs[:, 1], test_difficulty),
  }


@functools.cache
def arithmetic_tasks_builder() -> type:
  """The `ArithmeticTasks` builder class (imports TensorFlow; registered as "arithmetic_tasks")."""
  import tensorflow_datasets as tfds
  from etils import epath

  @dataclasses.dataclass(eq=False)
  class ArithmeticTasksBuilderConfig(tfds.core.BuilderConfig):
    spec: ArithmeticTasksConfig = ArithmeticTasksConfig()

  def builder_config(spec: ArithmeticTasksConfig) -> ArithmeticTasksBuilderConfig:
    return ArithmeticTasksBuilderConfig(
        name=spec.name,
        description=(
            f"a+b= tasks with 1..{spec.max_digits}-digit operands; {spec.train_size} train "
            f"examples, up to {spec.test_per_level} held-out test examples per level."
        ),
        spec=spec,
    )

  class ArithmeticTasks(tfds.core.GeneratorBasedBuilder):
    """Addition tasks as written-task rows of the arithmetic domain."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "Generated train split and held-out test split."}
    BUILDER_CONFIGS = [builder_config(spec) for spec in ARITHMETIC_PRESETS]

    # tfds's default lookup of this file needs `importlib_resources`, an optional package.
    code_path = epath.Path(__file__)

    @classmethod
    def for_config(cls, spec: ArithmeticTasksConfig, **kwargs: Any) -> ArithmeticTasks:
      # tfds refuses a custom config named like a preset: presets go by name.
      config = spec.name if spec in ARITHMETIC_PRESETS else builder_config(spec)
      return cls(config=config, **kwargs)

    def _info(self) -> tfds.core.DatasetInfo:
      task_len = ArithmeticDomain(max_digits=self.builder_config.spec.max_digits).task_len
      return self.dataset_info_from_configs(
          features=tfds.features.FeaturesDict({
              "task": tfds.features.Tensor(shape=(task_len,), dtype=np.int32),
              "difficulty": tfds.features.Scalar(dtype=np.int32),
              "a": tfds.features.Scalar(dtype=np.int64),
              "b": tfds.features.Scalar(dtype=np.int64),
          }),
      )

    def _split_generators(self, dl_manager: tfds.download.DownloadManager):
      del dl_manager  # the data is generated, not downloaded
      splits = arithmetic_splits(self.builder_config.spec)
      return {name: self._generate_examples(arrays) for name, arrays in splits.items()}

    def _generate_examples(self, arrays: dict[str, np.ndarray]):
      for index in range(arrays["task"].shape[0]):
        yield index, {key: value[index] for key, value in arrays.items()}

  return ArithmeticTasks


# Config type -> factory of its builder class (each class has `for_config(spec, data_dir=...)`).
_BUILDER_FACTORIES: dict[type, Callable[[], type]] = {
    ArithmeticTasksConfig: arithmetic_tasks_builder,
}


def builder_config_from(config: Any) -> ArithmeticTasksConfig:
  """The seed-data config of a run: `config.task` picks the source, `config.data` sizes it.

  Reads config.task.max_digits, config.data.seed, config.data.num_train
  and config.data.num_test_per_level.
  """
  return ArithmeticTasksConfig(
      max_digits=int(config.task.max_digits),
      seed=int(config.data.seed),
      train_size=int(config.data.num_train),
      test_per_level=int(config.data.num_test_per_level),
  )


def make_builder(name_or_config: str | Any, data_dir: str):
  """A tfds builder writing to and reading from `data_dir`.

  Args:
    name_or_config: a config instance (e.g. `ArithmeticTasksConfig(...)`) or a tfds
      name such as "arithmetic_tasks" (its first preset) or
      "arithmetic_tasks/digits3_seed0_train20000_test200".
    data_dir: directory for the prepared data.
  """
  factory = _BUILDER_FACTORIES.get(type(name_or_config))
  if factory is not None:
    return factory().for_config(name_or_config, data_dir=data_dir)
  if not isinstance(name_or_config, str):
    known = [config_type.__name__ for config_type in _BUILDER_FACTORIES]
    raise TypeError(
        f"name_or_config must be a dataset name or one of {known}, "
        f"got {type(name_or_config).__name__}"
    )
  import tensorflow_datasets as tfds

  for register in _BUILDER_FACTORIES.values():
    register()
  return tfds.builder(name_or_config, data_dir=data_dir)


def load_split(name_or_config: str | Any, split: str, data_dir: str) -> dict[str, np.ndarray]:
  """Prepares the dataset in `data_dir` if needed and returns one whole split as numpy arrays.

  Returns:
    {feature name: array with the split's examples along axis 0}, in the order tfds
    stored them (fixed for a given config).
  """
  import tensorflow_datasets as tfds

  builder = make_builder(name_or_config, data_dir)
  tfds.disable_progress_bar()
  with library_console():
    builder.download_and_prepare()
  if split not in builder.info.splits:
    raise ValueError(f"split {split!r} not in {builder.name}: {sorted(builder.info.splits)}")
  return dict(tfds.as_numpy(builder.as_dataset(split=split, batch_size=-1, shuffle_files=False)))


def seed_splits(domain: ArithmeticDomain, config: Any, data_dir: str
                ) -> tuple[dict, dict]:
  """The run's seed data (the registry's `seed_splits`): additions at every
  level (`arithmetic_splits`), prepared by the ArithmeticTasks builder in
  `data_dir`."""
  del domain  # the builder encodes with its own domain of the same digits
  builder_config = builder_config_from(config)
  return (load_split(builder_config, "train", data_dir),
          load_split(builder_config, "test", data_dir))
