"""Seed tasks of the text domain from local JSONL / parquet files, as a tfds builder.

`TextTasksConfig.source_dir` is read once into a prepared tensorflow-datasets
dataset (`text_tasks`, one config per source: its name digests the fields and the
files' names, sizes and modification times, BFCL answer files included, so edited
files are read again). The source directory holds, at its top level:

  *.jsonl / *.json   one JSON object per line (BFCL's `BFCL_v3_<category>.json`
                     question files are such files)
  *.parquet          one record per row (read with pyarrow)

Files whose names start with "test" form the `test` split (the held-out set) and
all others the `train` split (the agent pool's base data); without test files a
seeded `test_fraction` of the records is held out instead. (Format api_bank has
its own files, below.) A train record whose task text (whitespace runs collapsed)
is that of a held-out record is dropped, so no held-out task is trained on. A file
without records and an empty split are errors; a record without its fields is
reported with its file and 1-based line (JSON lines) or row (parquet).

Record formats (`format`):

  prompt_answer  a task text in `prompt_field` and its reference answer in
                 `answer_field` (a string; a list of strings gives its first; any
                 other JSON value is written as JSON).
  bfcl           BFCL single-turn lines: `question` (a string, or BFCL's list of turns
                 of {role, content} messages: the first turn's user messages),
                 `function` (the JSON schemas) and `ground_truth` (in the line, or in
                 `possible_answer/<same file name>` matched by `id`). The task text is
                 the question, the schemas and a request for Python-syntax calls; the
                 answer is the compact reference the text domain's `bfcl` verifier
                 reads (`text_verifiers.bfcl_reference`: the ground truth with the
                 types of the parameters it names, not the schemas).
  api_bank       API-Bank's level-1 and level-2 files (`scoring.apibank_levels`,
                 whose module doc gives their formats), found in the source
                 directory or its training-data/, test-data/ or json_test_data/:
                 the training files lv1-api-train.json and lv2-api-train.json are
                 the train split, the test files level-1-api.json and
                 level-2-api.json (Table 1's API-Bank items of those levels) the
                 held-out split; other files are not read. The task text is the
                 instruction (the call format; API descriptions), a line break and
                 the dialogue so far, ending "Generate API Request:"; the answer is
                 the gold call, `API-Request: [Name(key='value', ...)]`, which the
                 text domain's `api_bank` verifier reads (a record whose gold
                 call it cannot read is dropped as unparseable).

Features: `id`, `task`, `answer` (text) and `index` (the record's position in its
split; tfds stores examples in hashed order). `seed_rows` turns a split into the
domain's written-task rows, dropping tasks that do not fit its widths or that its
parser rejects; `load_seed_rows` does both splits of a run's config.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from typing import Any, NamedTuple, Sequence

from absl import logging
import jax
import numpy as np

from genenv_jax.domains.base import library_console
from genenv_jax.domains.seed_data import SeedData
from genenv_jax.domains.text import verifiers as text_verifiers
from genenv_jax.domains.text.domain import FORMATS, TextDomain
from genenv_jax.scoring import InputError, apibank_levels, read_jsonl, read_jsonl_lines

JSON_SUFFIXES = (".jsonl", ".json")
PARQUET_SUFFIX = ".parquet"
TEST_PREFIX = "test"
BFCL_ANSWER_DIR = "possible_answer"
PARSE_BATCH = 64
BFCL_REQUEST = ("Reply with the function call(s) only, as a Python list such as "
                "[function_name(argument=value)].")


class TextRecord(NamedTuple):
  """One seed task: an id, the task text and its reference answer text."""

  id: str
  task: str
  answer: str


@dataclasses.dataclass(frozen=True)
class TextTasksConfig:
  """Where the seed tasks are and how to read them.

  Attributes:
    source_dir: directory of JSONL / parquet files.
    format: one of FORMATS.
    prompt_field, answer_field: record fields of the task and the answer
      (prompt_answer format).
    test_fraction: share of the records held out when there are no test files.
    seed: seed of the held-out draw.
  """

  source_dir: str
  format: str = "prompt_answer"
  prompt_field: str = "prompt"
  answer_field: str = "answer"
  test_fraction: float = 0.1
  seed: int = 0

  def __post_init__(self):
    if self.format not in FORMATS:
      raise ValueError(f"config.data.format={self.format!r}; expected one of {FORMATS}")
    if not 0.0 <= self.test_fraction < 1.0:
      raise ValueError(f"config.data.test_fraction={self.test_fraction} must lie in [0, 1)")

  def source_files(self) -> list[str]:
    """The data files at the top level of source_dir, sorted by name (format
    api_bank: API-Bank's level-1/2 files, `apibank_levels.seed_files`)."""
    if not os.path.isdir(self.source_dir):
      raise InputError(f"config.data.source_dir={self.source_dir!r} is not a directory")
    if self.format == "api_bank":
      paths = apibank_levels.seed_files(self.source_dir)
      if not paths:
        raise InputError(
            f"{self.source_dir} holds none of API-Bank's files "
            f"{list(apibank_levels.TRAIN_FILES.values())} (training) or "
            f"{[apibank_levels.LEVEL_FILES[level] for level in apibank_levels.SEED_LEVELS]}"
            f" (test), directly or in {'/, '.join(apibank_levels.FOLDERS[1:])}/")
      return paths
    names = sorted(n for n in os.listdir(self.source_dir)
                   if n.endswith(JSON_SUFFIXES + (PARQUET_SUFFIX,))
                   and os.path.isfile(os.path.join(self.source_dir, n)))
    if not names:
      raise InputError(f"{self.source_dir} holds no {JSON_SUFFIXES + (PARQUET_SUFFIX,)} "
                       "files")
    return [os.path.join(self.source_dir, n) for n in names]

  @property
  def name(self) -> str:
    """The tfds config name: the format and a digest of the fields and source files."""
    digest = hashlib.sha1(repr(dataclasses.astuple(self)).encode())
    for path in self.source_files():
      answers = os.path.join(self.source_dir, BFCL_ANSWER_DIR, os.path.basename(path))
      for file in (path, answers) if os.path.isfile(answers) else (path,):
        stat = os.stat(file)
        digest.update(f"{os.path.relpath(file, self.source_dir)}:{stat.st_size}:"
                      f"{stat.st_mtime_ns}".encode())
    return f"{self.format}_{digest.hexdigest()[:16]}"


def _read_records(path: str) -> list[tuple[str, dict[str, Any]]]:
  """(where, record) of each record of a data file; `where` is "path:line N"
  (JSON lines, 1-based) or "path:row N" (parquet, 1-based).

  Raises:
    InputError: the file cannot be read or holds no records.
  """
  if path.endswith(PARQUET_SUFFIX):
    try:
      import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel
    except ImportError as e:
      raise InputError(f"reading {path} needs pyarrow, which is not installed") from e
    records = [(f"{path}:row {number}", record) for number, record in
               enumerate(pq.read_table(path).to_pylist(), start=1)]
  else:
    records = [(f"{path}:line {number}", record)
               for number, record in read_jsonl_lines(path)]
  if not records:
    raise InputError(f"{path} holds no records")
  return records


def _answer_text(value: Any) -> str:
  if isinstance(value, str):
    return value
  if isinstance(value, list) and value and isinstance(value[0], str):
    return value[0]
  return json.dumps(value)


def _question_text(question: Any) -> str:
  if isinstance(question, str):
    return question
  turn = question[0] if question and isinstance(question[0], list) else question
  return "\n".join(m["content"] for m in turn if m.get("role") == "user")


def _bfcl_answers(path: str) -> dict[str, Any]:
  answers_path = os.path.join(os.path.dirname(path), BFCL_ANSWER_DIR, os.path.basename(path))
  if not os.path.isfile(answers_path):
    return {}
  return {str(r.get("id")): r.get("ground_truth") for r in read_jsonl(answers_path)}


def bfcl_task_text(question: str, functions: Sequence[dict[str, Any]]) -> str:
  """The task text of a BFCL question: the question, its function schemas as
  compact JSON and BFCL_REQUEST."""
  return (f"{question}\n\nAvailable functions (JSON schemas):\n"
          f"{json.dumps(list(functions), separators=(',', ':'))}\n\n{BFCL_REQUEST}")


def api_bank_task_text(instruction: str, dialogue: str) -> str:
  """The task text of an API-Bank example: its instruction and its dialogue so far,
  one line break between them."""
  return f"{instruction.strip()}\n{dialogue.strip()}"


def is_held_out(config: TextTasksConfig, path: str) -> bool:
  """Whether a source file's records form the test split (module doc)."""
  if config.format == "api_bank":
    return apibank_levels.is_held_out(path)
  return os.path.basename(path).startswith(TEST_PREFIX)


def _task_key(task: str) -> str:
  return " ".join(task.split())


def read_source_file(config: TextTasksConfig, path: str) -> list[TextRecord]:
  """The seed tasks of one file.

  Raises:
    InputError: an unreadable or empty file, or a record without its fields (the
      message names the file, the record's line and the field).
  """
  if config.format == "api_bank":
    return [TextRecord(e.id, api_bank_task_text(e.system, e.user), e.answer)
            for e in apibank_levels.seed_examples(path)]
  records = _read_records(path)
  answers = _bfcl_answers(path) if config.format == "bfcl" else {}
  out = []
  for index, (where, record) in enumerate(records):
    record_id = str(record.get("id", f"{os.path.basename(path)}:{index}"))
    if config.format == "prompt_answer":
      for field in (config.prompt_field, config.answer_field):
        if record.get(field) in (None, ""):
          raise InputError(f"{where} has no {field!r} field")
      task = record[config.prompt_field]
      if not isinstance(task, str):
        raise InputError(f"{where}: field {config.prompt_field!r} is not a string")
      out.append(TextRecord(record_id, task, _answer_text(record[config.answer_field])))
      continue
    ground_truth = record.get("ground_truth", answers.get(record_id))
    for field, value in (("question", record.get("question")),
                         ("function", record.get("function")),
                         ("ground_truth", ground_truth)):
      if not value:
        raise InputError(f"{where} (id {record_id!r}) has no {field!r}")
    try:
      question = _question_text(record["question"])
    except (AttributeError, KeyError, TypeError) as e:
      raise InputError(f"{where}: 'question' is neither a string nor BFCL's list of "
                       "turns of {role, content} messages") from e
    functions = record["function"]
    try:
      reference = text_verifiers.bfcl_reference(functions, ground_truth)
    except (KeyError, TypeError, ValueError) as e:
      raise InputError(f"{where} (id {record_id!r}): the ground truth names a function "
                       f"without a typed schema: {e!r}") from e
    task = bfcl_task_text(question, functions)
    answer = json.dumps(reference, separators=(",", ":"))
    out.append(TextRecord(record_id, task, answer))
  return out


def read_splits(config: TextTasksConfig) -> dict[str, list[TextRecord]]:
  """{"train": records, "test": records} of the source directory (rules in the module doc).

  Raises:
    InputError: see `read_source_file`; or a split is empty (only test* files, or
      a test_fraction that holds out none of the records).
  """
  train: list[TextRecord] = []
  test: list[TextRecord] = []
  for path in config.source_files():
    records = read_source_file(config, path)
    (test if is_held_out(config, path) else train).extend(records)
  if not test:
    held_out = np.random.default_rng(config.seed).permutation(len(train))[
        :round(config.test_fraction * len(train))]
    chosen = set(held_out.tolist())
    test = [r for i, r in enumerate(train) if i in chosen]
    train = [r for i, r in enumerate(train) if i not in chosen]
    if not test:
      raise InputError(
          f"{config.source_dir} has no {TEST_PREFIX}* file and "
          f"config.data.test_fraction={config.test_fraction} holds out none of its "
          f"{len(train)} records: the test split would be empty")
  held_out = {_task_key(r.task) for r in test}
  kept = [r for r in train if _task_key(r.task) not in held_out]
  if len(kept) < len(train):
    logging.warning("Seed data: %d train records of %s dropped: their task is a "
                    "held-out task.", len(train) - len(kept), config.source_dir)
  if not kept:
    raise InputError(f"{config.source_dir}: the train split is empty (every "
                     "record is held out, or its task is a held-out task)")
  return {"train": kept, "test": test}


@functools.cache
def text_tasks_builder() -> type:
  """The `TextTasks` builder class (imports TensorFlow; registered as "text_tasks")."""
  import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
  from etils import epath  # pylint: disable=import-outside-toplevel

  @dataclasses.dataclass(eq=False)
  class TextTasksBuilderConfig(tfds.core.BuilderConfig):
    spec: TextTasksConfig | None = None

  class TextTasks(tfds.core.GeneratorBasedBuilder):
    """Seed text tasks read from a local directory."""

    VERSION = tfds.core.Version("1.1.0")
    RELEASE_NOTES = {"1.0.0": "train / test splits of local JSONL or parquet tasks.",
                     "1.1.0": "API-Bank files; train records with a held-out task "
                              "dropped."}
    BUILDER_CONFIGS = []

    # tfds's default lookup of this file needs `importlib_resources`, an optional package.
    code_path = epath.Path(__file__)

    @classmethod
    def for_config(cls, spec: TextTasksConfig, **kwargs: Any) -> TextTasks:
      config = TextTasksBuilderConfig(
          name=spec.name, description=f"{spec.format} tasks from {spec.source_dir}",
          spec=spec)
      return cls(config=config, **kwargs)

    def _info(self) -> tfds.core.DatasetInfo:
      return self.dataset_info_from_configs(
          features=tfds.features.FeaturesDict({
              "index": tfds.features.Scalar(dtype=np.int64),  # position in the split
              "id": tfds.features.Text(),
              "task": tfds.features.Text(),
              "answer": tfds.features.Text(),
          }))

    def _split_generators(self, dl_manager: tfds.download.DownloadManager):
      del dl_manager  # the data is local
      splits = read_splits(self.builder_config.spec)
      return {name: self._generate_examples(records) for name, records in splits.items()}

    def _generate_examples(self, records: list[TextRecord]):
      for index, record in enumerate(records):
        yield index, dict(record._asdict(), index=index)

  return TextTasks


def load_split(config: TextTasksConfig, split: str, data_dir: str) -> list[TextRecord]:
  """Prepares the dataset in `data_dir` if needed and returns one split, in source order."""
  import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel

  builder = text_tasks_builder().for_config(config, data_dir=data_dir)
  tfds.disable_progress_bar()
  with library_console():
    builder.download_and_prepare()
  if split not in builder.info.splits:
    raise ValueError(f"split {split!r} not in {builder.name}: {sorted(builder.info.splits)}")
  if not builder.info.splits[split].num_examples:
    return []
  arrays = tfds.as_numpy(builder.as_dataset(split=split, batch_size=-1,
                                            shuffle_files=False))
  return [TextRecord(*(arrays[f][i].decode() for f in TextRecord._fields))
          for i in np.argsort(arrays["index"])]


class SeedRows(NamedTuple):
  """Written-task rows of a split: rows int32[N, task_len], difficulty int32[N], and
  how many records were dropped (too long for the domain's widths, or rejected by its
  parser, e.g. a reference its verifier cannot check)."""

  rows: np.ndarray
  difficulty: np.ndarray
  num_dropped: int


def seed_rows(domain: TextDomain, records: Sequence[TextRecord]) -> SeedRows:
  """The domain's written-task rows of the records that it accepts, in order."""
  fitting = [r for r in records
             if len(domain.written_task_ids(r.task, r.answer)) <= domain.task_len]
  rows = domain.encode_tasks([r.task for r in fitting], [r.answer for r in fitting])
  if not len(rows):
    return SeedRows(rows, np.zeros((0,), np.int32), len(records))
  # Parsed in batches of a multiple of PARSE_BATCH rows: splits share compilations.
  padded = np.full((-(-len(rows) // PARSE_BATCH) * PARSE_BATCH, rows.shape[1]),
                   domain.pad_id, np.int32)
  padded[:len(rows)] = rows
  parsed = _jitted_parse(domain)(padded, padded != domain.pad_id)
  valid = np.asarray(parsed.valid)[:len(rows)]
  difficulty = np.asarray(parsed.difficulty)[:len(rows)]
  return SeedRows(rows[valid], difficulty[valid], len(records) - int(valid.sum()))


@functools.lru_cache(maxsize=8)
def _jitted_parse(domain: TextDomain):
  return jax.jit(domain.parse)


def config_from(config: Any) -> TextTasksConfig:
  """The seed-data config of a run (fields of config.data)."""
  data = config.data
  return TextTasksConfig(
      source_dir=str(data.source_dir), format=str(data.format),
      prompt_field=str(data.prompt_field), answer_field=str(data.answer_field),
      test_fraction=float(data.test_fraction), seed=int(data.seed))


def load_seed_rows(config: Any, domain: TextDomain, data_dir: str) -> dict[str, SeedRows]:
  """{"train": base-data rows, "test": held-out rows} of a run's text seed data."""
  spec = config_from(config)
  return {split: seed_rows(domain, load_split(spec, split, data_dir))
          for split in ("train", "test")}


def _missing_files(config, names: Sequence[str]) -> list[str]:
  """What config.data.source_dir lacks for config.data.format (SEED_DATA):
  the files `TextTasksConfig.source_files` reads."""
  if config.data.format == "api_bank":
    wanted = [apibank_levels.TRAIN_FILES[level] for level in apibank_levels.SEED_LEVELS]
    wanted += [apibank_levels.LEVEL_FILES[level] for level in apibank_levels.SEED_LEVELS]
    places = {f"{folder}/{name}".lstrip("/") for folder in apibank_levels.FOLDERS
              for name in wanted}
    return [] if places & set(names) else [" or ".join(wanted)]
  suffixes = JSON_SUFFIXES + (PARQUET_SUFFIX,)
  if any("/" not in n and n.endswith(suffixes) for n in names):
    return []
  return [f"a {' / '.join(suffixes)} file at its top level"]


def _expected_files(config) -> str:
  if config.data.format == "api_bank":
    return ("API-Bank's level-1/2 training files "
            f"{list(apibank_levels.TRAIN_FILES.values())} (and its test files "
            f"{[apibank_levels.LEVEL_FILES[v] for v in apibank_levels.SEED_LEVELS]}, "
            "held out), directly or in "
            f"{'/, '.join(apibank_levels.FOLDERS[1:])}/")
  if config.data.format == "bfcl":
    return ("BFCL's BFCL_v<N>_<category>.json question files at its top level "
            f"(answers in {BFCL_ANSWER_DIR}/; files named {TEST_PREFIX}* held out)")
  return (f"{' / '.join(JSON_SUFFIXES + (PARQUET_SUFFIX,))} files of records with "
          f"the fields config.data.prompt_field and answer_field at its top "
          f"level (files named {TEST_PREFIX}* held out)")


# Where the seed records come from (genenv_jax/domains/seed_data.py).
SEED_DATA = SeedData(field="data.source_dir", expected=_expected_files,
                     missing=_missing_files)


def seed_splits(domain: TextDomain, config: Any, data_dir: str
                ) -> tuple[dict, dict]:
  """The run's seed data (the registry's `seed_splits`): the records of
  config.data.source_dir (JSONL, parquet, BFCL or API-Bank files; `load_seed_rows`)
  that fit the domain's widths, prepared by the TextTasks builder in
  `data_dir`."""
  splits = load_seed_rows(config, domain, data_dir)
  for name, split in splits.items():
    if not len(split.rows):
      raise ValueError(
          f"config.data.source_dir={config.data.source_dir!r}: no {name} "
          f"record fits the text domain's widths ({split.num_dropped} "
          "dropped).")
    if split.num_dropped:
      logging.warning("Seed data: %d %s records dropped (too long for the "
                      "domain's widths or not parseable).",
                      split.num_dropped, name)
  return tuple({"task": splits[name].rows,
                "difficulty": splits[name].difficulty}
               for name in ("train", "test"))
