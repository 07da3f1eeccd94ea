"""ALFWorld as an episodic domain: the simulator writes a game, the agent plays
it in TextWorld with ALFWorld's own text and commands.

Written task. The simulator is shown a seed spec through the chat template and
writes a new one, one line (genenv_jax/domains/alfworld/game.py has the format):

    layout: FloorPlan1; task: pick_heat_then_place apple -> countertop; start: apple in fridge 1<EOS>

Text before the first line starting `layout:` is ignored (it may reason
first). `parse` runs on the host (`jax.pure_callback`, each device its own
rows) and keeps a generation iff `game.read_spec` reads that line and the
bundled planner solves its game in at least one and at most `max_turns`
steps; the canonical spec (the pool's row) and the agent's prompt must fit
their widths. Difficulty is the plan's length in levels (`level`): plans of
up to `first_level_steps` steps are level 1, each `steps_per_level` more
steps one level more, capped at `max_difficulty`.

Episode (`AlfworldHost`, a `HostTransition` behind `HostEnvironment`). The
agent's prompt is the system prompt (the commands it may type) and the game's
first text (ALFWorld's welcome, the room, "Your task is to: ..."), through the
chat template. Each action is one command, decoded to text without its stop
token (its first line, stripped), and played in the game: the observation is
ALFWorld's feedback, rendered as the chat template renders a user message
after an assistant message, through the next assistant header (over
`max_observation_tokens`: its head and the template's closing tokens). A
command ALFWorld does not admit is played too ("Nothing happens.") and counts
as an invalid action, as does an action cut at `max_action_tokens` without its
stop token. Winning ends the episode with reward 1 (ALFWorld's score); an
episode out of turns scores 0. Each row's game stays live between turns
(`game.GamePool`); `parse` loads no game (the first text of a layout's
games differs only in the task sentence, `GamePool.opening`).
"""

from __future__ import annotations

import collections
import hashlib
import math
import threading
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from genenv_jax import config_fields as fields
from genenv_jax import episodes, sharding
from genenv_jax.domains.alfworld import game
from genenv_jax.domains.base import ParsedTasks, TaskDomain, generation_rows
from genenv_jax.domains.text import domain as text
from genenv_jax.envs.host import HostEnvironment, HostStep, HostTransition

SPEC_FIELD = "layout:"
DEFAULT_SIMULATOR_INSTRUCTION = (
    "Here is a household task for a text game (ALFWorld): the room layout, the "
    "task with its object and target, and where the objects start.\n\n{seed}\n\n"
    "Write one new task of the same kind: change the task, its objects or where "
    "they start, using receptacles the room has. Use exactly this one-line "
    "format:\nlayout: FloorPlan<n>; task: <task type> <object> -> <target>; "
    "start: <object> in <receptacle> <n>, ...")
DEFAULT_AGENT_SYSTEM_PROMPT = (
    "You are in a household text game. Each turn, reply with one command and "
    "nothing else: look, inventory, go to <receptacle>, open <receptacle>, close "
    "<receptacle>, take <object> from <receptacle>, move <object> to "
    "<receptacle>, examine <something>, use <object>, heat <object> with "
    "<receptacle>, clean <object> with <receptacle>, cool <object> with "
    "<receptacle>. Name things with their numbers, e.g. take apple 1 from "
    "countertop 2.")
# Strings no message contains: the assistant message before an observation,
# and the content of its last message (to find the template's closing text).
_SENTINEL = "\u27e6genenv-action\u27e7"
_CONTENT = "\u27e6genenv-content\u27e7"
_CACHE_SIZE = 4096


