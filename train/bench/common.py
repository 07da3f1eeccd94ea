"""What the benchmarks share: device layouts, FLOP accounting, records, timing
and the peer (Tunix, transformers) workers."""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Iterable, Iterator

import jax
import jax.numpy as jnp
import numpy as np

from genenv_jax import policy
from genenv_jax import sharding
from models import config as model_config_lib
from train.runtime import cpu_flags

SIZES = ("tiny", "small")
PEAK_SIZE = 2048
TRAIN_BATCH, TRAIN_LENGTH = 64, 64
# The sampler benchmark's defaults: prompts, prompt length, new tokens.
SAMPLER_BATCH, SAMPLER_PROMPT_LENGTH, SAMPLER_NEW_TOKENS = 64, 32, 32
# metric -> whether a larger figure is better (throughput) or not (time).
METRICS = {"tokens_per_s": True, "gflops": True, "seconds": False}
TUNIX_PYTHON_ENV = "TUNIX_PYTHON"
RULES = sharding.DEFAULT_RULES  # our side's logical-axis rules


# ------------------------------------------------------------- device layout

LAYOUTS = ("auto", "data", "tensor")
# Matmul weights up to this size stay in a core's L2 cache (a few MiB on
# server CPUs) from one decode step to the next.
CACHE_RESIDENT_BYTES = 4 * 2**20


def tensor_devices(config: model_config_lib.ModelConfig, devices: int) -> int:
  """The most devices, a divisor of `devices`, that every dimension `RULES`
  puts on the tensor axis divides: heads, kv heads, MLP and vocabulary."""
  dims = (config.num_heads, config.num_kv_heads, config.intermediate_size,
          config.vocab_size)
  return max(d for d in range(1, devices + 1)
             if devices % d == 0 and all(n % d == 0 for n in dims))


def mesh_shape(config: model_config_lib.ModelConfig, layout: str,
               decoding: bool) -> dict[str, int]:
  """Our side's mesh for a model: a `sharding.make_mesh` shape.

  layout:
    "data": every device on the data axis; the batch is split, the weights
      replicated.
    "tensor": the weights' heads, MLP and vocabulary split over
      `tensor_devices` devices, the batch over the rest.
    "auto": "tensor" for a program that decodes (`decoding`) with a model
      whose matmul weights exceed CACHE_RESIDENT_BYTES, else "data". Decoding
      reads every weight once per generated token for a few rows each, so once
      the weights leave the cores' caches each core reading only its share is
      what counts; forward + backward reuses each weight for every token of the
      batch, and splitting the weights only adds collectives.
  """
  if layout not in LAYOUTS:
    raise ValueError(f"layout={layout!r}; expected one of {LAYOUTS}.")
  if layout == "auto":
    weight_bytes = (config.num_matmul_params()
                    * jnp.dtype(config.param_dtype).itemsize)
    layout = ("tensor" if decoding and weight_bytes > CACHE_RESIDENT_BYTES
              else "data")
  if layout == "data":
    return {"data": -1}
  return {"data": -1, "tensor": tensor_devices(config, jax.device_count())}


def describe_mesh(mesh) -> str:
  """A record's `mesh` field, e.g. "data=1,fsdp=1,tensor=2"."""
  return ",".join(f"{axis}={size}" for axis, size in mesh.shape.items())


# ----------------------------------------------------------- FLOP accounting


def forward_flops_per_token(config: model_config_lib.ModelConfig,
                            context: float) -> float:
  """FLOPs of one token's forward pass attending to `context` positions.

  2 per matmul weight (`num_matmul_params`: blocks and output projection,
  embedding lookup excluded) plus attention: q.k and p.v, each H * D
  multiply-adds per attended position and layer.
  """
  attention = (4 * config.num_layers * config.num_heads * config.head_dim
               * context)
  return 2 * config.num_matmul_params() + attention


def train_flops_per_token(config: model_config_lib.ModelConfig,
                          context: float) -> float:
  """Forward + backward FLOPs of one token: 3 forward passes (6 per weight)."""
  return 3 * forward_flops_per_token(config, context)


def sampler_context(prompt_length: int, new_tokens: int) -> float:
  """Mean positions attended per generated token: token t (0-based) comes
  from the forward pass at position P - 1 + t, which attends P + t."""
  return prompt_length + (new_tokens - 1) / 2


def generation_flops(config: model_config_lib.ModelConfig,
                     prompt_length: int, new_tokens: int) -> float:
  """Forward FLOPs of one row's generation, prompt included: the P prompt
  tokens through the blocks (prefill; the output projection only at the
  last, for the first new token), then N - 1 decode steps, step k feeding
  token k at slot P + k (attending P + k + 1 positions).

  `forward_flops_per_token` at `sampler_context` counts only one forward
  pass per generated token, the `limit` of the sampler's records; this adds
  the prefill (at P = N = 32: 83% more FLOPs for tiny, 57% for small).
  """
  head = 2 * config.hidden_size * config.vocab_size
  prefill = head + sum(forward_flops_per_token(config, position + 1) - head
                       for position in range(prompt_length))
  decode = sum(forward_flops_per_token(config, prompt_length + step + 1)
               for step in range(new_tokens - 1))
  return prefill + decode


