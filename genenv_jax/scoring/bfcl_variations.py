"""BFCL multi-turn tasks as text a simulator can write, and their checking by execution.

A written variation of a multi-turn entry is plain text, one field a line:

    Classes: GorillaFileSystem, MathAPI
    State: {"GorillaFileSystem": {"root": {...}}}
    User: Go into the 'document' folder and list what is there.
    Calls: [cd(folder='document'), ls()]
    User: What is the mean of 3, 4 and 8?
    Calls: [mean(numbers=[3, 4, 8])]

* `Classes:` the involved API classes (BFCL's class names), comma-separated, each
  once.
* `State:` the APIs' initial state, a JSON object keyed by class names of the line
  above (BFCL's `initial_config`); `{}` leaves every class in its default state.
* Then one `User:` / `Calls:` pair per turn: the user's message on one line, and the
  turn's ground truth as one step in BFCL's Python-call format (keyword arguments,
  literals only), or `[]` for a turn whose right answer is no call (the agent should
  ask for what is missing, as in `multi_turn_miss_param`).

`read(text)` is strict about that layout and reads the calls with the project's AST
decoder (`bfcl.decode_python_calls`; nothing is evaluated). `check(variation, docs)`
decides validity and difficulty by executing: the ground truth is replayed on fresh
API instances in the written state (`bfcl_apis.ApiSession`, the agent's own
execution path), and the variation is valid only if every call names a function of
its classes and none returns an error (an `Error during execution` result or a JSON
object with an `"error"` key). Nothing about validity or difficulty is taken from
the text itself.

Seeds (`from_entry`) are the wheel's entries written in the same format: their
ground-truth calls, which BFCL writes with positional arguments at times, are
rewritten with keyword arguments (the method's signature names them).
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
from typing import Any

from genenv_jax.scoring import InputError, bfcl, bfcl_apis
from genenv_jax.scoring import bfcl_multi_turn as mt
from genenv_jax.scoring.bfcl import Call

CLASSES = ("GorillaFileSystem", "MathAPI", "MessageAPI", "TwitterAPI", "TicketAPI",
           "TradingBot", "TravelAPI", "VehicleControlAPI")
CLASSES_FIELD, STATE_FIELD, USER_FIELD, CALLS_FIELD = "Classes:", "State:", "User:", "Calls:"
NO_CALLS = "[]"


class VariationError(ValueError):
  """Text that is not a valid variation (the message says why)."""


@dataclasses.dataclass(frozen=True)
class Variation:
  """One multi-turn task: classes, initial state, user turns and ground truth.

  Attributes:
    classes: the involved API classes.
    state: class name -> initial state (BFCL's `initial_config`).
    users: per turn, the user's message.
    calls: per turn, the ground-truth calls (empty: no call is right).
  """

  classes: tuple[str, ...]
  state: dict[str, Any]
  users: tuple[str, ...]
  calls: tuple[tuple[Call, ...], ...]

  def text(self) -> str:
    """The variation in the written format (module docstring)."""
    lines = [f"{CLASSES_FIELD} {', '.join(self.classes)}",
             f"{STATE_FIELD} {json.dumps(self.state, sort_keys=True)}"]
    for user, calls in zip(self.users, self.calls):
      lines.append(f"{USER_FIELD} {user}")
      lines.append(f"{CALLS_FIELD} [{', '.join(map(bfcl_apis.render_call, calls))}]")
    return "\n".join(lines)

  @property
  def num_calls(self) -> int:
    return sum(len(c) for c in self.calls)

  @property
  def steps_needed(self) -> int:
    """Agent steps of the ground-truth episode: per turn, one step of its calls and
    one step without a call that ends it (a turn without calls: that one only)."""
    return sum(2 if c else 1 for c in self.calls)


def read(text: str) -> Variation:
  """The variation written in `text` (module docstring).

  Raises:
    VariationError: the layout, a class name, the state's JSON or a call list is
      malformed.
  """
  lines = text.strip().split("\n")
  if len(lines) < 4 or len(lines) % 2:
    raise VariationError(f"{len(lines)} lines; a variation has Classes, State and "
                         "User/Calls pairs")
  classes = tuple(c.strip() for c in _field(lines[0], CLASSES_FIELD).split(","))
  unknown = [c for c in classes if c not in CLASSES]
  if unknown or len(set(classes)) != len(classes):
    raise VariationError(f"classes {classes} are not distinct names of {CLASSES}")
  try:
    state = json.loads(_field(lines[1], STATE_FIELD))
  except (ValueError, RecursionError) as e:
    raise VariationError(f"the state is not JSON ({e})") from e
  if not (isinstance(state, dict) and set(state) <= set(classes)
          and all(isinstance(v, dict) for v in state.values())):
    raise VariationError("the state is not an object of class states keyed by the "
                         "involved classes")
  users, calls = [], []
  for user_line, calls_line in zip(lines[2::2], lines[3::2]):
    user = _field(user_line, USER_FIELD)
    if not user:
      raise VariationError("an empty user turn")
    users.append(user)
    calls.append(_calls(_field(calls_line, CALLS_FIELD)))
  return Variation(classes, state, tuple(users), tuple(calls))


def _field(line: str, name: str) -> str:
  if not line.startswith(name):
    raise VariationError(f"expected a line starting {name!r}, got {line[:80]!r}")
  return line[len(name):].strip()


def _calls(text: str) -> tuple[Call, ...]:
  if text == NO_CALLS:
    return ()
  try:
    calls = bfcl.decode_python_calls(text)
  except bfcl.DecodeError as e:
    raise VariationError(f"the calls {text[:80]!r} do not decode ({e})") from e
  if not calls or not bfcl_apis.bfcl_step_decodes(calls):
    raise VariationError(f"the calls {text[:80]!r} are not a list of calls")
  return tuple(calls)


def is_error(result: str) -> bool:
  """Whether an execution result text reports an error."""
  if result.startswith(bfcl_apis.ERROR_PREFIX):
    return True
  try:
    value = json.loads(result)
  except (ValueError, RecursionError):
    return False
  return isinstance(value, dict) and "error" in value


def check(variation: Variation, func_docs: dict[str, list[dict[str, Any]]]
          ) -> mt.MultiTurnEntry:
  """The entry the agent plays, after replaying the ground truth.

  Args:
    func_docs: class name -> its function docs (`bfcl_multi_turn.load_func_docs`).

  Raises:
    VariationError: no call at all, a call of a function outside the classes' docs,
      or a call whose result is an error (the message names it).
  """
  if not variation.num_calls:
    raise VariationError("the ground truth has no call")
  documented = {f["name"] for c in variation.classes for f in func_docs[c]}
  session = bfcl_apis.ApiSession(variation.classes, variation.state, False)
  for turn in variation.calls:
    for call in turn:
      if call.name not in documented:
        raise VariationError(f"{call.name!r} is not a function of "
                             f"{', '.join(variation.classes)}")
      result = session.execute(call)
      if is_error(result):
        raise VariationError(f"{bfcl_apis.render_call(call)} -> {result[:200]}")
  text = variation.text()
  return mt.MultiTurnEntry(
      id="variation-" + hashlib.sha256(text.encode()).hexdigest()[:12],
      involved_classes=variation.classes, initial_config=variation.state,
      turns=tuple(({"role": "user", "content": u},) for u in variation.users),
      functions=tuple(f for c in variation.classes for f in func_docs[c]),
      held_out={}, ground_truth=tuple(
          tuple(map(bfcl_apis.render_call, turn)) for turn in variation.calls),
      long_context=False, fingerprint=hashlib.sha256(text.encode()).hexdigest())


def from_entry(entry: mt.MultiTurnEntry, max_turns: int = 0) -> Variation:
  """A wheel entry as a variation: its first `max_turns` turns (0: all), user
  messages joined on one line, ground truth with keyword arguments, the state of
  its involved classes only (the only ones BFCL loads).

  Raises:
    InputError: a turn has no user message (miss_func), or a ground-truth call's
      arguments do not bind to its method's signature.
  """
  turns = len(entry.turns) if max_turns <= 0 else min(max_turns, len(entry.turns))
  session = entry.session()
  users, calls = [], []
  for index in range(turns):
    text = " ".join(m["content"] for m in entry.turns[index] if m.get("role") == "user")
    if not text.strip():
      raise InputError(f"{entry.id}: turn {index} has no user message")
    users.append(" ".join(text.split()))
    calls.append(tuple(_keyword_call(session, t) for t in entry.ground_truth[index]))
  state = {c: v for c, v in entry.initial_config.items() if c in entry.involved_classes}
  return Variation(entry.involved_classes, state, tuple(users), tuple(calls))


def _keyword_call(session: bfcl_apis.ApiSession, text: str) -> Call:
  name, args, kwargs = bfcl_apis.ground_truth_call(text)
  if name not in session.methods:
    raise InputError(f"ground-truth call {text[:200]!r} names no method")
  try:
    bound = inspect.signature(session.methods[name]).bind(*args, **kwargs)
  except TypeError as e:
    raise InputError(f"ground-truth call {text[:200]!r}: {e}") from e
  return Call(name, dict(bound.arguments))
