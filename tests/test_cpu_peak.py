"""train/bench/cpu_peak.py: a GPU preset's step compiled by XLA:CPU, its
memory per device, with and without the attention's [T, T] scores."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from configs import qwen_gpu, qwen_tpu
from models import decoder
from tests.test_text_domain import make_tokenizer
from train.bench import cpu_peak


def _tiny_gpu_config(tmp_path):
  """The 0.5b preset's batches and settings with tiny players and widths
  and one decode window."""
  config = qwen_gpu.get_config("0.5b")
  make_tokenizer(tmp_path / "tokenizer")
  config.task.tokenizer_dir = str(tmp_path / "tokenizer")
  config.task.update(max_task_tokens=24, max_answer_tokens=8,
                     max_response_tokens=16, max_written_tokens=48,
                     max_simulator_tokens=48)
  # One decode loop per sampler instead of 16: a smaller program to compile.
  config.coevolve.decode_windows = 1
  for player in (config.agent, config.simulator):
    overrides = dict(player.model_overrides, **qwen_tpu.CPU_SHAPES)
    del overrides["vocab_size"]
    player.model_overrides = ml_collections.ConfigDict(overrides)
  return config


# Two compiles of the whole step: ~90 s on a 2-core host, so asked for:
#   pytest -m benchmark tests/test_cpu_peak.py
@pytest.mark.benchmark
def test_the_stand_in_leaves_out_the_attention_scores(tmp_path):
  config = _tiny_gpu_config(tmp_path)
  attention = decoder.dot_product_attention
  with_scores = cpu_peak.step_memory(config)
  without = cpu_peak.step_memory(config, stub_attention=True)
  assert decoder.dot_product_attention is attention  # restored
  for memory in (with_scores, without):
    assert memory["peak"] == (memory["argument"] + memory["output"]
                              - memory["alias"] + memory["temp"])
    assert memory["alias"] == memory["argument"] > 0  # the donated state
  assert without["argument"] == with_scores["argument"]
  assert without["temp"] < with_scores["temp"]


def test_the_stand_in_needs_the_dot_product_attention(tmp_path):
  config = _tiny_gpu_config(tmp_path)
  config.simulator.model_overrides.attention = "xla"
  attention = decoder.dot_product_attention
  with pytest.raises(ValueError, match=r"config\.simulator\.model_overrides"
                     r"\.attention='xla'"):
    cpu_peak.step_memory(config, stub_attention=True)
  assert decoder.dot_product_attention is attention  # restored


def test_the_stand_in_forms_no_score_array():
  b, t, k, g, d = 2, 48, 2, 3, 8
  q = jnp.ones((b, t, k, g, d), jnp.float32)
  kv = jnp.ones((b, t, k, d), jnp.float32)
  mask = jnp.ones((b, t), bool)
  out = cpu_peak._no_scores(q, kv, 2 * kv, mask, "bfloat16")
  assert out.shape == (b, t, k * g, d) and out.dtype == jnp.bfloat16
  np.testing.assert_array_equal(np.asarray(out, np.float32), 3.0)
  jaxpr = jax.make_jaxpr(cpu_peak._no_scores, static_argnums=4)(
      q, kv, kv, mask, "bfloat16")
  shapes = [v.aval.shape for eqn in jaxpr.eqns for v in eqn.outvars]
  assert not any(shape.count(t) > 1 for shape in shapes)
  # The real one forms f32 [T, T] scores (per row and head) in its XLA
  # implementation.
  scores = re.compile(rf"tensor<[0-9x]*x{t}x{t}xf32>")
  lowered = lambda fn: jax.jit(fn, static_argnums=4).lower(
      q, kv, kv, mask, "float32").as_text()
  assert scores.search(lowered(decoder.dot_product_attention))
  assert not scores.search(lowered(cpu_peak._no_scores))
