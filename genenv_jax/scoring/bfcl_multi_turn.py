"""BFCL multi-turn scoring: the official checker's verdict, computed without `eval`.

Categories: multi_turn_base, multi_turn_miss_func, multi_turn_miss_param,
multi_turn_long_context (bfcl-eval's `BFCL_v<N>_<category>.json`, its
`possible_answer/` and `multi_turn_func_doc/`).

An entry (`MultiTurnEntry`) is a question line with its ground truth: the involved
API classes and their `initial_config`, the user turns, the ground-truth calls per
turn, the function docs of the involved classes (BFCL's `multi_turn_func_doc`), and
for miss_func the docs held out until a turn (`missed_function`: turn -> names; that
turn has no user message, BFCL writes the docs as one). The question line's
`excluded_function` field is not read (BFCL 2026.3.23 does not read it either).

A result (`{"id": ..., "result": [[step text, ...] per turn]}`, BFCL's result-file
record) is scored as BFCL's `multi_turn_runner` and `multi_turn_checker` score it:
  * INCORRECT when it has another number of turns than the entry (BFCL: the
    model was force-terminated);
  * each step is decoded as Python call text (`bfcl.decode_python_calls`, BFCL's
    execution decoder's format); a step that does not decode, decodes to no call,
    or that BFCL's decoder would fail on (`bfcl_apis.bfcl_step_decodes`) is skipped;
  * turn by turn, the model's calls run on one `ApiSession` of its own and the
    ground truth's on another (both carry their state across turns). For a turn with
    ground-truth calls: the turn must hold a decoded step; then every public attribute
    of every API instance must equal the ground truth's (state check); then the
    ground truth's result texts of this turn must be contained, as a multiset, in
    the results of all the model's calls so far (response check). A turn without
    ground-truth calls is not checked (its calls still run). The first failing turn
    decides the verdict.
The verdict is INVALID when no step of the result decodes to a call. `turns_passed`
counts the turns before the first failure (all of them when it passes), for rewards
that credit part of an episode.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Any, NamedTuple, Sequence

from genenv_jax.scoring import CORRECT, INCORRECT, INVALID, InputError, Verdict
from genenv_jax.scoring import bfcl, bfcl_apis, read_jsonl
from genenv_jax.scoring.bfcl import Call

CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param",
              "multi_turn_long_context")
FUNC_DOC_DIR = "multi_turn_func_doc"


@dataclasses.dataclass(frozen=True)
class MultiTurnEntry:
  """One multi-turn question with its ground truth (module docstring).

  Attributes:
    id: e.g. "multi_turn_base_0".
    involved_classes: the API classes, in the question's order.
    initial_config: class name -> its scenario (BFCL's `initial_config`).
    turns: per turn, its user messages ([] for a miss_func turn that reveals docs).
    functions: the docs offered from the start (held-out ones removed).
    held_out: turn index -> the docs BFCL adds at that turn.
    ground_truth: per turn, the ground-truth call texts.
    long_context: whether the APIs load the long-context scenario (BFCL: the id's
      category contains "long_context").
    fingerprint: a digest of all the above, a cache key for episodes.
  """

  id: str
  involved_classes: tuple[str, ...]
  initial_config: dict[str, Any]
  turns: tuple[tuple[dict[str, str], ...], ...]
  functions: tuple[dict[str, Any], ...]
  held_out: dict[int, tuple[dict[str, Any], ...]]
  ground_truth: tuple[tuple[str, ...], ...]
  long_context: bool
  fingerprint: str = ""

  def session(self) -> bfcl_apis.ApiSession:
    """A fresh ApiSession in this entry's initial state."""
    return bfcl_apis.ApiSession(self.involved_classes, self.initial_config,
                                self.long_context)


class MultiTurnScore(NamedTuple):
  """The verdict on one result, and the turns passed before the first failure."""

  verdict: Verdict
  turns_passed: int
  turns: int


def make_entry(record: dict[str, Any], ground_truth: Sequence[Sequence[str]],
               func_docs: dict[str, list[dict[str, Any]]]) -> MultiTurnEntry:
  """The entry of a BFCL multi-turn question line.

  Args:
    record: the question line (`id`, `question`, `initial_config`,
      `involved_classes`, optionally `missed_function`).
    ground_truth: per turn, the ground-truth call texts.
    func_docs: class name -> its function docs.

  Raises:
    InputError: a field is missing or malformed, a class has no docs, the ground
      truth has another number of turns, or a held-out name is not documented
      (the message names the id).
  """
  entry_id = record.get("id")
  where = f"BFCL multi-turn id {entry_id!r}"
  question, classes = record.get("question"), record.get("involved_classes")
  if not (isinstance(question, list) and all(isinstance(t, list) for t in question)):
    raise InputError(f"{where}: 'question' is not a list of turns")
  if not (isinstance(classes, list) and classes):
    raise InputError(f"{where}: 'involved_classes' is not a non-empty list")
  if not isinstance(record.get("initial_config", {}), dict):
    raise InputError(f"{where}: 'initial_config' is not an object")
  if not (isinstance(ground_truth, list) and len(ground_truth) == len(question)
          and all(isinstance(t, list) and all(isinstance(c, str) for c in t)
                  for t in ground_truth)):
    raise InputError(f"{where}: ground truth is not a list of {len(question)} "
                     "turns of call texts")
  functions = []
  for class_name in classes:
    if class_name not in func_docs:
      raise InputError(f"{where}: no function docs for class {class_name!r}")
    functions.extend(func_docs[class_name])
  held_out = {}
  for turn, names in (record.get("missed_function") or {}).items():
    docs = []
    for name in names:
      match = [f for f in functions if f["name"] == name]
      if not match:
        raise InputError(f"{where}: held-out function {name!r} is not documented")
      functions.remove(match[0])
      docs.append(match[0])
    held_out[int(turn)] = tuple(docs)
  documented = {f["name"] for c in classes for f in func_docs[c]}
  for turn in ground_truth:
    for text in turn:
      name, _, _ = bfcl_apis.ground_truth_call(text)
      if name not in documented:
        raise InputError(f"{where}: ground-truth call {text[:200]!r} names no "
                         f"function of {', '.join(classes)}")
  fields = dict(
      id=entry_id, involved_classes=tuple(classes),
      initial_config=record.get("initial_config", {}),
      turns=tuple(tuple(dict(m) for m in t) for t in question),
      functions=tuple(functions), held_out=held_out,
      ground_truth=tuple(tuple(t) for t in ground_truth),
      long_context="long_context" in str(entry_id).rsplit("_", 1)[0])
  digest = hashlib.sha256(json.dumps(
      {k: v for k, v in fields.items() if k != "held_out"} | {
          "held_out": sorted(held_out.items())},
      sort_keys=True, default=repr).encode()).hexdigest()
  return MultiTurnEntry(**fields, fingerprint=digest)


def category_files(data_dir: str, category: str) -> tuple[str, str]:
  """(question file, possible-answer file) of a multi-turn category in `data_dir`.

  Raises:
    InputError: not a multi-turn category, or the files are missing or ambiguous.
  """
  if category not in CATEGORIES:
    raise InputError(f"unsupported BFCL multi-turn category {category!r}; "
                     f"supported: {', '.join(CATEGORIES)}")
  return bfcl.data_files(data_dir, category)


def load_func_docs(data_dir: str, class_names: Sequence[str]) -> dict[str, list]:
  """class name -> its function docs, from `data_dir/multi_turn_func_doc/`.

  Raises:
    InputError: a class is unknown, or its docs file is missing or malformed.
  """
  files = bfcl_apis.backend().MULTI_TURN_FUNC_DOC_FILE_MAPPING
  docs = {}
  for class_name in class_names:
    if class_name not in files:
      raise InputError(f"no function-doc file is known for class {class_name!r}")
    path = os.path.join(data_dir, FUNC_DOC_DIR, files[class_name])
    docs[class_name] = read_jsonl(path)
    if not all(isinstance(d.get("name"), str) for d in docs[class_name]):
      raise InputError(f"{path}: a function doc without a string 'name'")
  return docs


def load_category(data_dir: str, category: str) -> list[MultiTurnEntry]:
  """The entries of a multi-turn category, in question-file order.

  Raises:
    InputError: see `category_files`, `load_func_docs` and `make_entry`; or an entry
      has no ground truth.
  """
  questions_path, answers_path = category_files(data_dir, category)
  answers = {r.get("id"): r.get("ground_truth") for r in read_jsonl(answers_path)}
  records = read_jsonl(questions_path)
  classes = sorted({c for r in records for c in r.get("involved_classes") or []})
  docs = load_func_docs(data_dir, classes)
  entries = []
  for record in records:
    if record.get("id") not in answers:
      raise InputError(f"{answers_path}: no ground truth for id {record.get('id')!r}")
    entries.append(make_entry(record, answers[record["id"]], docs))
  return entries


def decode_step(text: str) -> list[Call] | None:
  """The calls of one step's text; None when BFCL skips the step (it does not
  decode, decodes to no call, or BFCL's decoder would fail on it)."""
  try:
    calls = bfcl.decode_python_calls(text)
  except bfcl.DecodeError:
    return None
  if not calls or not bfcl_apis.bfcl_step_decodes(calls):
    return None
  return calls


def check_result(result: Any, entry_id: str) -> list[list[str]]:
  """`result` as a list of turns of step texts.

  Raises:
    InputError: it is not a list of lists of strings.
  """
  if not (isinstance(result, list) and all(
      isinstance(t, list) and all(isinstance(s, str) for s in t) for t in result)):
    raise InputError(f"id {entry_id!r}: 'result' is not a list of turns, each a list "
                     "of step texts")
  return result


def score(entry: MultiTurnEntry, result: Sequence[Sequence[str]]) -> MultiTurnScore:
  """The checker's verdict on a result: per turn, the step texts (module docstring)."""
  turns = len(entry.ground_truth)
  if len(result) != turns:
    return MultiTurnScore(Verdict(INCORRECT, f"force-terminated: {len(result)} "
                                  f"turn(s) of {turns}"), 0, turns)
  decoded = [[calls for calls in map(decode_step, turn) if calls is not None]
             for turn in result]
  if not any(decoded):
    return MultiTurnScore(Verdict(INVALID, "no step decodes to a function call"),
                          0, turns)
  model, truth = entry.session(), entry.session()
  all_results: list[str] = []
  for index, (steps, expected) in enumerate(zip(decoded, entry.ground_truth)):
    for calls in steps:
      all_results.extend(model.execute(call) for call in calls)
    expected_results = [truth.execute_ground_truth(text) for text in expected]
    if not expected:
      continue
    reason = _turn_failure(steps, model, truth, all_results, expected_results)
    if reason is not None:
      return MultiTurnScore(Verdict(INCORRECT, f"turn {index}: {reason}"), index, turns)
  return MultiTurnScore(Verdict(CORRECT), turns, turns)


def _turn_failure(steps: list, model: bfcl_apis.ApiSession,
                  truth: bfcl_apis.ApiSession, all_results: list[str],
                  expected_results: list[str]) -> str | None:
  """Why a turn with ground-truth calls fails the checks; None when it passes."""
  if not steps:
    return "no step decodes to a call (the ground truth has calls)"
  differences = bfcl_apis.state_differences(model, truth)
  if differences:
    shown = "; ".join(f"{c}: {', '.join(a)}" for c, a in differences.items())
    return f"API state differs from the ground truth's ({shown})"
  remaining = list(all_results)
  missing = []
  for text in expected_results:
    try:
      remaining.remove(text)
    except ValueError:
      missing.append(text)
  if missing:
    return ("the results so far lack ground-truth result(s) "
            + "; ".join(repr(m[:200]) for m in missing[:3]))
  return None
