"""BFCL's stateful multi-turn APIs, called by name without `eval`.

The API classes are bfcl-eval's own pure-Python ones (`bfcl_eval.eval_checker.
multi_turn_eval.func_source_code`: GorillaFileSystem, MathAPI, MessageAPI, TwitterAPI,
TicketAPI, TradingBot, TravelAPI, VehicleControlAPI). An `ApiSession` holds one
instance of each class an entry involves, loaded from the entry's `initial_config`
as BFCL loads it (`_load_scenario(deepcopy(config), long_context=...)`, nothing for
the stateless MathAPI); every session is its own (BFCL keeps its instances in module
globals keyed on model and entry; here nothing is shared between sessions, rows or
threads).

Executing a decoded call (`ApiSession.execute`) gives the result text BFCL's
executor gives (`multi_turn_utils.execute_multi_turn_func_call`): a str result as
it is, a dict as `json.dumps` (`str` when that fails), anything else as `str`, and
any failure as `Error during execution: <message>`. The call's name is looked up
among the public methods of the session's instances (they are exactly the classes'
documented functions; a name two classes define goes to the later class in
`involved_classes`, as in BFCL) and the method is called with the decoded keyword
arguments. Nothing of the model's text is evaluated: these are execution errors,
shown with the message BFCL's `eval` would give (`name 'x' is not defined`):
  * a name that is not such a method, a dotted name (attribute access);
  * an argument that BFCL would run as a nested call: a dict whose values are all
    dicts (BFCL renders `{'g': {'b': 1}}`, and `g(b=1)`, as the call `g(b=1)`);
  * a float argument that is infinite or NaN (BFCL's `repr` writes `inf`, a name).
Arguments arrive as BFCL's decode-render-`eval` round trip leaves them: the values
the project's decoder reads (a bare name is its name as a string, as in BFCL), dict
keys made strings (BFCL writes every key of a plain dict as `'<key>'`). A step whose
arguments hold an empty dict where BFCL renders dicts (at the top or inside dicts)
does not decode in BFCL (`bfcl_step_decodes` is False).

Bounded time: the decoder bounds the text and its integers; the MathAPI parameters
whose cost grows without bound in the value (logarithm's and square_root's
`precision`, round_number's `decimal_places`, power's integer result) are refused past
MAX_PRECISION / MAX_POWER_DIGITS with an execution error. The process-wide numeric
contexts the APIs set (`mpmath.mp.dps`, the decimal context's `prec`) are restored
after every call, and calls run under one lock, so an episode's results do not
depend on what ran before or beside it.

Known difference from BFCL: BFCL prefixes every `<method name>(` it finds in the
call text with its instance's global name, inside string arguments too; strings
are passed here unchanged.
"""

from __future__ import annotations

import ast
import copy
import decimal
import importlib
import inspect
import json
import math
import threading
from typing import Any, Callable, Sequence

from genenv_jax.scoring import InputError
from genenv_jax.scoring.bfcl import Call

MAX_PRECISION = 1_000
MAX_POWER_DIGITS = 100_000
ERROR_PREFIX = "Error during execution: "

_CALL_LOCK = threading.Lock()
_DIGITS_PER_BIT = math.log10(2)


class ExecutionError(Exception):
  """A call that is not executed; its message is what BFCL's executor would show."""


def backend():
  """bfcl-eval's `executable_backend_config`: the API classes' modules and
  function-doc files, the stateless classes.

  Raises:
    InputError: bfcl-eval is not installed.
  """
  try:
    from bfcl_eval.constants import executable_backend_config  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise InputError("BFCL multi-turn needs the bfcl_eval package's API classes "
                     "(pip install --no-deps bfcl-eval)") from e
  return executable_backend_config


def api_class(class_name: str) -> type:
  """The bfcl-eval API class named `class_name`.

  Raises:
    InputError: not one of bfcl-eval's API classes.
  """
  modules = backend().CLASS_FILE_PATH_MAPPING
  if class_name not in modules:
    raise InputError(f"unknown BFCL API class {class_name!r}; known: "
                     f"{', '.join(sorted(modules))}")
  module = importlib.import_module(modules[class_name])
  return getattr(module, class_name)


