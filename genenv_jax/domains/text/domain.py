"""Free-form text tasks for any Hugging Face tokenizer (both players share it).

The simulator is shown a seed task through the chat template and writes a new task
with its reference answer in a delimited format (the delimiters are config strings):

    New Task: <the task, any text>
    New Answer: <its reference answer><EOS>

Written-task rows (the pool's format, `task_len` wide) hold exactly this text: the
task delimiter, the task, the answer delimiter, the answer (to its end, below), EOS,
then pad.

Parsing happens inside the jitted step on token ids. The delimiters are matched as
token sequences: as the tokenizer encodes each delimiter alone (how it reads at the
start of a line) and, where that differs, after a space or followed by a line break.
Chat models often write a delimiter their own way (`**New Task:**`, `New task:`,
`## New Task`): the spellings listed in `task_delimiter_variants` /
`answer_delimiter_variants` count as the delimiter too (a match inside a longer one
counts once), and `ParsedTasks.delimiter` says which spelling opened each task.
The simulator may write up to `max_simulator_tokens` tokens, reasoning first if it
likes; a generation is valid iff

  * its answer ends inside the mask (otherwise it was truncated): at its first EOS,
    or, with `answer_ends="line_break"`, at the end of the answer's first line (the
    first token holding a line break after the answer's first non-blank token) when
    that comes before EOS; what follows is ignored, as chat models often add a
    comment after the answer,
  * what it wrote from the task delimiter to the answer's end fits a written-task
    row,
  * the text before the answer's end holds the task delimiter exactly once and the
    answer delimiter exactly once, after it; text before the task delimiter is
    ignored,
  * the task (between the delimiters) and the answer (between the answer delimiter
    and its end), without whitespace-only tokens at either end, are non-empty and at
    most `max_task_tokens` / `max_answer_tokens` long,
  * the text holds no special token (chat markers, EOS, pad, ...), and
  * for a host verifier, the reference is one it can check (e.g. it holds a tool
    call, a boxed answer or a BFCL ground truth).

The task span is spliced into the agent's prompt (the agent instruction, with
`{task}` replaced, through the chat template), left-padded to a fixed width; the
answer span plus EOS is the reference. A span's first token loses its leading space
when the vocabulary has the unspaced token, so `New Task: What ...` gives the agent
`What ...` as it would read at the start of its message.

Difficulty: text tasks have no intrinsic level, so the difficulty is a length
bucket of the task span: levels 1..max_difficulty split 1..max_task_tokens tokens
into equal ranges (`1 + (n - 1) * max_difficulty // max_task_tokens`), longer tasks
being taken as harder.

Summary signals (`summary_signals=True`): the simulator's instruction holds a
`{signal}` slot where `signal_template` is written with `{rate}` replaced by the
agent's recent success rate on that seed, in steps of 10% ("unknown" when no rate is
given).
"""

from __future__ import annotations

import functools
import inspect
import json
import os
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from genenv_jax import config_fields as fields
from genenv_jax.domains.text import verifiers as text_verifiers
from genenv_jax.domains.base import (RATE_BUCKETS, ParsedTasks, TaskDomain,
                                   check_rows, generation_rows,
                                   success_buckets)

SEED_SLOT = "{seed}"
TASK_SLOT = "{task}"
SIGNAL_SLOT = "{signal}"
RATE_SLOT = "{rate}"
DELIMITER_SLOTS = ("{task_delimiter}", "{answer_delimiter}")
ANSWER_ENDS = ("eos", "line_break")  # where the simulator's answer ends

DEFAULT_ENV_INSTRUCTION = (
    "Here is a task with its answer:\n\n{seed}\n\n"
    "Write one new task of the same kind, with its correct answer, in exactly "
    "this format:\n{task_delimiter} <the task>\n{answer_delimiter} <the answer>")
DEFAULT_SIGNAL_TEMPLATE = "The solver currently answers {rate} of such tasks correctly."


# A string no instruction contains; slots are replaced by it before the chat template
# is rendered, and the rendered text is split at it.
_SENTINEL = "\u27e6genenv-slot-{}\u27e7"


# The formats of seed files `data.py` reads (config.data.format).
FORMATS = ("prompt_answer", "bfcl", "api_bank")


class PromptTemplate(NamedTuple):
  """A prompt as constant token pieces around variable slots.

  Attributes:
    pieces: in prompt order, constant token ids (a tuple of ints) or a slot index.
  """

  pieces: tuple[tuple[int, ...] | int, ...]

  @property
  def constant_len(self) -> int:
    return sum(len(p) for p in self.pieces if isinstance(p, tuple))


