"""BFCL multi-turn tool use as an episodic domain: the simulator writes a
variation of an entry, the agent plays it against the real APIs.

Written task. The simulator is shown a seed task (a variation of a wheel entry,
genenv_jax/scoring/bfcl_variations.py has the format) through the chat template
and writes a new one in the same format:

    Classes: <API classes>
    State: <initial state, JSON>
    User: <turn 1>
    Calls: [<ground-truth calls of turn 1>]
    ...<EOS>

Text before the first line starting `Classes:` is ignored (it may reason first).
`parse` runs on the host (`jax.pure_callback`, each device its own rows) and keeps
a generation only if `bfcl_variations.read` reads it and `bfcl_variations.check`
replays its ground truth on the APIs without an error; the ground-truth episode
must also fit the turn limit (`steps_needed <= max_turns`), and the canonical
text (the pool's written-task row), the agent's prompt must fit their widths.
Difficulty is computed from the replay: the number of ground-truth calls, in
levels of `calls_per_level` (capped at `max_difficulty`).

Episode (`BfclHost`, a `HostTransition` behind `HostEnvironment`). The agent's
prompt is BFCL's prompt-mode system prompt with the classes' function docs
(`function_docs="bfcl"`; "names" lists the function names only, for tiny runs)
and the first user turn, through the chat template. Each action is one step of
BFCL's prompt-mode loop, decoded to text without its stop token and played by
`genenv_jax.domains.bfcl_multi_turn.env.transition` (calls decoded by the project's AST
decoder and dispatched to the episode's own API instances; nothing is
evaluated): the observation is the execution results (tool messages) or, after a
step without a call, the next user turn, rendered as the chat template renders
those messages after an assistant message, through the next assistant header.
An action cut at `max_action_tokens` without its stop token counts as an
invalid action (it is still played).
An observation over `max_observation_tokens` keeps its head and the template's
closing tokens. After the last turn the episode is done: success is the official
checker's verdict, and the turn reward is the share of turns passed
(`config.episodes.reward`: "success" trains on the verdict, "turn_sum" on the
share).
"""

from __future__ import annotations

import collections
import hashlib
import threading
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from genenv_jax import config_fields as fields
from genenv_jax import episodes, sharding
from genenv_jax.domains.bfcl_multi_turn import env as env_lib
from genenv_jax.envs.host import HostEnvironment, HostStep, HostTransition
from genenv_jax.scoring import CORRECT
from genenv_jax.scoring import bfcl_multi_turn as mt
from genenv_jax.scoring import bfcl_prompt
from genenv_jax.scoring import bfcl_variations as bv
from genenv_jax.domains.text import domain as text
from genenv_jax.domains.base import ParsedTasks, TaskDomain, generation_rows

# BFCL's multi-turn categories this domain seeds from (config.data.categories).
CATEGORIES = ("multi_turn_base", "multi_turn_miss_param")
FUNCTION_DOCS = ("bfcl", "names")
DEFAULT_SIMULATOR_INSTRUCTION = (
    "Here is a multi-turn tool-use task: the API classes, their initial state as "
    "JSON, then each user turn with the function calls that answer it ([] when "
    "the user leaves out something the calls need).\n\n{seed}\n\n"
    "Write one new task of the same kind: change the state, the requests and their "
    "calls. Every call must succeed on the state you write. Use exactly this "
    "format, one field a line:\nClasses: ...\nState: ...\nUser: ...\nCalls: [...]")
NAMES_PROMPT = ("You can call these functions: {names}. Answer a request with a "
                "list of calls, e.g. [f(a=1), g(b='x')], and with plain text when "
                "it is done.")
# Strings no message contains: the assistant message before an observation, and
# the content of its last message (to find the template's closing text).
_SENTINEL = "\u27e6genenv-action\u27e7"
_CONTENT = "\u27e6genenv-content\u27e7"
_CACHE_SIZE = 4096


