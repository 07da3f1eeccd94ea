"""The Flax decoder for the Llama / Qwen2 family, with an explicit KV cache.

One module covers Llama 1/2/3 (incl. Llama-3 RoPE scaling) and Qwen2/2.5:
RoPE, grouped-query attention, RMSNorm, SwiGLU, optional q/k/v bias, tied or
untied embeddings. Every parameter and the main activations carry logical axis
names (`embed`, `mlp`, `heads`, `kv_heads`, `head_dim`, `vocab`, `batch`,
`length`, `layers`, `norm`), mapped to mesh axes by `genenv_jax.sharding`.

Shapes: B batch, T new tokens, S key/value slots, E hidden, H query heads,
K kv heads, D head dim, F MLP width, V vocab, L layers.

The cache is a plain pytree passed in and out (no mutable collections), so the
same `apply` serves training (no cache), prefill and single-token decode.
Attention works in "slots": token i of a call sits in slot `cache_index + i`;
it sees every slot s <= its own whose `kv_mask[b, s]` is true. Without a cache
the slots are the call's own tokens (S = T, cache_index = 0). With one,
kv_mask may be narrower than the cache: a call attends to the first W =
kv_mask.shape[1] slots only and reads no more of the cache (a sampler
decoding its first tokens needs the prompt and few generation slots).

Cached keys are stored transposed, [B, K, D, S], and cached values as
[B, K, S, D], so that a call's attention over the cache is a pair of batched
matmuls (batch B x K; q.k contracting D, p.v contracting S) that read the cache
in place: no copy of the cache into another order on any decode step.

The cache comes in two layouts (`KVCache`): stacked arrays with a leading
layer axis L, or per-layer tuples. Either way a call writes only its new
entries and reads each layer's keys and values where they lie, so a decode
loop carrying the cache copies none of it:
  - an unscanned decoder (per-layer cache) writes each layer's array with one
    `dynamic_update_slice`;
  - a scanned decoder (`scan_layers`, stacked cache) carries the whole
    stacked cache through the layer scan (`StackedLayerCache`). In a
    one-token call (decode) layer l attends over its slots where they lie
    and over the token's own key and value, then writes those at
    [l, :, :, :, cache_index] (keys) with one `dynamic_update_slice` of the
    carried arrays, in place (`_decode_from_stacked`); a longer call (a
    prefill) writes first and reads layer l's slots back, one copy per call.
    Passing the stacked cache as the scan's input and output instead would
    write every layer's whole cache to a new stacked array on every call: a
    copy of the cache per decode step.
A stacked cache given to an unscanned decoder is sliced per layer and
restacked (one copy per call); a per-layer cache given to a scanned one is
stacked and unstacked around the scan.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from models import lora
from models import splash
from models.config import ModelConfig

_NEG_INF = float(jnp.finfo(jnp.float32).min)


class KVCache(NamedTuple):
  """Keys and values of every layer (compute dtype), in one of two layouts:
  stacked, k: [L, B, K, D, S] and v: [L, B, K, S, D]; or per layer, tuples of
  L arrays k: [B, K, D, S] and v: [B, K, S, D]. A decoder call returns the
  layout it was given."""
  k: jax.Array | tuple[jax.Array, ...]
  v: jax.Array | tuple[jax.Array, ...]


class SharedPrefix(NamedTuple):
  """Keys and values of B prompts read by a decode call over R = B * G rows,
  row r reading prompt r // G (G samples of each prompt share one copy of its
  keys and values), in the layouts of `KVCache`: stacked, k: [L, B, K, D, P]
  and v: [L, B, K, P, D]; or per layer, tuples of L arrays [B, K, D, P] and
  [B, K, P, D]; mask: bool[B, P], the prompts' real slots. Read only: the
  call's own keys and values go to its (per-row) cache."""
  k: jax.Array | tuple[jax.Array, ...]
  v: jax.Array | tuple[jax.Array, ...]
  mask: jax.Array


# Logical axes of one layer's cached keys and values.
KEY_CACHE_AXES = ("batch", "kv_heads", "head_dim", "cache_length")
VALUE_CACHE_AXES = ("batch", "kv_heads", "cache_length", "head_dim")


class StackedLayerCache(NamedTuple):
  """One scanned layer's view of a stacked cache: every layer's keys k:
  [L, B, K, D, S] and values v: [L, B, K, S, D] (the scan's carry), and the
  index int32 scalar of the layer the call is in."""
  k: jax.Array
  v: jax.Array
  layer: jax.Array


def init_cache(config: ModelConfig, batch: int, length: int,
               per_layer: bool = False) -> KVCache:
  """An all-zero cache with `length` slots for `batch` rows, stacked or (with
  per_layer) as tuples of per-layer arrays."""
  k, d = config.num_kv_heads, config.head_dim
  shapes = ((batch, k, d, length), (batch, k, length, d))
  dtype = jnp.dtype(config.dtype)
  if per_layer:
    return KVCache(*(tuple(jnp.zeros(shape, dtype)
                           for _ in range(config.num_layers))
                     for shape in shapes))
  return KVCache(*(jnp.zeros((config.num_layers,) + shape, dtype)
                   for shape in shapes))