def causal_context(length: int) -> float:
  """Mean positions attended per token of a causal pass over `length`."""
  return (length + 1) / 2


# ------------------------------------------------------------------ records


def make_record(bench: str, size: str, metric: str, ours: float, *,
                hf: float | None = None, tunix: float | None = None,
                limit: float | None = None, **details: Any) -> dict:
  """One result line; ratios and the limit share read "> 1 / higher = we are
  faster" for throughput and time metrics alike.

  Args:
    metric: a key of METRICS.
    ours, hf, tunix: figures in the metric's unit (peers None when absent).
    limit: the best possible figure at the measured peak, or None.
    details: further fields (shapes, mode, repeats, ...).
  """
  if metric not in METRICS:
    raise ValueError(f"metric={metric!r}; expected one of {sorted(METRICS)}.")
  higher_is_better = METRICS[metric]

  def ratio(mine: float, other: float) -> float:
    return mine / other if higher_is_better else other / mine

  record = {"bench": bench, "size": size, "metric": metric,
            "ours": round_figure(ours)}
  for name, peer in (("hf", hf), ("tunix", tunix)):
    if peer is not None:
      record[name] = round_figure(peer)
  for name, peer in (("hf", hf), ("tunix", tunix)):
    if peer is not None:
      record[f"ratio_{name}"] = round(ratio(ours, peer), 3)
  if limit is not None:
    record["limit"] = round_figure(limit)
    record["frac_of_limit"] = round(ratio(ours, limit), 3)
  record.update(details)
  return record


def round_figure(value: float) -> float:
  return round(float(value), 4 if abs(value) < 10 else 1)


def markdown_table(records: Iterable[dict]) -> str:
  """A markdown table of benchmark records (peak, then one row per figure)."""
  rows = ["| bench | size | mode / phase | metric | ours | HF | Tunix | "
          "ours vs HF | ours vs Tunix | share of limit |",
          "|---|---|---|---|---|---|---|---|---|---|"]

  def cell(record, key, fmt="{:g}"):
    return fmt.format(record[key]) if key in record else "–"

  for r in records:
    rows.append("| " + " | ".join([
        r["bench"], r["size"], r.get("mode", r.get("phase", "")),
        r["metric"], cell(r, "ours"), cell(r, "hf"), cell(r, "tunix"),
        cell(r, "ratio_hf", "{:.2f}×"), cell(r, "ratio_tunix", "{:.2f}×"),
        cell(r, "frac_of_limit", "{:.0%}") if "frac_of_limit" in r else "–",
    ]) + " |")
  return "\n".join(rows)


# ------------------------------------------------------------------- timing


def seconds_of(fn: Callable[[], object]) -> float:
  start = time.perf_counter()
  fn()
  return time.perf_counter() - start


def time_alternately(sides: dict[str, Callable[[int], object]],
                     repeats: int) -> dict[str, float]:
  """Median seconds per side; each repeat runs every side once, in turn.

  sides: name -> fn(repeat) (already warmed up); a side whose call raises is
  dropped (reported on stderr).
  """
  times = {name: [] for name in sides}
  for repeat in range(1, repeats + 1):
    for name, fn in list(sides.items()):
      try:
        times[name].append(seconds_of(lambda: fn(repeat)))  # pylint: disable=cell-var-from-loop
      except Exception as error:  # pylint: disable=broad-except
        print(f"bench: {name} failed ({error}); leaving it out.",
              file=sys.stderr)
        del sides[name]
        del times[name]
  return {name: statistics.median(t) for name, t in times.items()}


PEAK_REPEATS = 10


def measure_peak() -> float:
  """Best GFLOP/s of PEAK_REPEATS jitted float32 PEAK_SIZE^2 matmuls (the
  best, not the median: a peak, and the least disturbed by other load)."""
  rng = np.random.default_rng(0)
  a = jnp.asarray(rng.standard_normal((PEAK_SIZE, PEAK_SIZE), np.float32))
  b = jnp.asarray(rng.standard_normal((PEAK_SIZE, PEAK_SIZE), np.float32))
  matmul = jax.jit(jnp.matmul)
  jax.block_until_ready(matmul(a, b))
  best = min(seconds_of(lambda: jax.block_until_ready(matmul(a, b)))
             for _ in range(PEAK_REPEATS))
  return 2 * PEAK_SIZE**3 / best / 1e9


# -------------------------------------------------------------------- peers


