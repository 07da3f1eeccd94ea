"""The environment interface of episodic domains: what the agent acts on.

An episodic task domain (`TaskDomain.environment` is not None) is attempted by
`genenv_jax.episodes.rollout_episodes` instead of single-answer sampling: the
agent writes an action of up to A tokens, the environment answers with an
observation of up to O tokens, and so on for at most K turns. Everything here
has fixed shapes and is pure, so a rollout is traced into the co-evolution
step and compiles once.

An environment is two pure functions over B rows:

  reset(spec)                      -> state
  step(state, action, action_mask) -> EnvStep(state, observation, ...)

`spec` is the canonical written-task row `ParsedTasks.task` (int32[B,
task_len]): the task and the environment's hidden state as the simulator
wrote it and the domain checked it. The agent's first view of the episode is
the task's prompt (`ParsedTasks.prompt`); every later view is an observation.
A JAX environment implements both in `jnp`; a host environment implements
`genenv_jax.envs.host.HostTransition` in Python and is wrapped by
`HostEnvironment`, which calls it through `jax.pure_callback`.
"""

from __future__ import annotations

import abc
from typing import Any, NamedTuple

import jax


class EnvStep(NamedTuple):
  """One environment step over B rows.

  Attributes:
    state: the environment's state after the action (a pytree of [B, ...]).
    observation: int32[B, O] what the agent sees next, real tokens first then
      pad (the rollout right-aligns them in its cache).
    observation_mask: bool[B, O] true on real observation tokens; a row that
      is not done has at least one.
    reward: f32[B] this turn's reward.
    done: bool[B] the episode ended with this action (goal reached, failure,
      or an error); the turn limit is the rollout's, not the environment's.
    success: bool[B] the episode ended in success with this action.
    invalid_action: bool[B] the action could not be read as a move of the
      environment (it still takes a turn).
    error: bool[B] the environment itself failed on this row (host
      environments: an exception); such a row is done with reward 0.
  """
  state: Any
  observation: jax.Array
  observation_mask: jax.Array
  reward: jax.Array
  done: jax.Array
  success: jax.Array
  invalid_action: jax.Array
  error: jax.Array


class Environment(abc.ABC):
  """A fixed-shape environment the agent acts in.

  Attributes:
    max_turns: K, the most actions per episode (the turn limit).
    action_len: A, the most tokens of one action, its stop token included.
    observation_len: O, the most tokens of one observation.
  """

  max_turns: int
  action_len: int
  observation_len: int

  @abc.abstractmethod
  def reset(self, spec: jax.Array) -> Any:
    """The initial states of B episodes from their spec rows int32[B, L]."""

  @abc.abstractmethod
  def step(self, state: Any, action: jax.Array, action_mask: jax.Array
           ) -> EnvStep:
    """Applies action int32[B, A] (bool[B, A] action_mask: the tokens the
    agent wrote, its stop token included, a prefix of the row)."""


def check_widths(env: Environment) -> None:
  """Raises ValueError naming the field when a width is not positive."""
  for name in ("max_turns", "action_len", "observation_len"):
    if int(getattr(env, name)) < 1:
      raise ValueError(f"{type(env).__name__}.{name}={getattr(env, name)} "
                       "must be >= 1.")
