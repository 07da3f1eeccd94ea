"""BFCL single-turn AST scoring for the Python categories.

Supported categories (the names in BFCL's data file names `BFCL_v<N>_<category>.json`):
simple_python (`simple` in BFCL v3), multiple, parallel, parallel_multiple, live_simple,
live_multiple, live_parallel, live_parallel_multiple. The Java and JavaScript categories
(simple_java, simple_javascript) are not supported.

Decoding a model's output text (`decode_calls`); a failure is an INVALID verdict:
  * Python calls, BFCL's default prompt-style format: `[f(a=1, b='x'), m.g(c=[1])]`.
    As BFCL does: backticks, newlines and spaces are stripped from both ends, a missing
    leading `[` / trailing `]` is added, and the text is parsed with `ast`. Only keyword
    arguments count (positional ones are dropped). Argument values are Python literals
    (strings, numbers, True/False/None, lists, tuples, dicts), unary minus, arithmetic
    (+ - * / // % **) on number and string literals, a bare name (kept as its name,
    i.e. a variable reference), `x[i]` (kept as its source text), a call without
    keywords (kept as its source text) or with keywords (kept as `{name: {arg: val}}`).
    Anything else fails to decode. Unlike BFCL's decoder, which evaluates arithmetic
    with `eval` and negates every unary operand, arithmetic is computed on literals only
    and only unary minus is accepted; strings take part only in `+` (with a string)
    and `*` (with an integer).
  * JSON: one object or a list of objects `{"name": ..., "arguments": {...}}`
    ("parameters" is accepted for "arguments", and arguments may be a JSON string
    holding the object), optionally inside a ```json fence.
  * `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks, one per call.

Decoding takes time linear in the text's length (no backtracking pattern, no
unbounded arithmetic) and never raises anything but DecodeError. Inputs past these
limits are INVALID:
  * MAX_OUTPUT_CHARS: the length of the output text;
  * MAX_CALLS: the number of calls in it;
  * MAX_INT_DIGITS: the decimal digits of any integer value (a literal, a JSON number
    or an arithmetic result), below Python's limit on int-to-text conversion;
  * MAX_ARITHMETIC_SIZE: the size (characters of a string, decimal digits of an
    integer) of one arithmetic result, and 16 times it of all results of one output.

Checking the decoded calls against the ground truth (`check_calls`), the official AST
checker's rules:
  * simple/multiple categories: as many calls as expected (one), compared in order.
    parallel categories: as many calls as expected; each expected call in ground-truth
    order takes the first not-yet-taken call that matches it (greedy, no search for
    another assignment when a later expected call is left without a match).
  * A call matches an expected call when its name is the function's name (with `.`
    written as `_` under `dots_as_underscores`, for models that cannot emit dotted
    names), every parameter the schema lists as required is given, every given parameter
    is in both the schema and the ground truth and has an acceptable value, and every
    ground-truth parameter left out lists "" (optional) among its acceptable values.
  * Types: the schema's type maps to an exact Python type (bool is not an int):
    string/any -> str, integer -> int, float -> float, boolean -> bool, array/tuple ->
    list, dict -> dict. An int is accepted for a float (and converted); a tuple for a
    tuple parameter becomes a list. Items of an array must each have the item type, or
    the type of the first value of the acceptable list they are compared with (one level
    deep); at least one acceptable value must pass this (an "" entry always does).
  * Literal comparison: when the first non-"" acceptable value has another Python type
    than the schema's (the ground truth names a variable, or holds null), the value may
    have either type and must equal an acceptable value under Python `==`.
  * Otherwise the value must be among the acceptable values after normalisation:
    strings by `normalize_string` (lower case, without spaces and `,./-_*^`, with `'` as
    `"`), against the string acceptable values only (so "" accepts a value that
    normalises to ""); lists with their string items normalised, "" standing for the
    empty list; dicts match an acceptable dict when each of their keys is one of its
    keys with a (string-normalised) acceptable value and each of its keys they lack
    lists ""; a list of dicts matches an acceptable list of the same length element
    by element ("" again standing for the empty list); other values by Python `==`
    (so 5 == 5.0 and True == 1).
"""

