"""Host environments: Python environments behind the fixed-shape interface.

A host environment (stateful Python APIs, a simulator with no JAX twin)
implements `HostTransition.transition(spec, actions)`: given a spec row and
every action of the episode so far, the outcome of the last one. It must be a
pure function of its arguments: JAX may call a callback again, skip it or
reorder calls, so the adapter never relies on state kept between calls. It
replays the episode from its spec each time; `memo_size` caches outcomes by
(spec, actions), which makes replays cheap and never changes them.

`HostEnvironment` wraps one as an `Environment`: its state is the spec rows
and the action history, and `step` calls `transition` through
`jax.pure_callback`, each device on its own rows (`sharding.rows_per_device`),
so every process steps the rows its devices hold. An exception in
`transition` ends that episode with reward 0 and an error (counted in the
rollout's metrics), never the run.
"""

from __future__ import annotations

import abc
import collections
import dataclasses
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from genenv_jax import sharding
from genenv_jax.envs.base import Environment, EnvStep


class HostStep(NamedTuple):
  """The outcome of an episode's last action, as a host environment gives it.

  observation: token ids (at most observation_len; more is an error).
  """
  observation: Sequence[int]
  reward: float
  done: bool
  success: bool
  invalid_action: bool


class HostTransition(abc.ABC):
  """A Python environment as a pure function of the episode so far."""

  @abc.abstractmethod
  def transition(self, spec: np.ndarray, actions: Sequence[np.ndarray]
                 ) -> HostStep:
    """The outcome of actions[-1].

    Args:
      spec: int32[L] the episode's spec row.
      actions: the agent's actions so far, oldest first, each int32[n_t] the
        tokens it wrote (its stop token included).
    """


class HostState(NamedTuple):
  """spec int32[B, L]; history int32[B, K, A] and history_mask bool[B, K, A]
  the actions so far; turn int32[B] actions taken."""
  spec: jax.Array
  history: jax.Array
  history_mask: jax.Array
  turn: jax.Array


# Columns of the packed callback result after the O observation tokens.
_COUNT, _REWARD, _DONE, _SUCCESS, _INVALID, _ERROR = range(6)


@dataclasses.dataclass(eq=False)
class HostEnvironment(Environment):
  """`Environment` over a `HostTransition` (see the module docstring)."""
  host: HostTransition
  max_turns: int
  action_len: int
  observation_len: int
  memo_size: int = 4096

  def __post_init__(self):
    self._memo: collections.OrderedDict = collections.OrderedDict()
    self.host_errors = 0  # exceptions caught on this process (replays too)

  def __hash__(self):
    return id(self)

  def reset(self, spec: jax.Array) -> HostState:
    b = spec.shape[0]
    shape = (b, self.max_turns, self.action_len)
    return HostState(jnp.asarray(spec, jnp.int32), jnp.zeros(shape, jnp.int32),
                     jnp.zeros(shape, bool), jnp.zeros((b,), jnp.int32))

  def _outcome(self, spec: np.ndarray, actions: list[np.ndarray]) -> np.ndarray:
    """One row's packed outcome int32[O + 6]."""
    key = (spec.tobytes(), tuple(a.tobytes() for a in actions))
    if key in self._memo:
      self._memo.move_to_end(key)
      return self._memo[key]
    out = np.zeros(self.observation_len + 6, np.int32)
    tail = out[self.observation_len:]
    try:
      result = self.host.transition(spec, actions)
      observation = np.asarray(result.observation, np.int64).reshape(-1)
      if len(observation) > self.observation_len:
        raise ValueError(f"observation of {len(observation)} tokens; "
                         f"observation_len is {self.observation_len}")
      out[:len(observation)] = observation
      tail[_COUNT] = len(observation)
      tail[_REWARD] = np.float32(result.reward).view(np.int32)
      tail[_DONE] = bool(result.done)
      tail[_SUCCESS] = bool(result.success)
      tail[_INVALID] = bool(result.invalid_action)
    except Exception:  # pylint: disable=broad-except
      # The episode ends with reward 0 and an error; the run goes on.
      self.host_errors += 1
      out[:] = 0
      tail[_DONE] = tail[_ERROR] = 1
    if self.memo_size:
      self._memo[key] = out
      if len(self._memo) > self.memo_size:
        self._memo.popitem(last=False)
    return out

  def _host_rows(self, spec, history, history_mask, turn) -> np.ndarray:
    spec, history = np.asarray(spec), np.asarray(history)
    history_mask, turn = np.asarray(history_mask), np.asarray(turn)
    out = np.zeros((spec.shape[0], self.observation_len + 6), np.int32)
    for b in range(spec.shape[0]):
      if turn[b] < 1:  # a padding row of rows_per_device
        continue
      actions = [history[b, t][history_mask[b, t]]
                 for t in range(min(int(turn[b]), self.max_turns))]
      out[b] = self._outcome(spec[b], actions)
    return out

  def step(self, state: HostState, action: jax.Array, action_mask: jax.Array
           ) -> EnvStep:
    at_turn = (jnp.arange(self.max_turns)[None, :] == state.turn[:, None])
    history = jnp.where(at_turn[:, :, None], action[:, None, :].astype(
        jnp.int32), state.history)
    history_mask = jnp.where(at_turn[:, :, None], action_mask[:, None, :],
                             state.history_mask)
    turn = state.turn + 1

    def on_rows(spec, history, history_mask, turn):
      return jax.pure_callback(
          self._host_rows,
          jax.ShapeDtypeStruct((spec.shape[0], self.observation_len + 6),
                               jnp.int32),
          spec, history, history_mask, turn, vmap_method="sequential")

    packed = sharding.rows_per_device(on_rows, state.spec, history,
                                      history_mask, turn)
    o = self.observation_len
    tail = packed[:, o:]
    observation_mask = (jnp.arange(o)[None, :] < tail[:, _COUNT][:, None])
    return EnvStep(
        state=HostState(state.spec, history, history_mask, turn),
        observation=jnp.where(observation_mask, packed[:, :o], 0),
        observation_mask=observation_mask,
        reward=jax.lax.bitcast_convert_type(tail[:, _REWARD], jnp.float32),
        done=tail[:, _DONE] > 0, success=tail[:, _SUCCESS] > 0,
        invalid_action=tail[:, _INVALID] > 0, error=tail[:, _ERROR] > 0)
