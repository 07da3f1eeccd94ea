"""Low-rank adapters (LoRA, Hu et al. 2021) on the decoder's projections.

A targeted projection y = x W gains two small matrices, A: [*in, r] and
B: [r, *out], and computes y = x W + (alpha / r) (x A) B (models/decoder.py's
`Projection`). A starts random (normal, std 1/sqrt(fan_in)) and B at zero, so
an adapted model starts equal to its base. The adapters live in the parameter
tree beside the kernel they adapt (`.../q_proj/{kernel, lora_a, lora_b}`;
under `scan_layers` with the layers' leading axis), with logical axes
(the kernel's input axes + "lora", "lora" + its output axes), so the sharding
rules lay them out like everything else ("lora" is replicated).

How the rest of the code uses them, all through this module:
  - a tree with adapters trains its adapters only: `split` gives (trainable,
    frozen) and `join` puts them back, so an update differentiates the
    trainable part alone (no gradient of a base weight is computed) and the
    optimiser state covers the adapters alone. A tree without adapters is all
    trainable (`split` returns it whole and an empty frozen part): one code
    path for both;
  - the reference policy is the base with its adapters off,
    `without_adapters(params)`: the decoder skips a projection's adapter when
    its tree has none, so no second copy of the weights exists;
  - `fold` writes W + (alpha / r) A B into each kernel and drops the
    adapters: the sampler decodes with base-shaped weights, and an export is
    an ordinary HF checkpoint.

Written here rather than taken from a library: the decoder's projections are
one module with multi-axis kernels ([E, H, D], [H, D, E]) and logical axis
names, and the reference needs the same module with its adapters absent; an
adapter inside that module keeps both with a few lines, where an
op-intercepting library (qwix's LoRA provider rewrites dot_general calls
matched by module path) would add a second parameter-naming and sharding
scheme to keep in step with the decoder's.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import jax
import jax.numpy as jnp

from models.config import ModelConfig

# The leaf names of an adapter's two matrices.
ADAPTERS = ("lora_a", "lora_b")


def scale(config: ModelConfig) -> float:
  """alpha / r: what multiplies an adapter's product."""
  return config.lora_alpha / config.lora_rank


def a_init(in_shape: tuple[int, ...]):
  """The initialiser of A: normal with std 1 / sqrt(fan_in)."""
  return jax.nn.initializers.normal(stddev=1.0 / math.sqrt(math.prod(in_shape)))


def base_config(config: ModelConfig) -> ModelConfig:
  """`config` without adapters (the shapes of the base's parameters)."""
  return config.replace(lora_rank=0)


def has_adapters(params) -> bool:
  """Whether the parameter tree (arrays, shapes or shardings) holds any."""
  if not isinstance(params, Mapping):
    return False
  return any(key in ADAPTERS or has_adapters(value)
             for key, value in params.items())


def split(params) -> tuple[Any, Any]:
  """(trainable, frozen) parts of a parameter tree (nested dicts whose
  leaves may be arrays, ShapeDtypeStructs, shardings or boxed values): with
  adapters, (the adapters, everything else); without, (the tree, {})."""
  if not has_adapters(params):
    return params, {}

  def go(node):
    trainable, frozen = {}, {}
    for key, value in node.items():
      if isinstance(value, Mapping):
        t, f = go(value)
        if t:
          trainable[key] = t
        if f:
          frozen[key] = f
      elif key in ADAPTERS:
        trainable[key] = value
      else:
        frozen[key] = value
    return trainable, frozen
  return go(params)


def join(trainable, frozen):
  """The tree `split` took apart."""
  if not frozen:
    return trainable
  if not trainable:
    return frozen
  out = dict(frozen)
  for key, value in trainable.items():
    out[key] = join(value, frozen[key]) if key in frozen else value
  return out


def without_adapters(params):
  """The base: `params` with every adapter removed (the reference policy)."""
  return split(params)[1] if has_adapters(params) else params


def fold(params, config: ModelConfig):
  """`params` with each adapted kernel replaced by W + (alpha / r) A B (in
  the kernel's dtype, computed in f32) and no adapters: the same function
  as the adapted model, as a base-shaped tree. A tree without adapters is
  returned as it is.

  Shapes: kernel [*lead, *in, *out], A [*lead, *in, r], B [*lead, r, *out]
  (lead: the layers axis of a scanned decoder, or none)."""
  if not has_adapters(params):
    return params
  s = scale(config)

  def go(node):
    if "lora_a" not in node:
      return {key: go(value) if isinstance(value, Mapping) else value
              for key, value in node.items()}
    kernel, a, b = node["kernel"], node["lora_a"], node["lora_b"]
    lead = a.ndim + b.ndim - 2 - kernel.ndim
    batch = tuple(range(lead))
    delta = jax.lax.dot_general(
        a.astype(jnp.float32), b.astype(jnp.float32),
        (((a.ndim - 1,), (lead,)), (batch, batch)))
    out = {key: value for key, value in node.items() if key not in ADAPTERS}
    out["kernel"] = (kernel.astype(jnp.float32) + s * delta).astype(
        kernel.dtype)
    return out
  return go(params)


def restart(params, config: ModelConfig):
  """`params` with its adapters folded into the base and each B reset to
  zero (A kept): the same function, as base weights plus adapters that
  start from nothing. After a warm-start trained the adapters, the
  warm-started model becomes the base, and so the reference."""
  if not has_adapters(params):
    return params
  trainable, _ = split(params)
  folded = fold(params, config)
  restarted = jax.tree_util.tree_map_with_path(
      lambda path, x: jnp.zeros_like(x) if path[-1].key == "lora_b" else x,
      trainable)
  return join(restarted, folded)
