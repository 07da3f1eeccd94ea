"""Episodic domains whose tasks are text that the host reads and plays.

The BFCL multi-turn and ALFWorld domains share one shape: on a chat
tokenizer, the simulator is shown a seed task's text through the chat
template and writes a new one; the host reads what it wrote (a
`jax.pure_callback`, each device its own rows) into the agent's prompt, the
canonical written-task row and a difficulty; the agent then plays the task as
an episode of a `HostEnvironment` whose `HostTransition` replays it from the
row. `HostTextDomain` holds that shared machinery, `HostTextTransition` the
episode's side; a domain supplies what its text means:

- `HostTextDomain.written_task(written)`: the task a generation's text writes
  (`WrittenTask`: canonical text, difficulty, the agent's prompt), raising
  `task_error` for text that is not one;
- `HostTextTransition.task_of_text(written)` and `play(task, actions,
  cut_short)`: a pool row's task, and the outcome of an episode's last action;
- its own config checks, `from_config`, templates and game or API logic.

Token rows: a written-task row is int32[task_len], the canonical text's
tokens, EOS, then pad (an all-pad row: an invalid task). The agent's reference
is a lone EOS: the environment scores the episodes, never `verify`.
"""

from __future__ import annotations

import abc
import collections
import hashlib
import threading
from typing import Any, Callable, Hashable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from genenv_jax import sharding
from genenv_jax.domains.base import ParsedTasks, TaskDomain, generation_rows
from genenv_jax.domains.text import domain as text
from genenv_jax.envs.host import HostEnvironment, HostStep, HostTransition

# Strings no message contains: the assistant message before an observation,
# and the content of its last message (to find the template's closing text).
_SENTINEL = "\u27e6genenv-action\u27e7"
_CONTENT = "\u27e6genenv-content\u27e7"
# Parsed generations and pool rows' tasks kept per domain.
_CACHE_SIZE = 4096


def require_positive(**values: int) -> None:
  """Raises ValueError naming the first of the config.task `values` below 1."""
  for name, value in values.items():
    if int(value) < 1:
      raise ValueError(f"config.task.{name}={value} must be >= 1")


class WrittenTask(NamedTuple):
  """A generation read as a task (`HostTextDomain.written_task`).

  Attributes:
    text: its canonical text; the pool's written-task row is its tokens and EOS.
    difficulty: its level, in 1..max_difficulty.
    agent_prompt: returns the agent's prompt token ids; called only once the
      row fits task_len (a prompt may cost more: an ALFWorld game's opening).
  """

  text: str
  difficulty: int
  agent_prompt: Callable[[], list[int]]


class _LruCache:
  """A map, shared by threads, that keeps the `size` most recently used keys."""

  def __init__(self, size: int):
    self._size = size
    self._entries: collections.OrderedDict = collections.OrderedDict()
    self._lock = threading.Lock()

  def get_or_compute(self, key: Hashable, compute: Callable[[], Any]) -> Any:
    """The value kept for `key`, else `compute()` (run outside the lock), kept."""
    with self._lock:
      if key in self._entries:
        self._entries.move_to_end(key)
        return self._entries[key]
    value = compute()
    with self._lock:
      self._entries[key] = value
      while len(self._entries) > self._size:
        self._entries.popitem(last=False)
    return value


