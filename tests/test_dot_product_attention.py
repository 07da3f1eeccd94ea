"""ModelConfig.attention="dot_product" (jax.nn.dot_product_attention) against
the "xla" path on this CPU, and which implementation it asks for on a GPU."""

from __future__ import annotations

import functools
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from genenv_jax import policy
from models import decoder
from models.config import get_preset
from models.decoder import forward, init_params

# Rows as the scoring passes lay them out: a left-padded prompt of P slots,
# then a response of R slots whose real tokens are a prefix.
BATCH, PROMPT, RESPONSE = 4, 12, 10


def _masks() -> tuple[np.ndarray, np.ndarray]:
  prompt = np.ones((BATCH, PROMPT), bool)
  response = np.zeros((BATCH, RESPONSE), bool)
  for row, (pad, answer) in enumerate([(0, RESPONSE), (3, 7), (5, 1),
                                       (PROMPT - 1, 4)]):
    prompt[row, :pad] = False
    response[row, :answer] = True
  return prompt, response


def _inputs(config, seed=0):
  params = init_params(config, jax.random.PRNGKey(seed))
  tokens = jax.random.randint(jax.random.PRNGKey(seed + 1),
                              (BATCH, PROMPT + RESPONSE), 0, config.vocab_size)
  return params, tokens


def _models(**overrides):
  # Grouped-query heads: 4 query heads over 2 KV heads.
  xla = get_preset("tiny", num_layers=2, **overrides)
  assert xla.num_heads == 2 * xla.num_kv_heads
  return xla, xla.replace(attention="dot_product")


def test_logits_equal_the_xla_path_with_padding_and_prompt_masks():
  # Scanned layers, as the GPU presets run them; two, so that a masked
  # query's output reaches the next layer's keys and values.
  xla, dot = _models(scan_layers=True)
  params, tokens = _inputs(xla)
  prompt_mask, response_mask = _masks()
  mask = np.concatenate([prompt_mask, response_mask], axis=1)
  # A hole inside row 0's prompt, as a dropped token leaves one.
  mask[0, 4] = False
  mask = jnp.asarray(mask)
  run = lambda config, mask: np.asarray(jax.jit(functools.partial(
      forward, config))(params, tokens, mask))
  want, got = run(xla, mask), run(dot, mask)
  valid = np.asarray(mask)
  assert np.isfinite(got).all()  # masked queries too: no empty score row
  np.testing.assert_allclose(got[valid], want[valid], atol=1e-5, rtol=1e-5)
  # The check has teeth: attending also to the padding changes real rows.
  leaky = run(xla, jnp.ones_like(mask))
  assert np.abs(leaky[valid] - want[valid]).max() > 1e-2


def test_response_logprobs_and_their_gradients_equal_the_xla_path():
  xla, dot = _models()
  params, tokens = _inputs(xla, seed=3)
  prompt_mask, response_mask = (jnp.asarray(m) for m in _masks())
  prompt, response = tokens[:, :PROMPT], tokens[:, PROMPT:]

  def loss(config, params):
    scores = policy.response_logprobs(config, params, prompt, prompt_mask,
                                      response, response_mask, chunk_size=0)
    return jnp.sum(scores.logp), scores.logp

  (want, want_logp), want_grad = jax.jit(jax.value_and_grad(
      functools.partial(loss, xla), has_aux=True))(params)
  (got, got_logp), got_grad = jax.jit(jax.value_and_grad(
      functools.partial(loss, dot), has_aux=True))(params)
  np.testing.assert_allclose(np.asarray(got_logp), np.asarray(want_logp),
                             atol=1e-5, rtol=1e-5)
  np.testing.assert_allclose(float(got), float(want), rtol=1e-5)
  for w, g in zip(jax.tree.leaves(want_grad), jax.tree.leaves(got_grad)):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=1e-5,
                               rtol=1e-4)


def test_decoding_with_a_cache_keeps_the_xla_path():
  """Prefill and one decode step with a KV cache give the same logits under
  either option (the cached path is the "xla" one)."""
  xla, dot = _models()
  params, tokens = _inputs(xla)
  mask = jnp.ones((BATCH, 6), bool)
  outs = []
  for config in (xla, dot):
    model = decoder.Decoder(config)

    @jax.jit
    def prefill_and_step(params, tokens, model=model, config=config):
      cache = decoder.init_cache(config, BATCH, 6)
      logits, cache = model.apply({"params": params}, tokens[:, :5],
                                  decoder.positions_from_mask(mask[:, :5]),
                                  mask[:, :5], cache=cache, cache_index=0)
      step, _ = model.apply({"params": params}, tokens[:, 5:6],
                            jnp.full((BATCH, 1), 5, jnp.int32), mask,
                            cache=cache, cache_index=5)
      return logits, step

    outs.append([np.asarray(x) for x in prefill_and_step(params, tokens)])
  for w, g in zip(*outs):
    np.testing.assert_array_equal(g, w)


