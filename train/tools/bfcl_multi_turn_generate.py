"""BFCL multi-turn episodes played by an agent with the project's sampler, for
`python -m train.tools.evaluate bfcl --generate --category multi_turn_...`.

Each entry is played as BFCL's prompt-mode inference plays a model
(`BaseHandler.inference_multi_turn_prompting` with the OSS handler's messages):
the system prompt is BFCL's default prompt-mode one (`bfcl_generate.bfcl_system_prompt`)
with the docs of the involved classes offered from the start, followed by the first
user turn; after each of the agent's steps (an assistant message) the environment
(genenv_jax/domains/bfcl_multi_turn/env.py) adds the execution results as tool messages,
or, when the step holds no call, the next user turn (at a miss_func turn, BFCL's
message revealing the held-out docs). The chat goes through the tokenizer's chat
template; steps are decoded greedily (or at `--temperature`).

Entries are played `batch_size` at a time in lockstep: one sampler call per step
for the batch's unfinished entries, prompts left-padded to a width rounded up to
WIDTH_MULTIPLE tokens so that the sampler compiles once per width bucket.
"""

from __future__ import annotations

import time
from typing import Sequence

from genenv_jax.domains.bfcl_multi_turn import env as env
from genenv_jax.scoring import bfcl_multi_turn as mt
from train.tools import agent_generate
from train.tools import bfcl_generate

WIDTH_MULTIPLE = 512


def first_messages(entry: mt.MultiTurnEntry) -> list[dict[str, str]]:
  """BFCL's prompt-mode system prompt with the entry's starting docs, then the
  first user turn (a system message of the question is appended to ours)."""
  first = env.transition(entry, []).messages
  return bfcl_generate.question_messages(
      {"id": entry.id, "function": list(entry.functions), "question": [list(first)]})


def play(agent: bfcl_generate.Agent, entries: Sequence[mt.MultiTurnEntry],
         max_new_tokens: int, batch_size: int,
         temperature: float = 0.0) -> list[list[str]]:
  """The agent's step texts for each entry, in order across its turns, played to
  the end of the episode (module docstring)."""
  played: list[list[str]] = []
  for start in range(0, len(entries), batch_size):
    batch = list(entries[start:start + batch_size])
    steps: list[list[str]] = [[] for _ in batch]
    chats = [first_messages(entry) for entry in batch]
    active = list(range(len(batch)))
    turn = 0
    while active:
      texts = bfcl_generate.generate(
          agent, [chats[i] for i in active], max_new_tokens, batch_size,
          temperature, seed=start * 100_003 + turn, width_multiple=WIDTH_MULTIPLE)
      turn += 1
      still = []
      for i, text in zip(active, texts):
        steps[i].append(text)
        chats[i].append({"role": "assistant", "content": text})
        step = env.transition(batch[i], steps[i])
        if not step.done:
          chats[i].extend(step.messages)
          still.append(i)
      active = still
    played.extend(steps)
  return played


def write_predictions(data_dir: str, category: str, agent: bfcl_generate.Agent,
                      path: str, max_new_tokens: int, batch_size: int,
                      limit: int = 0, temperature: float = 0.0,
                      ids: Sequence[str] = ()) -> tuple[int, float]:
  """Plays the first `limit` entries (0: all) of a multi-turn category, of those
  named in `ids` when given, and writes their result records `{"id": ..., "result":
  [[step, ...] per turn]}` to `path` (process 0 alone); returns (entries played, seconds spent
  playing them).

  Raises:
    InputError: an id of `ids` is not in the category.
  """
  entries = bfcl_generate.select(mt.load_category(data_dir, category),
                                 lambda e: e.id, ids, category)
  if limit:
    entries = entries[:limit]
  began = time.perf_counter()
  played = play(agent, entries, max_new_tokens, batch_size, temperature)
  seconds = time.perf_counter() - began
  agent_generate.write_records(path, [
      {"id": entry.id, "result": env.result_turns(entry, steps)}
      for entry, steps in zip(entries, played)])
  return len(entries), seconds
