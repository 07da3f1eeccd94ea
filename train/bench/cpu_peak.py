"""A run's co-evolution step compiled by XLA:CPU on this host, with abstract
arguments: its memory per device, for presets of accelerators this host lacks
(configs/qwen_gpu.py; a TPU slice has train/bench/compile_check.py, with
libtpu's compiler).

  XLA_FLAGS=--xla_force_host_platform_device_count=N JAX_PLATFORMS=cpu \\
  PYTHONPATH=. python -m train.bench.cpu_peak --config=configs/qwen_gpu.py:0.5b \\
      --config.task.tokenizer_dir=DIR [--stub_attention]

N: the GPUs the preset runs on (1 for 0.5b, 8 for 7b). The state and the
step are compile_check's (`Setup`: abstract parameters, optimizer state and
pool with the run's shardings; nothing allocated, no weight built). Prints
per device: argument, output, aliased (donated state) and temporary bytes,
and peak = argument + output - aliased + temporary, as XLA:CPU assigns the
buffers; another backend's compiler assigns them its own way.

On a CPU the "dot_product" attention runs jax.nn.dot_product_attention's XLA
implementation, which forms f32[B, H, T, T] scores that cuDNN's flash
attention (the GPU's) does not. `--stub_attention` replaces that attention by
a stand-in that forms no [T, T] array (each query head gets its KV head's
key + value: not a model, a memory bound): the step's memory without the
scores.
"""

from __future__ import annotations

import sys
import types

from absl import app
from absl import flags
import jax
from ml_collections import config_flags
import numpy as np

from genenv_jax import coevolve
from genenv_jax import scripted
from models import decoder
from train.bench import compile_check

FLAGS = flags.FLAGS
GIB = 2**30


def _no_scores(q, key, val, kv_mask, dtype):
  """[B, T, K * G, D] from q [B, T, K, G, D] and key, val [B, T, K, D],
  every input used, no [T, T] array formed."""
  del kv_mask
  b, t, k, g, d = q.shape
  out = (q.astype(dtype) * 0 + (key + val).astype(dtype)[:, :, :, None, :])
  return out.reshape(b, t, k * g, d)


def step_memory(config, stub_attention: bool = False) -> dict[str, int]:
  """Compiles `config`'s coevolve_step over all of this host's devices;
  returns its per-device bytes: argument, output, alias, temp and peak."""
  attention = decoder.dot_product_attention
  if stub_attention:
    decoder.dot_product_attention = _no_scores
  try:
    return _step_memory(config, stub_attention)
  finally:
    decoder.dot_product_attention = attention


def _step_memory(config, stub_attention: bool) -> dict[str, int]:
  # Setup reads a chip's peak rates for compile_check's roofline only.
  chip = types.SimpleNamespace(peak_tflops=1.0, hbm_gbps=1.0)
  setup = compile_check.Setup(config, types.SimpleNamespace(chip=chip),
                              jax.devices())
  for player, model in (("agent", setup.players.agent_model),
                        ("simulator", setup.players.simulator_model)):
    if stub_attention and model.attention != "dot_product":
      raise ValueError(
          f"config.{player}.model_overrides.attention={model.attention!r}: "
          "--stub_attention replaces the 'dot_product' attention only.")
  domain = setup.domain
  bank = (scripted.LevelBank(
      np.zeros((domain.max_difficulty, config.coevolve.scripted_bank_per_level,
                domain.task_len), np.int32),
      np.ones((domain.max_difficulty,), np.int32))
          if config.coevolve.generation in scripted.SCRIPTED_GENERATIONS
          else None)
  step = coevolve.jit_step(
      coevolve.make_step(config, domain, setup.players, bank),
      setup.shardings, setup.mesh, setup.rules)
  memory = step.fn.lower(setup.state).compile().memory_analysis()
  out = {"argument": memory.argument_size_in_bytes,
         "output": memory.output_size_in_bytes,
         "alias": memory.alias_size_in_bytes,
         "temp": memory.temp_size_in_bytes}
  out["peak"] = out["argument"] + out["output"] - out["alias"] + out["temp"]
  return out


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  memory = step_memory(FLAGS.config, FLAGS.stub_attention)
  mesh = dict(FLAGS.config.mesh)
  print(f"coevolve_step on {jax.device_count()} {jax.default_backend()} "
        f"device(s), mesh {mesh}, attention "
        f"{'stand-in' if FLAGS.stub_attention else 'as configured'}; "
        "GiB per device: "
        + " ".join(f"{k}={v / GIB:.2f}" for k, v in memory.items()))
  sys.stdout.flush()


if __name__ == "__main__":
  config_flags.DEFINE_config_file(
      "config", "configs/qwen_gpu.py", "Path to an ml_collections config file.",
      lock_config=True)
  flags.DEFINE_bool("stub_attention", False, "Replace the dot_product "
                    "attention by a stand-in that forms no [T, T] scores.")
  app.run(main)
