"""Decoder: KV cache, padding, scan, remat, bf16, GQA, RoPE; config checks."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models.config import ModelConfig, RopeScaling, get_preset
from models.decoder import (Decoder, forward, init_cache, init_params,
                            positions_from_mask, rope_frequencies,
                            tied_output_projection)
from train.bench import hlo_cost

TOL = 1e-5
BASE = get_preset("tiny")  # H=4 query heads over K=2 kv heads, qkv bias, tied.

# Three left-padded rows of one batch: prompt lengths 8, 5, 2 in T=8 columns,
# then N=4 generated tokens; padding slots hold arbitrary token ids.
PROMPT_LENGTHS = (8, 5, 2)
PROMPT_LEN, NEW_TOKENS = 8, 4


def _left_padded_mask(lengths, width):
  """bool[B, width] with the last lengths[b] columns of row b true."""
  cols = np.arange(width)[None, :]
  return cols >= width - np.asarray(lengths)[:, None]


@functools.lru_cache(maxsize=None)
def _jitted_forward(config: ModelConfig):
  return jax.jit(functools.partial(forward, config))


@pytest.fixture(scope="module")
def params():
  return init_params(BASE, jax.random.key(0))


@pytest.fixture(scope="module")
def batch():
  """Tokens int32[3, T + N] and mask bool[3, T + N] (left-padded prompts)."""
  rng = np.random.RandomState(0)
  total = PROMPT_LEN + NEW_TOKENS
  tokens = rng.randint(0, BASE.vocab_size, (len(PROMPT_LENGTHS), total))
  mask = np.concatenate(
      [_left_padded_mask(PROMPT_LENGTHS, PROMPT_LEN),
       np.ones((len(PROMPT_LENGTHS), NEW_TOKENS), bool)], axis=1)
  return tokens.astype(np.int32), mask


@pytest.fixture(scope="module")
def reference_logits(params, batch):
  tokens, mask = batch
  return np.asarray(_jitted_forward(BASE)(params, tokens, mask))


# ------------------------------------------------------------------ KV cache


def _apply(config, params, tokens, positions, kv_mask, cache, cache_index):
  return Decoder(config).apply({"params": params}, tokens, positions, kv_mask,
                               cache, cache_index)


_apply_jit = jax.jit(_apply, static_argnums=0)


def _prefill(config, params, batch):
  """Prefills the prompts into a cache of T + N slots.

  Returns (logits f32[B, T, V], cache, kv_mask bool[B, T + N])."""
  tokens, mask = batch
  b = tokens.shape[0]
  prompt_mask = mask[:, :PROMPT_LEN]
  kv_mask = np.zeros((b, PROMPT_LEN + NEW_TOKENS), bool)
  kv_mask[:, :PROMPT_LEN] = prompt_mask
  logits, cache = _apply_jit(config, params, tokens[:, :PROMPT_LEN],
                             positions_from_mask(prompt_mask), kv_mask,
                             init_cache(config, b, PROMPT_LEN + NEW_TOKENS),
                             jnp.int32(0))
  return logits, cache, kv_mask


@pytest.fixture(scope="module")
def prefill(params, batch):
  return _prefill(BASE, params, batch)


def _decode(config, params, batch, prefill):
  """Feeds the N tokens after the prompts one at a time, from `prefill`.

  Returns (logits f32[B, N, V], the final cache)."""
  tokens, _ = batch
  _, cache, kv_mask = prefill
  kv_mask = kv_mask.copy()
  lengths = np.asarray(PROMPT_LENGTHS)
  out = []
  for step in range(NEW_TOKENS):
    slot = PROMPT_LEN + step
    kv_mask[:, slot] = True
    positions = (lengths + step)[:, None].astype(np.int32)
    logits, cache = _apply_jit(config, params, tokens[:, slot:slot + 1],
                               positions, kv_mask, cache, jnp.int32(slot))
    out.append(np.asarray(logits[:, 0]))
  return np.stack(out, 1), cache


def test_prefill_then_decode_matches_full_forward(prefill, params, batch,
                                                  reference_logits):
  tokens, mask = batch
  logits, cache, _ = prefill
  slots = PROMPT_LEN + NEW_TOKENS
  assert cache.k.shape == (BASE.num_layers, tokens.shape[0],
                           BASE.num_kv_heads, BASE.head_dim, slots)
  assert cache.v.shape == (BASE.num_layers, tokens.shape[0],
                           BASE.num_kv_heads, slots, BASE.head_dim)
  real = mask[:, :PROMPT_LEN, None]
  np.testing.assert_allclose(np.where(real, logits, 0),
                             np.where(real, reference_logits[:, :PROMPT_LEN],
                                      0), atol=TOL, rtol=TOL)
  # Slots not yet written stay zero; the prompt's are filled.
  assert not np.any(np.asarray(cache.k[..., PROMPT_LEN:]))
  assert not np.any(np.asarray(cache.v[:, :, :, PROMPT_LEN:]))
  assert np.all(np.any(np.asarray(cache.v[:, :, :, PROMPT_LEN - 1]), -1))

  logits, cache = _decode(BASE, params, batch, prefill)
  np.testing.assert_allclose(logits, reference_logits[:, PROMPT_LEN:],
                             atol=TOL, rtol=TOL)
  assert np.all(np.any(np.asarray(cache.v[:, :, :, -1]), -1))


def test_scanned_decode_matches_unscanned(prefill, params, batch):
  """A scanned decoder carries the stacked cache through its layer scan and
  attends to each new token before writing it (models/decoder.py,
  `_decode_from_stacked`): the same logits and cache entries as the
  unscanned decoder writing first."""
  scan_config = BASE.replace(scan_layers=True)
  scan_params = _stack_layers(params, BASE.num_layers)
  logits, cache = _decode(BASE, params, batch, prefill)
  scan_logits, scan_cache = _decode(
      scan_config, scan_params, batch, _prefill(scan_config, scan_params,
                                                batch))
  np.testing.assert_allclose(scan_logits, logits, atol=TOL, rtol=TOL)
  np.testing.assert_allclose(scan_cache.k, cache.k, atol=TOL, rtol=TOL)
  np.testing.assert_allclose(scan_cache.v, cache.v, atol=TOL, rtol=TOL)


def test_a_kv_mask_wider_than_the_cache_is_refused(params):
  cache = init_cache(BASE, 2, 8)
  with pytest.raises(ValueError, match=r"kv_mask \(2, 12\).*\(8\)"):
    _apply(BASE, params, np.zeros((2, 1), np.int32),
           np.zeros((2, 1), np.int32), np.ones((2, 12), bool), cache, 0)


def test_scanned_decode_step_updates_the_cache_in_place():
  """The compiled decode step of a scanned decoder copies no buffer the size
  of the stacked cache (an independent write would make XLA copy it twice
  per layer), and its HBM bytes (train/bench/hlo_cost) stay within a few
  passes over the cache: one read, and on the CPU one copy of each layer's
  slice for the matmuls (3.9 passes measured here)."""
  config = BASE.replace(scan_layers=True)
  rows, slots = 8, 1024
  params = jax.eval_shape(functools.partial(init_params, config),
                          jax.random.key(0))
  cache = jax.eval_shape(lambda: init_cache(config, rows, slots))

  def step(params, cache, token):
    return Decoder(config).apply(
        {"params": params}, token[:, None], jnp.zeros((rows, 1), jnp.int32),
        jnp.ones((rows, slots), bool), cache, 100)
  compiled = jax.jit(step, donate_argnums=1).lower(
      params, cache, jax.ShapeDtypeStruct((rows,), jnp.int32)).compile()
  stacked = {f"f32[{','.join(map(str, a.shape))}]"
             for a in jax.tree.leaves(cache)}
  copies = [line for line in compiled.as_text().splitlines()
            if " copy(" in line and any(shape in line for shape in stacked)]
  assert not copies, copies
  cache_bytes = sum(a.size * 4 for a in jax.tree.leaves(cache))
  weight_bytes = sum(a.size * 4 for a in jax.tree.leaves(params))
  cost = hlo_cost.analyse(compiled, 1)
  assert cost.hbm_bytes < weight_bytes + 5 * cache_bytes, (
      cost.hbm_bytes, weight_bytes, cache_bytes)


def test_logits_do_not_depend_on_left_padding(params):
  """The same 6 real tokens behind 0, 2 and 5 pad slots (then other tokens)."""
  rng = np.random.RandomState(1)
  width = PROMPT_LEN + NEW_TOKENS
  content = rng.randint(0, BASE.vocab_size, 6)
  pads = (0, 2, 5)
  tokens = rng.randint(0, BASE.vocab_size, (len(pads), width))
  mask = np.ones((len(pads), width), bool)
  for row, pad in enumerate(pads):
    tokens[row, pad:pad + 6] = content
    mask[row, :pad] = False
  logits = np.asarray(_jitted_forward(BASE)(params, tokens.astype(np.int32),
                                            mask))
  for row, pad in enumerate(pads[1:], start=1):
    np.testing.assert_allclose(logits[row, pad:pad + 6], logits[0, :6],
                               atol=TOL, rtol=TOL)


def test_positions_from_mask_counts_real_tokens_before():
  mask = np.array([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 1]], bool)
  expected = [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4], [0, 0, 0, 0, 0]]
  np.testing.assert_array_equal(positions_from_mask(mask), expected)


# -------------------------------------------------------------- scanned layers


def _stack_layers(params, num_layers):
  """Unscanned params (layers_0 .. layers_{L-1}) -> scanned params (layers)."""
  stacked = jax.tree_util.tree_map(
      lambda *leaves: jnp.stack(leaves),
      *[params[f"layers_{i}"] for i in range(num_layers)])
  rest = {k: v for k, v in params.items() if not k.startswith("layers_")}
  return {**rest, "layers": stacked}


def test_scan_layers_matches_unscanned(params, batch, reference_logits,
                                       prefill):
  scan_cfg = BASE.replace(scan_layers=True)
  scan_params = _stack_layers(params, BASE.num_layers)
  init_shapes = jax.eval_shape(functools.partial(init_params, scan_cfg),
                               jax.random.key(0))
  assert (jax.tree_util.tree_structure(init_shapes)
          == jax.tree_util.tree_structure(scan_params))
  for want, got in zip(jax.tree_util.tree_leaves(init_shapes),
                       jax.tree_util.tree_leaves(scan_params)):
    assert want.shape == got.shape

  tokens, mask = batch
  logits = _jitted_forward(scan_cfg)(scan_params, tokens, mask)
  np.testing.assert_allclose(logits, reference_logits, atol=TOL, rtol=TOL)

  # A scanned prefill gives the same logits and cache as an unscanned one.
  logits, cache, _ = prefill
  scan_logits, scan_cache, _ = _prefill(scan_cfg, scan_params, batch)
  np.testing.assert_allclose(scan_logits, logits, atol=TOL, rtol=TOL)
  np.testing.assert_allclose(scan_cache.k, cache.k, atol=TOL, rtol=TOL)
  np.testing.assert_allclose(scan_cache.v, cache.v, atol=TOL, rtol=TOL)


# ---------------------------------------------------------------------- remat


def _next_token_loss(config, params, tokens, mask):
  logits = forward(config, params, tokens[:, :-1], mask[:, :-1])
  logp = jax.nn.log_softmax(logits)
  target_logp = jnp.take_along_axis(logp, tokens[:, 1:, None], -1)[..., 0]
  weights = mask[:, 1:] & mask[:, :-1]
  return -jnp.sum(target_logp * weights) / jnp.sum(weights)


# One block keeps the five gradient graphs (compiled together) small.
REMAT_BASE = BASE.replace(num_layers=1)
REMAT_VARIANTS = {
    "none": REMAT_BASE,
    "full": REMAT_BASE.replace(remat_policy="full"),
    "dots": REMAT_BASE.replace(remat_policy="dots"),
    "dots_no_batch": REMAT_BASE.replace(remat_policy="dots_no_batch"),
    "dots+scan": REMAT_BASE.replace(remat_policy="dots", scan_layers=True),
}


@pytest.fixture(scope="module")
def losses_and_grads(params, batch):
  """{variant: (loss, grads)}, scanned grads unstacked to layers_0; one jit."""
  one_block = {k: v for k, v in params.items()
               if not k.startswith("layers_") or k == "layers_0"}
  scan_params = _stack_layers(one_block, 1)

  @jax.jit
  def all_variants(params, scan_params, tokens, mask):
    return {name: jax.value_and_grad(functools.partial(_next_token_loss, cfg))(
        scan_params if cfg.scan_layers else params, tokens, mask)
            for name, cfg in REMAT_VARIANTS.items()}

  results = all_variants(one_block, scan_params, *batch)
  loss, grads = results["dots+scan"]
  unstacked = {k: v for k, v in grads.items() if k != "layers"}
  unstacked["layers_0"] = jax.tree_util.tree_map(lambda x: x[0],
                                                 grads["layers"])
  results["dots+scan"] = (loss, unstacked)
  return results


@pytest.mark.parametrize("variant", [v for v in REMAT_VARIANTS if v != "none"])
def test_remat_keeps_loss_and_gradients(variant, losses_and_grads):
  want_loss, want_grad = losses_and_grads["none"]
  loss, grad = losses_and_grads[variant]
  np.testing.assert_allclose(loss, want_loss, rtol=1e-6)
  assert (jax.tree_util.tree_structure(grad)
          == jax.tree_util.tree_structure(want_grad))
  paths = jax.tree_util.tree_flatten_with_path(want_grad)[0]
  for (path, want), got in zip(paths, jax.tree_util.tree_leaves(grad)):
    np.testing.assert_allclose(got, want, atol=1e-6, rtol=1e-5,
                               err_msg=jax.tree_util.keystr(path))
  assert max(np.abs(g).max() for g in jax.tree_util.tree_leaves(grad)) > 1e-3


# --------------------------------------------------- tied output projection


@pytest.mark.parametrize("leading", [(6,), (2, 3)])
def test_tied_output_projection_gradients_match_plain_autodiff(leading):
  """The custom VJP (embedding gradient formed as [E, V], then transposed)
  gives the value and gradients autodiff gives the plain product."""
  keys = jax.random.split(jax.random.key(3), 3)
  hidden = jax.random.normal(keys[0], leading + (8,))
  embedding = jax.random.normal(keys[1], (5, 8))
  weights = jax.random.normal(keys[2], leading + (5,))

  def objective(projection, hidden, embedding):
    return jnp.sum(jnp.tanh(projection(hidden, embedding)) * weights)

  plain = lambda h, w: h @ w.T
  want = jax.value_and_grad(functools.partial(objective, plain),
                            argnums=(0, 1))(hidden, embedding)
  projection = lambda h, w: tied_output_projection(h, w, "float32")
  got = jax.value_and_grad(functools.partial(objective, projection),
                           argnums=(0, 1))(hidden, embedding)
  np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
  for name, g, w in zip(("hidden", "embedding"), got[1], want[1]):
    assert g.shape == w.shape, name
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=name)


# ---------------------------------------------------------------------- bf16


def test_bfloat16_compute_with_float32_params(params, batch, reference_logits):
  cfg = BASE.replace(dtype="bfloat16", param_dtype="float32")
  shapes = jax.eval_shape(functools.partial(init_params, cfg),
                          jax.random.key(0))
  assert all(leaf.dtype == jnp.float32
             for leaf in jax.tree_util.tree_leaves(shapes))

  tokens, mask = batch

  @jax.jit
  def run(p):
    return Decoder(cfg).apply({"params": p}, tokens, positions_from_mask(mask),
                              mask, capture_intermediates=True)

  (logits, _), state = run(params)
  assert logits.dtype == jnp.float32
  block = state["intermediates"]["layers_0"]
  for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
    assert block["attn"][name]["__call__"][0].dtype == jnp.bfloat16, name
  assert block["mlp"]["__call__"][0].dtype == jnp.bfloat16
  assert block["__call__"][0][0].dtype == jnp.bfloat16  # residual stream

  diff = (np.asarray(logits) - reference_logits)[mask]
  relative = np.linalg.norm(diff) / np.linalg.norm(reference_logits[mask])
  assert relative < 2e-2, relative


# ----------------------------------------------------------------------- GQA


def test_grouped_query_attention_equals_repeated_kv_heads(params, batch,
                                                          reference_logits):
  group = BASE.num_heads // BASE.num_kv_heads
  assert group > 1
  mha_cfg = BASE.replace(num_kv_heads=BASE.num_heads)

  def repeat_kv(layer):
    attn = dict(layer["attn"])
    for name in ("k_proj", "v_proj"):
      attn[name] = {"kernel": jnp.repeat(attn[name]["kernel"], group, axis=1),
                    "bias": jnp.repeat(attn[name]["bias"], group, axis=0)}
    return {**layer, "attn": attn}

  mha_params = {k: repeat_kv(v) if k.startswith("layers_") else v
                for k, v in params.items()}
  mha_shapes = jax.eval_shape(functools.partial(init_params, mha_cfg),
                              jax.random.key(0))
  assert (jax.tree_util.tree_map(lambda x: x.shape, mha_shapes)
          == jax.tree_util.tree_map(lambda x: x.shape, mha_params))

  tokens, mask = batch
  logits = _jitted_forward(mha_cfg)(mha_params, tokens, mask)
  np.testing.assert_allclose(logits, reference_logits, atol=TOL, rtol=TOL)


# ---------------------------------------------------------------------- RoPE


def _llama3_inverse_frequencies(theta, head_dim, factor, low_freq_factor,
                                high_freq_factor, original_context):
  """Per-frequency Llama-3 scaling in float64."""
  result = []
  for freq in theta ** (-np.arange(0, head_dim, 2, dtype=np.float64)
                        / head_dim):
    wavelength = 2 * math.pi / freq
    if wavelength < original_context / high_freq_factor:
      result.append(freq)
    elif wavelength > original_context / low_freq_factor:
      result.append(freq / factor)
    else:
      smooth = ((original_context / wavelength - low_freq_factor)
                / (high_freq_factor - low_freq_factor))
      result.append((1 - smooth) * freq / factor + smooth * freq)
  return np.asarray(result)


def test_rope_without_scaling_is_plain_inverse_powers():
  cfg = get_preset("qwen2.5-7b")
  d = cfg.head_dim
  want = cfg.rope_theta ** (-2 * np.arange(d // 2) / d)
  np.testing.assert_allclose(rope_frequencies(cfg), want, rtol=1e-5)


@pytest.mark.parametrize("scaling", [
    RopeScaling(),
    {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 8192},
    RopeScaling(factor=4.0, low_freq_factor=2.0, high_freq_factor=8.0,
                original_max_position_embeddings=4096),
])
def test_llama3_rope_scaling_matches_formula(scaling):
  cfg = get_preset("llama-3.1-8b", rope_scaling=scaling)
  rs = cfg.rope_scaling
  assert isinstance(rs, RopeScaling)
  want = _llama3_inverse_frequencies(
      cfg.rope_theta, cfg.head_dim, rs.factor, rs.low_freq_factor,
      rs.high_freq_factor, rs.original_max_position_embeddings)
  got = np.asarray(rope_frequencies(cfg))
  np.testing.assert_allclose(got, want, rtol=1e-5)
  # All three bands occur: unchanged, divided by factor, and interpolated.
  plain = cfg.rope_theta ** (-2 * np.arange(cfg.head_dim // 2) / cfg.head_dim)
  ratio = got / plain
  assert np.any(np.isclose(ratio, 1.0, rtol=1e-5))
  assert np.any(np.isclose(ratio, 1 / rs.factor, rtol=1e-5))
  assert np.any((ratio < 0.99) & (ratio > 1.01 / rs.factor))


# ------------------------------------------------------------ config checks


@pytest.mark.parametrize("fields, message", [
    ({"hidden_size": 130, "head_dim": None}, "head_dim"),
    ({"num_kv_heads": 3}, "num_kv_heads"),
    ({"num_kv_heads": 0}, "num_kv_heads"),
    ({"num_heads": 0}, "num_heads"),
    ({"head_dim": 33}, "head_dim"),
    ({"remat_policy": "everything"}, "remat_policy"),
])
def test_config_validation_names_the_field(fields, message):
  with pytest.raises(ValueError, match=message):
    BASE.replace(**fields)


def test_get_preset_unknown_name():
  with pytest.raises(KeyError, match="no-such-model"):
    get_preset("no-such-model")


def _count(tree) -> int:
  return sum(math.prod(x.shape) for x in jax.tree_util.tree_leaves(tree))


def test_num_params_matches_initialised_tied_and_untied(params):
  assert BASE.tie_embeddings and BASE.qkv_bias
  assert _count(params) == BASE.num_params()
  untied = get_preset("tiny", tie_embeddings=False, qkv_bias=False,
                      num_kv_heads=1, head_dim=16)
  untied_shapes = jax.eval_shape(functools.partial(init_params, untied),
                                 jax.random.key(0))
  assert "lm_head" in untied_shapes
  assert _count(untied_shapes) == untied.num_params()


@pytest.mark.parametrize("name, public_size", [
    ("qwen2.5-0.5b", 494e6),
    ("qwen2.5-1.5b", 1.54e9),
    ("qwen2.5-7b", 7.6e9),
    ("llama-3-8b", 8.03e9),
])
def test_real_presets_build_abstractly_with_public_sizes(name, public_size):
  cfg = get_preset(name)
  shapes = jax.eval_shape(functools.partial(init_params, cfg),
                          jax.random.key(0))
  count = _count(shapes)
  assert count == cfg.num_params()
  assert abs(count - public_size) / public_size < 0.01, count
  assert shapes["embed"]["embedding"].shape == (cfg.vocab_size,
                                                cfg.hidden_size)
  assert ("lm_head" in shapes) == (not cfg.tie_embeddings)