def _replace_slots(text: str, slots: Sequence[str]) -> str:
  for index, slot in enumerate(slots):
    count = text.count(slot)
    if count != 1:
      raise ValueError(f"prompt instruction must hold {slot} exactly once, found {count}: "
                       f"{text!r}")
    text = text.replace(slot, _SENTINEL.format(index))
  return text


def render_template(tokenizer: Any, instruction: str, slots: Sequence[str],
                    system_prompt: str, use_chat_template: bool) -> PromptTemplate:
  """Tokenizes a prompt once, leaving its slots open.

  The instruction (with each of `slots` exactly once) becomes the user message of
  the tokenizer's chat template, after the system prompt when one is given, with the
  assistant's generation prompt at the end; without the chat template it is the
  prompt as written, after the tokenizer's BOS when it adds one. Each constant piece
  is tokenized on its own.
  """
  content = _replace_slots(instruction, slots)
  if use_chat_template:
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages.append({"role": "user", "content": content})
    rendered = tokenizer.apply_chat_template(messages, tokenize=False,
                                             add_generation_prompt=True)
    prefix_ids: list[int] = []
  else:
    rendered = system_prompt + content
    bos = tokenizer.bos_token_id
    added = tokenizer("", add_special_tokens=True)["input_ids"]
    prefix_ids = [bos] if bos is not None and bos in added else []
  pieces: list[tuple[int, ...] | int] = []
  cursor = 0
  located = sorted((rendered.find(_SENTINEL.format(i)), i) for i in range(len(slots)))
  for position, index in located:
    if position < 0 or rendered.count(_SENTINEL.format(index)) != 1:
      raise ValueError(f"the chat template dropped or repeated slot {slots[index]}")
    pieces.append(tuple(_encode(tokenizer, rendered[cursor:position])))
    pieces.append(index)
    cursor = position + len(_SENTINEL.format(index))
  pieces.append(tuple(_encode(tokenizer, rendered[cursor:])))
  pieces[0] = tuple(prefix_ids) + pieces[0]
  return PromptTemplate(tuple(p for p in pieces if p != ()))


def _encode(tokenizer: Any, text: str) -> list[int]:
  return list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []


def pack_segments(segments: Sequence[tuple[jax.Array, jax.Array]], width: int,
          pad_id: int) -> tuple[jax.Array, jax.Array]:
  """Concatenates variable-length segments and left-pads the result.

  Args:
    segments: (tokens int32[M, w_i], lengths int32[M]); row m of segment i holds
      tokens[m, :lengths[m]].
    width: output width, sum of the w_i.
    pad_id: token of the padding.

  Returns:
    (tokens int32[M, width], mask bool[M, width]), content at the right end.
  """
  tokens = jnp.concatenate([t for t, _ in segments], axis=1)
  if tokens.shape[1] != width:
    raise ValueError(f"segments are {tokens.shape[1]} wide, expected {width}")
  keep = jnp.concatenate(
      [jnp.arange(t.shape[1])[None, :] < n[:, None] for t, n in segments], axis=1)
  total = keep.sum(axis=1)
  packed = jnp.take_along_axis(tokens, jnp.argsort(~keep, axis=1, stable=True), axis=1)
  source = jnp.arange(width)[None, :] - (width - total)[:, None]
  mask = source >= 0
  out = jnp.take_along_axis(packed, jnp.clip(source, 0, width - 1), axis=1)
  return jnp.where(mask, out, pad_id), mask


def template_segments(template: PromptTemplate,
                      slots: Sequence[tuple[jax.Array, jax.Array]], num_rows: int
                      ) -> list[tuple[jax.Array, jax.Array]]:
  """The segments (`pack_segments`' input) of a prompt: the template's constant
  pieces for every one of num_rows rows, and slot i's (tokens, lengths) where the
  template has slot i."""
  segments = []
  for piece in template.pieces:
    if isinstance(piece, int):
      segments.append(slots[piece])
    else:
      ids = jnp.broadcast_to(jnp.asarray(piece, jnp.int32)[None, :], (num_rows, len(piece)))
      segments.append((ids, jnp.full((num_rows,), len(piece), jnp.int32)))
  return segments


def _window(tokens: jax.Array, start: jax.Array, length: jax.Array, width: int,
            pad_id: int) -> tuple[jax.Array, jax.Array]:
  """tokens[m, start[m] : start[m] + length[m]] left-aligned in `width` columns, pad
  after: (int32[M, width], mask bool[M, width])."""
  columns = jnp.arange(width)[None, :]
  source = jnp.clip(start[:, None] + columns, 0, tokens.shape[1] - 1)
  mask = columns < length[:, None]
  return jnp.where(mask, jnp.take_along_axis(tokens, source, axis=1), pad_id), mask