from __future__ import annotations

import ast
import json
import math
import operator
import os
import re
from typing import Any, NamedTuple

from genenv_jax.scoring import CORRECT, INCORRECT, INVALID, InputError, Verdict
from genenv_jax.scoring import read_jsonl

SUPPORTED_CATEGORIES = (
    "simple", "simple_python", "multiple", "parallel", "parallel_multiple",
    "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")

OPTIONAL = ""  # an acceptable value meaning "the parameter may be left out"

PYTHON_TYPES = {"string": str, "any": str, "integer": int, "float": float,
                 "boolean": bool, "array": list, "tuple": list, "dict": dict}
_ITEM_TYPED = ("array", "tuple")
_IGNORED_IN_STRINGS = re.compile(r"[ ,./\-_*^]")
_TOOL_CALL_OPEN = "<tool_call>"
_TOOL_CALL_CLOSE = "</tool_call>"
_FENCE = "```"
_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
               ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv,
               ast.Mod: operator.mod, ast.Pow: operator.pow}
MAX_OUTPUT_CHARS = 65_536
MAX_CALLS = 64
MAX_INT_DIGITS = 4_000
MAX_ARITHMETIC_SIZE = 100_000
_ARITHMETIC_BUDGET = 16 * MAX_ARITHMETIC_SIZE
_DIGITS_PER_BIT = math.log10(2)


class Call(NamedTuple):
  """One decoded function call: its (dotted) name and keyword arguments."""

  name: str
  args: dict[str, Any]


class DecodeError(ValueError):
  """A model output that cannot be read as a list of function calls."""


class BfclEntry(NamedTuple):
  """One BFCL question with its ground truth.

  Attributes:
    id: the entry id, e.g. "simple_python_0".
    functions: the question's function schemas by name, in question order.
    ground_truth: the expected calls, each `{function_name: {param: [acceptable...]}}`.
  """

  id: str
  functions: dict[str, dict[str, Any]]
  ground_truth: list[dict[str, dict[str, list[Any]]]]


# ------------------------------------------------------------------------ decoding


def decode_calls(text: str) -> list[Call]:
  """The calls in a model's output text (formats in the module docstring).

  Raises:
    DecodeError: the text holds no well-formed call list, or is past a limit (module
      docstring).
  """
  def decode() -> list[Call]:
    if _TOOL_CALL_OPEN in text:
      return _decode_tool_call_blocks(text)
    try:
      value = json.loads(_json_fence_content(text))
    except ValueError:  # not JSON, or a JSON integer past Python's digit limit
      return _decode_python_calls(text)
    return _calls_from_json(value)
  return _bounded_decode(text, decode)


def decode_python_calls(text: str) -> list[Call]:
  """The calls in Python-call text only (`[f(a=1), g(b='x')]`, brackets optional),
  with the limits of `decode_calls`: what BFCL's execution decoder reads.

  Raises:
    DecodeError: not a list of calls with decodable keyword arguments, or past a
      limit (module docstring).
  """
  return _bounded_decode(text, lambda: _decode_python_calls(text))


def _bounded_decode(text: str, decode) -> list[Call]:
  """`decode()`'s calls, after checking the text's length, and the calls' number
  and integer sizes."""
  if len(text) > MAX_OUTPUT_CHARS:
    raise DecodeError(f"output of {len(text)} characters is longer than "
                      f"MAX_OUTPUT_CHARS={MAX_OUTPUT_CHARS}")
  try:
    calls = decode()
  except (RecursionError, MemoryError) as e:
    raise DecodeError("output nested too deeply") from e
  if len(calls) > MAX_CALLS:
    raise DecodeError(f"{len(calls)} calls, more than MAX_CALLS={MAX_CALLS}")
  for call in calls:
    _check_int_sizes(call.args)
  return calls


def _json_fence_content(text: str) -> str:
  """What a ```json ... ``` (or ``` ... ```) fence around the whole stripped text
  holds, stripped; the text itself when it is not fenced."""
  stripped = text.strip()
  if (len(stripped) < 2 * len(_FENCE) or not stripped.startswith(_FENCE)
      or not stripped.endswith(_FENCE)):
    return text
  inner = stripped[len(_FENCE):-len(_FENCE)]
  return inner.removeprefix("json").strip()


