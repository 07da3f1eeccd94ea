"""Bamboogle (Press et al., 2022): 125 two-hop questions, answered in one reply
and scored by exact match and token F1 (genenv_jax/scoring/qa.py).

Source: the Hugging Face dataset `chiayewken/bamboogle` (MIT licence), one
parquet file `data/test-00000-of-00001-<hash>.parquet` with string columns
`Question` and `Answer`. `load` reads every `*.parquet` file under a directory
(sorted by path; a CSV file with the same two columns instead when there is no
parquet file); a question's id is its 0-based row index over those files.

Protocol: the question is the user turn, after a system prompt asking for a
short final answer on a last line `Answer: <answer>`. The answer scored is the
text after the last `Answer:` (or `answer is:`) of the reply, case-insensitive,
up to the end of its line, or, without that marker, the reply's last non-blank line; surrounding
`*`, quotes and a final period are dropped. It is compared with the gold
`Answer` as SQuAD's evaluation does (`qa.score`): exact match after
normalisation, and token F1. A reply with no answer text is INVALID (scores 0).
"""

from __future__ import annotations

import csv
import glob
import os
import re
from typing import NamedTuple

from genenv_jax.scoring import INVALID, InputError, Verdict, qa

NAME = "bamboogle"
LICENCE = "MIT (per the dataset card of chiayewken/bamboogle)"
PARQUET = "data/test-00000-of-00001-fd9def31e0acf72c.parquet"
FILES = {PARQUET: ("https://huggingface.co/datasets/chiayewken/bamboogle/resolve/main/"
                   + PARQUET)}
FIXTURE_FILE = "data/test-00000-of-00001.parquet"
COLUMNS = ("Question", "Answer")

SYSTEM_PROMPT = (
    "Answer the question. You may reason briefly first. End your reply with a "
    "line of the form 'Answer: <answer>', where <answer> is only the short answer "
    "(a name, a date, a number or a few words).")

_ANSWER = re.compile(r"\banswer(?:\s+is)?\s*:", re.IGNORECASE)

# Written for the tests and offline trials; not from the dataset.
_FIXTURE = [
    ("Which river flows through the capital city of Hungary?", "Danube"),
    ("In what year did the author of 'The Old Man and the Sea' receive the Nobel "
     "Prize in Literature?", "1954"),
    ("What is the chemical symbol of the element named after the planet Uranus?", "U"),
    ("Who was the first president of the country whose capital is Nairobi?",
     "Jomo Kenyatta"),
]


class Question(NamedTuple):
  """One question: its id (0-based row index), text and gold answer."""

  id: int
  question: str
  answer: str


def data_files(data_dir: str) -> list[str]:
  """The parquet files under `data_dir` (recursively, sorted), else its CSV files.

  Raises:
    InputError: no such directory, or neither kind of file in it.
  """
  if not os.path.isdir(data_dir):
    raise InputError(f"{data_dir}: no such directory (Bamboogle's --data_dir)")
  for pattern in ("*.parquet", "*.csv"):
    found = sorted(glob.glob(os.path.join(data_dir, "**", pattern), recursive=True))
    if found:
      return found
  raise InputError(f"{data_dir}: no *.parquet or *.csv file with columns "
                   f"{', '.join(COLUMNS)} (Bamboogle's test split)")


def _read_rows(path: str) -> list[dict]:
  if path.endswith(".parquet"):
    import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel
    try:
      return pq.read_table(path).to_pylist()
    except (OSError, ValueError) as e:  # pyarrow's errors derive from these
      raise InputError(f"cannot read {path} as parquet: {e}") from e
  try:
    with open(path, encoding="utf-8", newline="") as f:
      return list(csv.DictReader(f))
  except (OSError, UnicodeDecodeError, csv.Error) as e:
    raise InputError(f"cannot read {path} as CSV: {e}") from e


def load(data_dir: str) -> list[Question]:
  """The questions of the files under `data_dir`, in order.

  Raises:
    InputError: no data file, an unreadable one, or a row whose `Question` or
      `Answer` is missing or not a non-empty string (the message names the file,
      row and column).
  """
  questions = []
  for path in data_files(data_dir):
    for row_number, row in enumerate(_read_rows(path)):
      values = []
      for column in COLUMNS:
        value = row.get(column)
        if not isinstance(value, str) or not value.strip():
          raise InputError(f"{path}: row {row_number}: column {column!r} is not a "
                           f"non-empty string (got {value!r:.80})")
        values.append(value.strip())
      questions.append(Question(len(questions), *values))
  if not questions:
    raise InputError(f"{data_dir}: the Bamboogle files hold no rows")
  return questions


def write_fixture(directory: str) -> list[str]:
  """Writes a few hand-written questions in the source's format (a parquet file
  with columns Question, Answer) under `directory`; returns the paths."""
  import pyarrow as pa  # pylint: disable=import-outside-toplevel
  import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel
  path = os.path.join(directory, FIXTURE_FILE)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  table = pa.table({"Question": [q for q, _ in _FIXTURE],
                    "Answer": [a for _, a in _FIXTURE]})
  pq.write_table(table, path)
  return [path]


def messages(question: Question) -> list[dict[str, str]]:
  """The chat prompt of a question."""
  return [{"role": "system", "content": SYSTEM_PROMPT},
          {"role": "user", "content": question.question}]


def extract_answer(text: str) -> str:
  """The answer of a reply (rules in the module docstring); "" when none."""
  markers = list(_ANSWER.finditer(text))
  if markers:
    answer = text[markers[-1].end():].strip().split("\n", 1)[0]
  else:
    lines = [line for line in text.splitlines() if line.strip()]
    answer = lines[-1] if lines else ""
  answer = answer.strip().strip("*").strip().strip("\"'`").strip()
  return answer[:-1].rstrip() if answer.endswith(".") else answer


def score(question: Question, text: str) -> tuple[str, qa.QaScore]:
  """(the extracted answer, its exact match / F1 / verdict) of one reply."""
  if len(text) > qa.MAX_PREDICTION_CHARS:
    return "", qa.score([question.answer], text)  # INVALID: too long
  answer = extract_answer(text)
  if not answer:
    return "", qa.QaScore(0.0, 0.0, Verdict(INVALID, "no answer in the reply"))
  return answer, qa.score([question.answer], answer)