class HostTextDomain(TaskDomain):
  """A host-text episodic domain (module docstring) on a chat tokenizer.

  Args:
    tokenizer: an HF tokenizer with a chat template, shared by both players.
    host: the domain's `HostTextTransition`, which the environment steps.
    max_prompt_tokens: P, the agent's prompt width.
    max_written_tokens: task_len, a written task's width (EOS included).
    max_simulator_tokens: the simulator's budget (EOS included); None:
      max_written_tokens.
    max_turns: K, actions per episode.
    max_action_tokens: A, tokens of one action (its stop token included).
    max_observation_tokens: O, tokens of one observation.
    max_difficulty: the highest level.
    simulator_system_prompt, simulator_instruction: the simulator's prompt; the
      instruction holds `{seed}` once.
    eos_token, pad_token: token strings; "" takes the tokenizer's.

  Class attributes a domain sets:
    domain_title: the domain in messages, e.g. "ALFWorld" ("the ALFWorld domain").
    task_noun: what a written task is called in messages, e.g. "spec".
    task_error: the exception `written_task` raises for text that is no task.
  """

  bos_id = 0
  answer_len = 1
  domain_title: str
  task_noun: str
  task_error: type[Exception]

  def __init__(self, tokenizer: Any, host: HostTextTransition, *,
               max_prompt_tokens: int, max_written_tokens: int,
               max_simulator_tokens: int | None, max_turns: int,
               max_action_tokens: int, max_observation_tokens: int,
               max_difficulty: int, simulator_system_prompt: str,
               simulator_instruction: str, eos_token: str, pad_token: str):
    require_positive(max_prompt_tokens=max_prompt_tokens,
                     max_written_tokens=max_written_tokens, max_turns=max_turns,
                     max_action_tokens=max_action_tokens,
                     max_observation_tokens=max_observation_tokens,
                     max_difficulty=max_difficulty)
    if not getattr(tokenizer, "chat_template", None):
      raise ValueError(f"config.task.tokenizer_dir: the {self.domain_title} domain "
                       "needs a tokenizer with a chat template")
    self.tokenizer = tokenizer
    self.vocab_size = len(tokenizer)
    self.eos_id = _token_id(tokenizer, "eos_token", eos_token or tokenizer.eos_token)
    self.pad_id = _token_id(tokenizer, "pad_token", pad_token or tokenizer.pad_token)
    if self.eos_id == self.pad_id:
      raise ValueError("config.task.eos_token and pad_token are the same token; pool "
                       "rows are read with the mask row != pad, so they must differ")
    self.agent_prompt_len = int(max_prompt_tokens)
    self.task_len = int(max_written_tokens)
    self._simulator_len = int(max_simulator_tokens or max_written_tokens)
    self.max_turns = int(max_turns)
    self.max_difficulty = int(max_difficulty)
    self.simulator_template = text.render_template(
        tokenizer, simulator_instruction, (text.SEED_SLOT,), simulator_system_prompt,
        True)
    self.simulator_prompt_len = self.simulator_template.constant_len + self.task_len - 1
    self.checkpoint_stop_ids: tuple[int, ...] = ()
    self._environment = HostEnvironment(
        host, max_turns=self.max_turns, action_len=int(max_action_tokens),
        observation_len=int(max_observation_tokens))
    self._parsed = _LruCache(_CACHE_SIZE)

  @property
  def stop_ids(self) -> tuple[int, ...]:
    return tuple(dict.fromkeys((self.eos_id,) + self.checkpoint_stop_ids))

  @property
  def simulator_len(self) -> int:
    return self._simulator_len

  @property
  def environment(self) -> HostEnvironment:
    return self._environment

  @abc.abstractmethod
  def written_task(self, written: str) -> WrittenTask:
    """The task a generation's text writes (the domain's format and checks).

    Raises:
      task_error: `written` writes no task of this domain.
    """

  # ------------------------------------------------------------------ host side

  def chat_prompt_ids(self, messages: Sequence[dict[str, str]]) -> list[int]:
    """Token ids of `messages` through the chat template's assistant header."""
    rendered = self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                  add_generation_prompt=True)
    return _encode(self.tokenizer, rendered)

  def user_prompt_ids(self, system_prompt: str, content: str) -> list[int]:
    """`chat_prompt_ids` of one user message, after a system message when
    `system_prompt` is not "" (else the chat template's own, if it has one)."""
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return self.chat_prompt_ids([*messages, {"role": "user", "content": content}])

  def observation_ids(self, messages: Sequence[dict[str, str]], width: int
                      ) -> list[int]:
    """Token ids of `messages` as the chat template renders them after an
    assistant message (whose stop token the agent wrote), through the next
    assistant header; over `width` tokens, the head of that text and the
    template's closing tokens."""
    rendered = self._after_action(messages)
    ids = _encode(self.tokenizer, rendered)
    if len(ids) <= width:
      return ids
    closing = self._after_action(
        [*messages[:-1], dict(messages[-1], content=_CONTENT)]).rsplit(_CONTENT, 1)[1]
    closing_ids = _encode(self.tokenizer, closing)
    head = _encode(self.tokenizer, rendered[:len(rendered) - len(closing)])
    return head[:max(width - len(closing_ids), 0)] + closing_ids[-width:]

  def _after_action(self, messages: Sequence[dict[str, str]]) -> str:
    chat = [{"role": "user", "content": "."},
            {"role": "assistant", "content": _SENTINEL}, *messages]
    rendered = self.tokenizer.apply_chat_template(chat, tokenize=False,
                                                  add_generation_prompt=True)
    after = rendered.rsplit(_SENTINEL, 1)[1]
    eos = self.tokenizer.convert_ids_to_tokens(self.eos_id)
    return after[len(eos):] if after.startswith(eos) else after

  def text_of(self, ids: np.ndarray) -> str:
    """The text of token ids int[T] up to the first EOS, special tokens dropped."""
    ids = [int(t) for t in ids]
    if self.eos_id in ids:
      ids = ids[:ids.index(self.eos_id)]
    ids = [t for t in ids if t != self.pad_id and 0 <= t < self.vocab_size]
    return self.tokenizer.decode(ids, skip_special_tokens=True)

  def parse_row(self, tokens: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """One generation's packed parse int32[P + task_len + 2]: the agent's prompt
    (left-padded), the written-task row, valid, difficulty.

    Args:
      tokens: int32[L] the generation; mask: bool[L] the tokens written.

    A generation is a task iff its EOS lies inside its mask, `written_task`
    reads its text, and the canonical row and the agent's prompt fit task_len
    and P; otherwise the prompt and row are all pad, valid and difficulty 0.
    Results are kept by (tokens, mask), the most recent _CACHE_SIZE.
    """
    return self._parsed.get_or_compute((tokens.tobytes(), mask.tobytes()),
                                       lambda: self._read_row(tokens, mask))

  def _read_row(self, tokens: np.ndarray, mask: np.ndarray) -> np.ndarray:
    p, t = self.agent_prompt_len, self.task_len
    out = np.full(p + t + 2, self.pad_id, np.int32)
    out[-2:] = 0
    ended = np.flatnonzero((tokens == self.eos_id) & mask)
    if len(ended) and mask[:ended[0] + 1].all():
      try:
        task = self.written_task(self.text_of(tokens))
        row = _encode(self.tokenizer, task.text) + [self.eos_id]
        if len(row) <= t:
          prompt = task.agent_prompt()
          if len(prompt) <= p:
            out[p - len(prompt):p] = prompt
            out[p:p + len(row)] = row
            out[-2] = 1
            out[-1] = task.difficulty
      except self.task_error:
        pass
    return out

  def _parse_rows(self, tokens: np.ndarray, mask: np.ndarray) -> np.ndarray:
    tokens, mask = np.asarray(tokens), np.asarray(mask)
    return np.stack([self.parse_row(tokens[i], mask[i])
                     for i in range(tokens.shape[0])]).reshape(tokens.shape[0], -1)

  def seed_row(self, written: str) -> tuple[np.ndarray, int] | None:
    """A seed task's text as `parse` reads it: (its written-task row
    int32[task_len], its difficulty); None when it does not fit task_len or
    is no valid task."""
    try:
      tokens = self.encode_tasks([written])[0]
    except ValueError:  # longer than max_written_tokens
      return None
    parsed = self.parse_row(tokens, tokens != self.pad_id)
    if not parsed[-2]:
      return None
    return parsed[self.agent_prompt_len:-2], int(parsed[-1])

  # ------------------------------------------------------------------- in JAX

  def simulator_prompt(self, seed_tasks: jax.Array,
                       success_rate: jax.Array | None = None
                       ) -> tuple[jax.Array, jax.Array]:
    """The simulator's prompts: its instruction with each seed's text.

    Args:
      seed_tasks: int32[M, task_len] written-task rows.
      success_rate: unused (no summary signal).

    Returns:
      (tokens int32[M, simulator_prompt_len], mask), left-padded.
    """
    del success_rate
    seeds = jnp.asarray(seed_tasks, jnp.int32)
    ends = (seeds == self.eos_id) | (seeds == self.pad_id)
    seed_len = jnp.where(ends.any(axis=1), jnp.argmax(ends, axis=1), self.task_len)
    slots = [(seeds[:, :self.task_len - 1], jnp.minimum(seed_len, self.task_len - 1))]
    return text.pack_segments(
        text.template_segments(self.simulator_template, slots, seeds.shape[0]),
        self.simulator_prompt_len, self.pad_id)

  def parse(self, simulator_tokens: jax.Array, simulator_mask: jax.Array) -> ParsedTasks:
    """Reads written tasks on the host (`parse_row`, each device its own rows).

    Args:
      simulator_tokens: int32[M, L], L = simulator_len or task_len (pool rows).
      simulator_mask: bool[M, L].

    Returns:
      ParsedTasks: prompt int32[M, P] (all pad for invalid rows), task
      int32[M, task_len] (the canonical text and EOS; all pad for invalid
      rows), reference int32[M, 1] a lone EOS (unused: the environment scores
      episodes).
    """
    width = jnp.shape(simulator_tokens)[-1]
    tokens, mask = generation_rows(
        simulator_tokens, simulator_mask,
        width if width in (self.simulator_len, self.task_len) else self.simulator_len)
    p, t = self.agent_prompt_len, self.task_len

    def on_rows(tokens, mask):
      return jax.pure_callback(
          self._parse_rows,
          jax.ShapeDtypeStruct((tokens.shape[0], p + t + 2), jnp.int32),
          tokens, mask, vmap_method="sequential")

    packed = sharding.rows_per_device(on_rows, tokens, mask)
    valid = packed[:, -2] > 0
    prompt = packed[:, :p]
    n = tokens.shape[0]
    return ParsedTasks(
        prompt=prompt, prompt_mask=(prompt != self.pad_id) & valid[:, None],
        reference=jnp.full((n, 1), self.eos_id, jnp.int32),
        reference_mask=jnp.broadcast_to(valid[:, None], (n, 1)), valid=valid,
        difficulty=jnp.where(valid, packed[:, -1], 0).astype(jnp.int32),
        task=packed[:, p:p + t])

  def verify(self, response, response_mask, reference, reference_mask):
    raise NotImplementedError(
        f"The {self.domain_title} domain is episodic: its environment scores the "
        "agent (genenv_jax.episodes.rollout_episodes), not verify.")

  def decode(self, tokens) -> list[str]:
    """Rows int[N, T] (or one row int[T]) as text; pad and out-of-vocabulary
    ids dropped, special tokens kept."""
    rows = np.atleast_2d(np.asarray(tokens))
    return [self.tokenizer.decode([int(t) for t in row
                                   if t != self.pad_id and 0 <= t < self.vocab_size],
                                  skip_special_tokens=False) for row in rows]

  def encode_tasks(self, texts: Sequence[str]) -> np.ndarray:
    """Written-task rows int32[N, task_len] of task texts (pad after EOS).

    Raises:
      ValueError: a text does not fit task_len (the message names its index).
    """
    rows = np.full((len(texts), self.task_len), self.pad_id, np.int32)
    for index, written in enumerate(texts):
      ids = _encode(self.tokenizer, written) + [self.eos_id]
      if len(ids) > self.task_len:
        raise ValueError(f"{self.task_noun} {index} is {len(ids)} tokens, more than "
                         f"max_written_tokens={self.task_len}")
      rows[index, :len(ids)] = ids
    return rows


class HostTextTransition(HostTransition):
  """The episode of a written-task row as a pure function of its actions.

  A row's task is read from its text once (`task`, kept by the row's sha256,
  the most recent _CACHE_SIZE); a domain reads it (`task_of_text`) and plays
  the actions on it (`play`).
  """

  def __init__(self, domain: HostTextDomain):
    self.domain = domain
    self._tasks = _LruCache(_CACHE_SIZE)

  def task(self, row: np.ndarray) -> Any | None:
    """The task of a written-task row int32[task_len]; None for an all-pad
    row: an invalid task, whose episode ends at once."""

    def read() -> Any | None:
      written = self.domain.text_of(row)
      return self.task_of_text(written) if written.strip() else None

    key = hashlib.sha256(np.asarray(row, np.int32).tobytes()).digest()
    return self._tasks.get_or_compute(key, read)

  def transition(self, spec: np.ndarray, actions: Sequence[np.ndarray]) -> HostStep:
    task = self.task(spec)
    if task is None:
      return HostStep((), 0.0, True, False, False)
    cut_short = not np.isin(actions[-1], self.domain.stop_ids).any()
    return self.play(task, actions, cut_short)

  @abc.abstractmethod
  def task_of_text(self, written: str) -> Any:
    """The task a pool row's (non-blank) text writes."""

  @abc.abstractmethod
  def play(self, task: Any, actions: Sequence[np.ndarray], cut_short: bool
           ) -> HostStep:
    """The outcome of actions[-1] on `task` (`HostTransition.transition`).

    Args:
      task: what `task_of_text` read from the episode's row.
      actions: the agent's actions so far, each int32[n_t] its tokens.
      cut_short: actions[-1] holds no stop id (cut at max_action_tokens), an
        invalid action.
    """


def _encode(tokenizer: Any, value: str) -> list[int]:
  return list(tokenizer(value, add_special_tokens=False)["input_ids"]) if value else []


def _token_id(tokenizer: Any, field: str, token: str | None) -> int:
  if not token:
    raise ValueError(f"the tokenizer has no {field}; set config.task.{field}")
  token_id = tokenizer.convert_tokens_to_ids(token)
  if token_id is None or tokenizer.convert_ids_to_tokens(token_id) != token:
    raise ValueError(f"config.task.{field}={token!r} is not a token of the tokenizer")
  return int(token_id)