def _check_int_sizes(value: Any) -> None:
  """Raises DecodeError when an integer in `value` (nested lists, tuples and dicts
  included) has more than MAX_INT_DIGITS digits."""
  stack = [value]
  while stack:
    item = stack.pop()
    if isinstance(item, int):
      _bounded(item)
    elif isinstance(item, (list, tuple)):
      stack.extend(item)
    elif isinstance(item, dict):
      stack.extend(item.keys())
      stack.extend(item.values())


def _bounded(value: Any) -> Any:
  """`value`, after checking that an integer has at most MAX_INT_DIGITS digits.

  Raises:
    DecodeError: it has more.
  """
  if isinstance(value, int) and _int_digits(value) > MAX_INT_DIGITS:
    raise DecodeError(f"an integer of about {_int_digits(value)} digits, more than "
                      f"MAX_INT_DIGITS={MAX_INT_DIGITS}")
  return value


def _int_digits(value: int) -> int:
  """An upper bound on the decimal digits of `value`, without converting it."""
  return int(value.bit_length() * _DIGITS_PER_BIT) + 1


def _decode_python_calls(text: str) -> list[Call]:
  """The calls in Python-call text `[f(a=1), g(b='x')]` (brackets optional).

  Raises:
    DecodeError: not a list of calls with decodable keyword arguments.
  """
  source = text.strip("`\n ")
  if not source.startswith("["):
    source = "[" + source
  if not source.endswith("]"):
    source += "]"
  try:
    body = ast.parse(source, mode="eval").body
  except (SyntaxError, ValueError) as e:
    raise DecodeError(f"not a Python list of calls ({_clipped(e)})") from e
  if isinstance(body, ast.Call):
    nodes = [body]
  elif isinstance(body, (ast.List, ast.Tuple, ast.Set)):
    nodes = body.elts
  else:
    raise DecodeError(f"expected a list of calls, got a {type(body).__name__}")
  if len(nodes) > MAX_CALLS:
    raise DecodeError(f"{len(nodes)} calls, more than MAX_CALLS={MAX_CALLS}")
  for index, node in enumerate(nodes):
    if not isinstance(node, ast.Call):
      raise DecodeError(f"item {index} is a {type(node).__name__}, not a call: "
                        f"{_source(node)}")
  evaluator = _LiteralEvaluator()
  return [evaluator.call(node) for node in nodes]


def _clipped(value: Any, limit: int = 200) -> str:
  text = str(value)
  return text if len(text) <= limit else text[:limit] + "..."


def _shown(value: Any) -> str:
  """repr(value) for a message, clipped to 200 characters."""
  return _clipped(repr(value))


def _source(node: ast.AST) -> str:
  """The node's source text for a message, clipped to 200 characters."""
  try:
    return repr(_clipped(ast.unparse(node)))
  except ValueError:  # an integer past Python's digit limit
    return "<expression>"


