"""Multi-turn episodes: the agent acts, the environment answers, inside jit.

`rollout_episodes` is the attempt stage of episodic domains. It prefills each
prompt once, then runs a `lax.scan` over turns; in each turn the agent decodes
up to A tokens continuing its KV cache, the environment steps, and the
observation's O tokens are prefilled into the slots reserved for them. No
history is re-prefilled and nothing is re-tokenised: the tokens sampled are the
tokens trained.

Shapes: B prompts, G episodes per prompt, R = B·G rows, P prompt length,
K = max_turns, A = action_len, O = observation_len, V vocab, and the episode
body W = K·A + (K-1)·O (no observation follows the last action).

Body layout (per row, columns of `Episodes.tokens`; cache slot = P + column):

    [ act_1 A | obs_1 O | act_2 A | obs_2 O | ... | act_K A ]

An action is written from the left of its block (its tokens up to and
including its stop token, then holes); an observation is right-aligned in its
block (holes, then its tokens), so the slot before every action token is a
real token, and the trainer's "token t is predicted at slot t - 1" holds on
the body as on a single response. `attend` marks real tokens (actions and
observations), `mask` the agent's own tokens (the loss mask). RoPE positions
are the count of real tokens before a slot (`cumsum(attend) - 1` over prompt
and body), in the rollout and in every training pass alike, so the holes are
invisible to the model.

A row whose episode is done writes nothing more: its later actions and
observations are holes. An episode is truncated when it is not done after K
turns.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from genenv_jax import sampling
from genenv_jax.envs.base import Environment, EnvStep
from models import decoder
from models.config import ModelConfig

EPISODE_REWARDS = ("success", "turn_sum")
TRUNCATED = ("zero", "mask")


class Episodes(NamedTuple):
  """R episodes (row b·G + g is episode g of prompt b).

  Attributes:
    tokens: int32[R, W] the body (layout above); pad in holes.
    logprobs: f32[R, W] the sampler's log-prob of each agent token (as
      `SampleOutput.logprobs`), 0 elsewhere.
    mask: bool[R, W] the agent's tokens, each action's stop token included.
    attend: bool[R, W] every real token: the agent's and the observations'.
    lengths: int32[R] agent tokens per episode.
    reward: f32[R] the sum of the turn rewards.
    success: bool[R] the environment reported success.
    truncated: bool[R] not done after K turns.
    turns: int32[R] actions taken.
    invalid_actions: int32[R] actions the environment could not read.
    errors: int32[R] environment failures (an erroring row is done).
    observation_tokens: int32[R] observation tokens in the body.
  """
  tokens: jax.Array
  logprobs: jax.Array
  mask: jax.Array
  attend: jax.Array
  lengths: jax.Array
  reward: jax.Array
  success: jax.Array
  truncated: jax.Array
  turns: jax.Array
  invalid_actions: jax.Array
  errors: jax.Array
  observation_tokens: jax.Array


def body_width(env: Environment) -> int:
  """W = K·A + (K-1)·O, the columns of an episode body."""
  return (env.max_turns * env.action_len
          + (env.max_turns - 1) * env.observation_len)


def right_align(tokens: jax.Array, mask: jax.Array, pad_id: int
                ) -> tuple[jax.Array, jax.Array]:
  """Moves each row's real tokens (a prefix: tokens[b, :n_b]) to the end of
  the row. tokens int32[B, O], mask bool[B, O] -> the same shapes."""
  width = tokens.shape[1]
  lengths = jnp.sum(mask, axis=1, dtype=jnp.int32)
  source = jnp.arange(width)[None, :] - (width - lengths)[:, None]
  aligned_mask = source >= 0
  aligned = jnp.take_along_axis(tokens, jnp.clip(source, 0, width - 1), axis=1)
  return jnp.where(aligned_mask, aligned, pad_id), aligned_mask


def assemble_body(actions: jax.Array, observations: jax.Array,
                  last_action: jax.Array) -> jax.Array:
  """The body [R, W] from per-turn blocks.

  Args:
    actions: [K-1, R, A] the actions of turns 1..K-1.
    observations: [K-1, R, O] the observations after them (right-aligned).
    last_action: [R, A] turn K's action.
  """
  rows = last_action.shape[0]
  turns = jnp.concatenate([actions, observations], axis=2)  # [K-1, R, A+O]
  turns = turns.transpose(1, 0, 2).reshape(rows, -1)
  return jnp.concatenate([turns, last_action], axis=1)


class _Turn(NamedTuple):
  """What one turn produces for every row."""
  action: jax.Array          # int32[R, A]
  action_logp: jax.Array     # f32[R, A]
  action_mask: jax.Array     # bool[R, A]
  observation: jax.Array     # int32[R, O] right-aligned
  observation_mask: jax.Array  # bool[R, O]


class _Carry(NamedTuple):
  cache: decoder.KVCache
  kv_mask: jax.Array        # bool[R, S]
  num_real: jax.Array       # int32[R] real tokens in the row so far
  logits: jax.Array         # f32[R, V] next-token logits after the last real
  env_state: Any
  done: jax.Array           # bool[R]
  reward: jax.Array         # f32[R]
  success: jax.Array        # bool[R]
  turns: jax.Array          # int32[R]
  invalid_actions: jax.Array  # int32[R]
  errors: jax.Array         # int32[R]


class _Decode(NamedTuple):
  t: jax.Array              # int32: the action token fed next
  pending: jax.Array        # bool[R]: token t chosen, not yet fed
  cache: decoder.KVCache
  tokens: jax.Array         # int32[R, A]
  logprobs: jax.Array       # f32[R, A]
  mask: jax.Array           # bool[R, A]


def _feed(model_config: ModelConfig, params, cache, tokens, positions,
          kv_mask, cache_index, return_hidden=False):
  """Runs tokens int32[R, T] at slots cache_index.. and RoPE positions
  int32[R, T] through the decoder; returns (logits or hidden, cache)."""
  return decoder.Decoder(model_config).apply(
      {"params": params}, tokens, positions, kv_mask, cache, cache_index,
      return_hidden=return_hidden)


def _decode_action(model_config: ModelConfig, params, carry: _Carry,
                   base: jax.Array, sampling_cfg: sampling.SamplingConfig,
                   action_len: int, rng: jax.Array
                   ) -> tuple[decoder.KVCache, jax.Array, jax.Array,
                              jax.Array]:
  """Decodes one action of up to A tokens per live row, writing each token
  (its stop token included) into the cache at slots base.. .

  Returns (cache, tokens int32[R, A], logprobs f32[R, A], mask bool[R, A]).
  """
  rows = carry.done.shape[0]
  live = ~carry.done
  uniforms = sampling.step_uniforms(rng, action_len, rows, sampling_cfg)
  at = lambda t: (None if uniforms is None else
                  jax.lax.dynamic_index_in_dim(uniforms, t, keepdims=False))
  first, first_logp = sampling.choose_tokens(carry.logits, at(0), sampling_cfg)
  first = jnp.where(live, first, sampling_cfg.pad_id)
  # The action block is visible while it is written (later slots are hidden
  # by the causal mask); holes are masked once the action is known.
  kv_mask = jax.lax.dynamic_update_slice_in_dim(
      carry.kv_mask, jnp.broadcast_to(live[:, None], (rows, action_len)),
      base, axis=1)
  state = _Decode(
      t=jnp.zeros((), jnp.int32), pending=live, cache=carry.cache,
      tokens=jnp.full((rows, action_len), sampling_cfg.pad_id,
                      jnp.int32).at[:, 0].set(first),
      logprobs=jnp.zeros((rows, action_len), jnp.float32).at[:, 0].set(
          jnp.where(live, first_logp, 0.0)),
      mask=jnp.zeros((rows, action_len), bool).at[:, 0].set(live))

  def keep_going(state: _Decode):
    return (state.t < action_len) & jnp.any(state.pending)

  def feed_and_choose(state: _Decode) -> _Decode:
    token = jax.lax.dynamic_index_in_dim(state.tokens, state.t, axis=1,
                                         keepdims=False)
    logits, cache = _feed(model_config, params, state.cache, token[:, None],
                          (carry.num_real + state.t)[:, None], kv_mask,
                          base + state.t)
    nxt = state.t + 1
    stopped = sampling.is_stop(token, sampling_cfg)
    live_next = state.pending & ~stopped & (nxt < action_len)
    chosen, logp = sampling.choose_tokens(
        logits[:, 0], at(jnp.minimum(nxt, action_len - 1)), sampling_cfg)
    column = jnp.minimum(nxt, action_len - 1)
    write = lambda array, value: jnp.where(
        (jnp.arange(action_len) == column)[None, :] & live_next[:, None],
        value[:, None], array)
    return _Decode(nxt, live_next, cache,
                   write(state.tokens, chosen), write(state.logprobs, logp),
                   write(state.mask, jnp.ones_like(live_next)))

  state = jax.lax.while_loop(keep_going, feed_and_choose, state)
  return state.cache, state.tokens, state.logprobs, state.mask


def _turn(model_config: ModelConfig, params, env: Environment,
          sampling_cfg: sampling.SamplingConfig, prompt_len: int,
          carry: _Carry, turn: jax.Array, rng: jax.Array,
          observe: bool) -> tuple[_Carry, _Turn]:
  """Turn `turn` (0-based) of every row: act, step the environment, and with
  `observe` prefill the observation for the next turn."""
  a, o = env.action_len, env.observation_len
  base = prompt_len + turn * (a + o)
  live = ~carry.done
  cache, action, action_logp, action_mask = _decode_action(
      model_config, params, carry, base, sampling_cfg, a,
      jax.random.fold_in(rng, turn))
  kv_mask = jax.lax.dynamic_update_slice_in_dim(carry.kv_mask, action_mask,
                                                base, axis=1)
  num_real = carry.num_real + jnp.sum(action_mask, axis=1, dtype=jnp.int32)

  stepped: EnvStep = env.step(carry.env_state, action, action_mask)
  keep = lambda new, old: jnp.where(
      live.reshape(live.shape + (1,) * (new.ndim - 1)), new, old)
  env_state = jax.tree.map(keep, stepped.state, carry.env_state)
  obs_mask = stepped.observation_mask.astype(bool)
  error = live & stepped.error
  if observe:
    # A row the environment leaves without an observation cannot act again:
    # an environment error.
    error = error | (live & ~stepped.done & ~jnp.any(obs_mask, axis=1))
  done = carry.done | (live & stepped.done) | error
  new_carry = carry._replace(
      cache=cache, kv_mask=kv_mask, num_real=num_real, env_state=env_state,
      done=done,
      reward=carry.reward + jnp.where(live & ~error, stepped.reward, 0.0),
      success=carry.success | (live & stepped.success & ~error),
      turns=carry.turns + live.astype(jnp.int32),
      invalid_actions=carry.invalid_actions
      + (live & stepped.invalid_action).astype(jnp.int32),
      errors=carry.errors + error.astype(jnp.int32))
  observation = jnp.zeros((live.shape[0], o), jnp.int32)
  observation_mask = jnp.zeros((live.shape[0], o), bool)
  if observe:
    observation, observation_mask = right_align(
        stepped.observation.astype(jnp.int32), obs_mask & ~done[:, None],
        sampling_cfg.pad_id)
    kv_mask = jax.lax.dynamic_update_slice_in_dim(kv_mask, observation_mask,
                                                  base + a, axis=1)
    positions = num_real[:, None] + jnp.cumsum(
        observation_mask, axis=1, dtype=jnp.int32) - 1
    hidden, cache = _feed(model_config, params, cache, observation,
                          jnp.maximum(positions, 0), kv_mask, base + a,
                          return_hidden=True)
    logits = decoder.Decoder(model_config).apply(
        {"params": params}, hidden[:, -1:], method=decoder.Decoder.logits)
    new_carry = new_carry._replace(
        cache=cache, kv_mask=kv_mask,
        num_real=num_real + jnp.sum(observation_mask, axis=1,
                                    dtype=jnp.int32),
        logits=jnp.where(done[:, None], carry.logits, logits[:, 0]))
  return new_carry, _Turn(action, action_logp, action_mask, observation,
                          observation_mask)


def rollout_episodes(model_config: ModelConfig, params, env: Environment,
                     prompt: jax.Array, prompt_mask: jax.Array,
                     env_state: Any, rng: jax.Array,
                     sampling_cfg: sampling.SamplingConfig,
                     num_samples: int = 1) -> Episodes:
  """Plays G = num_samples episodes of each of B prompts (pure; jit outside).

  Args:
    model_config, params: the agent.
    env: the environment (its K, A, O fix the shapes).
    prompt: int32[B, P] left-padded; prompt_mask: bool[B, P].
    env_state: the environments' initial states over R = B·G rows (reset on
      the repeated spec rows), row b·G + g playing prompt b.
    rng: PRNG key; turn k's action tokens use `sampling.step_uniforms` of
      fold_in(rng, k).
    sampling_cfg: temperature / top-k / top-p and the action's stop ids and
      pad id (its max_new_tokens is not used: an action has A tokens).
    num_samples: G.

  Returns:
    Episodes over R rows.
  """
  k, a, o = env.max_turns, env.action_len, env.observation_len
  width = body_width(env)
  prompt_len = prompt.shape[1]
  logits, prompt_cache = sampling.prefill(model_config, params, prompt,
                                          prompt_mask, width)
  logits, prompt_cache = sampling.repeat_rows(logits, prompt_cache,
                                              num_samples)
  rows = logits.shape[0]
  kv_mask = prompt_cache.kv_mask.at[:, prompt_len:].set(False)
  zeros_i = jnp.zeros((rows,), jnp.int32)
  carry = _Carry(cache=prompt_cache.cache, kv_mask=kv_mask,
                 num_real=prompt_cache.num_prompt_tokens, logits=logits,
                 env_state=env_state, done=jnp.zeros((rows,), bool),
                 reward=jnp.zeros((rows,), jnp.float32),
                 success=jnp.zeros((rows,), bool), turns=zeros_i,
                 invalid_actions=zeros_i, errors=zeros_i)

  def observed_turn(carry, turn):
    return _turn(model_config, params, env, sampling_cfg, prompt_len, carry,
                 turn, rng, observe=True)

  if k > 1:
    carry, turns = jax.lax.scan(observed_turn, carry,
                                jnp.arange(k - 1, dtype=jnp.int32))
  else:
    empty = lambda width, dtype: jnp.zeros((0, rows, width), dtype)
    turns = _Turn(empty(a, jnp.int32), empty(a, jnp.float32), empty(a, bool),
                  empty(o, jnp.int32), empty(o, bool))
  carry, last = _turn(model_config, params, env, sampling_cfg, prompt_len,
                      carry, jnp.asarray(k - 1, jnp.int32), rng, observe=False)
  no_logp = jnp.zeros(turns.observation.shape, jnp.float32)
  no_obs = jnp.zeros(turns.observation.shape, bool)
  tokens = assemble_body(turns.action, turns.observation, last.action)
  logprobs = assemble_body(turns.action_logp, no_logp, last.action_logp)
  mask = assemble_body(turns.action_mask, no_obs, last.action_mask)
  attend = assemble_body(turns.action_mask, turns.observation_mask,
                         last.action_mask)
  return Episodes(
      tokens=tokens, logprobs=jnp.where(mask, logprobs, 0.0), mask=mask,
      attend=attend, lengths=jnp.sum(mask, axis=1, dtype=jnp.int32),
      reward=carry.reward, success=carry.success, truncated=~carry.done,
      turns=carry.turns, invalid_actions=carry.invalid_actions,
      errors=carry.errors,
      observation_tokens=jnp.sum(attend & ~mask, axis=1, dtype=jnp.int32))


def episode_rewards(episodes: Episodes, reward: str, truncated: str
                    ) -> tuple[jax.Array, jax.Array]:
  """Each episode's training reward and whether it is trained on.

  Args:
    reward: "success" (1 for a successful episode, else 0) or "turn_sum" (the
      sum of its turn rewards).
    truncated: "zero" (a truncated episode scores 0) or "mask" (it is left
      out of its group's advantage statistics and of the loss).

  Returns:
    (f32[R] rewards, bool[R] rows kept).
  """
  if reward not in EPISODE_REWARDS:
    raise ValueError(f"config.episodes.reward={reward!r}; expected one of "
                     f"{EPISODE_REWARDS}.")
  if truncated not in TRUNCATED:
    raise ValueError(f"config.episodes.truncated={truncated!r}; expected one "
                     f"of {TRUNCATED}.")
  value = (episodes.success.astype(jnp.float32) if reward == "success"
           else episodes.reward)
  value = jnp.where(episodes.truncated, 0.0, value)
  kept = jnp.ones_like(episodes.truncated)
  if truncated == "mask":
    kept = ~episodes.truncated
  return value, kept
