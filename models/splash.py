"""Causal self-attention of a full sequence through splash attention, the
Pallas TPU kernel that ships with jax: scores are formed block by block on
the chip, never as an [S, S] array, forward or backward.

`splash_attention` computes what `models.decoder.Attention` computes
without a cache (causal by slot, keys masked by kv_mask) and is used there
when `ModelConfig.attention` is "splash" (TPU) or "splash_interpret" (the
same kernel run by Pallas' interpreter, on any backend: for tests on a
CPU). Inside a mesh context (`genenv_jax.sharding.in_mesh`) the kernel runs
per device under `shard_map`, rows split as the rules split "batch" and KV
heads as they split "kv_heads".
"""

from __future__ import annotations

import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu.splash_attention import (
    splash_attention_kernel as kernel_lib)
from jax.experimental.pallas.ops.tpu.splash_attention import (
    splash_attention_mask as mask_lib)

# The kernel's tiles along the sequence; a sequence is padded to a multiple.
BLOCK = 128
MAX_BLOCK = 512


def _block(length: int) -> int:
  """The largest tile (a multiple of BLOCK up to MAX_BLOCK) dividing
  `length` (itself a multiple of BLOCK)."""
  for size in range(MAX_BLOCK, BLOCK - 1, -BLOCK):
    if length % size == 0:
      return size
  return BLOCK


def _kernel(groups: int, length: int, interpret: bool):
  """The MQA kernel for `groups` query heads sharing one KV head over
  `length` (padded) slots, causal by slot. Built per trace: it holds the
  mask's block tables as arrays of the trace it is made in."""
  block = _block(length)
  sizes = kernel_lib.BlockSizes(
      block_q=block, block_kv=block, block_kv_compute=block,
      block_q_dkv=block, block_kv_dkv=block, block_kv_dkv_compute=block,
      block_q_dq=block, block_kv_dq=block)
  mask = mask_lib.MultiHeadMask(
      [mask_lib.CausalMask((length, length)) for _ in range(groups)])
  return kernel_lib.make_splash_mqa_single_device(
      mask, block_sizes=sizes, interpret=interpret)


def _local(q, k, v, kv_mask, interpret: bool):
  """One device's share: q [B, T, K, G, D] (already scaled), k, v
  [B, T, K, D], kv_mask bool[B, T] -> [B, T, K, G, D]."""
  b, t, num_kv, groups, d = q.shape
  length = -(-t // BLOCK) * BLOCK
  pad = length - t
  if pad:
    q = jnp.pad(q, ((0, 0), (0, pad), (0, 0), (0, 0), (0, 0)))
    k = jnp.pad(k, ((0, 0), (0, pad), (0, 0), (0, 0)))
    v = jnp.pad(v, ((0, 0), (0, pad), (0, 0), (0, 0)))
    kv_mask = jnp.pad(kv_mask, ((0, 0), (0, pad)))
  # Masked slots (padding, holes) form segment 0: a real query attends only
  # real keys; a masked query attends masked keys (its output is unused).
  segments = kv_mask.astype(jnp.int32)
  kernel = _kernel(groups, length, interpret)

  def one(q_h, k_h, v_h, seg):  # [G, S, D], [S, D], [S, D], [S]
    return kernel(q_h, k_h, v_h,
                  segment_ids=kernel_lib.SegmentIds(q=seg, kv=seg))

  per_head = jax.vmap(one, in_axes=(0, 0, 0, None))   # over K
  per_row = jax.vmap(per_head, in_axes=(0, 0, 0, 0))  # over B
  out = per_row(q.transpose(0, 2, 3, 1, 4), k.transpose(0, 2, 1, 3),
                v.transpose(0, 2, 1, 3), segments)    # [B, K, G, S, D]
  return out.transpose(0, 3, 1, 2, 4)[:, :t]


def splash_attention(q: jax.Array, k: jax.Array, v: jax.Array,
                     kv_mask: jax.Array, interpret: bool = False) -> jax.Array:
  """softmax(q k^T / sqrt(D), causal and kv_mask) v.

  Args:
    q: [B, T, K, G, D] queries (G per KV head); k, v: [B, T, K, D];
    kv_mask: bool[B, T], which slots hold keys.
    interpret: run the kernel in Pallas' interpreter (any backend).
  Returns:
    [B, T, K, G, D] in q's dtype.
  """
  q = q * jnp.asarray(1.0 / math.sqrt(q.shape[-1]), q.dtype)
  k, v = k.astype(q.dtype), v.astype(q.dtype)
  local = functools.partial(_local, interpret=interpret)
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty:
    return local(q, k, v, kv_mask)
  rows, _, heads, _ = nn.logical_to_mesh_axes(
      ("batch", "length", "kv_heads", "head_dim"))
  row_axes = () if rows is None else (rows,) if isinstance(rows, str) else rows
  if q.shape[0] % math.prod(mesh.shape[a] for a in row_axes):
    # Fewer rows than row shards: only the one-row batch that `init_boxed`
    # traces to read the parameters' shapes (e.g. under eval_shape inside
    # the step); it computes nothing.
    return local(q, k, v, kv_mask)
  kv_spec = jax.sharding.PartitionSpec(rows, None, heads, None)
  q_spec = jax.sharding.PartitionSpec(rows, None, heads, None, None)
  return jax.shard_map(
      local, mesh=mesh,
      in_specs=(q_spec, kv_spec, kv_spec, jax.sharding.PartitionSpec(rows)),
      out_specs=q_spec, check_vma=False)(q, k, v, kv_mask)