class _LiteralEvaluator:
  """Reads call arguments as values (rules in the module docstring), spending the
  output's arithmetic budget: the sizes of all arithmetic results, together at most
  _ARITHMETIC_BUDGET."""

  def __init__(self):
    self.budget = _ARITHMETIC_BUDGET

  def call(self, node: ast.Call) -> Call:
    parts = []
    func = node.func
    while isinstance(func, ast.Attribute):
      parts.append(func.attr)
      func = func.value
    if isinstance(func, ast.Name):
      parts.append(func.id)
    args = {}
    for keyword in node.keywords:
      if keyword.arg is None:
        raise DecodeError(f"`**` unpacking in call: {_source(node)}")
      args[keyword.arg] = self.literal(keyword.value)
    return Call(".".join(reversed(parts)), args)

  def literal(self, node: ast.expr) -> Any:
    """The Python value of an argument expression."""
    if isinstance(node, ast.Constant):
      return "..." if node.value is Ellipsis else _bounded(node.value)
    if isinstance(node, ast.UnaryOp):
      return _negated(node)
    if isinstance(node, ast.List):
      return [self.literal(e) for e in node.elts]
    if isinstance(node, ast.Tuple):
      return tuple(self.literal(e) for e in node.elts)
    if isinstance(node, ast.Dict):
      if any(key is None for key in node.keys):
        raise DecodeError(f"`**` unpacking in dict: {_source(node)}")
      try:
        return {self.literal(k): self.literal(v)
                for k, v in zip(node.keys, node.values)}
      except TypeError as e:
        raise DecodeError(f"unhashable dict key in {_source(node)}") from e
    if isinstance(node, ast.BinOp):
      return self.arithmetic(node)
    if isinstance(node, ast.Name):
      return node.id
    if isinstance(node, ast.Call):
      if not node.keywords:
        return ast.unparse(node)
      call = self.call(node)
      return {call.name: call.args}
    if isinstance(node, ast.Subscript):
      return f"{ast.unparse(node.value)}[{ast.unparse(node.slice)}]"
    raise DecodeError(f"unsupported {type(node).__name__} expression: "
                      f"{_source(node)}")

  def arithmetic(self, node: ast.BinOp) -> Any:
    operands = []
    for side in (node.left, node.right):
      if isinstance(side, ast.BinOp):
        operands.append(self.arithmetic(side))
      elif isinstance(side, ast.UnaryOp):
        operands.append(_negated(side))
      elif (isinstance(side, ast.Constant)
            and isinstance(side.value, (int, float, complex, str))):
        operands.append(self.literal(side))
      else:
        raise DecodeError(f"arithmetic on a non-literal: {_source(node)}")
    left, right = operands
    op = type(node.op)
    if op not in _ARITHMETIC:
      raise DecodeError(f"unsupported operator in {_source(node)}")
    size = _result_size(op, left, right)
    if size is None:
      raise DecodeError(f"unsupported operands in {_source(node)}")
    if size > MAX_ARITHMETIC_SIZE:
      raise DecodeError(f"arithmetic result of size {size} in {_source(node)}, more "
                        f"than MAX_ARITHMETIC_SIZE={MAX_ARITHMETIC_SIZE}")
    self.budget -= size
    if self.budget < 0:
      raise DecodeError("arithmetic results add up to more than "
                        f"{_ARITHMETIC_BUDGET} characters and digits")
    try:
      value = _ARITHMETIC[op](left, right)
    except (ArithmeticError, TypeError, ValueError) as e:
      raise DecodeError(f"cannot evaluate {_source(node)}: {_clipped(e)}") from e
    return _bounded(value)


def _result_size(op: type, left: Any, right: Any) -> int | None:
  """An upper bound on the size of `left op right` (characters of a string, decimal
  digits of an integer, 1 for other numbers) computed without evaluating it; None
  for operations on strings other than str + str and str * int."""
  if isinstance(left, str) or isinstance(right, str):
    if op is ast.Add and isinstance(left, str) and isinstance(right, str):
      return len(left) + len(right)
    if op is ast.Mult:
      text, count = (left, right) if isinstance(left, str) else (right, left)
      if isinstance(count, int):
        return len(text) * max(count, 0)
    return None
  if not (isinstance(left, int) and isinstance(right, int)):
    return 1
  bits = max(left.bit_length(), right.bit_length()) + 1
  if op is ast.Mult:
    bits = left.bit_length() + right.bit_length()
  elif op is ast.Pow:
    bits = left.bit_length() * max(right, 0) if abs(left) > 1 else 1
  return int(bits * _DIGITS_PER_BIT) + 1


def _negated(node: ast.UnaryOp) -> Any:
  operand = node.operand
  if (isinstance(node.op, ast.USub) and isinstance(operand, ast.Constant)
      and isinstance(operand.value, (int, float, complex))):
    return -_bounded(operand.value)
  raise DecodeError(f"unsupported unary expression: {_source(node)}")


