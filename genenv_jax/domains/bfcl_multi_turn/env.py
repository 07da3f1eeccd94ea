"""A host environment over BFCL's multi-turn entries: the agent works through the
user turns against the entry's stateful APIs, as BFCL's prompt-mode inference loop
(`BaseHandler.inference_multi_turn_prompting`) runs a model.

Contract (for an episode adapter under `jax.pure_callback`, which may repeat or
reorder calls): `transition(entry, steps)` is a PURE function of the entry and the
agent's step texts so far, in order, across all turns. Each call replays the whole
history from the entry's initial state on API instances of its own (no state is
kept between calls, rows or threads); a bounded memo cache keyed on (entry
fingerprint, steps) returns the replayed value, never a different one. It never
raises for any step text: a step that fails to decode, names an unknown function,
passes arguments BFCL would run as code, or makes an API method raise is an
execution error result shown to the agent (`Error during execution: ...`); model
text is never evaluated (genenv_jax/scoring/bfcl_apis.py).

The episode, step by step:
  * `transition(entry, [])` observes the first user turn.
  * A step whose text decodes to calls (`bfcl_multi_turn.decode_step`, BFCL's
    Python-call format) executes them in order; the observation is their results,
    one tool message per call (`{"role": "tool", "name": <call text>, "content":
    <result text>}`, as BFCL's OSS handler adds them; `observation` is BFCL's
    prompting text for them, the repr of that list).
  * A step that decodes to no call ends the turn; the observation is the next user
    turn's message. At a miss_func turn that reveals held-out functions, that message
    is BFCL's: the docs, then "I have updated some more functions you can choose
    from. What about now?".
  * At the 21st call step of one turn (BFCL's MAXIMUM_STEP_LIMIT of 20 passed) BFCL
    force-quits: the turn and the episode end there. The checker then fails an
    episode cut short before its last turn.
  * After the last turn ends the episode is done: `score` is the official
    checker's verdict on the steps (`bfcl_multi_turn.score`), with the turns passed.
    Steps given after the episode ended are ignored.
`result_turns` gives the steps grouped by turn, BFCL's result record.
"""

from __future__ import annotations

import collections
import threading
from typing import NamedTuple, Sequence

from genenv_jax.scoring import bfcl_apis
from genenv_jax.scoring import bfcl_multi_turn as mt

MAX_STEPS_PER_TURN = 20  # bfcl_eval.constants.default_prompts.MAXIMUM_STEP_LIMIT
HELD_OUT_PROMPT = ("{functions}\nI have updated some more functions you can choose "
                   "from. What about now?")  # DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING
CACHE_SIZE = 4096

Message = dict  # {"role": ..., "content": ...[, "name": ...]}


class Transition(NamedTuple):
  """What the agent observes after its steps so far.

  Attributes:
    observation: the text of `messages` ("" when done): a user turn's content, or
      the repr of the tool messages (BFCL's prompting format).
    messages: the chat messages to append after the agent's last step.
    score: the checker's verdict and turns passed when done, else None.
    done: whether the episode has ended.
  """

  observation: str
  messages: tuple[Message, ...]
  score: mt.MultiTurnScore | None
  done: bool


class _Replay(NamedTuple):
  turns: list[list[str]]         # the steps played, grouped by turn
  messages: tuple[Message, ...]  # what the last step (or the start) shows
  done: bool


_cache: collections.OrderedDict = collections.OrderedDict()
_cache_lock = threading.Lock()


def transition(entry: mt.MultiTurnEntry, steps: Sequence[str]) -> Transition:
  """The observation, score and end flag after `steps` (module docstring)."""
  key = (entry.fingerprint, tuple(steps))
  with _cache_lock:
    if key in _cache:
      _cache.move_to_end(key)
      return _copied(_cache[key])
  replay = _replay(entry, steps)
  if replay.done:
    value = Transition("", (), mt.score(entry, replay.turns), True)
  else:
    value = Transition(_observation_text(replay.messages), replay.messages, None,
                       False)
  with _cache_lock:
    _cache[key] = value
    while len(_cache) > CACHE_SIZE:
      _cache.popitem(last=False)
  return _copied(value)


def _copied(value: Transition) -> Transition:
  """`value` with messages of its own, so that a caller cannot change the cache."""
  return value._replace(messages=tuple(dict(m) for m in value.messages))


def result_turns(entry: mt.MultiTurnEntry, steps: Sequence[str]) -> list[list[str]]:
  """The steps played, grouped by turn: BFCL's result record (`"result"`)."""
  return _replay(entry, steps).turns


def turn_messages(entry: mt.MultiTurnEntry, turn: int) -> tuple[Message, ...]:
  """The user message(s) that open `turn`: the question's, or at a miss_func turn
  BFCL's message revealing the held-out docs."""
  if turn in entry.held_out:
    return ({"role": "user",
             "content": HELD_OUT_PROMPT.format(functions=list(entry.held_out[turn]))},)
  return tuple(dict(m) for m in entry.turns[turn])


def _replay(entry: mt.MultiTurnEntry, steps: Sequence[str]) -> _Replay:
  if not entry.turns:
    return _Replay([], (), True)
  session = entry.session()
  turns: list[list[str]] = [[]]
  messages = turn_messages(entry, 0)
  call_steps = 0
  for text in steps:
    turns[-1].append(text)
    calls = mt.decode_step(text)
    if calls is None:
      if len(turns) == len(entry.turns):
        return _Replay(turns, (), True)
      turns.append([])
      messages, call_steps = turn_messages(entry, len(turns) - 1), 0
      continue
    messages = tuple({"role": "tool", "name": bfcl_apis.render_call(call),
                      "content": session.execute(call)} for call in calls)
    call_steps += 1
    if call_steps > MAX_STEPS_PER_TURN:
      return _Replay(turns, (), True)
  return _Replay(turns, messages, False)


def _observation_text(messages: tuple[Message, ...]) -> str:
  if messages and messages[0]["role"] == "tool":
    return repr([dict(m) for m in messages])
  return "\n\n".join(m["content"] for m in messages)