def is_per_layer(cache: KVCache | SharedPrefix) -> bool:
  """Whether `cache` holds per-layer tuples rather than stacked arrays."""
  return isinstance(cache.k, (tuple, list))


def rope_frequencies(config: ModelConfig) -> jax.Array:
  """Inverse frequencies f32[D/2], with Llama-3 scaling when configured."""
  d = config.head_dim
  inv_freq = 1.0 / (config.rope_theta ** (jnp.arange(0, d, 2, jnp.float32) / d))
  rs = config.rope_scaling
  if rs is None:
    return inv_freq
  low_wavelen = rs.original_max_position_embeddings / rs.low_freq_factor
  high_wavelen = rs.original_max_position_embeddings / rs.high_freq_factor
  wavelen = 2 * math.pi / inv_freq
  smooth = ((rs.original_max_position_embeddings / wavelen - rs.low_freq_factor)
            / (rs.high_freq_factor - rs.low_freq_factor))
  smoothed = (1 - smooth) * inv_freq / rs.factor + smooth * inv_freq
  scaled = jnp.where(wavelen > low_wavelen, inv_freq / rs.factor, inv_freq)
  is_medium = (wavelen <= low_wavelen) & (wavelen >= high_wavelen)
  return jnp.where(is_medium, smoothed, scaled)


def apply_rope(x: jax.Array, positions: jax.Array,
               inv_freq: jax.Array) -> jax.Array:
  """Rotates x: [B, T, N, D] by positions int[B, T] (half-split convention)."""
  angles = positions[:, :, None].astype(jnp.float32) * inv_freq  # [B, T, D/2]
  cos = jnp.cos(angles)[:, :, None, :]
  sin = jnp.sin(angles)[:, :, None, :]
  x32 = x.astype(jnp.float32)
  x1, x2 = jnp.split(x32, 2, axis=-1)
  out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
  return out.astype(x.dtype)


def _param(module: nn.Module, name: str, init, shape, axes, config):
  return module.param(name, nn.with_logical_partitioning(init, axes), shape,
                      jnp.dtype(config.param_dtype))


_KERNEL_INIT = nn.initializers.normal(stddev=0.02)


class RMSNorm(nn.Module):
  config: ModelConfig

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    cfg = self.config
    scale = _param(self, "scale", nn.initializers.ones, (x.shape[-1],),
                   ("norm",), cfg)
    x32 = x.astype(jnp.float32)
    var = jnp.mean(jnp.square(x32), axis=-1, keepdims=True)
    normed = (x32 * jax.lax.rsqrt(var + cfg.rms_norm_eps)).astype(cfg.dtype)
    return normed * scale.astype(cfg.dtype)


class Projection(nn.Module):
  """x[..., *in] @ kernel[*in, *out] (+ bias[*out]); kernel axes are logical.

  Inputs are cast to the compute dtype; the product (and bias) is in
  `out_dtype` when given (accumulated there: bf16 inputs, f32 result), else
  in the compute dtype."""
  config: ModelConfig
  in_shape: tuple[int, ...]
  out_shape: tuple[int, ...]
  kernel_axes: tuple[str, ...]
  use_bias: bool = False
  out_dtype: str | None = None

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    cfg = self.config
    out_dtype = jnp.dtype(self.out_dtype or cfg.dtype)
    kernel = _param(self, "kernel", _KERNEL_INIT,
                    self.in_shape + self.out_shape, self.kernel_axes, cfg)
    n_in = len(self.in_shape)
    contract = (tuple(range(x.ndim - n_in, x.ndim)), tuple(range(n_in)))
    y = jax.lax.dot_general(x.astype(cfg.dtype), kernel.astype(cfg.dtype),
                            (contract, ((), ())),
                            preferred_element_type=out_dtype)
    if self.use_bias:
      bias = _param(self, "bias", nn.initializers.zeros, self.out_shape,
                    self.kernel_axes[n_in:], cfg)
      y = y + bias.astype(out_dtype)
    if self._adapted():
      y = y + self._adapter(x, out_dtype)
    return y

  def _adapted(self) -> bool:
    """Whether this call adds a low-rank adapter: the config targets this
    projection and (past init) its parameters hold one; a tree without
    adapters runs the base (models/lora.py)."""
    cfg = self.config
    if not cfg.lora_rank or self.name not in cfg.lora_targets:
      return False
    return self.is_initializing() or self.has_variable("params", "lora_a")

  def _adapter(self, x: jax.Array, out_dtype) -> jax.Array:
    """(alpha / r) (x A) B for A: f32[*in, r], B: f32[r, *out] (B zero at
    init), in the compute dtype, accumulated in out_dtype."""
    cfg = self.config
    n_in, r = len(self.in_shape), cfg.lora_rank
    in_axes, out_axes = self.kernel_axes[:n_in], self.kernel_axes[n_in:]
    a = self.param("lora_a", nn.with_logical_partitioning(
        lora.a_init(self.in_shape), in_axes + ("lora",)),
                   self.in_shape + (r,), jnp.float32)
    b = self.param("lora_b", nn.with_logical_partitioning(
        nn.initializers.zeros, ("lora",) + out_axes),
                   (r,) + self.out_shape, jnp.float32)
    xa = jax.lax.dot_general(
        x.astype(cfg.dtype), a.astype(cfg.dtype),
        ((tuple(range(x.ndim - n_in, x.ndim)), tuple(range(n_in))), ((), ())))
    y = jax.lax.dot_general(xa, b.astype(cfg.dtype),
                            (((xa.ndim - 1,), (0,)), ((), ())),
                            preferred_element_type=out_dtype)
    return y * jnp.asarray(lora.scale(cfg), out_dtype)