class BfclMultiTurnDomain(TaskDomain):
  """BFCL multi-turn variations (format and rules in the module docstring).

  Args:
    tokenizer: an HF tokenizer with a chat template, shared by both players.
    data_dir: BFCL's data directory (function docs); "" the bfcl_eval wheel's.
    function_docs: one of FUNCTION_DOCS, what the agent's system prompt lists.
    max_prompt_tokens: P, the agent's prompt width.
    max_written_tokens: task_len, a written variation's width (EOS included).
    max_simulator_tokens: the simulator's budget (EOS included); None:
      max_written_tokens.
    max_turns: K, agent steps per episode.
    max_action_tokens: A, tokens of one step (its stop token included).
    max_observation_tokens: O, tokens of one observation.
    calls_per_level, max_difficulty: difficulty levels of ground-truth calls.
    simulator_system_prompt, simulator_instruction: the simulator's prompt; the
      instruction holds `{seed}` once.
    eos_token, pad_token: token strings; "" takes the tokenizer's.
  """

  bos_id = 0
  answer_len = 1

  def __init__(self, tokenizer: Any, *, data_dir: str = "",
               function_docs: str = "bfcl", max_prompt_tokens: int = 8192,
               max_written_tokens: int = 1536,
               max_simulator_tokens: int | None = None, max_turns: int = 8,
               max_action_tokens: int = 256, max_observation_tokens: int = 512,
               calls_per_level: int = 2, max_difficulty: int = 4,
               simulator_system_prompt: str = "",
               simulator_instruction: str = DEFAULT_SIMULATOR_INSTRUCTION,
               eos_token: str = "", pad_token: str = ""):
    if function_docs not in FUNCTION_DOCS:
      raise ValueError(f"config.task.function_docs={function_docs!r}; expected one "
                       f"of {FUNCTION_DOCS}")
    for name, value in (("max_prompt_tokens", max_prompt_tokens),
                        ("max_written_tokens", max_written_tokens),
                        ("max_turns", max_turns),
                        ("max_action_tokens", max_action_tokens),
                        ("max_observation_tokens", max_observation_tokens),
                        ("calls_per_level", calls_per_level),
                        ("max_difficulty", max_difficulty)):
      if int(value) < 1:
        raise ValueError(f"config.task.{name}={value} must be >= 1")
    if not getattr(tokenizer, "chat_template", None):
      raise ValueError("config.task.tokenizer_dir: the BFCL multi-turn domain needs "
                       "a tokenizer with a chat template")
    self.tokenizer = tokenizer
    self.function_docs = function_docs
    self.func_docs = mt.load_func_docs(data_dir or bfcl_prompt.wheel_data_dir(),
                                       bv.CLASSES)
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
    self.calls_per_level = int(calls_per_level)
    self.max_difficulty = int(max_difficulty)
    self.simulator_template = text.render_template(
        tokenizer, simulator_instruction, (text.SEED_SLOT,), simulator_system_prompt,
        True)
    self.simulator_prompt_len = self.simulator_template.constant_len + self.task_len - 1
    self.checkpoint_stop_ids: tuple[int, ...] = ()
    self._host = BfclHost(self)
    self._environment = HostEnvironment(
        self._host, max_turns=self.max_turns, action_len=int(max_action_tokens),
        observation_len=int(max_observation_tokens))
    self._parsed: collections.OrderedDict = collections.OrderedDict()
    self._lock = threading.Lock()

  @classmethod
  def from_config(cls, config: Any) -> BfclMultiTurnDomain:
    """Builds the domain from `config.task` (`text.from_task_config`)."""
    return text.from_task_config(cls, config, "the bfcl_multi_turn domain")

  @staticmethod
  def check_config(config: Any) -> None:
    for field in ("max_prompt_tokens", "max_written_tokens", "max_turns",
                  "max_action_tokens", "max_observation_tokens", "calls_per_level",
                  "max_difficulty"):
      fields.integer(config, f"task.{field}", low=1)
    fields.choice(config, "task.function_docs", FUNCTION_DOCS)
    categories = tuple(config.data.categories)
    if not categories or not set(categories) <= set(CATEGORIES):
      fields.fail("data.categories", categories, f"some of {CATEGORIES}")
    fields.integer(config, "data.max_seed_turns", low=0)
    fields.number(config, "data.test_fraction", low=0.0, high=1.0,
                  open_low=True, open_high=True)
    fields.choice(config, "episodes.reward", episodes.EPISODE_REWARDS)
    fields.choice(config, "episodes.truncated", episodes.TRUNCATED)

  @property
  def stop_ids(self) -> tuple[int, ...]:
    return tuple(dict.fromkeys((self.eos_id,) + self.checkpoint_stop_ids))

  @property
  def simulator_len(self) -> int:
    return self._simulator_len

  @property
  def environment(self) -> HostEnvironment:
    return self._environment

  # ------------------------------------------------------------------ host side

  def system_prompt(self, functions: Sequence[dict[str, Any]]) -> str:
    """The agent's system prompt for these function docs (`function_docs`)."""
    if self.function_docs == "bfcl":
      return bfcl_prompt.bfcl_system_prompt(functions)
    return NAMES_PROMPT.format(names=", ".join(f["name"] for f in functions))

  def prompt_ids(self, entry: mt.MultiTurnEntry) -> list[int]:
    """The agent's prompt: the system prompt, the first user turn, the
    assistant header (the chat template's)."""
    messages = [{"role": "system", "content": self.system_prompt(entry.functions)},
                *env_lib.transition(entry, []).messages]
    rendered = self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                  add_generation_prompt=True)
    return _encode(self.tokenizer, rendered)

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
    """The text of token ids up to the first EOS, special tokens dropped."""
    ids = [int(t) for t in ids]
    if self.eos_id in ids:
      ids = ids[:ids.index(self.eos_id)]
    ids = [t for t in ids if t != self.pad_id and 0 <= t < self.vocab_size]
    return self.tokenizer.decode(ids, skip_special_tokens=True)

  def read_task(self, written: str) -> tuple[bv.Variation, mt.MultiTurnEntry]:
    """The variation written in `written` (text before its `Classes:` line
    ignored) and its checked entry.

    Raises:
      bv.VariationError: not a valid variation, or one whose ground-truth
        episode needs more than max_turns steps.
    """
    at = written.find(bv.CLASSES_FIELD)
    while at > 0 and written[at - 1] != "\n":
      at = written.find(bv.CLASSES_FIELD, at + 1)
    if at < 0:
      raise bv.VariationError(f"no line starts {bv.CLASSES_FIELD!r}")
    variation = bv.read(written[at:])
    if variation.steps_needed > self.max_turns:
      raise bv.VariationError(f"its ground truth takes {variation.steps_needed} "
                              f"steps; max_turns is {self.max_turns}")
    return variation, bv.check(variation, self.func_docs)

  def parse_row(self, tokens: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """One generation's packed parse int32[P + task_len + 2]: the agent's prompt
    (left-padded), the written-task row, valid, difficulty (module docstring)."""
    key = (tokens.tobytes(), mask.tobytes())
    with self._lock:
      if key in self._parsed:
        self._parsed.move_to_end(key)
        return self._parsed[key]
    p, t = self.agent_prompt_len, self.task_len
    out = np.full(p + t + 2, self.pad_id, np.int32)
    out[-2:] = 0
    ended = np.flatnonzero((tokens == self.eos_id) & mask)
    if len(ended) and mask[:ended[0] + 1].all():
      try:
        variation, entry = self.read_task(self.text_of(tokens))
        row = _encode(self.tokenizer, variation.text()) + [self.eos_id]
        prompt = self.prompt_ids(entry)
        if len(row) <= t and len(prompt) <= p:
          out[p - len(prompt):p] = prompt
          out[p:p + len(row)] = row
          out[-2] = 1
          out[-1] = min(self.max_difficulty,
                        -(-variation.num_calls // self.calls_per_level))
      except bv.VariationError:
        pass
    with self._lock:
      self._parsed[key] = out
      while len(self._parsed) > _CACHE_SIZE:
        self._parsed.popitem(last=False)
    return out

  def _parse_rows(self, tokens: np.ndarray, mask: np.ndarray) -> np.ndarray:
    tokens, mask = np.asarray(tokens), np.asarray(mask)
    return np.stack([self.parse_row(tokens[i], mask[i])
                     for i in range(tokens.shape[0])]).reshape(tokens.shape[0], -1)

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
    """Reads written variations on the host (module docstring).

    Args:
      simulator_tokens: int32[M, L], L = simulator_len or task_len (pool rows).
      simulator_mask: bool[M, L].

    Returns:
      ParsedTasks: prompt int32[M, P] (all pad for invalid rows), task
      int32[M, task_len] (the canonical text and EOS; all pad for invalid rows),
      reference a lone EOS (unused: the environment scores episodes).
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
        "The BFCL multi-turn domain is episodic: its environment scores the agent "
        "(genenv_jax.episodes.rollout_episodes), not verify.")

  def decode(self, tokens) -> list[str]:
    rows = np.atleast_2d(np.asarray(tokens))
    return [self.tokenizer.decode([int(t) for t in row
                                   if t != self.pad_id and 0 <= t < self.vocab_size],
                                  skip_special_tokens=False) for row in rows]

  def encode_tasks(self, texts: Sequence[str]) -> np.ndarray:
    """Written-task rows int32[N, task_len] of variation texts (pad after EOS).

    Raises:
      ValueError: a text does not fit task_len (the message names its index).
    """
    rows = np.full((len(texts), self.task_len), self.pad_id, np.int32)
    for index, written in enumerate(texts):
      ids = _encode(self.tokenizer, written) + [self.eos_id]
      if len(ids) > self.task_len:
        raise ValueError(f"variation {index} is {len(ids)} tokens, more than "
                         f"max_written_tokens={self.task_len}")
      rows[index, :len(ids)] = ids
    return rows


class BfclHost(HostTransition):
  """The episode of a written variation as a pure function of its steps."""

  def __init__(self, domain: BfclMultiTurnDomain):
    self.domain = domain
    self._entries: collections.OrderedDict = collections.OrderedDict()
    self._lock = threading.Lock()

  def entry(self, spec: np.ndarray) -> mt.MultiTurnEntry | None:
    """The checked entry of a spec row (None for an all-pad row: an invalid
    task, whose episode ends at once)."""
    key = hashlib.sha256(np.asarray(spec, np.int32).tobytes()).digest()
    with self._lock:
      if key in self._entries:
        self._entries.move_to_end(key)
        return self._entries[key]
    written = self.domain.text_of(spec)
    entry = self.domain.read_task(written)[1] if written.strip() else None
    with self._lock:
      self._entries[key] = entry
      while len(self._entries) > _CACHE_SIZE:
        self._entries.popitem(last=False)
    return entry

  def transition(self, spec: np.ndarray, actions: Sequence[np.ndarray]) -> HostStep:
    entry = self.entry(spec)
    if entry is None:
      return HostStep((), 0.0, True, False, False)
    cut_short = not np.isin(actions[-1], self.domain.stop_ids).any()
    outcome = env_lib.transition(entry, [self.domain.text_of(a) for a in actions])
    if outcome.done:
      score = outcome.score
      return HostStep((), score.turns_passed / max(score.turns, 1), True,
                      score.verdict.status == CORRECT, cut_short)
    ids = self.domain.observation_ids(outcome.messages,
                                      self.domain.environment.observation_len)
    return HostStep(ids, 0.0, False, False, cut_short)


def _encode(tokenizer: Any, value: str) -> list[int]:
  return list(tokenizer(value, add_special_tokens=False)["input_ids"]) if value else []


def _token_id(tokenizer: Any, field: str, token: str | None) -> int:
  if not token:
    raise ValueError(f"the tokenizer has no {field}; set config.task.{field}")
  token_id = tokenizer.convert_tokens_to_ids(token)
  if token_id is None or tokenizer.convert_ids_to_tokens(token_id) != token:
    raise ValueError(f"config.task.{field}={token!r} is not a token of the tokenizer")
  return int(token_id)
