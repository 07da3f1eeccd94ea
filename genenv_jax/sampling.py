"""Batched autoregressive sampling with a KV cache, as a pure JAX function.

`sample` prefills each prompt once, shares its keys and values among its
`num_samples` continuations (`SamplingConfig.share_prompt`; or repeats its
cache for each), then decodes one token per step inside a `jax.lax.while_loop`
that stops as soon as every row has emitted a stop token (or the token budget
is spent). It contains no `jax.jit`, so it can be traced inside a caller's
jitted step; `make_sampler` wraps it in a jit of its own.

Shapes: B prompts, G samples per prompt, R = B * G rows, P prompt length,
N = max_new_tokens, S = P + N cache slots, V vocab.

Tokens are drawn by exact inverse-CDF sampling (`draw_from_weights`: one
uniform per row and level of a tree of block sums, no Gumbel noise over the
vocabulary), every step's uniforms drawn before the decode loop; top-k uses
`jax.lax.top_k`, top-p alone a bisected probability threshold; neither sorts
the vocabulary.

Cache layout: prompt token i sits in slot i (prompts are left-padded, so the
real tokens occupy the last slots of [0, P)); generated token t sits in slot
P + t at RoPE position (number of real prompt tokens) + t. With a shared
prompt, the prompts' B rows of P slots are one `decoder.SharedPrefix` that the
R rows read (row r: prompt r // G), and each row's cache holds its N
generated tokens only (token t in slot t): the prompt's keys and values are
held once, not G times, and each decode step reads them once per prompt.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from genenv_jax import sharding
from models import decoder
from models.config import ModelConfig


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
  """How tokens are drawn.

  Attributes:
    max_new_tokens: N, the most tokens generated per row.
    temperature: logits are divided by it; 0.0 means greedy (argmax).
    top_k: keep only the k most likely tokens; 0 disables.
    top_p: keep the smallest set of most likely tokens whose probability mass
      is >= top_p (always at least the most likely one); 1.0 disables.
    eos_ids: stop ids; a row stops after emitting one (the stop token itself
      is part of the output, with mask True).
    pad_id: token written after a row has stopped.
    decode_windows: K; the decode loop runs in K parts, part k attending to
      the prompt and the first ceil(N (k + 1) / K) generation slots, so
      decode steps read about (P + N (K + 1) / 2K) slots on average rather
      than P + N (each part a loop compiled on its own).
    share_prompt: with G > 1 samples a prompt, its keys and values are kept
      once and read by its G rows (`decoder.SharedPrefix`) rather than
      copied into each row's cache; the same tokens either way.
  """

  max_new_tokens: int
  temperature: float = 1.0
  top_k: int = 0
  top_p: float = 1.0
  eos_ids: tuple[int, ...] = ()
  pad_id: int = 0
  decode_windows: int = 1
  share_prompt: bool = True

  def __post_init__(self):
    if self.max_new_tokens < 1:
      raise ValueError(f"SamplingConfig.max_new_tokens={self.max_new_tokens} "
                       "must be >= 1.")
    if self.temperature < 0:
      raise ValueError(f"SamplingConfig.temperature={self.temperature} must "
                       "be >= 0 (0 means greedy).")
    if self.top_k < 0:
      raise ValueError(f"SamplingConfig.top_k={self.top_k} must be >= 0 "
                       "(0 disables it).")
    if not 1 <= self.decode_windows <= self.max_new_tokens:
      raise ValueError(f"SamplingConfig.decode_windows={self.decode_windows} "
                       f"must be in [1, max_new_tokens={self.max_new_tokens}].")
    if not 0.0 < self.top_p <= 1.0:
      raise ValueError(f"SamplingConfig.top_p={self.top_p} must be in (0, 1] "
                       "(1 disables it).")
    object.__setattr__(self, "eos_ids", tuple(int(i) for i in self.eos_ids))


class SampleOutput(NamedTuple):
  """Generated continuations; row b * G + g is sample g of prompt b.

  Attributes:
    tokens: int32[R, N]; pad_id after the row stopped.
    logprobs: f32[R, N]; log softmax(logits / temperature) of each token
      (plain log_softmax(logits) when greedy), taken before top-k / top-p
      truncation; 0 where mask is False.
    mask: bool[R, N]; True for generated tokens up to and including the first
      stop token.
    lengths: int32[R]; number of True entries of mask per row.
  """
  tokens: jax.Array
  logprobs: jax.Array
  mask: jax.Array
  lengths: jax.Array


class PromptCache(NamedTuple):
  """Decoding context after prefill.

  Attributes:
    cache: KVCache over R rows and S slots, slots [0, P) holding the prompt
      (keys [R, K, D, S], values [R, K, S, D] per layer; see
      `decoder.KVCache`): per-layer tuples for an unscanned decoder (each
      decode step then updates every layer's arrays in place), stacked on a
      leading layer axis for a scanned one. With `prefix`: S = N slots of
      generated tokens only.
    kv_mask: bool[R, S]; real prompt slots and every generation slot (slots
      after the current token are hidden by the causal mask).
    num_prompt_tokens: int32[R]; real tokens per prompt.
    prompt_length: int32 scalar, the slot of generated token 0: P, or 0 with
      `prefix`.
    prefix: None, or the prompts' keys and values over B = R / G rows and P
      slots, shared by each prompt's G rows (`share_rows`).
  """
  cache: decoder.KVCache
  kv_mask: jax.Array
  num_prompt_tokens: jax.Array
  prompt_length: jax.Array
  prefix: decoder.SharedPrefix | None = None


def prefill(model_config: ModelConfig, params, prompt_tokens: jax.Array,
            prompt_mask: jax.Array,
            max_new_tokens: int) -> tuple[jax.Array, PromptCache]:
  """Runs the prompts through the decoder, filling a cache of P + N slots.

  Args:
    prompt_tokens: int32[B, P], left-padded (each row's last token is real).
    prompt_mask: bool[B, P].
    max_new_tokens: N, the generation slots reserved after the prompt.

  Returns:
    (next-token logits f32[B, V] at each prompt's last token, PromptCache).
  """
  if prompt_tokens.ndim != 2 or prompt_tokens.shape != prompt_mask.shape:
    raise ValueError(
        f"prompt_tokens {prompt_tokens.shape} and prompt_mask "
        f"{prompt_mask.shape} must both be [batch, prompt_length].")
  batch, prompt_length = prompt_tokens.shape
  prompt_mask = prompt_mask.astype(bool)
  kv_mask = jnp.concatenate(
      [prompt_mask, jnp.ones((batch, max_new_tokens), bool)], axis=1)
  model = decoder.Decoder(model_config)
  hidden, cache = model.apply(
      {"params": params}, prompt_tokens.astype(jnp.int32),
      decoder.positions_from_mask(prompt_mask), kv_mask,
      decoder.init_cache(model_config, batch, prompt_length + max_new_tokens,
                         per_layer=not model_config.scan_layers),
      0, return_hidden=True)
  logits = model.apply({"params": params}, hidden[:, -1:],
                       method=decoder.Decoder.logits)[:, 0]
  num_prompt_tokens = jnp.sum(prompt_mask, axis=1, dtype=jnp.int32)
  return logits, PromptCache(cache, kv_mask, num_prompt_tokens,
                             jnp.asarray(prompt_length, jnp.int32))


def repeat_rows(logits: jax.Array, prompt_cache: PromptCache,
                num_samples: int) -> tuple[jax.Array, PromptCache]:
  """Repeats every prompt's row num_samples times (row b -> rows b*G ... b*G+G-1).

  Args:
    logits: f32[B, V].
    prompt_cache: PromptCache over B rows.

  Returns:
    (logits f32[B * G, V], PromptCache over B * G rows).
  """
  if num_samples == 1:
    return logits, prompt_cache
  repeat = functools.partial(jnp.repeat, repeats=num_samples)
  # Rows are axis 1 of stacked [L, B, ...] and axis 0 of per-layer arrays.
  cache = jax.tree.map(lambda x: repeat(x, axis=x.ndim - 4),
                       prompt_cache.cache)
  return repeat(logits, axis=0), PromptCache(
      cache, repeat(prompt_cache.kv_mask, axis=0),
      repeat(prompt_cache.num_prompt_tokens, axis=0),
      prompt_cache.prompt_length)


def share_rows(model_config: ModelConfig, logits: jax.Array,
               prompt_cache: PromptCache, num_samples: int, max_new_tokens: int
               ) -> tuple[jax.Array, PromptCache]:
  """The prompts' cache made a prefix that num_samples rows each read (row
  b -> rows b*G ... b*G+G-1), and a cache of their own N generation slots.

  Args:
    logits: f32[B, V].
    prompt_cache: PromptCache over B rows of P prompt slots (prefilled with
      no generation slots).
    max_new_tokens: N.

  Returns:
    (logits f32[B * G, V], PromptCache over B * G rows with its prefix).
  """
  repeat = functools.partial(jnp.repeat, repeats=num_samples, axis=0)
  rows = logits.shape[0] * num_samples
  prefix = decoder.SharedPrefix(prompt_cache.cache.k, prompt_cache.cache.v,
                                prompt_cache.kv_mask)
  own = decoder.init_cache(model_config, rows, max_new_tokens,
                           per_layer=decoder.is_per_layer(prompt_cache.cache))
  return repeat(logits), PromptCache(
      own, jnp.ones((rows, max_new_tokens), bool),
      repeat(prompt_cache.num_prompt_tokens), jnp.zeros((), jnp.int32),
      prefix)


def decode_step(model_config: ModelConfig, params, prompt_cache: PromptCache,
                tokens: jax.Array,
                step: jax.Array) -> tuple[jax.Array, decoder.KVCache]:
  """Feeds generated token number `step` of every row; returns the next logits.

  Args:
    prompt_cache: context after prefill, its cache holding the earlier steps.
    tokens: int32[R], generated token `step` of each row (written to slot
      P + step, RoPE position num_prompt_tokens + step).
    step: int32 scalar.

  Returns:
    (logits f32[R, V] for token step + 1, updated KVCache).
  """
  positions = (prompt_cache.num_prompt_tokens + step)[:, None]
  logits, cache = decoder.Decoder(model_config).apply(
      {"params": params}, tokens[:, None], positions, prompt_cache.kv_mask,
      prompt_cache.cache, prompt_cache.prompt_length + step,
      prefix=prompt_cache.prefix)
  return logits[:, 0], cache


# Entries per block in `draw_from_weights`: each level of the draw picks one of
# at most this many blocks (or ids), so no cumulative sum runs over more.
_DRAW_BLOCK = 32
# Uniforms per row and draw: one per level, enough for a vocabulary of up to
# _DRAW_BLOCK ** DRAW_LEVELS (about a million) ids.
DRAW_LEVELS = 4


def _inverse_cdf(weights: jax.Array, uniform: jax.Array) -> jax.Array:
  """Per row, the index i with cdf[i-1] <= u * total < cdf[i].

  Args:
    weights: f32[R, n], non-negative, each row with a positive total.
    uniform: f32[R] in [0, 1).

  Returns:
    int32[R]. With a non-decreasing cumulative sum the index never lands on a
    zero weight (u * total < total for u < 1); the clamp to the last positive
    weight covers a cumulative sum whose rounding is not monotone (a
    tree-ordered scan, as some backends compute it), which could otherwise
    count past it.
  """
  cdf = jnp.cumsum(weights, axis=-1)
  threshold = uniform[:, None] * cdf[:, -1:]
  index = jnp.sum(cdf <= threshold, axis=-1, dtype=jnp.int32)
  ids = jax.lax.broadcasted_iota(jnp.int32, weights.shape, 1)
  last_positive = jnp.max(jnp.where(weights > 0, ids, 0), axis=-1)
  return jnp.minimum(index, last_positive)


def draw_from_weights(uniforms: jax.Array, weights: jax.Array) -> jax.Array:
  """Draws index i of each row with probability weights[i] / sum(weights).

  Exact inverse-CDF sampling down a tree of block sums: blocks of
  `_DRAW_BLOCK` ids, blocks of those blocks, and so on up to one block. Each
  level picks a block by its mass with a uniform of its own, then the next
  level picks inside it, so no cumulative sum runs over more than
  `_DRAW_BLOCK` entries (two levels at a 512-id vocabulary, three at 32k).

  Args:
    uniforms: f32[L, R] in [0, 1), independent, L >= the levels V needs
      (`DRAW_LEVELS` always suffices up to a million ids); level l uses
      uniforms[l], level 0 being the ids themselves.
    weights: f32[R, V], non-negative (e.g. exp(logits - max)), each row with
      a positive total.

  Returns:
    int32[R].
  """
  rows = weights.shape[0]
  levels = [weights]  # levels[l]: f32[R, n_l], padded to whole blocks below
  while levels[-1].shape[-1] > _DRAW_BLOCK:
    size = levels[-1].shape[-1]
    num_blocks = -(-size // _DRAW_BLOCK)
    levels[-1] = jnp.pad(levels[-1],
                         ((0, 0), (0, num_blocks * _DRAW_BLOCK - size)))
    levels.append(levels[-1].reshape(rows, num_blocks, _DRAW_BLOCK).sum(-1))
  if uniforms.shape[0] < len(levels):
    raise ValueError(
        f"draw_from_weights: uniforms has {uniforms.shape[0]} levels, a "
        f"vocabulary of {weights.shape[-1]} needs {len(levels)}.")
  index = _inverse_cdf(levels[-1], uniforms[len(levels) - 1])
  for level in reversed(range(len(levels) - 1)):
    blocks = levels[level].reshape(rows, -1, _DRAW_BLOCK)
    in_block = jnp.take_along_axis(blocks, index[:, None, None], axis=1)[:, 0]
    index = index * _DRAW_BLOCK + _inverse_cdf(in_block, uniforms[level])
  return index


def _nucleus(weights: jax.Array, top_p: float) -> jax.Array:
  """bool[R, V]: per row, the highest weights that together hold >= top_p of
  the row's mass, as few as possible (ties at the boundary are all kept).

  Finds the smallest kept weight by bisection on its float bit pattern
  (order-preserving for non-negative floats): 31 masked sums over V instead
  of a sort of the vocabulary.

  Args:
    weights: f32[R, V], non-negative, each row's maximum 1.0.
    top_p: in (0, 1).
  """
  target = top_p * jnp.sum(weights, axis=-1)
  bits = jax.lax.bitcast_convert_type(weights, jnp.int32)
  rows = weights.shape[0]

  def mass_at_or_above(threshold):
    return jnp.sum(jnp.where(bits >= threshold[:, None], weights, 0.0),
                   axis=-1)

  def halve(_, bounds):
    # Invariant: mass_at_or_above(low) >= target > mass_at_or_above(high).
    low, high = bounds
    middle = low + (high - low) // 2
    enough = mass_at_or_above(middle) >= target
    return jnp.where(enough, middle, low), jnp.where(enough, high, middle)

  one_bits = jax.lax.bitcast_convert_type(jnp.float32(1.0), jnp.int32)
  low, _ = jax.lax.fori_loop(
      0, 31, halve, (jnp.zeros(rows, jnp.int32),
                     jnp.full(rows, one_bits + 1, jnp.int32)))
  return bits >= low[:, None]


def choose_tokens(logits: jax.Array, uniforms: jax.Array | None,
                  sampling: SamplingConfig) -> tuple[jax.Array, jax.Array]:
  """Draws one token per row.

  Args:
    logits: f32[R, V].
    uniforms: f32[DRAW_LEVELS, R], independent uniforms in [0, 1) for this
      step (`step_uniforms`); unused (may be None) when greedy.

  Returns:
    (tokens int32[R], logprobs f32[R]) with logprobs the untruncated
    log softmax(logits / temperature) of the chosen tokens.
  """
  if sampling.temperature == 0.0:
    # argmax (the first id of the largest logit) as two plain reductions,
    # which XLA:CPU runs faster than argmax's reduction over (value, index)
    # pairs.
    best = jnp.max(logits, axis=-1)
    vocab_ids = jax.lax.broadcasted_iota(jnp.int32, logits.shape, 1)
    tokens = jnp.min(jnp.where(logits == best[:, None], vocab_ids,
                               logits.shape[-1]), axis=-1)
    return tokens, best - jax.nn.logsumexp(logits, axis=-1)
  scaled = logits / sampling.temperature
  shifted = scaled - jnp.max(scaled, axis=-1, keepdims=True)
  weights = jnp.exp(shifted)  # unnormalised probabilities, maximum 1.0
  log_norm = jnp.log(jnp.sum(weights, axis=-1))
  vocab = scaled.shape[-1]
  if 0 < sampling.top_k < vocab:
    # The k best in descending order, then top-p among them.
    candidates, candidate_ids = jax.lax.top_k(shifted, sampling.top_k)
    candidate_weights = jnp.exp(candidates)
    if sampling.top_p < 1.0:
      probs = candidate_weights / jnp.sum(candidate_weights, axis=-1,
                                          keepdims=True)
      mass_before = jnp.cumsum(probs, axis=-1) - probs
      candidate_weights = jnp.where(mass_before < sampling.top_p,
                                    candidate_weights, 0.0)
    choice = draw_from_weights(uniforms, candidate_weights)[:, None]
    tokens = jnp.take_along_axis(candidate_ids, choice, axis=-1)[:, 0]
    chosen = jnp.take_along_axis(candidates, choice, axis=-1)[:, 0]
    return tokens.astype(jnp.int32), chosen - log_norm
  if sampling.top_p < 1.0:
    weights = jnp.where(_nucleus(weights, sampling.top_p), weights, 0.0)
  tokens = draw_from_weights(uniforms, weights)
  chosen = jnp.take_along_axis(shifted, tokens[:, None], axis=-1)[:, 0]
  return tokens, chosen - log_norm


def step_uniforms(rng: jax.Array, num_steps: int, rows: int,
                  sampling: SamplingConfig) -> jax.Array | None:
  """Every step's uniforms, drawn at once before decoding starts.

  Returns:
    f32[num_steps, DRAW_LEVELS, rows]: step t's are uniform(fold_in(rng, t)),
    one vectorised draw instead of a PRNG call inside every decode step; None
    when greedy (no randomness needed).
  """
  if sampling.temperature == 0.0:
    return None
  return jax.vmap(lambda step: jax.random.uniform(
      jax.random.fold_in(rng, step), (DRAW_LEVELS, rows)))(
          jnp.arange(num_steps))


def _at_step(uniforms: jax.Array | None, step) -> jax.Array | None:
  if uniforms is None:
    return None
  return jax.lax.dynamic_index_in_dim(uniforms, step, keepdims=False)


def is_stop(tokens: jax.Array, sampling: SamplingConfig) -> jax.Array:
  """bool[...]: which of tokens int32[...] are one of sampling.eos_ids."""
  stop = jnp.zeros(tokens.shape, bool)
  for stop_id in sampling.eos_ids:
    stop = stop | (tokens == stop_id)
  return stop


class _LoopState(NamedTuple):
  step: jax.Array         # int32: index of the last token written
  last_tokens: jax.Array  # int32[R]: token `step` of every row
  done: jax.Array         # bool[R]: row emitted a stop token at or before step
  cache: decoder.KVCache
  tokens: jax.Array       # int32[R, N]
  logprobs: jax.Array     # f32[R, N]
  mask: jax.Array         # bool[R, N]


def sample(model_config: ModelConfig, params, prompt_tokens: jax.Array,
           prompt_mask: jax.Array, rng: jax.Array, sampling: SamplingConfig,
           num_samples: int = 1) -> SampleOutput:
  """Samples num_samples continuations of every prompt (pure; jit it outside).

  Args:
    model_config: the decoder's architecture.
    params: the decoder's parameters (plain pytree).
    prompt_tokens: int32[B, P], left-padded: each row's real tokens at the
      end, at least one per row.
    prompt_mask: bool[B, P].
    rng: PRNG key; token t is drawn with the uniforms of fold_in(rng, t)
      (`step_uniforms`).
    sampling: how tokens are drawn and when rows stop.
    num_samples: G continuations per prompt (row b * G + g is sample g of
      prompt b); each prompt is prefilled once.

  Returns:
    SampleOutput over B * G rows and N = sampling.max_new_tokens columns.
  """
  if num_samples < 1:
    raise ValueError(f"num_samples={num_samples} must be >= 1.")
  n = sampling.max_new_tokens
  shared = sampling.share_prompt and num_samples > 1
  logits, prompt_cache = prefill(model_config, params, prompt_tokens,
                                 prompt_mask, 0 if shared else n)
  if shared:
    logits, prompt_cache = share_rows(model_config, logits, prompt_cache,
                                      num_samples, n)
  else:
    logits, prompt_cache = repeat_rows(logits, prompt_cache, num_samples)
  rows = logits.shape[0]

  uniforms = step_uniforms(rng, n, rows, sampling)
  first, first_logprobs = choose_tokens(logits, _at_step(uniforms, 0),
                                        sampling)
  state = _LoopState(
      step=jnp.zeros((), jnp.int32),
      last_tokens=first,
      done=is_stop(first, sampling),
      cache=prompt_cache.cache,
      tokens=jnp.full((rows, n), sampling.pad_id, jnp.int32).at[:, 0].set(
          first),
      logprobs=jnp.zeros((rows, n), jnp.float32).at[:, 0].set(first_logprobs),
      mask=jnp.zeros((rows, n), bool).at[:, 0].set(True))

  def next_token(state: _LoopState, context: PromptCache) -> _LoopState:
    step_logits, cache = decode_step(
        model_config, params, context._replace(cache=state.cache),
        state.last_tokens, state.step)
    step = state.step + 1
    new, new_logprobs = choose_tokens(step_logits, _at_step(uniforms, step),
                                      sampling)
    live = ~state.done
    new = jnp.where(live, new, sampling.pad_id)
    return _LoopState(
        step=step,
        last_tokens=new,
        done=state.done | is_stop(new, sampling),
        cache=cache,
        tokens=state.tokens.at[:, step].set(new),
        logprobs=state.logprobs.at[:, step].set(
            jnp.where(live, new_logprobs, 0.0)),
        mask=state.mask.at[:, step].set(live))

  # Part k writes tokens up to end_k - 1, at most end_k - end_{k-1} of them
  # (its loop counts from 0, so that the compiled loop's trip count reads
  # off its condition): its steps feed tokens (slots P + step) below
  # end_k - 1, so it attends to the first P + end_k slots.
  # The cache's slots before generated token 0: the prompt's, unless shared.
  prompt_slots = 0 if shared else prompt_tokens.shape[1]
  start = 1
  for end in window_ends(n, sampling.decode_windows):
    if end <= start:
      continue
    context = prompt_cache._replace(
        kv_mask=prompt_cache.kv_mask[:, :prompt_slots + end])
    _, state = jax.lax.while_loop(
        lambda count_state, trips=end - start: (
            (count_state[0] < trips) & ~jnp.all(count_state[1].done)),
        lambda count_state, context=context: (
            count_state[0] + 1, next_token(count_state[1], context)),
        (jnp.zeros((), jnp.int32), state))
    start = end
  lengths = jnp.sum(state.mask, axis=1, dtype=jnp.int32)
  return SampleOutput(state.tokens, state.logprobs, state.mask, lengths)


def window_ends(num_tokens: int, windows: int) -> list[int]:
  """The token counts ceil(N (k + 1) / K), k < K, at which the decode loop's
  parts end (the last one N)."""
  return [-(-num_tokens * (k + 1) // windows) for k in range(windows)]


def make_sampler(model_config: ModelConfig, sampling: SamplingConfig,
                 num_samples: int = 1, mesh=None, rules=None):
  """A jitted `(params, prompt_tokens, prompt_mask, rng) -> SampleOutput`.

  Compiled once per input shape. With `mesh` and `rules`, the function is
  traced inside `sharding.in_mesh(mesh, rules)` so the decoder's logical
  constraints apply.
  """
  def run(params, prompt_tokens, prompt_mask, rng):
    return sample(model_config, params, prompt_tokens, prompt_mask, rng,
                  sampling, num_samples)
  if (mesh is None) != (rules is None):
    raise ValueError("make_sampler: pass both mesh and rules, or neither.")
  if mesh is not None:
    run = sharding.in_mesh(mesh, rules)(run)
  return jax.jit(run)