def result_text(value: Any) -> str:
  """An API return value as BFCL's executor shows it."""
  if type(value) is str:  # pylint: disable=unidiomatic-typecheck
    return value
  if type(value) is dict:  # pylint: disable=unidiomatic-typecheck
    try:
      return json.dumps(value)
    except (TypeError, ValueError):
      return str(value)
  return str(value)


class ApiSession:
  """The API instances of one episode (or of its ground truth), and their methods.

  Attributes:
    instances: class name -> its instance, in `involved_classes` order.
    methods: public method name -> the bound method that BFCL would call.
  """

  def __init__(self, involved_classes: Sequence[str], initial_config: dict[str, Any],
               long_context: bool):
    stateless = backend().STATELESS_CLASSES
    self.instances: dict[str, Any] = {}
    self.methods: dict[str, Callable[..., Any]] = {}
    with _CALL_LOCK, _numeric_contexts_restored():
      for class_name in involved_classes:
        instance = api_class(class_name)()
        if class_name not in stateless:
          instance._load_scenario(  # pylint: disable=protected-access
              copy.deepcopy(initial_config.get(class_name, {})),
              long_context=long_context)
        self.instances[class_name] = instance
        for name, method in inspect.getmembers(instance, predicate=inspect.ismethod):
          if not name.startswith("_"):
            self.methods[name] = method

  def execute(self, call: Call) -> str:
    """The result text of a decoded model call (module docstring); never raises
    (an `Exception` from the API becomes an error result)."""
    try:
      method = self._method(call.name)
      kwargs = {name: bfcl_argument(value) for name, value in call.args.items()}
      _check_cost(method, kwargs)
    except ExecutionError as e:
      return ERROR_PREFIX + str(e)
    return self._run(method, (), kwargs)

  def execute_ground_truth(self, text: str) -> str:
    """The result text of one ground-truth call, e.g. `sort('report.pdf')`
    (positional literal arguments allowed, as BFCL's data uses them).

    Raises:
      InputError: the text is not a call of a known name with literal arguments.
    """
    name, args, kwargs = ground_truth_call(text)
    if name not in self.methods:
      raise InputError(f"ground-truth call {text!r} names no method of "
                       f"{', '.join(self.instances)}")
    return self._run(self.methods[name], args, kwargs)

  def _method(self, name: str) -> Callable[..., Any]:
    if name in self.methods:
      return self.methods[name]
    shown = name.split(".", 1)[0] if name else name
    raise ExecutionError(f"name {shown!r} is not defined")

  @staticmethod
  def _run(method: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> str:
    with _CALL_LOCK, _numeric_contexts_restored():
      try:
        value = method(*args, **kwargs)
        return result_text(value)
      except Exception as e:  # pylint: disable=broad-except
        # BFCL's executor shows any failure of a call as its result.
        return ERROR_PREFIX + str(e)


def state_differences(model: ApiSession, ground_truth: ApiSession) -> dict[str, list[str]]:
  """class name -> the public attributes of the ground truth's instance that the
  model's instance of the same class does not equal (BFCL's state check: `!=` on
  each attribute; an attribute too deeply nested to compare, e.g. a directory
  copied into itself, differs); empty when the states agree."""
  differences = {}
  for class_name, expected in ground_truth.instances.items():
    actual = model.instances[class_name]
    names = [name for name, value in vars(expected).items()
             if not name.startswith("_") and _differs(getattr(actual, name), value)]
    if names:
      differences[class_name] = names
  return differences


def _differs(actual: Any, expected: Any) -> bool:
  try:
    return bool(actual != expected)
  except RecursionError:
    return True


class _numeric_contexts_restored:  # pylint: disable=invalid-name
  """Restores `mpmath.mp.dps` and the decimal context's precision on exit."""

  def __enter__(self):
    import mpmath  # pylint: disable=import-outside-toplevel
    self._mp = mpmath.mp
    self._dps = mpmath.mp.dps
    self._prec = decimal.getcontext().prec
    return self

  def __exit__(self, *exc_info):
    self._mp.dps = self._dps
    decimal.getcontext().prec = self._prec
    return False


# ------------------------------------------------------------------ arguments


def bfcl_argument(value: Any) -> Any:
  """`value` as BFCL's render-then-`eval` of a decoded argument leaves it.

  Raises:
    ExecutionError: BFCL would run it as a nested call, or it holds an infinite or
      NaN float.
  """
  if isinstance(value, dict):
    if value and all(isinstance(v, dict) for v in value.values()):
      raise ExecutionError(f"a nested call ({next(iter(value))}) as an argument is "
                           "not executed")
    return {_bfcl_key(k): bfcl_argument(v) for k, v in value.items()}
  _check_finite(value)
  return value


def _bfcl_key(key: Any) -> str:
  """A dict key as BFCL writes it: `'<key>'`, read back as a string literal."""
  try:
    return ast.literal_eval(f"'{key}'")
  except (SyntaxError, ValueError) as e:
    raise ExecutionError(f"dict key {str(key)[:100]!r} is not a string literal "
                         f"when quoted ({e})") from e


def _check_finite(value: Any) -> None:
  stack = [value]
  while stack:
    item = stack.pop()
    if isinstance(item, float) and not math.isfinite(item):
      raise ExecutionError(f"name {repr(item).lstrip('-')!r} is not defined")
    if isinstance(item, complex) and not (math.isfinite(item.real)
                                          and math.isfinite(item.imag)):
      raise ExecutionError("name 'inf' is not defined")
    if isinstance(item, (list, tuple)):
      stack.extend(item)
    elif isinstance(item, dict):
      stack.extend(item.keys())
      stack.extend(item.values())


def bfcl_step_decodes(calls: Sequence[Call]) -> bool:
  """Whether BFCL's decoder turns these decoded calls into call text: its renderer
  (`parse_nested_value`) fails on an empty dict wherever it renders dicts: an
  argument, a value of a plain dict, an argument of a dict it renders as a call
  (the first key's; the other keys are dropped)."""
  stack = [value for call in calls for value in call.args.values()]
  while stack:
    item = stack.pop()
    if not isinstance(item, dict):
      continue
    if not item:
      return False
    values = list(item.values())
    if all(isinstance(v, dict) for v in values):
      stack.extend(values[0].values())
    else:
      stack.extend(values)
  return True


def render_call(call: Call) -> str:
  """A decoded call as BFCL's decoder writes it for execution, e.g.
  `cd(folder='document')` (the name BFCL gives the call's result message)."""
  return f"{call.name}({', '.join(f'{k}={_render(v)}' for k, v in call.args.items())})"


def _render(value: Any) -> str:
  if isinstance(value, dict) and value:
    if all(isinstance(v, dict) for v in value.values()):
      name, args = next(iter(value.items()))
      return f"{name}({', '.join(f'{k}={_render(v)}' for k, v in args.items())})"
    return "{" + ", ".join(f"'{k}': {_render(v)}" for k, v in value.items()) + "}"
  return repr(value)


def _check_cost(method: Callable[..., Any], kwargs: dict[str, Any]) -> None:
  """Refuses MathAPI arguments whose cost grows without bound (module docstring)."""
  name = method.__name__
  bounded = {"logarithm": "precision", "square_root": "precision",
             "round_number": "decimal_places"}
  if type(method.__self__).__name__ != "MathAPI":
    return
  param = bounded.get(name)
  if param is not None:
    value = kwargs.get(param)
    if isinstance(value, (int, float)) and abs(value) > MAX_PRECISION:
      raise ExecutionError(f"{name}: {param}={value} is past this environment's "
                           f"limit of {MAX_PRECISION}")
  if name == "power":
    base, exponent = kwargs.get("base"), kwargs.get("exponent")
    if (isinstance(base, int) and isinstance(exponent, int) and abs(base) > 1
        and exponent > 0
        and base.bit_length() * exponent * _DIGITS_PER_BIT > MAX_POWER_DIGITS):
      raise ExecutionError(f"power: a result of more than {MAX_POWER_DIGITS} digits")


# ------------------------------------------------------------------ ground truth


def ground_truth_call(text: str) -> tuple[str, tuple, dict[str, Any]]:
  """(name, positional args, keyword args) of a ground-truth call text, its
  arguments read as literals.

  Raises:
    InputError: not one call of a plain name with literal arguments.
  """
  try:
    node = ast.parse(text, mode="eval").body
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and all(k.arg is not None for k in node.keywords)):
      raise ValueError("not a call of a plain name with keyword arguments")
    args = tuple(ast.literal_eval(a) for a in node.args)
    kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
  except (SyntaxError, ValueError) as e:
    raise InputError(f"ground-truth call {text[:200]!r} is not a call with "
                     f"literal arguments ({e})") from e
  return node.func.id, args, kwargs