class TunixWorker:
  """`train/bench/tunix_side.py` in $TUNIX_PYTHON, driven by JSON lines.

  Each request is one line on the worker's stdin, answered by one line on
  its stdout: {"op": "setup", ...} builds and warms up a benchmark,
  {"op": "run", "repeat": k} times one run of it ({"seconds": t}).

  The worker compiles with this process's XLA flags but on `devices` CPU
  devices, by default one: Tunix's own layout for several devices shards the
  weights over them (its fsdp axis), and on this project's 2-core machine
  that ran every Tunix benchmark slower than one device did (docs/performance.md,
  "Devices and layouts"; `--tunix_devices`).
  """

  def __init__(self, python: str, devices: int = 1):
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          "tunix_side.py")
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=cpu_flags.with_device_count(
                   os.environ.get("XLA_FLAGS", ""), devices))
    self._process = subprocess.Popen(
        [python, "-u", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True, env=env)

  def request(self, **message) -> dict:
    self._process.stdin.write(json.dumps(message) + "\n")
    self._process.stdin.flush()
    line = self._process.stdout.readline()
    if not line:
      raise RuntimeError(f"the Tunix worker exited (code "
                         f"{self._process.wait()}).")
    reply = json.loads(line)
    if "error" in reply:
      raise RuntimeError(f"Tunix worker: {reply['error']}")
    return reply

  def close(self) -> None:
    self._process.stdin.close()
    self._process.wait()


@contextlib.contextmanager
def tunix_worker(devices: int = 1) -> Iterator[TunixWorker | None]:
  """A Tunix worker for $TUNIX_PYTHON on `devices` CPU devices (None when
  unset), closed on exit."""
  python = os.environ.get(TUNIX_PYTHON_ENV)
  if not python:
    yield None
    return
  worker = TunixWorker(python, devices)
  try:
    yield worker
  finally:
    worker.close()


def tunix_side(worker: TunixWorker | None, **setup
               ) -> Callable[[int], object] | None:
  """A timed side for `time_alternately` running one Tunix benchmark, or
  None when there is no worker or its setup fails (reported on stderr)."""
  if worker is None:
    return None
  try:
    worker.request(op="setup", **setup)
  except Exception as error:  # pylint: disable=broad-except
    print(f"bench: Tunix {setup.get('bench')} setup failed: {error}",
          file=sys.stderr)
    return None

  def run(repeat: int):
    return worker.request(op="run", repeat=repeat)
  return run


def model_shapes(config: model_config_lib.ModelConfig) -> dict:
  """The architecture fields a peer needs to build the same Qwen2 model."""
  return dict(vocab_size=config.vocab_size, hidden_size=config.hidden_size,
              intermediate_size=config.intermediate_size,
              num_layers=config.num_layers, num_heads=config.num_heads,
              num_kv_heads=config.num_kv_heads, head_dim=config.head_dim,
              rope_theta=config.rope_theta, rms_norm_eps=config.rms_norm_eps,
              tie_embeddings=config.tie_embeddings)


def qwen2_hf_config(config: model_config_lib.ModelConfig):
  """The transformers Qwen2Config with `config`'s shapes (Qwen2: q/k/v bias)."""
  import transformers  # pylint: disable=g-import-not-at-top
  if not config.qkv_bias:
    raise ValueError("Qwen2 needs ModelConfig.qkv_bias=True.")
  if config.rope_scaling is not None:
    raise ValueError("The benchmarks expect rope_scaling=None.")
  return transformers.Qwen2Config(
      vocab_size=config.vocab_size, hidden_size=config.hidden_size,
      intermediate_size=config.intermediate_size,
      num_hidden_layers=config.num_layers,
      num_attention_heads=config.num_heads,
      num_key_value_heads=config.num_kv_heads, head_dim=config.head_dim,
      max_position_embeddings=config.max_position_embeddings,
      rope_theta=config.rope_theta, rms_norm_eps=config.rms_norm_eps,
      tie_word_embeddings=config.tie_embeddings, use_sliding_window=False,
      dtype="float32")


def twin_models(config: model_config_lib.ModelConfig, seed: int, mesh):
  """A random HF Qwen2ForCausalLM of `config` and our parameters for it.

  Returns:
    (our params read from the HF model's checkpoint and laid out on `mesh`
    per `RULES`, the HF model in eval mode).
  """
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  from train import build  # pylint: disable=g-import-not-at-top
  torch.manual_seed(seed)
  hf_model = transformers.Qwen2ForCausalLM(qwen2_hf_config(config)).eval()
  with tempfile.TemporaryDirectory() as hf_dir:
    hf_model.save_pretrained(hf_dir)
    params = build.init_player_params(config, jax.random.PRNGKey(seed), mesh,
                                     RULES, hf_dir)
  return params, hf_model

def next_token_loss(config: model_config_lib.ModelConfig, params,
                    tokens: jax.Array) -> jax.Array:
  """Mean cross-entropy of tokens[:, 1:] given their prefixes (all real), as
  the players' updates score responses (`policy.nll_loss`: the first token
  as the prompt, the rest as the response)."""
  real = jnp.ones(tokens.shape, bool)
  return policy.nll_loss(config, params, tokens[:, :1], real[:, :1],
                         tokens[:, 1:], real[:, 1:])
