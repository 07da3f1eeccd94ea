"""Response log-probs: chunked scoring equals one-shot scoring and a reference
built from the full logits, in values and gradients; no [N, R, V] array is
formed, forward or backward, when chunked; bad inputs are named."""

from __future__ import annotations

import functools
import math

import flax.linen as nn
import jax
import jax.extend.core as jax_core
import jax.numpy as jnp
import numpy as np
import pytest

from genenv_jax import policy
from genenv_jax import sharding
from models.config import ModelConfig
from models.decoder import forward, init_boxed, init_params
from train.bench import hlo_cost

# A prime vocabulary no other dimension equals, so vocab-wide arrays are found
# by shape in a jaxpr.
VOCAB = 61
N, P, R = 3, 5, 7
TEMPERATURE = 0.7


def _config(tie_embeddings: bool) -> ModelConfig:
  return ModelConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                     num_layers=1, num_heads=4, num_kv_heads=2, qkv_bias=True,
                     tie_embeddings=tie_embeddings)


@functools.lru_cache(maxsize=None)
def _params(tie_embeddings: bool):
  return init_params(_config(tie_embeddings), jax.random.key(0))


def _abstract_params(tie_embeddings: bool):
  """The parameters' shapes and dtypes (enough to trace a jaxpr)."""
  return jax.eval_shape(
      lambda key: nn.unbox(init_boxed(_config(tie_embeddings), key)),
      jax.random.key(0))


def _batch():
  """Left-padded prompts (lengths 5, 3, 1) and responses whose masks are
  prefixes of lengths 7, 4, 0."""
  rng = np.random.default_rng(0)
  prompt = rng.integers(0, VOCAB, (N, P)).astype(np.int32)
  prompt_mask = np.arange(P)[None] >= P - np.array([5, 3, 1])[:, None]
  response = rng.integers(0, VOCAB, (N, R)).astype(np.int32)
  response_mask = np.arange(R)[None] < np.array([7, 4, 0])[:, None]
  weights = rng.normal(size=(2, N, R)).astype(np.float32)
  return prompt, prompt_mask, response, response_mask, weights


def _reference_scores(config, params, prompt, prompt_mask, response,
                      response_mask):
  """The full [N, P+R, V] logits, sliced to the response, log-softmaxed."""
  tokens = jnp.concatenate([prompt, response], axis=1)
  mask = jnp.concatenate([prompt_mask, response_mask], axis=1)
  logits = forward(config, params, tokens, mask)[:, P - 1:-1] / TEMPERATURE
  log_probs = jax.nn.log_softmax(logits, axis=-1)
  logp = jnp.take_along_axis(log_probs, response[..., None], axis=-1)[..., 0]
  entropy = -jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1)
  return (jnp.where(response_mask, logp, 0.0),
          jnp.where(response_mask, entropy, 0.0))


def _objective(score_fn, params, batch):
  """A weighted sum of log-probs and entropies, and the scores themselves."""
  prompt, prompt_mask, response, response_mask, weights = batch
  logp, entropy = score_fn(params, prompt, prompt_mask, response,
                           response_mask)
  return jnp.sum(weights[0] * logp) + jnp.sum(weights[1] * entropy), (
      logp, entropy)


def _run_compiled(fn, *args):
  """jax.jit(fn)(*args), compiled without XLA's backend optimisations: they
  take most of the compile time of these one-off CPU programs."""
  compiled = jax.jit(fn).lower(*args).compile(
      compiler_options={"xla_backend_optimization_level": 0})
  return compiled(*args)


def _chunked(config, chunk_size):
  def score(params, *batch):
    return tuple(policy.response_logprobs(config, params, *batch, TEMPERATURE,
                                          chunk_size))
  return score


