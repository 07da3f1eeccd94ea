"""Multi-digit addition: the default demo domain.

The simulator writes a task token by token as `a+b=` then EOS, where a and b are decimal
numbers of 1..max_digits digits without leading zeros (0 itself is allowed). The task's
difficulty is the digit count of its longer operand, so the simulator controls difficulty
only through the digits it writes. The agent sees `BOS a + b =` and answers with the
digits of a+b then EOS, least-significant digit first when `reverse_answer` is set (the
order in which carries are computed, which small transformers learn far more easily).
With `pad_operands` the agent sees both operands written with leading zeros to
max_digits digits (`BOS 00123 + 00045 =`): every digit of a place value then sits at
the same position in every prompt, and a task's difficulty is how many places it uses.

Vocabulary (16 ids):

  id     0    1    2    3..12  13  14  15
  token  pad  bos  eos  0..9   +   =   >

'>' ends a simulator prompt: `BOS <seed task without EOS> >` reads "write a new task
after this seed".
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from genenv_jax import config_fields as fields
from genenv_jax.domains.base import (ParsedTasks, TaskDomain, check_rows,
                                   generation_rows)

PAD = 0
BOS = 1
EOS = 2
DIGIT0 = 3
PLUS = 13
EQUALS = 14
SEP = 15
VOCAB_SIZE = 16

# Two 9-digit operands sum to at most 1_999_999_998 < 2**31: every value stays in int32.
MAX_SUPPORTED_DIGITS = 9
REWARDS = ("exact", "digits")

_TOKEN_TEXT = {PAD: "", BOS: "<bos>", EOS: "<eos>", PLUS: "+", EQUALS: "=", SEP: ">"}
_TOKEN_TEXT.update({DIGIT0 + d: str(d) for d in range(10)})


def _left_align(
    rows: jax.Array, lengths: jax.Array, width: int
) -> tuple[jax.Array, jax.Array]:
  """Moves each row's first `lengths` tokens to the right end of a `width`-wide row.

  Args:
    rows: int32[M, W] tokens whose content is the prefix rows[i, :lengths[i]].
    lengths: int32[M], each in 0..min(W, width).
    width: output width.

  Returns:
    (tokens int32[M, width] left-padded with PAD, mask bool[M, width]).
  """
  columns = jnp.arange(width)[None, :]
  source = columns - (width - lengths)[:, None]
  mask = source >= 0
  gathered = jnp.take_along_axis(rows, jnp.clip(source, 0, rows.shape[1] - 1), axis=1)
  return jnp.where(mask, gathered, PAD), mask


@dataclasses.dataclass(frozen=True)
class ArithmeticDomain(TaskDomain):
  """Addition of two numbers of 1..max_digits digits.

  Attributes:
    max_digits: longest operand, 1..9; also the largest difficulty.
    reverse_answer: write the answer least-significant digit first.
    reward: "exact" (1 iff the whole answer is right) or "digits" (the share of
      the reference's tokens, EOS included, that the response has in place:
      partial credit, 1 only for the exact answer).
    pad_operands: the agent's prompt writes both operands with leading zeros to
      max_digits digits (the simulator still writes them without).
  """

  max_digits: int = 5
  reverse_answer: bool = True
  reward: str = "exact"
  pad_operands: bool = False

  vocab_size = VOCAB_SIZE
  pad_id = PAD
  bos_id = BOS
  eos_id = EOS

  def __post_init__(self):
    if not 1 <= self.max_digits <= MAX_SUPPORTED_DIGITS:
      raise ValueError(
          f"max_digits must be in 1..{MAX_SUPPORTED_DIGITS} (int32 sums), got {self.max_digits}"
      )
    if self.reward not in REWARDS:
      raise ValueError(f"config.task.reward={self.reward!r}; expected one of {REWARDS}")

  @classmethod
  def from_config(cls, config: Any) -> ArithmeticDomain:
    return cls(
        max_digits=int(config.max_digits),
        reverse_answer=bool(config.reverse_answer),
        reward=str(config.reward),
        pad_operands=bool(config.pad_operands),
    )

  @staticmethod
  def check_config(config: Any) -> None:
    fields.integer(config, "task.max_digits", low=1, high=MAX_SUPPORTED_DIGITS)
    fields.choice(config, "task.reward", REWARDS)
    fields.integer(config, "data.num_train", low=1)
    fields.integer(config, "data.num_test_per_level", low=1)
    fields.level_weights(config, "task.max_digits")

  @property
  def task_len(self) -> int:
    """Digits of both operands, '+', '=', EOS."""
    return 2 * self.max_digits + 3

  @property
  def simulator_prompt_len(self) -> int:
    """BOS, the seed without its EOS, '>'."""
    return self.task_len + 1

  @property
  def agent_prompt_len(self) -> int:
    """BOS, the task without its EOS."""
    return self.task_len

  @property
  def answer_len(self) -> int:
    """Up to max_digits + 1 digits of the sum, EOS."""
    return self.max_digits + 2

  @property
  def max_difficulty(self) -> int:
    return self.max_digits

  def simulator_prompt(
      self, seed_tasks: jax.Array, success_rate: jax.Array | None = None
  ) -> tuple[jax.Array, jax.Array]:
    """`BOS <seed tokens before its EOS> >`, left-padded.

    Args:
      seed_tasks: int32[M, task_len] written-task rows; the seed's content ends at its
        first EOS or pad (an all-pad row gives `BOS >`).
      success_rate: ignored (this domain's prompts carry no summary signal).

    Returns:
      (tokens int32[M, simulator_prompt_len], mask bool[M, simulator_prompt_len]).
    """
    seeds = jnp.asarray(seed_tasks, jnp.int32)
    check_rows("seed_tasks", seeds, self.task_len)
    ends = (seeds == EOS) | (seeds == PAD)
    content_len = jnp.where(ends.any(axis=1), jnp.argmax(ends, axis=1), self.task_len)
    content_len = jnp.minimum(content_len, self.task_len - 1)
    with_bos = jnp.concatenate([jnp.full((seeds.shape[0], 1), BOS, jnp.int32), seeds], axis=1)
    columns = jnp.arange(with_bos.shape[1])[None, :]
    prompt = jnp.where(columns == content_len[:, None] + 1, SEP, with_bos)
    return _left_align(prompt, content_len + 2, self.simulator_prompt_len)

  def parse(self, simulator_tokens: jax.Array, simulator_mask: jax.Array) -> ParsedTasks:
    """Validates `a+b=<eos>` exactly and builds the agent's prompt and reference.

    A generation is valid iff its first EOS lies inside `simulator_mask` (with every token
    before it), the tokens before that EOS are digits with exactly one '+' and one '='
    in the order `a+b=`, '=' is right before EOS, each operand has 1..max_digits digits
    and no leading zero unless it is the single digit 0. Tokens after the EOS are
    ignored.

    Args:
      simulator_tokens: int32[M, task_len].
      simulator_mask: bool[M, task_len].

    Returns:
      ParsedTasks; prompt int32[M, task_len] is `BOS a + b =` (with pad_operands,
      each operand zero-padded to max_digits digits; a lone BOS for invalid rows,
      so every prompt attends to at least one token), reference int32[M,
      max_digits + 2] is the sum's digits then EOS (all pad for invalid rows).
    """
    tokens, mask = generation_rows(simulator_tokens, simulator_mask, self.task_len)
    num_rows, width = tokens.shape
    columns = jnp.arange(width)[None, :]

    is_eos = tokens == EOS
    has_eos = is_eos.any(axis=1)
    eos_pos = jnp.argmax(is_eos, axis=1)
    up_to_eos = columns <= eos_pos[:, None]
    before_eos = columns < eos_pos[:, None]
    written = jnp.all(mask | ~up_to_eos, axis=1)

    is_plus = (tokens == PLUS) & before_eos
    is_equals = (tokens == EQUALS) & before_eos
    plus_pos = jnp.argmax(is_plus, axis=1)
    equals_pos = jnp.argmax(is_equals, axis=1)
    is_digit = (tokens >= DIGIT0) & (tokens < DIGIT0 + 10)
    only_digits_around = jnp.all(is_digit | is_plus | is_equals | ~before_eos, axis=1)

    len_a = plus_pos
    len_b = equals_pos - plus_pos - 1
    first_a = tokens[:, 0]
    after_plus = jnp.minimum(plus_pos + 1, width - 1)[:, None]
    first_b = jnp.take_along_axis(tokens, after_plus, axis=1)[:, 0]
    valid = (
        has_eos
        & written
        & (is_plus.sum(axis=1) == 1)
        & (is_equals.sum(axis=1) == 1)
        & (equals_pos == eos_pos - 1)
        & only_digits_around
        & (len_a >= 1) & (len_a <= self.max_digits)
        & (len_b >= 1) & (len_b <= self.max_digits)
        & ((len_a == 1) | (first_a != DIGIT0))
        & ((len_b == 1) | (first_b != DIGIT0))
    )

    powers = jnp.asarray(10 ** np.arange(self.max_digits + 1), jnp.int32)
    digit = jnp.clip(tokens - DIGIT0, 0, 9)

    def operand_value(start: jax.Array, stop: jax.Array) -> jax.Array:
      inside = (columns >= start[:, None]) & (columns < stop[:, None]) & valid[:, None]
      exponent = jnp.clip(stop[:, None] - 1 - columns, 0, self.max_digits - 1)
      return jnp.sum(jnp.where(inside, digit * powers[exponent], 0), axis=1)

    a = operand_value(jnp.zeros_like(plus_pos), plus_pos)
    b = operand_value(plus_pos + 1, equals_pos)
    total = a + b

    total_len = 1 + jnp.sum(total[:, None] >= powers[None, 1:], axis=1)
    total_digits = (total[:, None] // powers[None, :]) % 10
    answer_columns = jnp.arange(self.answer_len)[None, :]
    if self.reverse_answer:
      digit_index = answer_columns
    else:
      digit_index = total_len[:, None] - 1 - answer_columns
    digit_index = jnp.clip(digit_index, 0, self.max_digits)
    answer_digits = DIGIT0 + jnp.take_along_axis(total_digits, digit_index, axis=1)
    in_answer = answer_columns < total_len[:, None]
    reference = jnp.where(
        in_answer, answer_digits, jnp.where(answer_columns == total_len[:, None], EOS, PAD)
    )
    reference_mask = (answer_columns <= total_len[:, None]) & valid[:, None]
    reference = jnp.where(reference_mask, reference, PAD)

    if self.pad_operands:
      place = powers[self.max_digits - 1 :: -1][: self.max_digits]  # 10**(W-1) .. 1
      padded = lambda x: DIGIT0 + (x[:, None] // place[None, :]) % 10
      column = lambda token: jnp.full((num_rows, 1), token, jnp.int32)
      agent_tokens = jnp.concatenate(
          [column(BOS), padded(a), column(PLUS), padded(b), column(EQUALS)], axis=1)
      prompt_len = jnp.where(valid, self.agent_prompt_len, 1)
    else:
      agent_tokens = jnp.concatenate([jnp.full((num_rows, 1), BOS, jnp.int32), tokens], axis=1)
      prompt_len = jnp.where(valid, eos_pos + 1, 1)
    prompt, prompt_mask = _left_align(agent_tokens, prompt_len, self.agent_prompt_len)

    task = jnp.where(valid[:, None] & up_to_eos, tokens, PAD)
    difficulty = jnp.where(valid, jnp.maximum(len_a, len_b), 0).astype(jnp.int32)
    return ParsedTasks(
        prompt=prompt,
        prompt_mask=prompt_mask,
        reference=reference,
        reference_mask=reference_mask,
        valid=valid,
        difficulty=difficulty,
        task=task,
    )

  def verify(
      self,
      response: jax.Array,
      response_mask: jax.Array,
      reference: jax.Array,
      reference_mask: jax.Array,
  ) -> jax.Array:
    """Exact match: 1.0 iff the response up to its first EOS (inclusive) is the reference.

    Tokens after the response's first EOS are ignored; a response without an EOS inside
    `response_mask` scores 0, and so does any response to an invalid task. With
    reward="digits" an inexact response scores the share of reference positions it
    matches (tokens after its first EOS never match).

    Args:
      response: int32[M, answer_len].
      response_mask: bool[M, answer_len].
      reference: int32[M, answer_len].
      reference_mask: bool[M, answer_len].

    Returns:
      float32[M] in {0, 1}.
    """
    response = jnp.asarray(response, jnp.int32)
    response_mask = jnp.asarray(response_mask, bool)
    reference = jnp.asarray(reference, jnp.int32)
    reference_mask = jnp.asarray(reference_mask, bool)
    for name, array in (
        ("response", response),
        ("response_mask", response_mask),
        ("reference", reference),
        ("reference_mask", reference_mask),
    ):
      check_rows(name, array, self.answer_len)
    columns = jnp.arange(self.answer_len)[None, :]
    is_eos = (response == EOS) & response_mask
    eos_pos = jnp.argmax(is_eos, axis=1)
    up_to_eos = columns <= eos_pos[:, None]
    same = (response == reference) & reference_mask & response_mask
    # The reference's only EOS is its last token, so matching through the response's EOS
    # matches the whole reference.
    match = is_eos.any(axis=1) & jnp.all(same | ~up_to_eos, axis=1)
    if self.reward == "exact":
      return match.astype(jnp.float32)
    written = same & (up_to_eos | ~is_eos.any(axis=1, keepdims=True))
    share = written.sum(axis=1) / jnp.maximum(reference_mask.sum(axis=1), 1)
    return jnp.where(match, 1.0, share).astype(jnp.float32)

  def decode(self, tokens: np.ndarray | jax.Array) -> list[str]:
    """Renders rows as text, e.g. `12+345=<eos>`; pad is dropped, unknown ids print as `<id>`."""
    rows = np.asarray(tokens)
    if rows.ndim == 1:
      rows = rows[None, :]
    if rows.ndim != 2:
      raise ValueError(f"tokens must have shape [N, T] or [T], got {rows.shape}")
    return ["".join(_TOKEN_TEXT.get(int(t), f"<{int(t)}>") for t in row) for row in rows]

  def operand_digits(self, tasks: np.ndarray | jax.Array) -> np.ndarray:
    """Digit counts of each written task's two operands (its layout: `3+2` for
    `123+45=`), the finer grain of a difficulty level.

    Args:
      tasks: int[N, task_len] written-task rows `a+b=<eos>`.

    Returns:
      int64[N, 2]: digits of a and of b; (0, 0) for a row that is not a valid task.
    """
    rows = np.asarray(tasks)
    if rows.ndim != 2 or rows.shape[1] != self.task_len:
      raise ValueError(f"tasks must have shape [N, {self.task_len}], got {rows.shape}")
    parsed = self.parse(jnp.asarray(rows, jnp.int32), jnp.asarray(rows != PAD))
    valid = np.asarray(parsed.valid)
    plus = np.argmax(rows == PLUS, axis=1)
    equals = np.argmax(rows == EQUALS, axis=1)
    digits = np.stack([plus, equals - plus - 1], axis=1).astype(np.int64)
    return np.where(valid[:, None], digits, 0)

  def encode_tasks(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Written-task rows `a+b=<eos>` for operand arrays.

    Args:
      a: int[N] first operands, each in 0..10**max_digits - 1.
      b: int[N] second operands, same range.

    Returns:
      int32[N, task_len], pad after each row's EOS.
    """
    a = np.asarray(a)
    b = np.asarray(b)
    limit = 10**self.max_digits
    for name, operand in (("a", a), ("b", b)):
      if operand.ndim != 1 or not np.issubdtype(operand.dtype, np.integer):
        raise ValueError(f"{name} must be a 1-D integer array, got {operand.dtype}{operand.shape}")
      if operand.size and (operand.min() < 0 or operand.max() >= limit):
        raise ValueError(f"{name} must lie in 0..{limit - 1} (max_digits={self.max_digits})")
    if a.shape != b.shape:
      raise ValueError(f"a and b must have the same shape, got {a.shape} and {b.shape}")
    char_ids = {str(d): DIGIT0 + d for d in range(10)}
    char_ids.update({"+": PLUS, "=": EQUALS})
    rows = np.full((a.shape[0], self.task_len), PAD, np.int32)
    for i, (x, y) in enumerate(zip(a.tolist(), b.tolist())):
      ids = [char_ids[c] for c in f"{x}+{y}="] + [EOS]
      rows[i, : len(ids)] = ids
    return rows

  def random_operands(
      self, rng: np.random.Generator, difficulty: np.ndarray
  ) -> tuple[np.ndarray, np.ndarray]:
    """Operands for tasks of exactly the given difficulties.

    For each row the longer operand (a or b, with equal chance) has exactly d digits;
    the other has a digit count drawn uniformly from 1..d, then a uniform value of that
    many digits (one-digit numbers include 0).

    Args:
      rng: numpy random generator.
      difficulty: int[N], each in 1..max_digits.

    Returns:
      (a int64[N], b int64[N]).
    """
    difficulty = np.asarray(difficulty, np.int64)
    if difficulty.ndim != 1:
      raise ValueError(f"difficulty must be 1-D, got shape {difficulty.shape}")
    if difficulty.size and (difficulty.min() < 1 or difficulty.max() > self.max_digits):
      raise ValueError(f"difficulty must lie in 1..{self.max_digits}, got {np.unique(difficulty)}")

    def with_digits(num_digits: np.ndarray) -> np.ndarray:
      low = np.where(num_digits == 1, 0, 10 ** (num_digits - 1))
      return rng.integers(low, 10**num_digits)

    longer = with_digits(difficulty)
    shorter = with_digits(rng.integers(1, difficulty + 1))
    longer_first = rng.random(difficulty.shape[0]) < 0.5
    return np.where(longer_first, longer, shorter), np.where(longer_first, shorter, longer)

  def random_tasks(
      self, rng: np.random.Generator, n: int, difficulties: int | Sequence[int] | None = None
  ) -> tuple[np.ndarray, np.ndarray]:
    """n random written tasks, each at a difficulty drawn uniformly from `difficulties`.

    Args:
      rng: numpy random generator.
      n: number of tasks.
      difficulties: a level or the levels to draw from; None means 1..max_digits.

    Returns:
      (rows int32[n, task_len], difficulty int32[n]).
    """
    if difficulties is None:
      difficulties = range(1, self.max_digits + 1)
    levels = np.atleast_1d(np.asarray(difficulties, np.int64))
    difficulty = rng.choice(levels, size=n)
    a, b = self.random_operands(rng, difficulty)
    return self.encode_tasks(a, b), difficulty.astype(np.int32)

