"""API-Bank call match: does the predicted API call equal the gold call?

Gold data (JSONL), one call per line, with the field names of API-Bank's samples:
  {"id": "lv1-0", "api_name": "ToolSearcher", "param_dict": {"keywords": "weather"}}

A prediction's text is read as
  * API-Bank's format `API-Request: [Name(key='value', ...)]`: the call list on the
    rest of the marker's line (or the next line when that is empty), text around it
    ignored. Where that line is not Python, it is read as API-Bank's own files write
    it, a quoted value holding quotes of its own (`health_data='[{'name': 'x'}]'`,
    41 of the 534 gold calls of its level-1/2 test files): the arguments split at
    each `, key=`, and a value that is not a Python literal but is quoted reads as
    the literal its quotes hold (a list, a dict), else as the text between them;
    or otherwise
  * any format `bfcl.decode_calls` reads: JSON `{"name": ..., "parameters": {...}}`
    (or "arguments"), `<tool_call>` blocks, or Python calls `[Name(key='value')]`.
Text that cannot be read is INVALID. It is CORRECT when it holds exactly one call whose
name equals the gold name (case-sensitive) and whose parameters have the gold keys with
equal `canonical` values: strings are compared with surrounding whitespace stripped,
inner whitespace runs collapsed and in lower case; "true"/"false" strings equal the
booleans; numeric strings equal numbers, compared by value ("3" == 3 == 3.0, but
True != 1); lists and dicts compare element-wise. Scoring takes time linear in the
text's length; a text longer than `bfcl.MAX_OUTPUT_CHARS`, or past another of
`bfcl.decode_calls`' limits, is INVALID.
"""

from __future__ import annotations

import ast
import re
from typing import Any, NamedTuple

from genenv_jax.scoring import CORRECT, INCORRECT, INVALID, InputError, Verdict
from genenv_jax.scoring import read_jsonl
from genenv_jax.scoring.bfcl import MAX_OUTPUT_CHARS, Call, DecodeError
from genenv_jax.scoring.bfcl import decode_calls

_REQUEST_LINE = re.compile(r"API-Request:\s*([^\n]*)")
# API-Bank's writing of one call: `[Name(key=value, ...)]`, and where each
# argument starts.
_ONE_CALL = re.compile(r"\[\s*(\w+)\s*\((.*)\)\s*\]", re.DOTALL)
_ARGUMENT = re.compile(r"(?:^|,)\s*(\w+)\s*=\s*")
_INTEGER = re.compile(r"[+-]?\d{1,100}")  # longer digit strings compare as floats
# One way to match each text, so a failed match does not backtrack over digit runs.
_DECIMAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


class ApiCall(NamedTuple):
  """A gold API call: its name and parameters."""

  name: str
  parameters: dict[str, Any]


def load_gold(path: str) -> dict[Any, ApiCall]:
  """The gold calls of a data file by id, in file order.

  Raises:
    InputError: unreadable file, a record without an id, a string 'api_name' and an
      object 'param_dict', or a repeated id.
  """
  gold = {}
  for record in read_jsonl(path):
    entry_id = record.get("id")
    if not isinstance(entry_id, (str, int)) or isinstance(entry_id, bool):
      raise InputError(f"{path}: record without a string or integer 'id': "
                       f"{str(record)[:200]}")
    if not isinstance(record.get("api_name"), str):
      raise InputError(f"{path}: id {entry_id!r} has no string 'api_name'")
    if not isinstance(record.get("param_dict"), dict):
      raise InputError(f"{path}: id {entry_id!r} has no object 'param_dict'")
    if entry_id in gold:
      raise InputError(f"{path}: id {entry_id!r} appears twice")
    gold[entry_id] = ApiCall(record["api_name"], record["param_dict"])
  return gold