def test_chunked_values_and_gradients_match_the_full_logits():
  # Tied embeddings: the embedding's gradient flows in through both ends.
  config, params, batch = _config(True), _params(True), _batch()
  chunk_size = 3  # chunks of 3, 3 and 1 positions cover R = 7
  score_fns = (functools.partial(_reference_scores, config),
               _chunked(config, 0), _chunked(config, chunk_size))

  def all_gradients(params, batch):  # one program: the three share a trunk
    return [jax.value_and_grad(functools.partial(_objective, fn),
                               has_aux=True)(params, batch)
            for fn in score_fns]

  reference, full, chunked = _run_compiled(all_gradients, params, batch)
  (_, (ref_logp, ref_entropy)), ref_grads = reference
  (_, (full_logp, full_entropy)), full_grads = full
  (_, (logp, entropy)), grads = chunked
  np.testing.assert_allclose(full_logp, ref_logp, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(full_entropy, ref_entropy, rtol=1e-5, atol=1e-5)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4,
                                                       atol=1e-6),
               full_grads, ref_grads)
  np.testing.assert_allclose(logp, full_logp, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(entropy, full_entropy, rtol=1e-6, atol=1e-6)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5,
                                                       atol=1e-7),
               grads, full_grads)
  # Masked positions score zero; the log-probs are real probabilities.
  _, _, _, response_mask, _ = batch
  assert np.all(np.asarray(logp)[~response_mask] == 0.0)
  assert np.all(np.asarray(logp)[response_mask] < 0.0)
  assert np.all(np.asarray(entropy)[response_mask] > 0.0)


def _vocab_rows(jaxpr) -> list[int]:
  """For every array of rank >= 3 with a vocabulary-sized dimension in `jaxpr`
  (sub-jaxprs included), its element count divided by VOCAB."""
  rows = []

  def visit(jaxpr):
    for eqn in jaxpr.eqns:
      for var in eqn.outvars:
        shape = getattr(var.aval, "shape", ())
        if len(shape) >= 3 and VOCAB in shape:
          rows.append(math.prod(shape) // VOCAB)
      for param in eqn.params.values():
        for sub in param if isinstance(param, (tuple, list)) else (param,):
          if isinstance(sub, jax_core.ClosedJaxpr):
            visit(sub.jaxpr)
          elif isinstance(sub, jax_core.Jaxpr):
            visit(sub)

  visit(jaxpr.jaxpr)
  return rows


@pytest.mark.parametrize("tie_embeddings", [True, False])
def test_chunked_gradient_never_forms_response_by_vocab_arrays(tie_embeddings):
  config, batch = _config(tie_embeddings), _batch()
  params = _abstract_params(tie_embeddings)
  chunk_size = 3

  def largest(chunk):
    jaxpr = jax.make_jaxpr(jax.grad(lambda p: _objective(
        _chunked(config, chunk), p, batch)[0]))(params)
    return max(_vocab_rows(jaxpr))

  # One-shot scoring holds all N*R response positions' logits at once ...
  assert largest(0) >= N * R
  # ... chunked scoring at most one chunk's, in the forward pass and in the
  # backward pass (stacked per-chunk residuals would count num_chunks times).
  assert largest(chunk_size) == N * chunk_size


@pytest.mark.parametrize("tie_embeddings", [True, False])
def test_on_a_mesh_chunks_gather_the_output_projection_once(tie_embeddings):
  """On a mesh whose fsdp axis splits the weights, each device scores its own
  rows' chunks: the gradient moves the same collective bytes in 7 chunks as
  in 2 (the output projection gathered, and its gradient reduced, once per
  pass, not once per chunk), and equals the gradient computed off the
  mesh."""
  config = ModelConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                       num_layers=1, num_heads=4, num_kv_heads=2,
                       tie_embeddings=tie_embeddings)
  mesh = sharding.make_mesh({"data": 1, "fsdp": 4, "tensor": 2},
                            jax.devices()[:8])
  rules = sharding.DEFAULT_RULES
  params, _ = sharding.sharded_init(functools.partial(init_boxed, config),
                                    mesh, rules, jax.random.key(0))
  rng = np.random.default_rng(0)
  rows, prompt_len, response_len = 4, 5, 7
  prompt = jnp.asarray(rng.integers(0, 128, (rows, prompt_len)), jnp.int32)
  response = jnp.asarray(rng.integers(0, 128, (rows, response_len)),
                         jnp.int32)
  prompt_mask = jnp.asarray(np.arange(prompt_len)[None]
                            >= prompt_len - np.array([5, 3, 1, 4])[:, None])
  response_mask = jnp.asarray(np.arange(response_len)[None]
                              < np.array([7, 4, 0, 2])[:, None])
  weights = jnp.asarray(rng.normal(size=(rows, response_len)), jnp.float32)

  def grad_fn(chunk_size):
    def loss(p):
      scores = policy.response_logprobs(config, p, prompt, prompt_mask,
                                        response, response_mask, TEMPERATURE,
                                        chunk_size)
      return jnp.sum(weights * (scores.logp + scores.entropy))
    return jax.grad(loss)

  def on_mesh(chunk_size):
    compiled = jax.jit(sharding.in_mesh(mesh, rules)(grad_fn(chunk_size))
                       ).lower(params).compile()
    return (hlo_cost.analyse(compiled, mesh.size).collective_bytes,
            compiled(params))

  (many, grads), (few, _) = on_mesh(1), on_mesh(4)
  head_bytes = 128 * 32 * 4
  assert many > head_bytes / 2, many  # the weights do move
  assert many == pytest.approx(few, rel=0.02), (many, few)
  off_mesh = jax.jit(grad_fn(1))(jax.device_get(params))
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5,
                                                       atol=1e-6),
               jax.device_get(grads), off_mesh)


