"""Host-side benchmark scorers: plain Python, no JAX.

  bfcl     BFCL single-turn AST categories (Python): decode a model's call text, check
           it against BFCL's `possible_answer` ground truth with the official rules.
  apibank  API-Bank call match: one predicted API call against the gold call.
  qa       Exact match and token F1 with SQuAD-style answer normalisation.

`python -m train.tools.evaluate` is the command-line front end. This module holds what the
scorers share: the per-example `Verdict`, `InputError` for malformed inputs, and
`read_jsonl` / `read_jsonl_lines`.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple, Sequence

CORRECT = "correct"
INCORRECT = "incorrect"
INVALID = "invalid"


class InputError(ValueError):
  """A data or prediction file is missing, unreadable or malformed; the message names
  the file and the offending line, id, field or category."""


class Verdict(NamedTuple):
  """The score of one example.

  Attributes:
    status: CORRECT; INCORRECT (well-formed output that does not match the answer); or
      INVALID (the output could not be decoded).
    reason: why the example is not correct; empty when it is.
  """

  status: str
  reason: str = ""

  @property
  def correct(self) -> bool:
    return self.status == CORRECT

  def __str__(self) -> str:
    return self.status if self.correct else f"{self.status}: {self.reason}"


def read_jsonl(path: str) -> list[dict[str, Any]]:
  """The JSON objects of a JSON-lines file, one per non-blank line.

  Raises:
    InputError: the file cannot be read, or a line is not a JSON object.
  """
  return [record for _, record in read_jsonl_lines(path)]


def read_jsonl_lines(path: str) -> list[tuple[int, dict[str, Any]]]:
  """(1-based line number, JSON object) of each non-blank line of a JSON-lines file.

  Raises:
    InputError: the file cannot be read, or a line is not a JSON object (the
      message names the file and line).
  """
  try:
    with open(path, encoding="utf-8") as f:
      lines = f.read().splitlines()
  except (OSError, UnicodeDecodeError) as e:
    raise InputError(f"cannot read {path}: {e}") from e
  records = []
  for number, line in enumerate(lines, start=1):
    if not line.strip():
      continue
    try:
      record = json.loads(line)
    except (ValueError, RecursionError) as e:  # a number past Python's digit limit too
      raise InputError(f"{path}:{number}: not valid JSON ({e})") from e
    if not isinstance(record, dict):
      raise InputError(f"{path}:{number}: expected a JSON object, got "
                       f"{type(record).__name__}")
    records.append((number, record))
  return records


def write_jsonl(path: str, records: Sequence[dict[str, Any]]) -> None:
  """Writes `records` to `path` as JSON lines, one object per line.

  Raises:
    InputError: the file cannot be written.
  """
  try:
    with open(path, "w", encoding="utf-8") as f:
      for record in records:
        f.write(json.dumps(record, ensure_ascii=False) + "\n")
  except OSError as e:
    raise InputError(f"cannot write {path}: {e}") from e