def _fake_device(platform: str, version: str):
  return types.SimpleNamespace(
      platform=platform, client=types.SimpleNamespace(platform_version=version))


@pytest.mark.parametrize("platform, version, dtype, expected", [
    ("gpu", "cuda 12080", "bfloat16", "cudnn"),
    ("gpu", "cuda 12080", "float16", "cudnn"),
    # cuDNN takes no float32; a ROCm GPU has no cuDNN.
    ("gpu", "cuda 12080", "float32", "xla"),
    ("gpu", "rocm 60300", "bfloat16", "xla"),
    ("cpu", "cpu", "bfloat16", "xla"),
    ("tpu", "PJRT C API", "bfloat16", "xla"),
])
def test_cudnn_is_asked_for_on_a_cuda_gpu_in_half_precision(
    monkeypatch, platform, version, dtype, expected):
  monkeypatch.setattr(jax, "devices",
                      lambda *a, **k: [_fake_device(platform, version)])
  assert decoder.dot_product_implementation(dtype) == expected


def test_the_attention_call_carries_the_implementation_and_masks(monkeypatch):
  """On a (faked) CUDA GPU the bfloat16 forward asks for "cudnn", causal,
  with one bool[B, 1, T, T] mask per row; the call is then run by the XLA
  implementation here."""
  calls = []
  real = jax.nn.dot_product_attention

  def recording(q, k, v, bias=None, mask=None, **kwargs):
    calls.append((q.shape, k.shape, q.dtype, mask.shape, mask.dtype, kwargs))
    return real(q, k, v, bias, mask, **dict(kwargs, implementation="xla"))

  monkeypatch.setattr(decoder, "dot_product_implementation",
                      lambda dtype: "cudnn" if dtype == "bfloat16" else "xla")
  monkeypatch.setattr(jax.nn, "dot_product_attention", recording)
  _, dot = _models(dtype="bfloat16")
  params, tokens = _inputs(dot)
  mask = jnp.asarray(np.concatenate(_masks(), axis=1))
  t = PROMPT + RESPONSE
  for length, slots in ((t, t), (t - 1, t)):  # an odd length gets one slot
    calls.clear()
    logits = jax.eval_shape(functools.partial(forward, dot), params,
                            tokens[:, :length], mask[:, :length])
    assert logits.shape == (BATCH, length, dot.vocab_size)
    assert len(calls) == dot.num_layers
    q_shape, k_shape, dtype, mask_shape, mask_dtype, kwargs = calls[0]
    assert q_shape == (BATCH, slots, dot.num_heads, dot.head_dim)
    assert k_shape == (BATCH, slots, dot.num_kv_heads, dot.head_dim)
    assert (dtype, mask_shape, mask_dtype) == (
        jnp.bfloat16, (BATCH, 1, slots, slots), jnp.bool_)
    assert kwargs == {"is_causal": True, "implementation": "cudnn"}


def test_an_odd_length_padded_for_cudnn_leaves_the_logits_as_they_were(
    monkeypatch):
  """The slot appended for cuDNN changes no real row (run here by the XLA
  implementation, in float32)."""
  real = jax.nn.dot_product_attention
  monkeypatch.setattr(decoder, "dot_product_implementation",
                      lambda dtype: "cudnn")
  monkeypatch.setattr(
      jax.nn, "dot_product_attention",
      lambda *a, **k: real(*a, **dict(k, implementation="xla")))
  xla, dot = _models()
  params, tokens = _inputs(xla)
  length = PROMPT + RESPONSE - 1
  mask = jnp.asarray(np.concatenate(_masks(), axis=1))[:, :length]
  tokens = tokens[:, :length]
  want = np.asarray(jax.jit(functools.partial(forward, xla))(
      params, tokens, mask))
  got = np.asarray(jax.jit(functools.partial(forward, dot))(
      params, tokens, mask))
  valid = np.asarray(mask)
  np.testing.assert_allclose(got[valid], want[valid], atol=1e-5, rtol=1e-5)


def test_an_unknown_attention_is_refused_naming_the_field():
  with pytest.raises(ValueError, match=r"ModelConfig\.attention='flash'.*"
                     "'dot_product'"):
    get_preset("tiny", attention="flash")