def _trimmed_span(tokens: jax.Array, blank: jax.Array, start: jax.Array,
                  stop: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(first int32[M], length int32[M]) of columns [start, stop) without blank tokens
  at either end; length 0 when nothing but blanks lies there."""
  columns = jnp.arange(tokens.shape[1])[None, :]
  solid = ~blank & (columns >= start[:, None]) & (columns < stop[:, None])
  first = jnp.argmax(solid, axis=1)
  last = tokens.shape[1] - 1 - jnp.argmax(solid[:, ::-1], axis=1)
  return first, jnp.where(solid.any(axis=1), last - first + 1, 0)


def _contains(sequence: Sequence[int], pattern: Sequence[int]) -> bool:
  k = len(pattern)
  return any(tuple(sequence[i:i + k]) == tuple(pattern)
             for i in range(len(sequence) - k + 1))


class TextDomain(TaskDomain):
  """Delimited text tasks for an HF tokenizer (format and rules in the module doc).

  Args:
    tokenizer: an HF tokenizer (`transformers.AutoTokenizer`), shared by both players.
    task_delimiter, answer_delimiter: the strings that open the task and the answer.
    max_task_tokens: widest task span the agent's prompt holds.
    max_answer_tokens: widest answer span (the reference adds EOS).
    max_response_tokens: the agent's budget (EOS not counted), room to reason
      before the answer; `response_len` is one more. None: max_answer_tokens.
    max_written_tokens: task_len, the width of a written-task row (EOS included).
    max_simulator_tokens: the simulator's budget (EOS included), `simulator_len`;
      text before the task delimiter is ignored, so it may reason first, but what
      it writes from the task delimiter on must fit task_len. None:
      max_written_tokens.
    task_delimiter_variants, answer_delimiter_variants: other spellings accepted
      for each delimiter (e.g. `**New Task:**`, `New task:`, `## New Task`);
      `ParsedTasks.delimiter` says which one opened each task.
    answer_ends: where the simulator's answer ends (one of ANSWER_ENDS): "eos",
      at its EOS; "line_break", at the end of the answer's first line, or at EOS
      if that comes first.
    answer_from, final_answer_marker: where the verifier finds the answer in a
      response (`text_verifiers.ANSWERS_FROM`) and the marker of `final_answer`.
    use_chat_template: render prompts through the tokenizer's chat template.
    simulator_system_prompt, simulator_instruction: the simulator's prompt; the instruction holds
      `{seed}` (and `{signal}` with summary signals); `{task_delimiter}` and
      `{answer_delimiter}` in it are replaced by the delimiters.
    agent_system_prompt, agent_instruction: the agent's prompt; the instruction holds
      `{task}`.
    eos_token, pad_token: token strings; "" takes the tokenizer's eos / pad token.
      They must differ (pool rows are read with the mask `row != pad`).
    verifier: one of `text_verifiers.VERIFIERS`.
    max_difficulty: number of task-length buckets.
    summary_signals: write the agent's success rate into the simulator's prompt.
    signal_template: the signal's text, with `{rate}`.
  """

  def __init__(self, tokenizer: Any, *, task_delimiter: str = "New Task:",
               answer_delimiter: str = "New Answer:", max_task_tokens: int = 256,
               max_answer_tokens: int = 64, max_response_tokens: int | None = None,
               max_written_tokens: int = 384, max_simulator_tokens: int | None = None,
               task_delimiter_variants: Sequence[str] = (),
               answer_delimiter_variants: Sequence[str] = (),
               answer_ends: str = "eos", answer_from: str = "all",
               final_answer_marker: str = "Final answer:",
               use_chat_template: bool = True, simulator_system_prompt: str = "",
               simulator_instruction: str = DEFAULT_ENV_INSTRUCTION,
               agent_system_prompt: str = "", agent_instruction: str = TASK_SLOT,
               eos_token: str = "", pad_token: str = "", verifier: str = "exact",
               max_difficulty: int = 4, summary_signals: bool = False,
               signal_template: str = DEFAULT_SIGNAL_TEMPLATE):
    if verifier not in text_verifiers.VERIFIERS:
      raise ValueError(f"config.task.verifier={verifier!r}; expected one of "
                       f"{text_verifiers.VERIFIERS}")
    if answer_ends not in ANSWER_ENDS:
      raise ValueError(f"config.task.answer_ends={answer_ends!r}; expected one of "
                       f"{ANSWER_ENDS}")
    self._extract = text_verifiers.answer_extractor(answer_from, final_answer_marker,
                                                    verifier)
    if max_response_tokens is None:
      max_response_tokens = max_answer_tokens
    if max_simulator_tokens is None:
      max_simulator_tokens = max_written_tokens
    for name, value in (("max_task_tokens", max_task_tokens),
                        ("max_answer_tokens", max_answer_tokens),
                        ("max_response_tokens", max_response_tokens),
                        ("max_difficulty", max_difficulty)):
      if value < 1:
        raise ValueError(f"config.task.{name}={value} must be >= 1")
    if not task_delimiter.strip() or not answer_delimiter.strip():
      raise ValueError("config.task.task_delimiter and answer_delimiter must be "
                       f"non-blank, got {task_delimiter!r} and {answer_delimiter!r}")
    for name, variants in (("task_delimiter_variants", task_delimiter_variants),
                           ("answer_delimiter_variants", answer_delimiter_variants)):
      if isinstance(variants, str) or not all(
          isinstance(v, str) and v.strip() for v in variants):
        raise ValueError(f"config.task.{name} must be a list of non-blank strings, "
                         f"got {variants!r}")
    self.tokenizer = tokenizer
    self.task_delimiter = task_delimiter
    self.answer_delimiter = answer_delimiter
    self.max_task_tokens = int(max_task_tokens)
    self.max_answer_tokens = int(max_answer_tokens)
    self.max_response_tokens = int(max_response_tokens)
    self.verifier = verifier
    self.answer_from = answer_from
    self.answer_ends = answer_ends
    self.max_difficulty = int(max_difficulty)
    self.summary_signals = bool(summary_signals)

    self.vocab_size = len(tokenizer)
    self.eos_id = self._token_id("eos_token", eos_token or tokenizer.eos_token)
    self.pad_id = self._token_id("pad_token", pad_token or tokenizer.pad_token)
    if self.eos_id == self.pad_id:
      raise ValueError(
          f"config.task.eos_token and pad_token are the same token (id {self.eos_id}); "
          "pool rows are read with the mask row != pad, so they must differ (for chat "
          "models set eos_token to the end-of-turn token, e.g. '<|im_end|>').")
    bos = tokenizer.bos_token_id
    self.bos_id = self.pad_id if bos is None else int(bos)
    self.tables = text_verifiers.token_tables(tokenizer)
    self._host = text_verifiers.HOST_SCORERS.get(verifier)
    self._decode = functools.partial(tokenizer.decode, skip_special_tokens=False)

    self.task_variants, self.task_variant_group = self._spellings(
        "task_delimiter", (task_delimiter, *task_delimiter_variants))
    self.answer_variants, _ = self._spellings(
        "answer_delimiter", (answer_delimiter, *answer_delimiter_variants))
    self.marker_variants = (self._delimiter_variants("final_answer_marker",
                                                     final_answer_marker)
                            if answer_from == "final_answer" else ())
    for a in self.task_variants:
      for b in self.answer_variants:
        if _contains(a, b) or _contains(b, a):
          raise ValueError(
              f"config.task.task_delimiter={task_delimiter!r} and answer_delimiter="
              f"{answer_delimiter!r} tokenize into overlapping sequences {a} and {b}")

    self.task_len = int(max_written_tokens)
    self._simulator_len = int(max_simulator_tokens)
    shortest = (min(map(len, self.task_variants)) + min(map(len, self.answer_variants))
                + 3)
    for name, value in (("max_written_tokens", self.task_len),
                        ("max_simulator_tokens", self._simulator_len)):
      if value < shortest:
        raise ValueError(f"config.task.{name}={value} is below {shortest}, the two "
                         "delimiters plus a one-token task, a one-token answer and EOS")
    probe = self.written_task_ids("a", "b")
    if not any(tuple(probe[:len(v)]) == v for v in self.task_variants) or not any(
        _contains(probe, v) for v in self.answer_variants):
      raise ValueError(
          f"the tokenizer does not keep the delimiters {task_delimiter!r} / "
          f"{answer_delimiter!r} as the same tokens inside a written task "
          f"(probe ids {probe}); choose delimiters that start a line cleanly")

    def with_delimiters(text: str) -> str:
      for slot, delimiter in zip(DELIMITER_SLOTS, (task_delimiter, answer_delimiter)):
        text = text.replace(slot, delimiter)
      return text

    simulator_instruction = with_delimiters(simulator_instruction)
    agent_instruction = with_delimiters(agent_instruction)
    simulator_slots = (SEED_SLOT, SIGNAL_SLOT) if self.summary_signals else (SEED_SLOT,)
    if not self.summary_signals:
      simulator_instruction = simulator_instruction.replace(SIGNAL_SLOT, "")
    self.simulator_template = render_template(tokenizer, simulator_instruction, simulator_slots,
                                        simulator_system_prompt, use_chat_template)
    self.agent_template = render_template(tokenizer, agent_instruction, (TASK_SLOT,),
                                          agent_system_prompt, use_chat_template)
    if not self.agent_template.constant_len:
      raise ValueError("config.task.agent_instruction must hold text besides {task} "
                       "(every agent prompt needs at least one token)")
    self.signal_tokens, self.signal_lengths = self._signal_table(signal_template)
    self.simulator_prompt_len = (self.simulator_template.constant_len + self.task_len - 1
                           + (self.signal_tokens.shape[1] if self.summary_signals else 0))
    self.agent_prompt_len = self.agent_template.constant_len + self.max_task_tokens
    self.answer_len = self.max_answer_tokens + 1

  @property
  def response_len(self) -> int:
    """The agent's max_new_tokens: max_response_tokens plus its EOS."""
    return self.max_response_tokens + 1

  @property
  def simulator_len(self) -> int:
    """The simulator's max_new_tokens (max_simulator_tokens)."""
    return self._simulator_len

  @classmethod
  def from_config(cls, config: Any) -> TextDomain:
    """Builds the domain from `config.task` (`from_task_config`)."""
    return from_task_config(cls, config, "the text domain")

  @staticmethod
  def check_config(config: Any) -> None:
    fields.choice(config, "task.verifier", text_verifiers.VERIFIERS)
    for field in ("max_task_tokens", "max_answer_tokens", "max_written_tokens",
                  "max_difficulty"):
      fields.integer(config, f"task.{field}", low=1)
    fields.choice(config, "data.format", FORMATS)
    fields.number(config, "data.test_fraction", low=0.0, high=1.0,
                  open_high=True)

  checkpoint_stop_ids: tuple[int, ...] = ()

  @property
  def stop_ids(self) -> tuple[int, ...]:
    """eos_id, then the end-of-generation ids of the tokenizer directory's
    generation_config.json (when it has one)."""
    return tuple(dict.fromkeys((self.eos_id,) + self.checkpoint_stop_ids))

  # ------------------------------------------------------------ host-side set-up

  def _token_id(self, field: str, token: str | None) -> int:
    if not token:
      raise ValueError(f"the tokenizer has no {field}; set config.task.{field}")
    token_id = self.tokenizer.convert_tokens_to_ids(token)
    if token_id is None or self.tokenizer.convert_ids_to_tokens(token_id) != token:
      raise ValueError(f"config.task.{field}={token!r} is not a token of the tokenizer")
    return int(token_id)

  def _delimiter_variants(self, field: str, delimiter: str) -> tuple[tuple[int, ...], ...]:
    """The token sequences of one spelling: alone, after a space, and (where the
    tokenizer merges its end with a line break) followed by one."""
    variants = []
    for text in (delimiter, " " + delimiter, delimiter + "\n", " " + delimiter + "\n"):
      ids = tuple(_encode(self.tokenizer, text))
      if ids and ids not in variants:
        variants.append(ids)
    if not variants:
      raise ValueError(f"config.task.{field}={delimiter!r} encodes to no tokens")
    # A variant holding another (a space token before the same ids, a line-break
    # token after them) would match the same delimiter twice; the shorter one finds
    # it alone.
    return tuple(v for v in variants
                 if not any(u != v and _contains(v, u) for u in variants))

  def _spellings(self, field: str, spellings: Sequence[str]
                 ) -> tuple[tuple[tuple[int, ...], ...], np.ndarray]:
    """The token sequences of all spellings of a delimiter, shortest first (so a
    longer one starting at the same token wins), and int32[K] the spelling index
    (0 the delimiter, i its i-th variant) of each."""
    found: dict[tuple[int, ...], int] = {}
    for index, spelling in enumerate(spellings):
      for ids in self._delimiter_variants(field if not index else field + "_variants",
                                          spelling):
        found.setdefault(ids, index)
    ordered = sorted(found, key=len)
    return tuple(ordered), np.array([found[v] for v in ordered], np.int32)

  def _signal_table(self, signal_template: str) -> tuple[np.ndarray, np.ndarray]:
    """Token rows int32[RATE_BUCKETS + 1, W] and lengths of the signal texts."""
    if self.summary_signals and RATE_SLOT not in signal_template:
      raise ValueError(f"config.task.signal_template must hold {RATE_SLOT}: "
                       f"{signal_template!r}")
    rates = [f"{10 * b}%" for b in range(RATE_BUCKETS)] + ["unknown"]
    encoded = [_encode(self.tokenizer, signal_template.replace(RATE_SLOT, r))
               for r in rates]
    width = max(map(len, encoded))
    table = np.full((len(encoded), width), self.pad_id, np.int32)
    for row, ids in zip(table, encoded):
      row[:len(ids)] = ids
    return table, np.array([len(ids) for ids in encoded], np.int32)

  # ------------------------------------------------------------------- in JAX

  def simulator_prompt(self, seed_tasks: jax.Array,
                 success_rate: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """The simulator's prompts: the simulator instruction with each seed's text.

    Args:
      seed_tasks: int32[M, task_len] written-task rows; a seed's text ends at its
        first EOS or pad.
      success_rate: f32[M] the agent's recent success rate per seed, written into
        the prompt with summary signals (rounded to 10%; outside [0, 1], NaN or
        None: "unknown"). Ignored without summary signals.

    Returns:
      (tokens int32[M, simulator_prompt_len], mask bool[M, simulator_prompt_len]), left-padded.
    """
    seeds = jnp.asarray(seed_tasks, jnp.int32)
    check_rows("seed_tasks", seeds, self.task_len)
    num_rows = seeds.shape[0]
    ends = (seeds == self.eos_id) | (seeds == self.pad_id)
    seed_len = jnp.where(ends.any(axis=1), jnp.argmax(ends, axis=1), self.task_len)
    slots = [(seeds[:, :self.task_len - 1], jnp.minimum(seed_len, self.task_len - 1))]
    if self.summary_signals:
      bucket = success_buckets(success_rate, num_rows)
      slots.append((jnp.asarray(self.signal_tokens)[bucket],
                    jnp.asarray(self.signal_lengths)[bucket]))
    return pack_segments(template_segments(self.simulator_template, slots, num_rows),
                         self.simulator_prompt_len, self.pad_id)

  @staticmethod
  def _delimiter_hits(tokens: jax.Array, region: jax.Array,
                      variants: Sequence[tuple[int, ...]]
                      ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(hits bool[M, L], which int32[M, L], length int32[M, L]): where a spelling
    starts wholly inside `region` and not inside an earlier match (`## New Task:`
    holds ` New Task:`), the index of its token sequence, and its token count."""
    hits, which, lengths = text_verifiers.sequence_hits(tokens, region, variants)
    reach = jax.lax.cummax(jnp.where(hits, jnp.arange(tokens.shape[1])[None, :]
                                     + lengths, 0), axis=1)
    covered = jnp.pad(reach[:, :-1], ((0, 0), (1, 0))) > jnp.arange(tokens.shape[1])
    hits = hits & ~covered
    return hits, which, jnp.where(hits, lengths, 0)

  def parse(self, simulator_tokens: jax.Array, simulator_mask: jax.Array) -> ParsedTasks:
    """Reads delimited tasks (rules in the module docstring).

    Args:
      simulator_tokens: int32[M, L], L = simulator_len (generations) or task_len
        (pool rows).
      simulator_mask: bool[M, L].

    Returns:
      ParsedTasks: prompt int32[M, agent_prompt_len] (the agent template with an
      empty task for invalid rows), reference int32[M, answer_len] (answer span, EOS,
      pad; all pad and unmasked for invalid rows), task int32[M, task_len] (the text
      from the task delimiter as written, unspaced, to EOS, then pad; all pad for
      invalid rows), delimiter int32[M] (which spelling of the task delimiter).
    """
    width = jnp.shape(simulator_tokens)[-1]
    tokens, mask = generation_rows(
        simulator_tokens, simulator_mask,
        width if width in (self.simulator_len, self.task_len) else self.simulator_len)
    num_rows = tokens.shape[0]
    columns = jnp.arange(width)[None, :]
    blank = text_verifiers.lookup(self.tables.blank, tokens, False)

    is_eos = tokens == self.eos_id
    has_eos = is_eos.any(axis=1)
    eos_pos = jnp.where(has_eos, jnp.argmax(is_eos, axis=1), width)
    before_eos = columns < eos_pos[:, None]

    task_hits, task_which, task_widths = self._delimiter_hits(
        tokens, before_eos, self.task_variants)
    answer_hits, _, answer_widths = self._delimiter_hits(tokens, before_eos,
                                                         self.answer_variants)
    task_at = jnp.argmax(task_hits, axis=1)
    answer_at = jnp.argmax(answer_hits, axis=1)
    task_delim_len = jnp.take_along_axis(task_widths, task_at[:, None], axis=1)[:, 0]
    answer_delim_len = jnp.take_along_axis(answer_widths, answer_at[:, None], axis=1)[:, 0]
    answer_start = answer_at + answer_delim_len
    # last: the column that ends the answer (its EOS, or its first line's break);
    # end: one past the answer's last token (EOS excluded, the break included).
    last, end, ended = eos_pos, eos_pos, has_eos
    if self.answer_ends == "line_break":
      first_solid, _ = _trimmed_span(tokens, blank, answer_start, eos_pos)
      breaks = (text_verifiers.lookup(self.tables.newline, tokens, False)
                & (columns >= first_solid[:, None]) & before_eos)
      has_break = breaks.any(axis=1)
      last = jnp.where(has_break, jnp.argmax(breaks, axis=1), eos_pos)
      end = jnp.where(has_break, last + 1, eos_pos)
      ended = has_eos | has_break
    before_end = columns < end[:, None]
    written = jnp.all(mask | (columns > last[:, None]), axis=1)
    plain = jnp.all(text_verifiers.lookup(self.tables.plain, tokens, False) | ~before_end,
                    axis=1)
    task_count = (task_hits & before_end).sum(axis=1)
    answer_count = (answer_hits & before_end).sum(axis=1)
    task_first, task_len = _trimmed_span(tokens, blank, task_at + task_delim_len, answer_at)
    answer_first, answer_len = _trimmed_span(tokens, blank, answer_start, end)
    written_len = end - task_at
    valid = (
        ended & written & plain & (written_len < self.task_len)
        & (task_count == 1) & (answer_count == 1)
        & (answer_at >= task_at + task_delim_len)
        & (task_len >= 1) & (task_len <= self.max_task_tokens)
        & (answer_len >= 1) & (answer_len <= self.max_answer_tokens)
    )

    answer, _ = _window(tokens, answer_first, answer_len, self.answer_len, self.pad_id)
    answer = self._unspace_first(answer, answer_len)
    answer_columns = jnp.arange(self.answer_len)[None, :]
    reference = jnp.where(answer_columns == answer_len[:, None], self.eos_id, answer)
    if self._host is not None:
      checkable_mask = (answer_columns <= answer_len[:, None]) & valid[:, None]
      valid = valid & text_verifiers.host_reference_ok(
          self._host, self._decode, self.eos_id, self.vocab_size, reference,
          checkable_mask)
    reference_mask = (answer_columns <= answer_len[:, None]) & valid[:, None]
    reference = jnp.where(reference_mask, reference, self.pad_id)

    task_len = jnp.where(valid, task_len, 0)
    task, _ = _window(tokens, task_first, task_len, self.max_task_tokens, self.pad_id)
    task = self._unspace_first(task, task_len)
    prompt, prompt_mask = pack_segments(
        template_segments(self.agent_template, [(task, task_len)], num_rows),
        self.agent_prompt_len, self.pad_id)

    row, _ = _window(tokens, task_at, written_len, self.task_len, self.pad_id)
    row = self._unspace_first(row, written_len)
    row = jnp.where(jnp.arange(self.task_len)[None, :] == written_len[:, None],
                    self.eos_id, row)
    row = jnp.where(valid[:, None], row, self.pad_id)
    which = jnp.take_along_axis(task_which, task_at[:, None], axis=1)[:, 0]
    delimiter = jnp.where(valid, jnp.asarray(self.task_variant_group)[
        jnp.clip(which, 0, len(self.task_variants) - 1)], -1)
    difficulty = jnp.where(
        valid, 1 + (task_len - 1) * self.max_difficulty // self.max_task_tokens, 0)
    return ParsedTasks(prompt=prompt, prompt_mask=prompt_mask, reference=reference,
                       reference_mask=reference_mask, valid=valid,
                       difficulty=difficulty.astype(jnp.int32), task=row,
                       delimiter=delimiter.astype(jnp.int32))

  def _unspace_first(self, span: jax.Array, length: jax.Array) -> jax.Array:
    first = text_verifiers.lookup(self.tables.unspaced, span[:, 0], span[:, 0])
    return span.at[:, 0].set(jnp.where(length > 0, first, span[:, 0]))

  def verify(self, response: jax.Array, response_mask: jax.Array, reference: jax.Array,
             reference_mask: jax.Array) -> jax.Array:
    """Scores responses with `config.task.verifier` (see `text_verifiers`).

    The answer is read from where `config.task.answer_from` says.

    Args:
      response: int32[M, response_len]; response_mask: bool[M, response_len].
      reference: int32[M, answer_len]; reference_mask: bool[M, answer_len].

    Returns:
      float32[M] in [0, 1].
    """
    arrays = (("response", response, self.response_len),
              ("response_mask", response_mask, self.response_len),
              ("reference", reference, self.answer_len),
              ("reference_mask", reference_mask, self.answer_len))
    for name, array, width in arrays:
      check_rows(name, jnp.asarray(array), width)
    if self.verifier == "exact":
      return text_verifiers.exact_match(response, response_mask, reference,
                                        reference_mask, self.eos_id, self.tables,
                                        self.marker_variants)
    return text_verifiers.host_scores(self._host, self._decode, self.eos_id,
                                      self.vocab_size, response, response_mask,
                                      reference, reference_mask, self._extract)

  # ------------------------------------------------------------------ host side

  def decode(self, tokens: np.ndarray | jax.Array) -> list[str]:
    """Rows `int[N, T]` (or one row `int[T]`) as text; pad and out-of-vocabulary ids
    are dropped, special tokens kept."""
    rows = np.asarray(tokens)
    if rows.ndim == 1:
      rows = rows[None, :]
    if rows.ndim != 2:
      raise ValueError(f"tokens must have shape [N, T] or [T], got {rows.shape}")
    return [self._decode([int(t) for t in row
                          if t != self.pad_id and 0 <= t < self.vocab_size])
            for row in rows]

  def written_task_ids(self, task: str, answer: str) -> list[int]:
    """Token ids of `<task delimiter> <task>\\n<answer delimiter> <answer>` then EOS
    (any length)."""
    text = f"{self.task_delimiter} {task.strip()}\n{self.answer_delimiter} {answer.strip()}"
    return _encode(self.tokenizer, text) + [self.eos_id]

  def encode_tasks(self, tasks: Sequence[str], answers: Sequence[str]) -> np.ndarray:
    """Written-task rows for task and answer texts.

    Returns:
      int32[N, task_len], pad after each row's EOS.

    Raises:
      ValueError: the lists differ in length, or a task's ids do not fit task_len
        (the message names its index).
    """
    if len(tasks) != len(answers):
      raise ValueError(f"tasks and answers differ in length: {len(tasks)} vs {len(answers)}")
    rows = np.full((len(tasks), self.task_len), self.pad_id, np.int32)
    for index, (task, answer) in enumerate(zip(tasks, answers)):
      ids = self.written_task_ids(task, answer)
      if len(ids) > self.task_len:
        raise ValueError(f"task {index} is {len(ids)} tokens written, more than "
                         f"max_written_tokens={self.task_len}")
      rows[index, :len(ids)] = ids
    return rows


def from_task_config(cls, config: Any, what: str):
  """`cls(tokenizer, **fields)` for a tokenizer-backed domain from
  `config.task`: the tokenizer loaded from tokenizer_dir, every other field
  but `name` passed to `cls.__init__` (a field it does not take is a
  ValueError naming it), and `checkpoint_stop_ids` set from the directory's
  generation_config.json. `what` names the domain in errors."""
  from models import hf  # pylint: disable=import-outside-toplevel

  if not config.get("tokenizer_dir"):
    raise ValueError("config.task.tokenizer_dir must name an HF tokenizer directory")
  fields = {k: v for k, v in config.to_dict().items()
            if k not in ("name", "tokenizer_dir")}
  known = set(inspect.signature(cls.__init__).parameters) - {"self", "tokenizer"}
  unknown = sorted(set(fields) - known)
  if unknown:
    raise ValueError(f"config.task has fields {what} does not know: {unknown}; "
                     f"known: {sorted(known)}")
  domain = cls(hf.load_tokenizer(config.tokenizer_dir), **fields)
  domain.checkpoint_stop_ids = checkpoint_stop_ids_of(config.tokenizer_dir)
  return domain


def checkpoint_stop_ids_of(tokenizer_dir: str) -> tuple[int, ...]:
  """The eos ids of `tokenizer_dir`'s generation_config.json; () when it has
  none or names none."""
  from models import hf  # pylint: disable=import-outside-toplevel
  path = os.path.join(tokenizer_dir, hf.GENERATION_CONFIG_FILE)
  if not os.path.isfile(path):
    return ()
  with open(path) as f:
    if json.load(f).get("eos_token_id") is None:
      return ()
  return hf.stop_token_ids(tokenizer_dir)