def parse_prediction(text: str) -> list[Call]:
  """The calls in a prediction (formats in the module docstring).

  Raises:
    DecodeError: the text holds no readable call list, or is longer than
      MAX_OUTPUT_CHARS.
  """
  if len(text) > MAX_OUTPUT_CHARS:
    raise DecodeError(f"output of {len(text)} characters is longer than "
                      f"MAX_OUTPUT_CHARS={MAX_OUTPUT_CHARS}")
  request = _REQUEST_LINE.search(text)
  if not request:
    return decode_calls(text)
  line = request.group(1).strip()
  try:
    return decode_calls(line)
  except DecodeError as error:
    return [_api_bank_call(line, error)]


def _api_bank_call(line: str, error: DecodeError) -> Call:
  """The one call of an API-Request line that is not Python, read as API-Bank
  writes it (module docstring).

  Raises:
    error: the line is not one `[Name(key=value, ...)]` whose values read.
  """
  match = _ONE_CALL.fullmatch(line)
  if not match:
    raise error
  name, arguments = match.groups()
  starts = list(_ARGUMENT.finditer(arguments))
  if (not starts or starts[0].start() != 0) and arguments.strip():
    raise error
  args = {}
  for start, end in zip(starts, starts[1:] + [None]):
    value = arguments[start.end():end.start() if end else len(arguments)].strip()
    args[start.group(1)] = _api_bank_value(value, error)
  return Call(name, args)


def _api_bank_value(text: str, error: DecodeError) -> Any:
  """An argument's value: a Python literal, else what its quotes hold (a
  literal when it reads as one, else their text)."""
  try:
    return ast.literal_eval(text)
  except (ValueError, SyntaxError, MemoryError):
    pass
  if len(text) < 2 or text[0] not in "'\"" or text[-1] != text[0]:
    raise error
  inner = text[1:-1]
  try:
    return ast.literal_eval(inner)
  except (ValueError, SyntaxError, MemoryError):
    return inner


def single_call(text: str) -> ApiCall:
  """The one call a text holds (formats in the module docstring), e.g. a gold
  `API-Request: [Name(key='value')]`.

  Raises:
    DecodeError: the text holds no readable call list, or not exactly one call.
  """
  calls = parse_prediction(text)
  if len(calls) != 1:
    raise DecodeError(f"{len(calls)} calls, not one")
  return ApiCall(calls[0].name, dict(calls[0].args))


def canonical(value: Any) -> Any:
  """`value` in the form parameters are compared in (rules in the module docstring)."""
  if isinstance(value, bool):
    return "true" if value else "false"
  if isinstance(value, str):
    text = " ".join(value.split()).lower()
    if _INTEGER.fullmatch(text):
      return int(text)
    return float(text) if _DECIMAL.fullmatch(text) else text
  if isinstance(value, (list, tuple)):
    return [canonical(v) for v in value]
  if isinstance(value, dict):
    return {str(k).strip(): canonical(v) for k, v in value.items()}
  return value


def score(gold: ApiCall, text: str) -> Verdict:
  """The verdict on one prediction against its gold call."""
  try:
    return _score(gold, text)
  except DecodeError as e:
    return Verdict(INVALID, str(e))
  except RecursionError:
    return Verdict(INVALID, "prediction nested too deeply")


def _score(gold: ApiCall, text: str) -> Verdict:
  calls = parse_prediction(text)
  if len(calls) != 1:
    return Verdict(INCORRECT, f"expected one API call, got {len(calls)}")
  call, = calls
  if call.name != gold.name:
    return Verdict(INCORRECT, f"called {call.name!r}, expected {gold.name!r}")
  predicted = {k: canonical(v) for k, v in call.args.items()}
  expected = {k: canonical(v) for k, v in gold.parameters.items()}
  problems = [f"missing {k!r}" for k in expected if k not in predicted]
  problems += [f"unexpected {k!r}" for k in predicted if k not in expected]
  problems += [f"{k!r}: {call.args[k]!r} != {gold.parameters[k]!r}"
               for k in expected if k in predicted and predicted[k] != expected[k]]
  if problems:
    return Verdict(INCORRECT, "; ".join(problems))
  return Verdict(CORRECT)