def _decode_tool_call_blocks(text: str) -> list[Call]:
  blocks = []
  position = text.find(_TOOL_CALL_OPEN)
  while position >= 0:
    start = position + len(_TOOL_CALL_OPEN)
    end = text.find(_TOOL_CALL_CLOSE, start)
    if end < 0:
      raise DecodeError("a <tool_call> block is not closed by </tool_call>")
    blocks.append(text[start:end])
    position = text.find(_TOOL_CALL_OPEN, end + len(_TOOL_CALL_CLOSE))
  if len(blocks) != text.count(_TOOL_CALL_OPEN):
    raise DecodeError("a <tool_call> block is not closed by </tool_call>")
  if len(blocks) > MAX_CALLS:
    raise DecodeError(f"{len(blocks)} calls, more than MAX_CALLS={MAX_CALLS}")
  calls = []
  for index, block in enumerate(blocks):
    try:
      value = json.loads(block)
    except ValueError as e:
      raise DecodeError(f"<tool_call> block {index} is not JSON ({_clipped(e)})") from e
    calls.append(_call_from_json(value, f"<tool_call> block {index}"))
  return calls


def _calls_from_json(value: Any) -> list[Call]:
  if isinstance(value, dict):
    return [_call_from_json(value, "the JSON object")]
  if isinstance(value, list):
    return [_call_from_json(item, f"JSON item {index}")
            for index, item in enumerate(value)]
  raise DecodeError(f"JSON {type(value).__name__} is not a call or a list of calls")


def _call_from_json(value: Any, where: str) -> Call:
  if not isinstance(value, dict) or not isinstance(value.get("name"), str):
    raise DecodeError(f"{where} is not an object with a string 'name'")
  args = value.get("arguments", value.get("parameters", {}))
  if isinstance(args, str):
    try:
      args = json.loads(args)
    except ValueError as e:
      raise DecodeError(f"{where}: arguments string is not JSON ({e})") from e
  if not isinstance(args, dict):
    raise DecodeError(f"{where}: arguments are a {type(args).__name__}, "
                      "not an object")
  return Call(value["name"], args)


# ------------------------------------------------------------------------ checking


def normalize_string(text: str) -> str:
  """Lower case, without spaces and `,./-_*^`, single quotes made double."""
  return _IGNORED_IN_STRINGS.sub("", text).lower().replace("'", '"')


def check_calls(entry: BfclEntry, calls: list[Call], category: str,
                dots_as_underscores: bool = False) -> str | None:
  """Why `calls` do not answer `entry` under `category`'s rules; None when they do.

  Raises:
    InputError: `category` is not supported.
  """
  parallel = "parallel" in _supported(category)
  expected = entry.ground_truth
  if len(calls) != len(expected):
    return f"expected {len(expected)} call(s), got {len(calls)}"
  if not parallel:
    for index, (call, answer) in enumerate(zip(calls, expected)):
      reason = _check_call(entry, call, answer, dots_as_underscores)
      if reason is not None:
        return reason if len(calls) == 1 else f"call {index}: {reason}"
    return None
  untaken = list(range(len(calls)))
  for index, answer in enumerate(expected):
    reasons = []
    for position in untaken:
      reason = _check_call(entry, calls[position], answer, dots_as_underscores)
      if reason is None:
        untaken.remove(position)
        break
      reasons.append(f"call {position}: {reason}")
    else:
      return (f"no call matches expected call {index} ({next(iter(answer))}): "
              + "; ".join(reasons))
  return None


def _check_call(entry: BfclEntry, call: Call, answer: dict[str, dict[str, list]],
                dots_as_underscores: bool) -> str | None:
  """Why `call` does not match the expected call `answer`; None when it does."""
  (name, acceptable), = answer.items()
  schema = entry.functions[name]["parameters"]
  wanted = name.replace(".", "_") if dots_as_underscores else name
  if call.name != wanted:
    return f"called {call.name!r}, expected {wanted!r}"
  for param in schema.get("required", []):
    if param not in call.args:
      return f"{wanted}: missing required parameter {param!r}"
  for param, value in call.args.items():
    if param not in schema["properties"] or param not in acceptable:
      return f"{wanted}: unexpected parameter {param!r}"
    reason = _check_value(param, value, schema["properties"][param],
                          acceptable[param])
    if reason is not None:
      return f"{wanted}: {reason}"
  for param, values in acceptable.items():
    if param not in call.args and OPTIONAL not in values:
      return f"{wanted}: missing parameter {param!r} (not optional in the answer)"
  return None