def test_scoring_by_rows_equals_one_pass():
  config, params, batch = _config(False), _params(False), _batch()
  prompt, prompt_mask, response, response_mask, _ = batch

  def both(params, *rows):
    return [policy.response_logprobs_by_rows(config, params, *rows,
                                             TEMPERATURE, 3, row_chunks)
            for row_chunks in (1, N)]

  whole, by_rows = _run_compiled(both, params, prompt, prompt_mask, response,
                                 response_mask)
  for a, b in zip(by_rows, whole):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
  assert np.all(np.asarray(by_rows.logp)[response_mask] < 0.0)
  with pytest.raises(ValueError, match="row_chunks=2 must be >= 1 and divide "
                     "the 3 rows"):
    policy.response_logprobs_by_rows(config, params, *batch[:4],
                                     row_chunks=2)


def test_nll_loss_is_the_mean_masked_negative_log_prob():
  config, params = _config(True), _params(True)
  prompt, prompt_mask, response, response_mask, _ = _batch()

  def scores_and_loss(params):
    scores = policy.response_logprobs(config, params, prompt, prompt_mask,
                                      response, response_mask)
    return scores, policy.nll_loss(config, params, prompt, prompt_mask,
                                   response, response_mask, chunk_size=2)

  scores, loss = _run_compiled(scores_and_loss, params)
  expected = -np.asarray(scores.logp)[response_mask].mean()
  np.testing.assert_allclose(loss, expected, rtol=1e-6)


def test_bad_inputs_are_named():
  config, params = _config(True), _params(True)
  prompt, prompt_mask, response, response_mask, _ = _batch()
  score = functools.partial(policy.response_logprobs, config, params)
  with pytest.raises(ValueError, match="chunk_size=-1"):
    score(prompt, prompt_mask, response, response_mask, chunk_size=-1)
  with pytest.raises(ValueError, match="prompt: expected"):
    score(prompt[:, :0], prompt_mask[:, :0], response, response_mask)
  with pytest.raises(ValueError, match="response: expected"):
    score(prompt, prompt_mask, response[:2], response_mask[:2])
  with pytest.raises(ValueError, match="response_mask shape"):
    score(prompt, prompt_mask, response, response_mask[:, :3])
  with pytest.raises(ValueError, match="prompt_mask shape"):
    score(prompt, prompt_mask[:, :2], response, response_mask)
