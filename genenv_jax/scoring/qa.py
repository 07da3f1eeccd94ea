"""Question answering: exact match and token F1, best over the gold answers.

Gold data (JSONL), one question per line, with a non-empty list of answer strings:
  {"id": "q1", "answers": ["Paris", "City of Paris"]}

Both sides are normalised as SQuAD's evaluation does (`normalize_answer`): lower case,
ASCII punctuation removed, the articles a/an/the removed, whitespace runs collapsed.
Exact match is 1 when the normalised prediction equals a normalised gold answer. Token
F1 is the harmonic mean of precision and recall of the prediction's tokens (whitespace
split, counted with multiplicity) against a gold answer's; when either side has no
tokens it is 1 if both have none, else 0. Each score is the maximum over the answers;
an example is CORRECT when its exact match is 1. Scoring takes time linear in the
lengths of the texts; a prediction longer than MAX_PREDICTION_CHARS is INVALID and
scores 0.
"""

from __future__ import annotations

import collections
import re
import string
from typing import Any, NamedTuple

from genenv_jax.scoring import CORRECT, INCORRECT, INVALID, InputError, Verdict
from genenv_jax.scoring import read_jsonl

_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
MAX_PREDICTION_CHARS = 65_536


class QaScore(NamedTuple):
  """The scores of one prediction: exact_match in {0, 1}, f1 in [0, 1], verdict."""

  exact_match: float
  f1: float
  verdict: Verdict


def load_answers(path: str) -> dict[Any, list[str]]:
  """The gold answers of a data file by id, in file order.

  Raises:
    InputError: unreadable file, a record without an id or a non-empty 'answers' list
      of strings, or a repeated id.
  """
  answers = {}
  for record in read_jsonl(path):
    entry_id = record.get("id")
    if not isinstance(entry_id, (str, int)) or isinstance(entry_id, bool):
      raise InputError(f"{path}: record without a string or integer 'id': "
                       f"{str(record)[:200]}")
    gold = record.get("answers")
    if (not isinstance(gold, list) or not gold
        or not all(isinstance(a, str) for a in gold)):
      raise InputError(f"{path}: id {entry_id!r}: 'answers' must be a non-empty "
                       "list of strings")
    if entry_id in answers:
      raise InputError(f"{path}: id {entry_id!r} appears twice")
    answers[entry_id] = gold
  return answers


def normalize_answer(text: str) -> str:
  """Lower case, no punctuation, no articles, single spaces."""
  text = text.lower().translate(_PUNCTUATION)
  return " ".join(_ARTICLES.sub(" ", text).split())


def _f1(prediction_tokens: list[str], gold_tokens: list[str]) -> float:
  if not prediction_tokens or not gold_tokens:
    return float(prediction_tokens == gold_tokens)
  common = sum((collections.Counter(prediction_tokens)
                & collections.Counter(gold_tokens)).values())
  if common == 0:
    return 0.0
  precision = common / len(prediction_tokens)
  recall = common / len(gold_tokens)
  return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, answers: list[str]) -> float:
  """1.0 when the normalised prediction equals some normalised answer, else 0.0."""
  normalized = normalize_answer(prediction)
  return float(any(normalized == normalize_answer(a) for a in answers))


def token_f1(prediction: str, answers: list[str]) -> float:
  """The best token F1 of the prediction against the answers."""
  tokens = normalize_answer(prediction).split()
  return max(_f1(tokens, normalize_answer(a).split()) for a in answers)


def score(answers: list[str], text: str) -> QaScore:
  """Exact match, F1 and the verdict of one prediction."""
  if len(text) > MAX_PREDICTION_CHARS:
    return QaScore(0.0, 0.0, Verdict(
        INVALID, f"prediction of {len(text)} characters is longer than "
                 f"MAX_PREDICTION_CHARS={MAX_PREDICTION_CHARS}"))
  em, f1 = exact_match(text, answers), token_f1(text, answers)
  if em:
    return QaScore(em, f1, Verdict(CORRECT))
  return QaScore(em, f1, Verdict(
      INCORRECT, f"no exact match (best F1 {f1:.3f}) with {answers!r}"))