def _first_type(acceptable: list[Any]) -> type | None:
  """The Python type of the first acceptable value that is not OPTIONAL."""
  for value in acceptable:
    if value != OPTIONAL:
      return type(value)
  return None


def _check_value(param: str, value: Any, spec: dict[str, Any],
                 acceptable: list[Any]) -> str | None:
  """Why `value` is not acceptable for `param` (schema `spec`); None when it is."""
  declared = spec["type"]
  expected_type = PYTHON_TYPES[declared]
  item_type = (PYTHON_TYPES[spec["items"]["type"]] if declared in _ITEM_TYPED
               else None)
  if declared == "tuple" and type(value) is tuple:
    value = list(value)
  if declared == "float" and type(value) is int:
    value = float(value)
  answer_type = _first_type(acceptable)
  literal = answer_type is not None and answer_type is not expected_type
  if type(value) is expected_type:
    if item_type is not None and not _items_typed(value, item_type, acceptable):
      return (f"{param!r}: items of {_shown(value)} are not all of the item type "
              f"{spec['items']['type']}")
  elif type(value) is not answer_type:
    return (f"{param!r}: expected type {declared}, got {type(value).__name__} "
            f"{_shown(value)}")
  if literal:
    matched = value in acceptable
  elif expected_type is dict:
    matched = _dict_matches(value, acceptable)
  elif expected_type is list and item_type is dict:
    matched = _dict_list_matches(value, acceptable)
  elif expected_type is str:
    matched = normalize_string(value) in [
        normalize_string(a) for a in acceptable if type(a) is str]
  elif expected_type is list:
    matched = _normalized_items(value) in [
        [] if a == OPTIONAL else _normalized_items(a) if type(a) is list else a
        for a in acceptable]
  else:
    matched = value in acceptable
  if not matched:
    return f"{param!r}: {_shown(value)} is not one of {_shown(acceptable)}"
  return None


def _items_typed(items: list[Any], item_type: type, acceptable: list[Any]) -> bool:
  """Whether the items pass the item type check against some acceptable value."""
  for candidate in acceptable:
    if type(candidate) is not list:
      return True
    candidate_type = _first_type(candidate)
    if all(type(item) is item_type or type(item) is candidate_type
           for item in items):
      return True
  return False


def _normalized(value: Any) -> Any:
  return normalize_string(value) if type(value) is str else value


def _normalized_items(items: list[Any]) -> list[Any]:
  return [_normalized(item) for item in items]


def _dict_matches(value: dict[Any, Any], acceptable: list[Any]) -> bool:
  for candidate in acceptable:
    if candidate == OPTIONAL:
      continue
    if (all(key in candidate
            and _normalized(v) in _normalized_items(candidate[key])
            for key, v in value.items())
        and all(key in value or OPTIONAL in values
                for key, values in candidate.items())):
      return True
  return False


def _dict_list_matches(value: list[Any], acceptable: list[Any]) -> bool:
  for candidate in acceptable:
    dicts = [] if candidate == OPTIONAL else candidate
    if len(value) == len(dicts) and all(
        _dict_matches(v, [d]) for v, d in zip(value, dicts)):
      return True
  return False


# ------------------------------------------------------------------------ data


def _supported(category: str) -> str:
  if category not in SUPPORTED_CATEGORIES:
    raise InputError(f"unsupported BFCL category {category!r}; supported: "
                     f"{', '.join(SUPPORTED_CATEGORIES)}")
  return category


def category_files(data_dir: str, category: str) -> tuple[str, str]:
  """(question file, possible-answer file) of `category` in a BFCL data directory,
  laid out as bfcl-eval's: `DIR/BFCL_v<N>_<category>.json` and
  `DIR/possible_answer/BFCL_v<N>_<category>.json`.

  Raises:
    InputError: unsupported category, or the files are missing or ambiguous.
  """
  return data_files(data_dir, _supported(category))