class AlfworldDomain(TaskDomain):
  """ALFWorld games written as specs (format and rules in the module docstring).

  Args:
    tokenizer: an HF tokenizer with a chat template, shared by both players.
    max_prompt_tokens: P, the agent's prompt width.
    max_written_tokens: task_len, a written spec's width (EOS included).
    max_simulator_tokens: the simulator's budget (EOS included); None:
      max_written_tokens.
    max_turns: K, commands per episode (ALFWorld's step limit).
    max_action_tokens: A, tokens of one command (its stop token included).
    max_observation_tokens: O, tokens of one observation.
    first_level_steps, steps_per_level, max_difficulty: the levels of plan
      lengths (`level`).
    live_games: the most TextWorld games kept live at once (`game.GamePool`).
    simulator_system_prompt, simulator_instruction: the simulator's prompt; the
      instruction holds `{seed}` once.
    agent_system_prompt: the agent's system prompt ("" for none).
    eos_token, pad_token: token strings; "" takes the tokenizer's.
  """

  bos_id = 0
  answer_len = 1

  def __init__(self, tokenizer: Any, *, max_prompt_tokens: int = 768,
               max_written_tokens: int = 160,
               max_simulator_tokens: int | None = None, max_turns: int = 30,
               max_action_tokens: int = 24, max_observation_tokens: int = 128,
               first_level_steps: int = 4, steps_per_level: int = 2,
               max_difficulty: int = 4, live_games: int = 512,
               simulator_system_prompt: str = "",
               simulator_instruction: str = DEFAULT_SIMULATOR_INSTRUCTION,
               agent_system_prompt: str = DEFAULT_AGENT_SYSTEM_PROMPT,
               eos_token: str = "", pad_token: str = ""):
    for name, value in (("max_prompt_tokens", max_prompt_tokens),
                        ("max_written_tokens", max_written_tokens),
                        ("max_turns", max_turns),
                        ("max_action_tokens", max_action_tokens),
                        ("max_observation_tokens", max_observation_tokens),
                        ("first_level_steps", first_level_steps),
                        ("steps_per_level", steps_per_level),
                        ("max_difficulty", max_difficulty),
                        ("live_games", live_games)):
      if int(value) < 1:
        raise ValueError(f"config.task.{name}={value} must be >= 1")
    if not getattr(tokenizer, "chat_template", None):
      raise ValueError("config.task.tokenizer_dir: the ALFWorld domain needs a "
                       "tokenizer with a chat template")
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
    self.first_level_steps = int(first_level_steps)
    self.steps_per_level = int(steps_per_level)
    self.max_difficulty = int(max_difficulty)
    self.agent_system_prompt = agent_system_prompt
    self.simulator_template = text.render_template(
        tokenizer, simulator_instruction, (text.SEED_SLOT,), simulator_system_prompt,
        True)
    self.simulator_prompt_len = self.simulator_template.constant_len + self.task_len - 1
    self.checkpoint_stop_ids: tuple[int, ...] = ()
    self.games = game.GamePool(int(live_games))
    self._host = AlfworldHost(self)
    self._environment = HostEnvironment(
        self._host, max_turns=self.max_turns, action_len=int(max_action_tokens),
        observation_len=int(max_observation_tokens))
    self._parsed: collections.OrderedDict = collections.OrderedDict()
    self._lock = threading.Lock()

  @classmethod
  def from_config(cls, config: Any) -> AlfworldDomain:
    """Builds the domain from `config.task` (`text.from_task_config`)."""
    return text.from_task_config(cls, config, "the alfworld domain")

  @staticmethod
  def check_config(config: Any) -> None:
    for field in ("max_prompt_tokens", "max_written_tokens", "max_turns",
                  "max_action_tokens", "max_observation_tokens", "first_level_steps",
                  "steps_per_level", "max_difficulty", "live_games"):
      fields.integer(config, f"task.{field}", low=1)
    cc = config.coevolve
    episodes_per_step = ((cc.num_seeds * cc.variations + config.pool.replay_tasks)
                         * cc.attempts)
    if config.task.live_games < episodes_per_step:
      fields.fail("task.live_games", config.task.live_games,
                  f">= the episodes of a step ({episodes_per_step}: (coevolve."
                  "num_seeds * variations + pool.replay_tasks) * attempts), or "
                  "every turn replays its episode")
    fields.integer(config, "data.num_train", low=1)
    fields.integer(config, "data.test_per_task", low=1)
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

  def level(self, plan_length: int) -> int:
    """The level of a plan of `plan_length` steps: 0 (no task) outside
    1..max_turns, else 1 + ceil((plan_length - first_level_steps) /
    steps_per_level) capped to 1..max_difficulty."""
    if plan_length < 1 or plan_length > self.max_turns:
      return 0
    above = max(0, plan_length - self.first_level_steps)
    return min(self.max_difficulty, 1 + math.ceil(above / self.steps_per_level))

  def read_task(self, written: str) -> tuple[game.Spec, int]:
    """The spec on the first line of `written` that starts `layout:` (text
    before it ignored) and its plan's length.

    Raises:
      game.SpecError: no such line, not a spec, or a game the planner does not
        solve in 1..max_turns steps.
    """
    lines = written.splitlines()
    line = next((l for l in lines if l.strip().lower().startswith(SPEC_FIELD)), None)
    if line is None:
      raise game.SpecError(f"no line starts {SPEC_FIELD!r}")
    spec = game.read_spec(line)
    steps = game.plan(spec)
    if steps is None:
      raise game.SpecError("the planner finds no plan")
    if not self.level(len(steps)):
      raise game.SpecError(f"its plan takes {len(steps)} steps; a task takes 1 to "
                           f"max_turns={self.max_turns}")
    return spec, len(steps)

  def prompt_ids(self, spec: game.Spec) -> list[int]:
    """The agent's prompt: the system prompt, the game's first text, the
    assistant header (the chat template's)."""
    messages = ([{"role": "system", "content": self.agent_system_prompt}]
                if self.agent_system_prompt else [])
    messages.append({"role": "user", "content": self.games.opening(spec)})
    rendered = self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                  add_generation_prompt=True)
    return _encode(self.tokenizer, rendered)

  def observation_ids(self, feedback: str, width: int) -> list[int]:
    """Token ids of ALFWorld's feedback as the chat template renders a user
    message after an assistant message (whose stop token the agent wrote),
    through the next assistant header; over `width` tokens, the head of that
    text and the template's closing tokens."""
    rendered = self._after_action(feedback)
    ids = _encode(self.tokenizer, rendered)
    if len(ids) <= width:
      return ids
    closing = self._after_action(_CONTENT).rsplit(_CONTENT, 1)[1]
    closing_ids = _encode(self.tokenizer, closing)
    head = _encode(self.tokenizer, rendered[:len(rendered) - len(closing)])
    return head[:max(width - len(closing_ids), 0)] + closing_ids[-width:]

  def _after_action(self, feedback: str) -> str:
    chat = [{"role": "user", "content": "."},
            {"role": "assistant", "content": _SENTINEL},
            {"role": "user", "content": feedback}]
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

  def command_of(self, ids: np.ndarray) -> str:
    """The command an action's tokens write: the first non-blank line of
    their text (up to the stop token), stripped."""
    ids = np.asarray(ids)
    stops = np.flatnonzero(np.isin(ids, self.stop_ids))
    written = self.text_of(ids[:stops[0]] if len(stops) else ids)
    return next((l.strip() for l in written.splitlines() if l.strip()), "")

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
        spec, steps = self.read_task(self.text_of(tokens))
        row = _encode(self.tokenizer, spec.text()) + [self.eos_id]
        if len(row) <= t:
          prompt = self.prompt_ids(spec)
          if len(prompt) <= p:
            out[p - len(prompt):p] = prompt
            out[p:p + len(row)] = row
            out[-2] = 1
            out[-1] = self.level(steps)
      except game.SpecError:
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
    """The simulator's prompts: its instruction with each seed's spec.

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
    """Reads written specs on the host (module docstring).

    Args:
      simulator_tokens: int32[M, L], L = simulator_len or task_len (pool rows).
      simulator_mask: bool[M, L].

    Returns:
      ParsedTasks: prompt int32[M, P] (all pad for invalid rows), task
      int32[M, task_len] (the canonical spec and EOS; all pad for invalid
      rows), reference a lone EOS (unused: the environment scores episodes).
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
        "The ALFWorld domain is episodic: its environment scores the agent "
        "(genenv_jax.episodes.rollout_episodes), not verify.")

  def decode(self, tokens) -> list[str]:
    rows = np.atleast_2d(np.asarray(tokens))
    return [self.tokenizer.decode([int(t) for t in row
                                   if t != self.pad_id and 0 <= t < self.vocab_size],
                                  skip_special_tokens=False) for row in rows]

  def encode_tasks(self, texts: Sequence[str]) -> np.ndarray:
    """Written-task rows int32[N, task_len] of spec texts (pad after EOS).

    Raises:
      ValueError: a text does not fit task_len (the message names its index).
    """
    rows = np.full((len(texts), self.task_len), self.pad_id, np.int32)
    for index, written in enumerate(texts):
      ids = _encode(self.tokenizer, written) + [self.eos_id]
      if len(ids) > self.task_len:
        raise ValueError(f"spec {index} is {len(ids)} tokens, more than "
                         f"max_written_tokens={self.task_len}")
      rows[index, :len(ids)] = ids
    return rows