def _attention_scores(q: jax.Array, keys: jax.Array,
                      cached: bool) -> jax.Array:
  """f32[B, K, G, T, S] scores of queries q: [B, T, K, G, D] against the
  call's own keys [B, S, K, D] or (cached) a cache's keys [B, K, D, S].

  One query per row (decode) is a batched [G, D] x [D, S] matmul per (row, kv
  head), taken with the T axis dropped so that it stays one plain batched dot.
  """
  if not cached:
    return jnp.einsum("btkgd,bskd->bkgts", q, keys.astype(q.dtype),
                      preferred_element_type=jnp.float32)
  keys = keys.astype(q.dtype)
  if q.shape[1] == 1:
    return jnp.einsum("bkgd,bkds->bkgs", q[:, 0], keys,
                      preferred_element_type=jnp.float32)[:, :, :, None]
  # Queries moved to [B, K, G, T, D] first (a call's T tokens, not the
  # cache): a batched matmul in this order is one XLA:CPU runs with bf16
  # inputs and an f32 result; taken from [B, T, K, G, D] it is not ("DotThunk:
  # Unsupported element type BF16 x BF16 = F32" unless the YNNPACK dot fusion
  # claims it).
  return jnp.einsum("bkgtd,bkds->bkgts", q.transpose(0, 2, 3, 1, 4), keys,
                    preferred_element_type=jnp.float32)


def _attention_values(probs: jax.Array, values: jax.Array, cached: bool,
                      dtype) -> jax.Array:
  """[B, T, K, G, D] = probs f32[B, K, G, T, S] @ values: the call's own
  [B, S, K, D] or (cached) a cache's [B, K, S, D]."""
  probs = probs.astype(dtype)
  values = values.astype(dtype)
  if not cached:
    return jnp.einsum("bkgts,bskd->btkgd", probs, values)
  if probs.shape[3] == 1:
    return jnp.einsum("bkgs,bksd->bkgd", probs[:, :, :, 0], values)[:, None]
  return jnp.einsum("bkgts,bksd->btkgd", probs, values)


