"""The task-domain interface: what a task looks like, how to read one, how to score an answer.

A domain fixes one token format shared by the simulator's outputs, the seed rows and the
task pool: a *written-task row* `int32[..., task_len]`, the task's tokens, its EOS, then
pad. Inside the co-evolution step a domain

1. turns seed rows into simulator prompts (`simulator_prompt`),
2. reads what the simulator wrote (`parse`): the agent's prompt, the reference answer,
   whether the task is well formed, and its difficulty,
3. scores the agent's responses against the references (`verify`).

Everything used inside the step is pure JAX with fixed shapes, so it compiles once and
never crashes or produces NaN on malformed generations: those are flagged invalid.
`decode` and `encode_tasks` are host-side helpers (numpy / Python) for data and logs.
"""

from __future__ import annotations

import abc
import contextlib
import io
from typing import Any, NamedTuple

from absl import logging as absl_logging
import jax
import jax.numpy as jnp
import numpy as np


def check_rows(name: str, array: jax.Array, width: int) -> None:
  """Raises ValueError unless `array` (named `name`) has shape [M, width]."""
  if array.ndim != 2 or array.shape[1] != width:
    raise ValueError(f"{name} must have shape [M, {width}], got {tuple(array.shape)}")


# Success-rate buckets of a simulator prompt's summary signal: 0%, 10%, ...,
# 100%, then bucket RATE_BUCKETS for "unknown".
RATE_BUCKETS = 11


def success_buckets(success_rate: jax.Array | None, num_rows: int
                    ) -> jax.Array:
  """int32[num_rows] the agent's success rate f32[num_rows] per seed rounded
  to 10% (bucket b: b/10); RATE_BUCKETS where unknown (None, outside [0, 1]
  or NaN)."""
  unknown = jnp.full((num_rows,), RATE_BUCKETS, jnp.int32)
  if success_rate is None:
    return unknown
  rate = jnp.asarray(success_rate, jnp.float32)
  if rate.shape != (num_rows,):
    raise ValueError(f"success_rate must have shape [{num_rows}], got "
                     f"{rate.shape}")
  known = (rate >= 0) & (rate <= 1)  # false for NaN
  return jnp.where(known, jnp.round(jnp.where(known, rate, 0) * 10),
                   unknown).astype(jnp.int32)


def library_console():
  """A context in which the libraries' console prints (tensorflow-datasets
  prints its preparation lines) are dropped, unless absl logs at INFO
  (`train.main --library_logs`)."""
  if absl_logging.get_verbosity() >= absl_logging.INFO:
    return contextlib.nullcontext()
  return contextlib.redirect_stdout(io.StringIO())


def generation_rows(simulator_tokens, simulator_mask, task_len: int
                    ) -> tuple[jax.Array, jax.Array]:
  """What `TaskDomain.parse` receives, as (int32[M, task_len] tokens,
  bool[M, task_len] mask); raises ValueError naming the wrong-shaped one."""
  tokens = jnp.asarray(simulator_tokens, jnp.int32)
  mask = jnp.asarray(simulator_mask, bool)
  check_rows("simulator_tokens", tokens, task_len)
  check_rows("simulator_mask", mask, task_len)
  return tokens, mask


class ParsedTasks(NamedTuple):
  """What `TaskDomain.parse` reads from M simulator generations.

  Attributes:
    prompt: int32[M, P] the agent's prompt, left-padded with `pad_id`.
    prompt_mask: bool[M, P] true on prompt tokens, false on left padding.
    reference: int32[M, R] the reference answer tokens including their EOS, pad after.
    reference_mask: bool[M, R] true on reference tokens (EOS included).
    valid: bool[M] whether the generation is a well-formed task.
    difficulty: int32[M] in 1..max_difficulty for valid tasks, 0 for invalid ones.
    task: int32[M, task_len] the canonical written-task row (pad after its EOS), all
      pad for invalid tasks; this is what goes into the task pool.
    delimiter: int32[M] for domains that accept several spellings of their task
      delimiter: which one opened the task (0 the configured one, i >= 1 the i-th
      accepted variant, -1 for invalid rows); None for domains with one format.
  """

  prompt: jax.Array
  prompt_mask: jax.Array
  reference: jax.Array
  reference_mask: jax.Array
  valid: jax.Array
  difficulty: jax.Array
  task: jax.Array
  delimiter: jax.Array | None = None