class AlfworldHost(HostTransition):
  """The episode of a written spec as a pure function of its commands."""

  def __init__(self, domain: AlfworldDomain):
    self.domain = domain
    self._specs: collections.OrderedDict = collections.OrderedDict()
    self._lock = threading.Lock()

  def spec(self, row: np.ndarray) -> game.Spec | None:
    """The spec of a written-task row (None for an all-pad row: an invalid
    task, whose episode ends at once)."""
    key = hashlib.sha256(np.asarray(row, np.int32).tobytes()).digest()
    with self._lock:
      if key in self._specs:
        self._specs.move_to_end(key)
        return self._specs[key]
    written = self.domain.text_of(row)
    spec = game.read_spec(written) if written.strip() else None
    with self._lock:
      self._specs[key] = spec
      while len(self._specs) > _CACHE_SIZE:
        self._specs.popitem(last=False)
    return spec

  def transition(self, spec: np.ndarray, actions: Sequence[np.ndarray]) -> HostStep:
    the_spec = self.spec(spec)
    if the_spec is None:
      return HostStep((), 0.0, True, False, False)
    cut_short = not np.isin(actions[-1], self.domain.stop_ids).any()
    step = self.domain.games.play(the_spec, [self.domain.command_of(a) for a in actions])
    invalid = cut_short or not step.admissible
    if step.won:
      return HostStep((), 1.0, True, True, invalid)
    ids = self.domain.observation_ids(step.feedback,
                                      self.domain.environment.observation_len)
    return HostStep(ids, 0.0, False, False, invalid)


def _encode(tokenizer: Any, value: str) -> list[int]:
  return list(tokenizer(value, add_special_tokens=False)["input_ids"]) if value else []


def _token_id(tokenizer: Any, field: str, token: str | None) -> int:
  if not token:
    raise ValueError(f"the tokenizer has no {field}; set config.task.{field}")
  token_id = tokenizer.convert_tokens_to_ids(token)
  if token_id is None or tokenizer.convert_ids_to_tokens(token_id) != token:
    raise ValueError(f"config.task.{field}={token!r} is not a token of the tokenizer")
  return int(token_id)
