"""A player's policy as log-probabilities of responses given prompts.

Both players are trained on (prompt, response) pairs: the agent on its attempts
(GRPO) and on reference answers (warm-start), the simulator on the tasks it
wrote (RWR / PG) and on seed tasks (warm-start). This module scores a response
under a decoder in one forward pass over the concatenated sequence.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from models.config import ModelConfig
from models.decoder import Decoder, positions_from_mask


class ResponseScores(NamedTuple):
  logp: jax.Array     # f32[N, R]: log pi(response_t | prompt, response_<t)
  entropy: jax.Array  # f32[N, R]: entropy of pi(. | prompt, response_<t)


def response_logprobs(model_config: ModelConfig, params, prompt: jax.Array,
                      prompt_mask: jax.Array, response: jax.Array,
                      response_mask: jax.Array,
                      temperature: float = 1.0) -> ResponseScores:
  """Scores responses under the model.

  Args:
    model_config: the player's decoder.
    params: its parameters.
    prompt: int32[N, P], LEFT-padded; prompt_mask: bool[N, P].
    response: int32[N, R]; response_mask: bool[N, R] (True on generated tokens,
      a prefix of each row).
    temperature: logits are divided by it (as when sampling), so the scores are
      those of the distribution the tokens were drawn from; 0 means 1.

  Returns:
    ResponseScores with log-probs and entropies, zero where response_mask is
    False.
  """
  tokens = jnp.concatenate([prompt, response], axis=1)
  mask = jnp.concatenate([prompt_mask, response_mask], axis=1)
  logits, _ = Decoder(model_config).apply({"params": params}, tokens,
                                          positions_from_mask(mask), mask)
  p_len = prompt.shape[1]
  # The token at position P + t is predicted by the logits at P + t - 1.
  logits = logits[:, p_len - 1:-1]
  if temperature and temperature != 1.0:
    logits = logits / temperature
  log_probs = jax.nn.log_softmax(logits, axis=-1)
  logp = jnp.take_along_axis(log_probs, response[..., None], axis=-1)[..., 0]
  entropy = -jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1)
  zeros = jnp.zeros_like(logp)
  return ResponseScores(jnp.where(response_mask, logp, zeros),
                        jnp.where(response_mask, entropy, zeros))


def nll_loss(model_config: ModelConfig, params, prompt, prompt_mask, response,
             response_mask) -> jax.Array:
  """Mean token negative log-likelihood of responses (supervised warm-start)."""
  scores = response_logprobs(model_config, params, prompt, prompt_mask,
                             response, response_mask)
  count = jnp.maximum(response_mask.sum(), 1)
  return -scores.logp.sum() / count