class TaskDomain(abc.ABC):
  """A task format with its parser and verifier.

  Attributes (ints, fixed per domain instance):
    vocab_size: number of token ids the domain uses; ids at or above it are never valid.
    pad_id, bos_id, eos_id: special token ids.
    task_len: width of a written-task row, its EOS included; the simulator's
      max_new_tokens.
    simulator_prompt_len: width of the simulator's prompts.
    agent_prompt_len: P, width of the agent's prompts.
    answer_len: R, width of references.
    max_difficulty: largest difficulty level a valid task can have.
    response_len: the agent's max_new_tokens (`answer_len` unless a domain lets the
      agent write more than the answer, e.g. reasoning before it).
    simulator_len: the simulator's max_new_tokens, the width `parse` reads
      (`task_len` unless a domain lets the simulator write more than the task).
    stop_ids: the ids that end a sampled row (`eos_id`, and for a domain read
      from a checkpoint every end-of-generation id it names, e.g. Qwen2.5's
      <|im_end|> and <|endoftext|>). `canonical_stops` writes them as `eos_id`
      for `parse` and `verify`.
  """

  vocab_size: int
  pad_id: int
  bos_id: int
  eos_id: int
  task_len: int
  simulator_prompt_len: int
  agent_prompt_len: int
  answer_len: int
  max_difficulty: int

  @property
  def response_len(self) -> int:
    return self.answer_len

  @property
  def simulator_len(self) -> int:
    return self.task_len

  @property
  def stop_ids(self) -> tuple[int, ...]:
    return (self.eos_id,)

  @property
  def environment(self):
    """The `genenv_jax.envs.base.Environment` the agent acts in, for an
    episodic domain (its attempts are episodes, its `verify` unused); None
    for a domain whose agent answers each task once."""
    return None

  def canonical_stops(self, tokens: jax.Array, mask: jax.Array) -> jax.Array:
    """int32[B, N] sampled `tokens` with every stop id inside `mask` (bool[B, N])
    written as `eos_id`, the one end mark `parse` and `verify` read."""
    extra = [i for i in self.stop_ids if i != self.eos_id]
    if not extra:
      return tokens
    return jnp.where(mask & jnp.isin(tokens, jnp.asarray(extra)), self.eos_id,
                     tokens)

  @classmethod
  @abc.abstractmethod
  def from_config(cls, config: Any) -> TaskDomain:
    """Builds the domain from its config section (`config.task`)."""

  @staticmethod
  @abc.abstractmethod
  def check_config(config: Any) -> None:
    """Checks the run config's fields this domain reads (config.task.*,
    config.data.*, and any other section it constrains) before anything is
    built; raises ValueError naming the first bad field
    (genenv_jax.config_fields)."""

  @abc.abstractmethod
  def simulator_prompt(
      self, seed_tasks: jax.Array, success_rate: jax.Array | None = None
  ) -> tuple[jax.Array, jax.Array]:
    """Simulator prompts asking for a new task in the style of each seed.

    Args:
      seed_tasks: int32[M, task_len] written-task rows.
      success_rate: f32[M] the agent's latest success rate on each seed task
        (negative: not measured yet), for domains whose prompts can carry it as
        a summary signal; others ignore it.

    Returns:
      (tokens int32[M, simulator_prompt_len], mask bool[M, simulator_prompt_len]), left-padded.
    """

  @abc.abstractmethod
  def parse(self, simulator_tokens: jax.Array, simulator_mask: jax.Array) -> ParsedTasks:
    """Reads the simulator's generations.

    Args:
      simulator_tokens: int32[M, L] sampled tokens, L = simulator_len (or task_len:
        pool rows are parsed too).
      simulator_mask: bool[M, L] true on tokens the simulator actually wrote (up to
        and including its EOS); a generation whose EOS is not inside the mask was
        truncated and is invalid.

    Returns:
      ParsedTasks for the M generations; invalid rows have difficulty 0, an all-pad
      `task` row and a reference that no response matches.
    """

  @abc.abstractmethod
  def verify(
      self,
      response: jax.Array,
      response_mask: jax.Array,
      reference: jax.Array,
      reference_mask: jax.Array,
  ) -> jax.Array:
    """Scores the agent's responses (the response tokens only, never the prompt).

    Args:
      response: int32[M, response_len] sampled answer tokens.
      response_mask: bool[M, response_len] true on tokens the agent wrote.
      reference: int32[M, R] reference answers from `parse`.
      reference_mask: bool[M, R].

    Returns:
      float32[M] reward in [0, 1] per attempt.
    """

  def agent_target(self, parsed: ParsedTasks) -> tuple[jax.Array, jax.Array]:
    """The answer the agent is trained to write in a supervised warm start.

    Returns:
      (tokens int32[M, R], mask bool[M, R]); the reference itself unless a domain
      overrides this (for example to add a worked solution before the answer).
    """
    return parsed.reference, parsed.reference_mask

  def agent_demonstration(self, parsed: ParsedTasks
                          ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """What the agent's supervised warm start trains on, after its prompt.

    Returns:
      (tokens int32[M, W], attend bool[M, W] the real tokens, loss bool[M, W]
      the tokens the loss is on): `agent_target` with both masks its mask,
      unless an episodic domain overrides this with whole demonstration
      episodes (observations attended, not trained on).
    """
    tokens, mask = self.agent_target(parsed)
    return tokens, mask, mask

  @abc.abstractmethod
  def decode(self, tokens: np.ndarray | jax.Array) -> list[str]:
    """Host-side, human-readable rendering of token rows `int[N, T]` (or one row `int[T]`)."""

  @abc.abstractmethod
  def encode_tasks(self, *args: Any, **kwargs: Any) -> np.ndarray:
    """Host-side construction of written-task rows `int32[N, task_len]` from structured data."""
