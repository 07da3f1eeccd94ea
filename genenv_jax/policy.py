"""A player's policy as log-probabilities of responses given prompts.

Both players are trained on (prompt, response) pairs: the agent on its attempts
(GRPO) and on reference answers (warm-start), the simulator on the tasks it
wrote (RWR / PG) and on seed tasks (warm-start). This module scores a response
under a decoder in one forward pass over the concatenated sequence.

The decoder runs once to its final hidden states; the output projection,
log-softmax, the response token's log-prob and the entropy are then computed
over the response positions in chunks of `chunk_size` positions. Each chunk is
rematerialised in the backward pass, so neither pass holds more than one
chunk's logits [N, chunk_size, V] (never [N, R, V]: at a 152k vocabulary that
array dwarfs the model's activations). Inside a mesh each device scores its
own rows' chunks (`sharding.rows_on_their_devices`), the output projection's
weights gathered once before the chunks and their gradient reduced once after
them, not in every chunk.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from genenv_jax import sharding
from models.config import ModelConfig
from models.decoder import Decoder, positions_from_mask

# Response positions scored per chunk; 0 scores all of them at once.
DEFAULT_CHUNK_SIZE = 128


class ResponseScores(NamedTuple):
  logp: jax.Array     # f32[N, R]: log pi(response_t | prompt, response_<t)
  entropy: jax.Array  # f32[N, R]: entropy of pi(. | prompt, response_<t)


def token_scores(logits: jax.Array, tokens: jax.Array
                 ) -> tuple[jax.Array, jax.Array]:
  """Log-prob of `tokens` and entropy under `logits`.

  Args:
    logits: f32[..., V]; tokens: int32[...].

  Returns:
    (logp f32[...], entropy f32[...]).
  """
  lse = jax.nn.logsumexp(logits, axis=-1)
  probs = jnp.exp(logits - lse[..., None])
  entropy = lse - jnp.sum(probs * logits, axis=-1)
  return picked_logits(logits, tokens) - lse, entropy


@jax.custom_vjp
def picked_logits(logits: jax.Array, tokens: jax.Array) -> jax.Array:
  """logits[..., tokens]: f32[...] from logits f32[..., V], tokens int[...].

  A gather forward (XLA partitions it when V is split across devices: each
  shard picks what it holds, then a sum over shards). The backward writes the
  one-hot cotangent as a compare against the vocabulary's iota, which XLA
  fuses into the consumer of the logits' gradient; differentiated as a gather,
  it would zero a logits-sized array and scatter into it.
  """
  return jnp.take_along_axis(logits, tokens[..., None], axis=-1)[..., 0]


def _picked_logits_fwd(logits, tokens):
  # A zero-size [..., 0, V] array carries the logits' shape and dtype.
  template = jnp.zeros(logits.shape[:-1] + (0, logits.shape[-1]),
                       logits.dtype)
  return picked_logits(logits, tokens), (tokens, template)


def _picked_logits_bwd(residuals, cotangent):
  tokens, template = residuals
  shape = template.shape[:-2] + template.shape[-1:]
  vocab_ids = jax.lax.broadcasted_iota(jnp.int32, shape, len(shape) - 1)
  d_logits = jnp.where(vocab_ids == tokens[..., None], cotangent[..., None],
                       jnp.zeros((), template.dtype))
  return d_logits, None


picked_logits.defvjp(_picked_logits_fwd, _picked_logits_bwd)


def _scores_in_chunks(score_chunk, params, hidden: jax.Array,
                      tokens: jax.Array, chunk_size: int
                      ) -> tuple[jax.Array, jax.Array]:
  """Applies `score_chunk(params, hidden[N, C, E], tokens[N, C])` to successive
  chunks of C = chunk_size positions (the last one padded) with `lax.map`,
  rematerialising each chunk in the backward pass. Returns f32[N, R] twice."""
  n, r, e = hidden.shape
  num_chunks = -(-r // chunk_size)
  pad = num_chunks * chunk_size - r
  hidden = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0)))
  tokens = jnp.pad(tokens, ((0, 0), (0, pad)))
  hidden = hidden.reshape(n, num_chunks, chunk_size, e).transpose(1, 0, 2, 3)
  tokens = tokens.reshape(n, num_chunks, chunk_size).transpose(1, 0, 2)
  rematerialised = jax.checkpoint(score_chunk, prevent_cse=False)
  logp, entropy = jax.lax.map(lambda xs: rematerialised(params, *xs),
                              (hidden, tokens))
  unchunk = lambda x: x.transpose(1, 0, 2).reshape(n, -1)[:, :r]
  return unchunk(logp), unchunk(entropy)


def response_logprobs(model_config: ModelConfig, params, prompt: jax.Array,
                      prompt_mask: jax.Array, response: jax.Array,
                      response_mask: jax.Array,
                      temperature: float = 1.0,
                      chunk_size: int = DEFAULT_CHUNK_SIZE) -> ResponseScores:
  """Scores responses under the model.

  Args:
    model_config: the player's decoder.
    params: its parameters.
    prompt: int32[N, P], LEFT-padded, P >= 1; prompt_mask: bool[N, P].
    response: int32[N, R]; response_mask: bool[N, R] (True on generated tokens,
      a prefix of each row).
    temperature: logits are divided by it (as when sampling), so the scores are
      those of the distribution the tokens were drawn from; 0 means 1.
    chunk_size: response positions whose logits are computed together (and
      recomputed in the backward pass); 0, or at least R, computes all R at
      once without recomputation.

  Returns:
    ResponseScores with log-probs and entropies, zero where response_mask is
    False.
  """
  if chunk_size < 0:
    raise ValueError(f"chunk_size={chunk_size} must be >= 0 (0 = unchunked).")
  if prompt.ndim != 2 or prompt.shape[1] < 1:
    raise ValueError(f"prompt: expected int32[N, P] with P >= 1, got shape "
                     f"{prompt.shape}.")
  if response.ndim != 2 or response.shape[0] != prompt.shape[0]:
    raise ValueError(f"response: expected int32[N, R] with N = "
                     f"{prompt.shape[0]} (the prompt's rows), got shape "
                     f"{response.shape}.")
  if prompt_mask.shape != prompt.shape:
    raise ValueError(f"prompt_mask shape {prompt_mask.shape} differs from "
                     f"prompt shape {prompt.shape}.")
  if response_mask.shape != response.shape:
    raise ValueError(f"response_mask shape {response_mask.shape} differs from "
                     f"response shape {response.shape}.")
  decoder = Decoder(model_config)
  tokens = jnp.concatenate([prompt, response], axis=1)
  mask = jnp.concatenate([prompt_mask, response_mask], axis=1)
  hidden, _ = decoder.apply({"params": params}, tokens,
                            positions_from_mask(mask), mask,
                            return_hidden=True)
  # The token at position P + t is predicted by the hidden state at P + t - 1.
  p_len = prompt.shape[1]
  hidden = hidden[:, p_len - 1:-1]

  def score_chunk(params, hidden_chunk, token_chunk):
    logits = decoder.apply({"params": params}, hidden_chunk,
                           method=Decoder.logits)
    if temperature and temperature != 1.0:
      logits = logits / temperature
    return token_scores(logits, token_chunk)

  if chunk_size == 0 or chunk_size >= response.shape[1]:
    logp, entropy = score_chunk(params, hidden, response)
  else:
    # Only the output projection's weights enter the per-device chunks.
    name = "lm_head" if "lm_head" in params else "embed"
    head = {name: params[name]}
    logp, entropy = sharding.rows_on_their_devices(
        lambda head, h, t: _scores_in_chunks(score_chunk, head, h, t,
                                             chunk_size),
        head, hidden, response)
  zeros = jnp.zeros_like(logp)
  return ResponseScores(jnp.where(response_mask, logp, zeros),
                        jnp.where(response_mask, entropy, zeros))


def response_logprobs_by_rows(model_config: ModelConfig, params,
                              prompt: jax.Array, prompt_mask: jax.Array,
                              response: jax.Array, response_mask: jax.Array,
                              temperature: float = 1.0,
                              chunk_size: int = DEFAULT_CHUNK_SIZE,
                              row_chunks: int = 1) -> ResponseScores:
  """`response_logprobs` of N rows in `row_chunks` passes of N / row_chunks
  rows each (a `lax.map`), for forward-only scoring of a large batch: a pass
  holds the decoder activations of its rows only (attention scores f32[N /
  row_chunks, H, P+R, P+R], not N rows' worth). Pass c scores rows c,
  c + row_chunks, c + 2 * row_chunks, ...: a device holding a contiguous block
  of rows whose size row_chunks divides holds its share of every pass, so
  the passes stay split over the batch's mesh axes with no resharding.

  Args and returns as `response_logprobs`; row_chunks must divide N (1 scores
  all rows in one pass).
  """
  n = prompt.shape[0]
  if row_chunks < 1 or n % row_chunks:
    raise ValueError(f"row_chunks={row_chunks} must be >= 1 and divide the "
                     f"{n} rows scored.")
  score = lambda p, pm, r, rm: response_logprobs(
      model_config, params, p, pm, r, rm, temperature, chunk_size)
  if row_chunks == 1:
    return score(prompt, prompt_mask, response, response_mask)
  split = lambda x: x.reshape((n // row_chunks, row_chunks) + x.shape[1:]
                              ).swapaxes(0, 1)
  scores = jax.lax.map(lambda xs: score(*xs), tuple(
      split(x) for x in (prompt, prompt_mask, response, response_mask)))
  return ResponseScores(*(x.swapaxes(0, 1).reshape((n,) + x.shape[2:])
                          for x in scores))


def nll_loss(model_config: ModelConfig, params, prompt, prompt_mask, response,
             response_mask, chunk_size: int = DEFAULT_CHUNK_SIZE,
             loss_mask=None) -> jax.Array:
  """Mean token negative log-likelihood of responses (supervised warm-start).

  response_mask (bool[N, R]) marks the response's real tokens, attended to;
  loss_mask (bool[N, R], within it) the ones the mean is over: an episode's
  actions, not its observations. None: response_mask.
  """
  scores = response_logprobs(model_config, params, prompt, prompt_mask,
                             response, response_mask, chunk_size=chunk_size)
  if loss_mask is None:
    loss_mask = response_mask
  count = jnp.maximum(loss_mask.sum(), 1)
  return -jnp.sum(jnp.where(loss_mask, scores.logp, 0.0)) / count