def data_files(data_dir: str, category: str) -> tuple[str, str]:
  """`category_files` for any category name (its support checked by the
  caller): the one `BFCL_v<N>_<category>.json` in `data_dir` and its
  possible-answer file.

  Raises:
    InputError: the files are missing or ambiguous.
  """
  pattern = re.compile(rf"BFCL_v\d+_{re.escape(category)}\.json")
  try:
    names = sorted(n for n in os.listdir(data_dir) if pattern.fullmatch(n))
  except OSError as e:
    raise InputError(f"cannot list BFCL data directory {data_dir}: {e}") from e
  if len(names) != 1:
    found = ", ".join(names) if names else "none"
    raise InputError(f"expected one BFCL_v<N>_{category}.json in {data_dir}, "
                     f"found {found}")
  answers = os.path.join(data_dir, "possible_answer", names[0])
  if not os.path.isfile(answers):
    raise InputError(f"category {category!r} has no possible-answer file {answers}")
  return os.path.join(data_dir, names[0]), answers


def load_category(data_dir: str, category: str) -> list[BfclEntry]:
  """The entries of one category, in question-file order, checked for well-formedness.

  Raises:
    InputError: see `category_files`; or an entry lacks its answer, names an undefined
      function, or has a malformed schema or ground truth (the message names the id).
  """
  questions_path, answers_path = category_files(data_dir, category)
  answers = {}
  for record in read_jsonl(answers_path):
    if "id" not in record or not isinstance(record.get("ground_truth"), list):
      raise InputError(f"{answers_path}: record without 'id' and a 'ground_truth' "
                       f"list: {str(record)[:200]}")
    answers[record["id"]] = record["ground_truth"]
  entries = []
  for record in read_jsonl(questions_path):
    entry_id = record.get("id")
    if entry_id not in answers:
      raise InputError(f"{answers_path}: no ground truth for id {entry_id!r}")
    functions = {}
    for schema in record.get("function", []):
      _check_schema(schema, f"{questions_path}: id {entry_id!r}")
      functions.setdefault(schema["name"], schema)
    ground_truth = answers[entry_id]
    _check_ground_truth(ground_truth, functions, f"{answers_path}: id {entry_id!r}")
    entries.append(BfclEntry(entry_id, functions, ground_truth))
  return entries


def _check_schema(schema: Any, where: str) -> None:
  try:
    properties = schema["parameters"]["properties"]
    name = schema["name"]
  except (KeyError, TypeError) as e:
    raise InputError(
        f"{where}: function schema without name/parameters/properties") from e
  for param, spec in properties.items():
    declared = spec.get("type")
    if declared not in PYTHON_TYPES:
      raise InputError(f"{where}: {name}.{param} has unsupported type {declared!r}")
    item_type = spec.get("items", {}).get("type")
    if declared in _ITEM_TYPED and item_type not in PYTHON_TYPES:
      raise InputError(f"{where}: {name}.{param} is a {declared} with unsupported "
                       f"items type {item_type!r}")


def _check_ground_truth(ground_truth: list[Any], functions: dict[str, Any],
                        where: str) -> None:
  for answer in ground_truth:
    if not isinstance(answer, dict) or len(answer) != 1:
      raise InputError(f"{where}: expected call {answer!r} is not one "
                       "{function: {param: [values]}} object")
    (name, params), = answer.items()
    if name not in functions:
      raise InputError(f"{where}: ground truth calls {name!r}, which the question "
                       "does not define")
    if not isinstance(params, dict) or not all(
        isinstance(v, list) for v in params.values()):
      raise InputError(f"{where}: acceptable values of {name!r} are not lists")


def score(entry: BfclEntry, text: str, category: str,
          dots_as_underscores: bool = False) -> Verdict:
  """The verdict on one model output: INVALID when it does not decode.

  Raises:
    InputError: `category` is not supported.
  """
  _supported(category)
  try:
    calls = decode_calls(text)
    reason = check_calls(entry, calls, category, dots_as_underscores)
  except DecodeError as e:
    return Verdict(INVALID, str(e))
  except RecursionError:  # comparing or showing a value nested ~1,000 levels deep
    return Verdict(INVALID, "output nested too deeply")
  return Verdict(CORRECT) if reason is None else Verdict(INCORRECT, reason)