def _prefix_scores(q: jax.Array, prefix_k: jax.Array,
                   prefix_mask: jax.Array) -> jax.Array:
  """f32[R, K, G, P] scores of one query per row q: [R, K, G, D] against its
  prompt's keys prefix_k: [B, K, D, P] (row r reads prompt r // (R / B)),
  -inf at the prompt's padding (prefix_mask bool[B, P] false); not scaled."""
  r, k, g, d = q.shape
  b = prefix_k.shape[0]
  scores = jnp.einsum("bnkgd,bkdp->bnkgp", q.reshape(b, r // b, k, g, d),
                      prefix_k.astype(q.dtype),
                      preferred_element_type=jnp.float32)
  scores = jnp.where(prefix_mask[:, None, None, None], scores, _NEG_INF)
  return scores.reshape(r, k, g, -1)


def _prefix_values(probs: jax.Array, prefix_v: jax.Array, dtype) -> jax.Array:
  """[R, K, G, D] = probs f32[R, K, G, P] @ each row's prompt values
  prefix_v: [B, K, P, D]."""
  r, k, g, p = probs.shape
  b = prefix_v.shape[0]
  out = jnp.einsum("bnkgp,bkpd->bnkgd",
                   probs.reshape(b, r // b, k, g, p).astype(dtype),
                   prefix_v.astype(dtype))
  return out.reshape(r, k, g, -1)


def _write_stacked(cache: StackedLayerCache, key: jax.Array, val: jax.Array,
                   cache_index) -> StackedLayerCache:
  """Writes a call's keys and values [B, T, K, D] into the stacked cache at
  layer `cache.layer`, slots [cache_index, cache_index + T), in place."""
  zero = jnp.zeros((), jnp.int32)
  index = jnp.asarray(cache_index, jnp.int32)
  all_k = jax.lax.dynamic_update_slice(
      cache.k, key.transpose(0, 2, 3, 1)[None].astype(cache.k.dtype),
      (cache.layer, zero, zero, zero, index))
  all_v = jax.lax.dynamic_update_slice(
      cache.v, val.transpose(0, 2, 1, 3)[None].astype(cache.v.dtype),
      (cache.layer, zero, zero, index, zero))
  all_k = nn.with_logical_constraint(all_k, ("layers",) + KEY_CACHE_AXES)
  all_v = nn.with_logical_constraint(all_v, ("layers",) + VALUE_CACHE_AXES)
  return StackedLayerCache(all_k, all_v, cache.layer)


def _layer_slice(cache: StackedLayerCache,
                 width: int) -> tuple[jax.Array, jax.Array]:
  """Layer `cache.layer`'s keys [B, K, D, W] and values [B, K, W, D] in the
  first `width` slots."""
  # One dynamic slice per array (layer and slots at once), which the
  # attention's matmuls read in place; a static slice of the layer's
  # dynamic slice is copied out on a TPU.
  zero = jnp.zeros((), jnp.int32)
  _, b, k, d, _ = cache.k.shape
  keys = jax.lax.dynamic_slice(cache.k, (cache.layer, zero, zero, zero, zero),
                               (1, b, k, d, width))[0]
  values = jax.lax.dynamic_slice(cache.v,
                                 (cache.layer, zero, zero, zero, zero),
                                 (1, b, k, width, d))[0]
  return (nn.with_logical_constraint(keys, KEY_CACHE_AXES),
          nn.with_logical_constraint(values, VALUE_CACHE_AXES))


def _decode_from_stacked(q, key, val, cache: StackedLayerCache, kv_mask,
                         cache_index, dtype, prefix=None):
  """One token's attention in a scanned layer, then its entries written.

  Attends over the layer's cached slots before `cache_index` (read where
  they lie in the stacked cache) and the token's own key and value, then
  writes those into slot `cache_index`. Reading before writing lets the
  compiler feed the attention's matmuls from the carried cache; written
  first, the layer's slice is copied out of it on every step (on a TPU
  also into another layout).

  q: [B, 1, K, G, D]; key, val: [B, 1, K, D]; kv_mask: bool[B, W], the
  first W slots of the cache attended to; prefix: None, or this layer's
  shared prompts (keys [Bp, K, D, P], values [Bp, K, P, D], mask
  bool[Bp, P]; B = Bp * samples), attended before the cache's slots.
  Returns ([B, 1, K, G, D] in `dtype`, the updated StackedLayerCache).
  """
  d = q.shape[-1]
  cached_k, cached_v = _layer_slice(cache, kv_mask.shape[1])
  scores = _attention_scores(q, cached_k, True)[:, :, :, 0] / math.sqrt(d)
  own_k, own_v = key[:, 0].astype(q.dtype), val[:, 0]  # [B, K, D]
  own = jnp.einsum("bkgd,bkd->bkg", q[:, 0], own_k,
                   preferred_element_type=jnp.float32) / math.sqrt(d)
  slots = jnp.arange(kv_mask.shape[1])
  earlier = (slots[None, :] < cache_index) & kv_mask  # [B, W]
  own_seen = jax.lax.dynamic_index_in_dim(kv_mask, cache_index, axis=1)
  scores = jnp.where(earlier[:, None, None], scores, _NEG_INF)  # [B, K, G, W]
  own = jnp.where(own_seen[:, :, None], own, _NEG_INF)  # [B, K, G]
  parts = [scores, own[..., None]]
  if prefix is not None:
    parts.insert(0, _prefix_scores(q[:, 0], prefix[0], prefix[2]) / math.sqrt(d))
  probs = jax.nn.softmax(jnp.concatenate(parts, -1), -1)
  if prefix is not None:
    num_prefix = prefix[0].shape[-1]
    prefix_out = _prefix_values(probs[..., :num_prefix], prefix[1], dtype)
    probs = probs[..., num_prefix:]
  out = (_attention_values(probs[:, :, :, None, :-1], cached_v, True,
                           dtype)[:, 0]
         + probs[..., -1:].astype(dtype) * own_v.astype(dtype)[:, :, None])
  if prefix is not None:
    out = out + prefix_out
  # The written entries are made to depend on the attention's result (0
  # times a finite value: exact), so the write provably follows the reads
  # and the carried cache is updated in place. Without a data dependency
  # XLA:CPU copies the whole stacked cache twice per layer (an optimization
  # barrier does not prevent it).
  tie = (0.0 * out[:, None, :, 0, :1]).astype(key.dtype)  # [B, 1, K, 1]
  return out[:, None], _write_stacked(cache, key + tie, val + tie,
                                      cache_index)


# Compute dtypes cuDNN's fused attention takes (jax's check_layout).
CUDNN_DTYPES = ("bfloat16", "float16")


def dot_product_implementation(dtype: str) -> str:
  """The `implementation` the "dot_product" attention passes to
  `jax.nn.dot_product_attention` for compute dtype `dtype`, on the backend
  this process computes on: "cudnn" (flash attention: no [T, S] score array
  per head, causal blocks above the diagonal skipped) on a CUDA GPU for
  bfloat16 or float16, else "xla" (scores f32[B, H, T, S], as the "xla"
  option forms them). Not None: in jax 0.10.2 None always means "xla", on a
  GPU too."""
  if jnp.dtype(dtype).name not in CUDNN_DTYPES:
    return "xla"
  device = jax.devices()[0]
  version = getattr(device.client, "platform_version", "") or ""
  if device.platform == "gpu" and "cuda" in version.lower():
    return "cudnn"
  return "xla"


def dot_product_attention(q: jax.Array, key: jax.Array, val: jax.Array,
                          kv_mask: jax.Array, dtype: str) -> jax.Array:
  """Causal attention of a whole sequence (no KV cache) through
  `jax.nn.dot_product_attention`, as the "xla" path attends.

  Each query attends the slots at or before its own of its own kind: a real
  query (kv_mask true) real slots only, exactly what the "xla" path computes
  for it; a masked query (padding, a hole) masked slots, itself among them,
  so that no row of scores is empty: its output is unused, but it becomes
  the next layer's keys and values, where a NaN would reach real rows (0 x
  NaN), and no implementation is left to choose what a row masked throughout
  gives. The mask goes in as bool[B, 1, T, S] (one per row,
  not per head): on cuDNN it becomes an additive bias of that shape in
  `dtype`, and the backward pass also forms its (unused) gradient. cuDNN
  trains with a bias at even lengths only: there an odd T gets one masked
  slot appended (its output dropped).

  Decoding with a cache keeps the "xla" path (`Attention`): this function's
  T queries attend the T slots of their own call, not a cache's window.

  Args:
    q: [B, T, K, G, D] queries, K kv heads of G query heads each (head
      k * G + g, as `Attention` reshapes them), RoPE applied, not scaled.
    key, val: [B, T, K, D].
    kv_mask: bool[B, T], the real slots.
    dtype: the compute dtype: q, key and val are cast to it, and it picks
      the implementation (`dot_product_implementation`).

  Returns:
    [B, T, K * G, D] in `dtype`.
  """
  b, t, k, g, d = q.shape
  dtype = jnp.dtype(dtype)
  implementation = dot_product_implementation(dtype.name)
  q = q.reshape(b, t, k * g, d).astype(dtype)
  key, val = key.astype(dtype), val.astype(dtype)
  pad = t % 2 if implementation == "cudnn" else 0
  if pad:
    q, key, val = (jnp.pad(x, ((0, 0), (0, pad), (0, 0), (0, 0)))
                   for x in (q, key, val))
    kv_mask = jnp.pad(kv_mask, ((0, 0), (0, pad)))
  same_kind = kv_mask[:, :, None] == kv_mask[:, None, :]  # [B, T, S]
  out = jax.nn.dot_product_attention(
      q, key, val, mask=same_kind[:, None], is_causal=True,
      implementation=implementation)
  return out[:, :t]


class Attention(nn.Module):
  config: ModelConfig

  @nn.compact
  def __call__(self, x, positions, kv_mask, layer_cache, cache_index,
               prefix=None):
    """x: [B, T, E]; positions: int[B, T]; kv_mask: bool[B, W] (W <= S, the
      cache's slots, see the module doc);
    layer_cache: this layer's (k [B, K, D, S], v [B, K, S, D]), a
      StackedLayerCache, or None; cache_index: int scalar;
    prefix: None, or (with a cache, one token a row) this layer's shared
      prompts (keys [Bp, K, D, P], values [Bp, K, P, D], mask bool[Bp, P];
      B = Bp * samples, `SharedPrefix`), attended before the cache's slots.
    Returns ([B, T, E], the updated layer cache, same kind, or None)."""
    cfg = self.config
    e, h, k, d = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    q = Projection(cfg, (e,), (h, d), ("embed", "heads", "head_dim"),
                   cfg.qkv_bias, name="q_proj")(x)
    key = Projection(cfg, (e,), (k, d), ("embed", "kv_heads", "head_dim"),
                     cfg.qkv_bias, name="k_proj")(x)
    val = Projection(cfg, (e,), (k, d), ("embed", "kv_heads", "head_dim"),
                     cfg.qkv_bias, name="v_proj")(x)
    q = nn.with_logical_constraint(q, ("batch", "length", "heads", "head_dim"))
    inv_freq = rope_frequencies(cfg)
    q = apply_rope(q, positions, inv_freq)
    key = apply_rope(key, positions, inv_freq)

    b, t = x.shape[:2]
    q = q.reshape(b, t, k, h // k, d)
    if prefix is not None and (layer_cache is None or t != 1):
      raise ValueError("A shared prefix is read by decode calls only: one "
                       f"token a row ({t} given) with a cache.")
    if isinstance(layer_cache, StackedLayerCache) and t == 1:
      out, layer_cache = _decode_from_stacked(q, key, val, layer_cache,
                                              kv_mask, cache_index, cfg.dtype,
                                              prefix)
      out = out.reshape(b, t, h, d)
    else:
      cached = layer_cache is not None
      if isinstance(layer_cache, StackedLayerCache):
        # Several tokens (a prefill): written first, then the layer's slice
        # read back; one copy of this layer's cache per call.
        layer_cache = _write_stacked(layer_cache, key, val, cache_index)
        key, val = _layer_slice(layer_cache, kv_mask.shape[1])
      elif cached:
        ck, cv = layer_cache
        key = jax.lax.dynamic_update_slice_in_dim(
            ck, key.transpose(0, 2, 3, 1).astype(ck.dtype), cache_index,
            axis=3)
        val = jax.lax.dynamic_update_slice_in_dim(
            cv, val.transpose(0, 2, 1, 3).astype(cv.dtype), cache_index,
            axis=2)
        key = nn.with_logical_constraint(key, KEY_CACHE_AXES)
        val = nn.with_logical_constraint(val, VALUE_CACHE_AXES)
        layer_cache = (key, val)
        width = kv_mask.shape[1]
        key, val = key[..., :width], val[:, :, :width]
      else:
        axes = ("batch", "length", "kv_heads", "head_dim")
        key = nn.with_logical_constraint(key, axes)
        val = nn.with_logical_constraint(val, axes)
      if not cached and cfg.attention == "dot_product":
        # A full sequence without a cache: cuDNN's flash attention on a GPU.
        out = dot_product_attention(q, key, val, kv_mask, cfg.dtype)
      elif not cached and cfg.attention != "xla":
        # A full sequence without a cache (the scoring and training passes):
        # the kernel never forms the [T, T] scores.
        out = splash.splash_attention(
            q, key, val, kv_mask,
            interpret=cfg.attention == "splash_interpret").astype(
                cfg.dtype).reshape(b, t, h, d)
      else:
        s = key.shape[3] if cached else t
        scores = _attention_scores(q, key, cached) / math.sqrt(d)
        q_slot = cache_index + jnp.arange(t)
        causal = jnp.arange(s)[None, :] <= q_slot[:, None]  # [T, S]
        allowed = causal[None] & kv_mask[:, None, :]  # [B, T, S]
        scores = jnp.where(allowed[:, None, None], scores, _NEG_INF)
        if prefix is None:
          probs = jax.nn.softmax(scores, axis=-1)
          out = _attention_values(probs, val, cached, cfg.dtype)
        else:  # one token a row (checked above): T = 1
          num_prefix = prefix[0].shape[-1]
          probs = jax.nn.softmax(jnp.concatenate(
              [_prefix_scores(q[:, 0], prefix[0], prefix[2])[:, :, :, None]
               / math.sqrt(d), scores], axis=-1), axis=-1)
          out = (_attention_values(probs[..., num_prefix:], val, cached,
                                   cfg.dtype)
                 + _prefix_values(probs[:, :, :, 0, :num_prefix], prefix[1],
                                  cfg.dtype)[:, None])
        out = out.reshape(b, t, h, d)
    out = nn.with_logical_constraint(out, ("batch", "length", "heads",
                                           "head_dim"))
    y = Projection(cfg, (h, d), (e,), ("heads", "head_dim", "embed"),
                   name="o_proj")(out)
    return y, layer_cache


class MLP(nn.Module):
  config: ModelConfig

  @nn.compact
  def __call__(self, x):
    cfg = self.config
    e, f = cfg.hidden_size, cfg.intermediate_size
    gate = Projection(cfg, (e,), (f,), ("embed", "mlp"), name="gate_proj")(x)
    up = Projection(cfg, (e,), (f,), ("embed", "mlp"), name="up_proj")(x)
    hidden = nn.with_logical_constraint(nn.silu(gate) * up,
                                        ("batch", "length", "mlp"))
    return Projection(cfg, (f,), (e,), ("mlp", "embed"), name="down_proj")(
        hidden)


class Block(nn.Module):
  """Pre-norm transformer block (scanned over the layers by `_layer_step`):
  (x, layer_cache, positions, kv_mask, cache_index, prefix) -> (x,
  layer_cache); prefix: None or the layer's (keys, values, mask) of a
  `SharedPrefix`."""
  config: ModelConfig

  @nn.compact
  def __call__(self, x, layer_cache, positions, kv_mask, cache_index,
               prefix=None):
    cfg = self.config
    attn_out, layer_cache = Attention(cfg, name="attn")(
        RMSNorm(cfg, name="attn_norm")(x), positions, kv_mask, layer_cache,
        cache_index, prefix)
    x = x + attn_out
    x = x + MLP(cfg, name="mlp")(RMSNorm(cfg, name="mlp_norm")(x))
    x = nn.with_logical_constraint(x, ("batch", "length", "embed"))
    return x, layer_cache


_REMAT_POLICIES = {
    "full": jax.checkpoint_policies.nothing_saveable,
    "dots": jax.checkpoint_policies.checkpoint_dots,
    "dots_no_batch":
        jax.checkpoint_policies.checkpoint_dots_with_no_batch_dims,
}


def _block_class(config: ModelConfig):
  if config.remat_policy == "none":
    return Block
  return nn.remat(Block, policy=_REMAT_POLICIES[config.remat_policy],
                  prevent_cse=not config.scan_layers)


def _layer_step(block, carry, layer, positions, kv_mask, cache_index,
                prefix):
  """One layer of the scan: carry (x [B, T, E], stacked KVCache or None),
  layer int32 scalar; the cache is updated in place (`StackedLayerCache`);
  prefix: a stacked `SharedPrefix` or None, of which the layer reads its
  own."""
  x, cache = carry
  layer_cache = (None if cache is None else
                 StackedLayerCache(cache.k, cache.v, layer))
  if prefix is not None:
    prefix = (jax.lax.dynamic_index_in_dim(prefix.k, layer, keepdims=False),
              jax.lax.dynamic_index_in_dim(prefix.v, layer, keepdims=False),
              prefix.mask)
  x, layer_cache = block(x, layer_cache, positions, kv_mask, cache_index,
                         prefix)
  if cache is not None:
    cache = KVCache(layer_cache.k, layer_cache.v)
  return (x, cache), None


def _scanned_layers(config: ModelConfig):
  """`_layer_step` scanned over the layers: call it with (block, (x, cache),
  layer indices int32[L], positions, kv_mask, cache_index, prefix); the block's
  parameters are stacked on a leading axis named "layers"."""
  return nn.scan(_layer_step, variable_axes={"params": 0},
                 split_rngs={"params": True},
                 in_axes=(0, nn.broadcast, nn.broadcast, nn.broadcast,
                          nn.broadcast),
                 length=config.num_layers,
                 metadata_params={nn.PARTITION_NAME: "layers"})


class Decoder(nn.Module):
  """Token ids -> logits, optionally reading and writing a KV cache."""
  config: ModelConfig

  def setup(self):
    cfg = self.config
    self.embed = nn.Embed(
        cfg.vocab_size, cfg.hidden_size,
        embedding_init=nn.with_logical_partitioning(_KERNEL_INIT,
                                                    ("vocab", "embed")),
        dtype=jnp.dtype(cfg.dtype), param_dtype=jnp.dtype(cfg.param_dtype))
    block = _block_class(cfg)
    if cfg.scan_layers:
      # One block whose parameters carry a leading layer axis, run by
      # `_scanned_layers`.
      self.layers = block(cfg)
    else:
      self.layers = [block(cfg, name=f"layers_{i}")
                     for i in range(cfg.num_layers)]
    self.final_norm = RMSNorm(cfg)
    if not cfg.tie_embeddings:
      self.lm_head = Projection(cfg, (cfg.hidden_size,), (cfg.vocab_size,),
                                ("embed", "vocab"),
                                out_dtype=cfg.logits_dtype)

  def __call__(self, tokens, positions, kv_mask, cache=None, cache_index=0,
               return_hidden=False, prefix=None):
    """Runs the decoder.

    Args:
      tokens: int32[B, T].
      positions: int32[B, T] RoPE positions (count of real tokens before).
      kv_mask: bool[B, W]: which key slots hold real tokens (W = T without a
        cache); with a cache, the first W of its S slots are attended to (W
        at most S, and past the call's last slot cache_index + T - 1).
      cache: KVCache (stacked or per-layer, see `KVCache`), or None.
      cache_index: int32 scalar, the slot of tokens[:, 0].
      return_hidden: return final-norm hidden states [B, T, E] instead of
        logits (for chunked log-prob computation via `logits`).
      prefix: a `SharedPrefix` over B / G prompts, attended by every row
        before its cache's slots (decode only: T = 1, with a cache); the
        cache then holds each row's own slots only.

    Returns:
      (logits f32[B, T, V] or hidden [B, T, E], updated cache or None).
    """
    if cache is not None:
      slots = cache.k[0].shape[-1]  # layer 0's [B, K, D, S], either layout
      if kv_mask.shape[1] > slots:
        raise ValueError(f"kv_mask {kv_mask.shape} attends to more slots "
                         f"than the KV cache holds ({slots}).")
    x = self.embed(tokens)
    x = nn.with_logical_constraint(x, ("batch", "length", "embed"))
    per_layer = cache is not None and is_per_layer(cache)
    if self.config.scan_layers:
      if per_layer:
        cache = KVCache(jnp.stack(cache.k), jnp.stack(cache.v))
      if prefix is not None and is_per_layer(prefix):
        prefix = SharedPrefix(jnp.stack(prefix.k), jnp.stack(prefix.v),
                              prefix.mask)
      layers = jnp.arange(self.config.num_layers, dtype=jnp.int32)
      (x, cache), _ = _scanned_layers(self.config)(
          self.layers, (x, cache), layers, positions, kv_mask,
          jnp.asarray(cache_index, jnp.int32), prefix)
      if per_layer:
        cache = KVCache(*(tuple(c) for c in cache))
    else:
      new_k, new_v = [], []
      for i, layer in enumerate(self.layers):
        layer_cache = None if cache is None else (cache.k[i], cache.v[i])
        layer_prefix = (None if prefix is None else
                        (prefix.k[i], prefix.v[i], prefix.mask))
        x, layer_cache = layer(x, layer_cache, positions, kv_mask, cache_index,
                               layer_prefix)
        if cache is not None:
          new_k.append(layer_cache[0])
          new_v.append(layer_cache[1])
      if cache is not None:
        cache = (KVCache(tuple(new_k), tuple(new_v)) if per_layer else
                 KVCache(jnp.stack(new_k), jnp.stack(new_v)))
    x = self.final_norm(x)
    if return_hidden:
      return x, cache
    return self.logits(x), cache

  def logits(self, hidden: jax.Array) -> jax.Array:
    """Output projection: hidden [..., E] -> f32 logits [..., V].

    The matmul takes compute-dtype inputs and accumulates into
    `config.logits_dtype` (f32 by default, so bf16 models round no logit)."""
    if self.config.tie_embeddings:
      dtype = jnp.dtype(self.config.dtype)
      logits = tied_output_projection(hidden.astype(dtype),
                                      self.embed.embedding.astype(dtype),
                                      self.config.logits_dtype)
    else:
      logits = self.lm_head(hidden)
    logits = logits.astype(jnp.float32)
    return nn.with_logical_constraint(logits, ("batch", "length", "vocab"))


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def tied_output_projection(hidden: jax.Array, embedding: jax.Array,
                           out_dtype: str) -> jax.Array:
  """Logits [..., V] = hidden [..., E] @ embedding [V, E]^T, accumulated and
  returned in `out_dtype`.

  The VJP takes the cotangent in the inputs' dtype and writes the
  embedding's gradient as the [E, V] product hidden^T @ g, transposed (a
  weight-sized transpose). Differentiated as written above, the gradient is
  the product g^T @ hidden, for which XLA:CPU copied the cotangent g [..., V]
  (logits-sized: [N, 32000] at the small preset) into [V, N] order on every
  training step; from the VJP's form it reads g where it lies.
  """
  return jnp.einsum("...e,ve->...v", hidden, embedding,
                    preferred_element_type=jnp.dtype(out_dtype))


def _tied_output_projection_fwd(hidden, embedding, out_dtype):
  return (tied_output_projection(hidden, embedding, out_dtype),
          (hidden, embedding))


def _tied_output_projection_bwd(out_dtype, residuals, cotangent):
  del out_dtype
  hidden, embedding = residuals
  cotangent = cotangent.astype(hidden.dtype)
  d_hidden = jnp.einsum("...v,ve->...e", cotangent, embedding)
  batch_axes = tuple(range(hidden.ndim - 1))
  d_embedding_t = jax.lax.dot_general(hidden, cotangent,
                                      ((batch_axes, batch_axes), ((), ())))
  return d_hidden, d_embedding_t.T.astype(embedding.dtype)


tied_output_projection.defvjp(_tied_output_projection_fwd,
                              _tied_output_projection_bwd)


def positions_from_mask(mask: jax.Array) -> jax.Array:
  """RoPE positions int32[B, T] for a (left-)padded mask bool[B, T]."""
  return jnp.maximum(jnp.cumsum(mask.astype(jnp.int32), axis=-1) - 1, 0)


def init_boxed(config: ModelConfig, rng: jax.Array):
  """Random parameters as a tree of `nn.Partitioned` leaves (logical axes kept).

  Pass to `genenv_jax.sharding.sharded_init` to create them sharded."""
  return Decoder(config).init(rng, jnp.zeros((1, 1), jnp.int32),
                              jnp.zeros((1, 1), jnp.int32),
                              jnp.ones((1, 1), bool))["params"]


def init_params(config: ModelConfig, rng: jax.Array):
  """Unsharded random parameters (logical metadata stripped)."""
  return nn.unbox(jax.jit(init_boxed, static_argnums=0)(config, rng))


def forward(config: ModelConfig, params, tokens, mask):
  """Full forward over tokens int32[B, T] with mask bool[B, T] -> f32[B, T, V]."""
  logits, _ = Decoder(config).apply({"params": params}, tokens,
                                    positions_from_mask(mask), mask)
  return logits
