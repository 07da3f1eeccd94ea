"""Decoder configuration and presets for the Llama / Qwen2 family.

A `ModelConfig` fully describes the architecture (shapes, RoPE, bias, tying) and
how it is computed (dtypes, remat, layer scan). Presets give the real shapes of
the checkpoints researchers use, plus tiny shapes that run on a CPU.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

REMAT_POLICIES = ("none", "full", "dots", "dots_no_batch")
ATTENTION = ("xla", "splash", "splash_interpret", "dot_product")
# The decoder's projections, the modules a low-rank adapter can target.
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
               "down_proj")


@dataclasses.dataclass(frozen=True)
class RopeScaling:
  """Llama-3 style RoPE frequency scaling ("rope_type": "llama3" in HF)."""

  factor: float = 8.0
  low_freq_factor: float = 1.0
  high_freq_factor: float = 4.0
  original_max_position_embeddings: int = 8192


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Architecture and numerics of one decoder.

  Attributes:
    vocab_size: number of token ids.
    hidden_size: model width E.
    intermediate_size: SwiGLU width F.
    num_layers: number of transformer blocks L.
    num_heads: query heads H.
    num_kv_heads: key/value heads K (H % K == 0; K < H is grouped-query attention).
    head_dim: per-head width D; defaults to hidden_size // num_heads.
    rope_theta: RoPE base frequency.
    rope_scaling: optional Llama-3 frequency scaling.
    rms_norm_eps: RMSNorm epsilon.
    qkv_bias: whether q/k/v projections have a bias (Qwen2: True).
    tie_embeddings: output projection shares the input embedding matrix.
    max_position_embeddings: longest sequence the model is meant for.
    dtype: compute dtype ("float32", "bfloat16").
    param_dtype: parameter (master weight) dtype.
    logits_dtype: dtype the output projection accumulates into and returns
      before logits become f32: "float32" (default: with a bfloat16 compute
      dtype the head's inputs stay bfloat16 and only its result is f32, so
      the sampler's and the trainer's log-probs agree), or "bfloat16"
      (logits rounded to bfloat16, 0.125 apart at |logit| 16-32).
    remat_policy: one of REMAT_POLICIES, applied per block.
    scan_layers: stack the blocks' parameters on a leading "layers" axis and
      run them with `nn.scan` (one compiled block instead of L copies).
    attention: how a pass over a whole sequence (no KV cache: scoring,
      training) attends: "xla" (scores formed as [T, T] arrays), "splash"
      (the Pallas TPU kernel, models/splash.py; TPU only) or
      "splash_interpret" (that kernel in Pallas' interpreter, any backend),
      or "dot_product" (`jax.nn.dot_product_attention`: cuDNN's flash
      attention on a CUDA GPU when dtype is bfloat16 or float16, its XLA
      implementation otherwise; models/decoder.py, `dot_product_attention`).
      Decoding with a cache always takes the "xla" path.
    lora_rank: r of the low-rank adapters on `lora_targets` (models/lora.py);
      0: none.
    lora_alpha: the adapters' product is scaled by lora_alpha / lora_rank.
    lora_targets: the PROJECTIONS that carry an adapter.
  """

  vocab_size: int
  hidden_size: int
  intermediate_size: int
  num_layers: int
  num_heads: int
  num_kv_heads: int
  head_dim: int | None = None
  rope_theta: float = 10000.0
  rope_scaling: RopeScaling | None = None
  rms_norm_eps: float = 1e-6
  qkv_bias: bool = False
  tie_embeddings: bool = False
  max_position_embeddings: int = 2048
  dtype: str = "float32"
  param_dtype: str = "float32"
  logits_dtype: str = "float32"
  remat_policy: str = "none"
  scan_layers: bool = False
  attention: str = "xla"
  lora_rank: int = 0
  lora_alpha: float = 16.0
  lora_targets: tuple[str, ...] = PROJECTIONS

  def __post_init__(self):
    for field in ("vocab_size", "hidden_size", "intermediate_size",
                  "num_layers", "num_heads", "num_kv_heads"):
      if getattr(self, field) <= 0:
        raise ValueError(f"ModelConfig.{field}={getattr(self, field)} must be "
                         "positive.")
    if self.head_dim is None:
      if self.hidden_size % self.num_heads:
        raise ValueError(
            f"ModelConfig: hidden_size={self.hidden_size} is not divisible by "
            f"num_heads={self.num_heads}; set head_dim explicitly.")
      object.__setattr__(self, "head_dim", self.hidden_size // self.num_heads)
    if self.head_dim <= 0 or self.head_dim % 2:
      raise ValueError(f"ModelConfig.head_dim={self.head_dim} must be positive "
                       "and even (RoPE rotates pairs of dimensions).")
    if self.num_heads % self.num_kv_heads:
      raise ValueError(
          f"ModelConfig: num_heads={self.num_heads} must be a multiple of "
          f"num_kv_heads={self.num_kv_heads}.")
    if self.logits_dtype not in ("float32", "bfloat16"):
      raise ValueError(f"ModelConfig.logits_dtype={self.logits_dtype!r}; "
                       "expected 'float32' or 'bfloat16'.")
    if self.remat_policy not in REMAT_POLICIES:
      raise ValueError(
          f"ModelConfig.remat_policy={self.remat_policy!r}; expected one of "
          f"{REMAT_POLICIES}.")
    if self.attention not in ATTENTION:
      raise ValueError(f"ModelConfig.attention={self.attention!r}; expected "
                       f"one of {ATTENTION}.")
    if self.lora_rank < 0:
      raise ValueError(f"ModelConfig.lora_rank={self.lora_rank} must be >= 0 "
                       "(0: no adapters).")
    object.__setattr__(self, "lora_targets", tuple(self.lora_targets))
    unknown = [t for t in self.lora_targets if t not in PROJECTIONS]
    if unknown or (self.lora_rank and not self.lora_targets):
      raise ValueError(f"ModelConfig.lora_targets={self.lora_targets}: "
                       f"expected a non-empty subset of {PROJECTIONS}.")
    if isinstance(self.rope_scaling, Mapping):
      object.__setattr__(self, "rope_scaling", RopeScaling(**self.rope_scaling))

  def replace(self, **changes: Any) -> "ModelConfig":
    return dataclasses.replace(self, **changes)

  def num_params(self) -> int:
    """Total parameter count (embeddings included once when tied)."""
    e, f, h, k, d = (self.hidden_size, self.intermediate_size, self.num_heads,
                     self.num_kv_heads, self.head_dim)
    attn = e * h * d + 2 * e * k * d + h * d * e
    if self.qkv_bias:
      attn += h * d + 2 * k * d
    block = attn + 3 * e * f + 2 * e
    head = 0 if self.tie_embeddings else e * self.vocab_size
    return self.vocab_size * e + self.num_layers * block + e + head

  def num_matmul_params(self) -> int:
    """Weights that take part in matmuls per token: blocks + output projection."""
    e, f, h, k, d = (self.hidden_size, self.intermediate_size, self.num_heads,
                     self.num_kv_heads, self.head_dim)
    block = e * h * d + 2 * e * k * d + h * d * e + 3 * e * f
    return self.num_layers * block + e * self.vocab_size


PRESETS: dict[str, ModelConfig] = {
    # The CPU demo's players (the vocabulary is set by the task domain).
    "demo": ModelConfig(vocab_size=16, hidden_size=128, intermediate_size=384,
                        num_layers=2, num_heads=4, num_kv_heads=2,
                        rope_theta=10000.0, qkv_bias=True, tie_embeddings=True,
                        max_position_embeddings=64),
    # A few-hundred-thousand-parameter model for CPU tests and demos.
    "tiny": ModelConfig(vocab_size=512, hidden_size=128, intermediate_size=512,
                        num_layers=2, num_heads=4, num_kv_heads=2,
                        rope_theta=10000.0, qkv_bias=True, tie_embeddings=True,
                        max_position_embeddings=512),
    # ~40M parameters (16M tied embedding): the benchmarks' "small" shape.
    "small": ModelConfig(vocab_size=32000, hidden_size=512,
                         intermediate_size=1408, num_layers=8, num_heads=8,
                         num_kv_heads=4, rope_theta=10000.0, qkv_bias=True,
                         tie_embeddings=True, max_position_embeddings=2048),
    "qwen2.5-0.5b": ModelConfig(vocab_size=151936, hidden_size=896,
                                intermediate_size=4864, num_layers=24,
                                num_heads=14, num_kv_heads=2,
                                rope_theta=1000000.0, rms_norm_eps=1e-6,
                                qkv_bias=True, tie_embeddings=True,
                                max_position_embeddings=32768),
    "qwen2.5-1.5b": ModelConfig(vocab_size=151936, hidden_size=1536,
                                intermediate_size=8960, num_layers=28,
                                num_heads=12, num_kv_heads=2,
                                rope_theta=1000000.0, rms_norm_eps=1e-6,
                                qkv_bias=True, tie_embeddings=True,
                                max_position_embeddings=32768),
    "qwen2.5-7b": ModelConfig(vocab_size=152064, hidden_size=3584,
                              intermediate_size=18944, num_layers=28,
                              num_heads=28, num_kv_heads=4,
                              rope_theta=1000000.0, rms_norm_eps=1e-6,
                              qkv_bias=True, tie_embeddings=False,
                              max_position_embeddings=32768),
    "llama-3-8b": ModelConfig(vocab_size=128256, hidden_size=4096,
                              intermediate_size=14336, num_layers=32,
                              num_heads=32, num_kv_heads=8,
                              rope_theta=500000.0, rms_norm_eps=1e-5,
                              qkv_bias=False, tie_embeddings=False,
                              max_position_embeddings=8192),
    "llama-3.1-8b": ModelConfig(vocab_size=128256, hidden_size=4096,
                                intermediate_size=14336, num_layers=32,
                                num_heads=32, num_kv_heads=8,
                                rope_theta=500000.0,
                                rope_scaling=RopeScaling(),
                                rms_norm_eps=1e-5, qkv_bias=False,
                                tie_embeddings=False,
                                max_position_embeddings=131072),
}


def get_preset(name: str, **overrides: Any) -> ModelConfig:
  """Returns the preset `name` with `overrides` applied (e.g. dtype='bfloat16')."""
  if name not in PRESETS:
    raise KeyError(f"Unknown model preset {name!r}; known: {sorted(PRESETS)}.")
  return PRESETS[name].replace(**overrides)
