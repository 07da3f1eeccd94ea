"""Benchmarks against peer stacks on this machine, printed as JSON lines.

  python -m train.bench {peak,sampler,train,step,all} [--sizes tiny,small]
      [--repeats 3] [--layout auto] [--tunix_devices 1] [--markdown]
  python -m train.bench table RESULTS.jsonl   # markdown table of saved output

Sub-benchmarks (model presets `tiny` and `small` as random Qwen2 models):
  peak: GFLOP/s of a jitted float32 2048 x 2048 matmul (the best of 10);
    the hardware limit every other figure is compared with (every run
    measures it first). Then JAX's matmul against torch's at that shape and
    at the small preset's output projection in `train` (4096 x 512 x 32000).
  sampler: generated tokens/s of `genenv_jax.sampling` against transformers'
    `generate`: batch 64, 32-token random prompts, 32 new tokens, no stop
    token, once sampling at temperature 1 and once greedy.
  train: forward + backward tokens/s (next-token cross-entropy gradients, no
    optimiser) on 64 x 64 tokens, against the same in torch.
  step: seconds per jitted co-evolution step (`train/bench_step.py`), with
    the time of each phase compiled on its own; Tunix's figure is one step of
    its GRPO learner at the agent's batch.
Every record is one JSON object: bench, size, metric, ours, the peers'
figures (hf, tunix) where the peer has one, ratio_hf / ratio_tunix ("> 1 = we
are faster": throughput ours / peer, time peer / ours), limit (the best
figure the measured peak allows: 2 FLOPs per matmul weight and token forward,
6 forward + backward, output projection included, embedding lookup excluded,
plus attention; the sampler's counts generated tokens only, leaving out the
prompts' prefill, which every side does too) and frac_of_limit (the share of
it reached). Sampler records also carry ours_gflops, the FLOP rate of our
runs with the prefill counted (`generation_flops`), to set against the peak.

All sides are compiled and warmed up first, then timed alternately (ours, HF,
Tunix, ours, ...); each figure is the median of --repeats. torch runs on
--threads threads (default: all cores) with its OpenMP settings as the
environment leaves them (OMP_WAIT_POLICY=PASSIVE, say, slows HF by 5-10% at
these shapes). Tunix is measured when the environment variable TUNIX_PYTHON
names a Python with `google-tunix` installed: it runs `train/bench_tunix.py`
as a worker process (Tunix pins library versions this project's environment
does not have) on --tunix_devices CPU devices (default 1). Without
TUNIX_PYTHON, or where the worker fails, the Tunix keys are absent. Our side
runs on every device the process has (one per core, `genenv_jax.cpu_flags`)
in the layout --layout names (`mesh_shape`; each record's `mesh`): by default
the batch split over them, but for decoding (sampler, step) a model whose
weights outgrow the cores' caches, the weights split over them.
"""

from __future__ import annotations

import argparse
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

from genenv_jax import cpu_flags
from genenv_jax import policy
from genenv_jax import sampling
from genenv_jax import sharding
from models import config as model_config_lib

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
            "ours": _round(ours)}
  for name, peer in (("hf", hf), ("tunix", tunix)):
    if peer is not None:
      record[name] = _round(peer)
  for name, peer in (("hf", hf), ("tunix", tunix)):
    if peer is not None:
      record[f"ratio_{name}"] = round(ratio(ours, peer), 3)
  if limit is not None:
    record["limit"] = _round(limit)
    record["frac_of_limit"] = round(ratio(ours, limit), 3)
  record.update(details)
  return record


def _round(value: float) -> float:
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


def _seconds(fn: Callable[[], object]) -> float:
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
        times[name].append(_seconds(lambda: fn(repeat)))  # pylint: disable=cell-var-from-loop
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
  best = min(_seconds(lambda: jax.block_until_ready(matmul(a, b)))
             for _ in range(PEAK_REPEATS))
  return 2 * PEAK_SIZE**3 / best / 1e9


# -------------------------------------------------------------------- peers


class TunixWorker:
  """`train/bench_tunix.py` in $TUNIX_PYTHON, driven by JSON lines.

  Each request is one line on the worker's stdin, answered by one line on
  its stdout: {"op": "setup", ...} builds and warms up a benchmark,
  {"op": "run", "repeat": k} times one run of it ({"seconds": t}).

  The worker compiles with this process's XLA flags but on `devices` CPU
  devices, by default one: Tunix's own layout for several devices shards the
  weights over them (its fsdp axis), and on this project's 2-core machine
  that ran every Tunix benchmark slower than one device did (README,
  "Performance"; `--tunix_devices`).
  """

  def __init__(self, python: str, devices: int = 1):
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          "bench_tunix.py")
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


def _qwen2_hf_config(config: model_config_lib.ModelConfig):
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


def _twin_models(config: model_config_lib.ModelConfig, seed: int, mesh):
  """A random HF Qwen2ForCausalLM of `config` and our parameters for it.

  Returns:
    (our params read from the HF model's checkpoint and laid out on `mesh`
    per `RULES`, the HF model in eval mode).
  """
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  from train import loop  # pylint: disable=g-import-not-at-top
  torch.manual_seed(seed)
  hf_model = transformers.Qwen2ForCausalLM(_qwen2_hf_config(config)).eval()
  with tempfile.TemporaryDirectory() as hf_dir:
    hf_model.save_pretrained(hf_dir)
    params = loop.init_player_params(config, jax.random.PRNGKey(seed), mesh,
                                     RULES, hf_dir)
  return params, hf_model


# ----------------------------------------------------------- sub-benchmarks


def matmul_gflops(m: int, k: int, n: int, repeats: int
                  ) -> dict[str, float]:
  """Best GFLOP/s of a float32 [m, k] x [k, n] matmul in JAX (jitted) and in
  torch (`hf`: the library HF's models run on), timed alternately."""
  import torch  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  a = rng.standard_normal((m, k), np.float32)
  b = rng.standard_normal((k, n), np.float32)
  jax_a, jax_b = jnp.asarray(a), jnp.asarray(b)
  torch_a, torch_b = torch.from_numpy(a), torch.from_numpy(b)
  matmul = jax.jit(jnp.matmul)
  sides = {"ours": lambda _: jax.block_until_ready(matmul(jax_a, jax_b)),
           "hf": lambda _: torch.mm(torch_a, torch_b)}
  best = {name: float("inf") for name in sides}
  for repeat in range(repeats + 1):  # repeat 0 warms up
    for name, fn in sides.items():
      seconds = _seconds(lambda: fn(repeat))  # pylint: disable=cell-var-from-loop
      if repeat:
        best[name] = min(best[name], seconds)
  return {name: 2 * m * k * n / s / 1e9 for name, s in best.items()}


def bench_peak(args: argparse.Namespace, peak: float) -> Iterable[dict]:
  """The peak every limit uses, then JAX against torch at that square shape
  and at the output projection of the small preset's training benchmark (its
  largest matmuls: [batch x length, hidden] x [hidden, vocab])."""
  yield make_record("peak", str(PEAK_SIZE), "gflops", peak,
                    repeats=PEAK_REPEATS, dtype="float32",
                    backend=jax.default_backend())
  small = model_config_lib.get_preset("small")
  for m, k, n in ((PEAK_SIZE, PEAK_SIZE, PEAK_SIZE),
                  (TRAIN_BATCH * TRAIN_LENGTH, small.hidden_size,
                   small.vocab_size)):
    rates = matmul_gflops(m, k, n, args.repeats)
    yield make_record("peak", f"{m}x{k}x{n}", "gflops", rates["ours"],
                      hf=rates["hf"], mode="matmul", repeats=args.repeats,
                      torch_threads=args.threads, dtype="float32",
                      backend=jax.default_backend())


def bench_sampler(args: argparse.Namespace, peak: float) -> Iterable[dict]:
  """Generated tokens/s of our sampler vs HF generate (and Tunix)."""
  with tunix_worker(args.tunix_devices) as tunix:
    for size in args.sizes:
      yield from _sampler_records(args, peak, tunix, size)


def _sampler_records(args: argparse.Namespace, peak: float,
                     tunix: TunixWorker | None, size: str) -> Iterable[dict]:
  import torch  # pylint: disable=g-import-not-at-top
  batch, prompt_length, new_tokens = (args.batch, args.prompt_length,
                                      args.new_tokens)
  config = model_config_lib.get_preset(size)
  mesh = sharding.make_mesh(mesh_shape(config, args.layout, decoding=True))
  params, hf_model = _twin_models(config, args.seed, mesh)
  rng = np.random.default_rng(args.seed)
  host_prompts = rng.integers(0, config.vocab_size, (batch, prompt_length),
                              dtype=np.int32)
  placed = sharding.shard_batch(
      {"prompts": host_prompts,
       "prompt_mask": np.ones_like(host_prompts, bool)}, mesh, RULES)
  prompts, prompt_mask = placed["prompts"], placed["prompt_mask"]
  hf_prompts = torch.from_numpy(host_prompts.astype(np.int64))
  hf_mask = torch.ones_like(hf_prompts)
  limit = peak * 1e9 / forward_flops_per_token(
      config, sampler_context(prompt_length, new_tokens))
  for mode, temperature in (("sample", 1.0), ("greedy", 0.0)):
    sampler = sampling.make_sampler(
        config, sampling.SamplingConfig(max_new_tokens=new_tokens,
                                        temperature=temperature),
        mesh=mesh, rules=RULES)
    hf_options = (dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0)
                  if mode == "sample" else dict(do_sample=False))

    def ours(repeat: int):
      out = sampler(params, prompts, prompt_mask,
                    jax.random.key(args.seed + repeat))
      return jax.block_until_ready(out)

    def hf(repeat: int):
      torch.manual_seed(args.seed + repeat)
      with torch.inference_mode():
        return hf_model.generate(
            input_ids=hf_prompts, attention_mask=hf_mask,
            min_new_tokens=new_tokens, max_new_tokens=new_tokens,
            pad_token_id=0, **hf_options)

    generated = ours(0)
    hf_generated = hf(0)
    if int(np.sum(generated.lengths)) != batch * new_tokens:
      raise RuntimeError(f"our sampler generated {generated.lengths} "
                         f"tokens per row, expected {new_tokens}.")
    if tuple(hf_generated.shape) != (batch, prompt_length + new_tokens):
      raise RuntimeError(f"HF generate returned shape "
                         f"{tuple(hf_generated.shape)}.")
    sides = {"ours": ours, "hf": hf}
    tunix_run = tunix_side(
        tunix, bench="sampler", model=model_shapes(config), batch=batch,
        prompt_length=prompt_length, new_tokens=new_tokens,
        temperature=temperature, seed=args.seed)
    if tunix_run is not None:
      sides["tunix"] = tunix_run
    seconds = time_alternately(sides, args.repeats)
    tokens = batch * new_tokens
    rates = {name: tokens / s for name, s in seconds.items()}
    # FLOP/s of every forward pass our runs made, prefill included.
    ours_gflops = (generation_flops(config, prompt_length, new_tokens)
                   * rates["ours"] / new_tokens / 1e9)
    yield make_record(
        "sampler", size, "tokens_per_s", rates["ours"], hf=rates.get("hf"),
        tunix=rates.get("tunix"), limit=limit, mode=mode,
        ours_gflops=_round(ours_gflops), batch=batch,
        prompt_length=prompt_length, new_tokens=new_tokens,
        repeats=args.repeats, torch_threads=args.threads,
        devices=jax.device_count(), mesh=describe_mesh(mesh),
        backend=jax.default_backend())


def next_token_loss(config: model_config_lib.ModelConfig, params,
                    tokens: jax.Array) -> jax.Array:
  """Mean cross-entropy of tokens[:, 1:] given their prefixes (all real), as
  the players' updates score responses (`policy.nll_loss`: the first token
  as the prompt, the rest as the response)."""
  real = jnp.ones(tokens.shape, bool)
  return policy.nll_loss(config, params, tokens[:, :1], real[:, :1],
                         tokens[:, 1:], real[:, 1:])


def bench_train(args: argparse.Namespace, peak: float) -> Iterable[dict]:
  """Forward + backward tokens/s on TRAIN_BATCH x TRAIN_LENGTH tokens."""
  with tunix_worker(args.tunix_devices) as tunix:
    for size in args.sizes:
      yield _train_record(args, peak, tunix, size)


def _train_record(args: argparse.Namespace, peak: float,
                  tunix: TunixWorker | None, size: str) -> dict:
  import torch  # pylint: disable=g-import-not-at-top
  config = model_config_lib.get_preset(size)
  mesh = sharding.make_mesh(mesh_shape(config, args.layout, decoding=False))
  params, hf_model = _twin_models(config, args.seed, mesh)
  host_tokens = np.random.default_rng(args.seed).integers(
      0, config.vocab_size, (TRAIN_BATCH, TRAIN_LENGTH), dtype=np.int32)
  tokens = sharding.shard_batch({"tokens": host_tokens}, mesh,
                                RULES)["tokens"]
  # The gradients come back laid out as the parameters, as an update uses
  # them (replicated on the data layout: summed over the devices).
  grad_fn = jax.jit(
      sharding.in_mesh(mesh, RULES)(jax.value_and_grad(
          lambda p, t: next_token_loss(config, p, t))),
      out_shardings=(sharding.replicated(mesh),
                     jax.tree.map(lambda p: p.sharding, params)))
  hf_model.train()
  hf_tokens = torch.from_numpy(host_tokens.astype(np.int64))

  def ours(_):
    return jax.block_until_ready(grad_fn(params, tokens))

  def hf(_):
    hf_model.zero_grad(set_to_none=True)
    loss = hf_model(input_ids=hf_tokens, labels=hf_tokens).loss
    loss.backward()
    return loss

  our_loss, _ = ours(0)
  hf_loss = hf(0).item()
  if not abs(float(our_loss) - hf_loss) < 1e-3 * max(1.0, abs(hf_loss)):
    raise RuntimeError(f"losses differ: ours {float(our_loss)}, HF "
                       f"{hf_loss}: the two sides do not run the same model.")
  sides = {"ours": ours, "hf": hf}
  tunix_run = tunix_side(tunix, bench="train", model=model_shapes(config),
                         batch=TRAIN_BATCH, length=TRAIN_LENGTH,
                         seed=args.seed)
  if tunix_run is not None:
    sides["tunix"] = tunix_run
  seconds = time_alternately(sides, args.repeats)
  tokens_per_step = TRAIN_BATCH * TRAIN_LENGTH
  rates = {name: tokens_per_step / s for name, s in seconds.items()}
  limit = peak * 1e9 / train_flops_per_token(config,
                                             causal_context(TRAIN_LENGTH))
  return make_record(
      "train", size, "tokens_per_s", rates["ours"], hf=rates.get("hf"),
      tunix=rates.get("tunix"), limit=limit, batch=TRAIN_BATCH,
      length=TRAIN_LENGTH, repeats=args.repeats, torch_threads=args.threads,
      devices=jax.device_count(), mesh=describe_mesh(mesh),
      backend=jax.default_backend())


def bench_step(args: argparse.Namespace, peak: float) -> Iterable[dict]:
  from train import bench_step as step_lib  # pylint: disable=g-import-not-at-top
  with tunix_worker(args.tunix_devices) as tunix:
    for size in args.sizes:
      yield from step_lib.run(size, args.repeats, peak, tunix, args.layout)


Benchmark = Callable[[argparse.Namespace, float], Iterable[dict]]
BENCHMARKS: dict[str, Benchmark] = {
    "peak": bench_peak,
    "sampler": bench_sampler,
    "train": bench_train,
    "step": bench_step,
}


# ---------------------------------------------------------------------- CLI


def _sizes(text: str) -> list[str]:
  sizes = [s for s in text.split(",") if s]
  unknown = [s for s in sizes if s not in SIZES]
  if unknown or not sizes:
    raise argparse.ArgumentTypeError(
        f"--sizes {text!r}: expected a comma-separated subset of {SIZES}.")
  return sizes


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog="python -m train.bench",
      description="Benchmarks against HF transformers and Tunix; each prints "
                  "JSON lines.")
  parser.add_argument("benchmark", choices=sorted(BENCHMARKS) + ["all",
                                                                 "table"])
  parser.add_argument("results", nargs="?",
                      help="table: a file of saved JSON lines")
  parser.add_argument("--sizes", type=_sizes, default=list(SIZES),
                      help="comma-separated model presets: tiny,small")
  parser.add_argument("--repeats", type=int, default=3,
                      help="timed runs per side; the median is reported")
  parser.add_argument("--batch", type=int, default=SAMPLER_BATCH)
  parser.add_argument("--prompt_length", type=int,
                      default=SAMPLER_PROMPT_LENGTH)
  parser.add_argument("--new_tokens", type=int,
                      default=SAMPLER_NEW_TOKENS)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--layout", choices=LAYOUTS, default="auto",
                      help="our side's device layout (see mesh_shape): auto "
                           "picks tensor for decoding a model too large for "
                           "the cores' caches, data otherwise")
  parser.add_argument("--tunix_devices", type=int, default=1,
                      help="CPU devices the Tunix worker runs on (its mesh "
                           "puts them on its fsdp axis)")
  parser.add_argument("--threads", type=int, default=os.cpu_count(),
                      help="torch intra-op threads (default: all cores)")
  parser.add_argument("--markdown", action="store_true",
                      help="after the JSON lines, print them as a markdown "
                           "table on stderr")
  return parser


def main(argv: list[str] | None = None) -> None:
  args = _parser().parse_args(argv)
  if args.benchmark == "table":
    if not args.results:
      raise SystemExit("table: name a file of saved JSON lines.")
    with open(args.results) as f:
      print(markdown_table(json.loads(line) for line in f if line.strip()))
    return
  if args.repeats < 1:
    raise SystemExit(f"--repeats={args.repeats} must be >= 1.")
  if args.tunix_devices < 1:
    raise SystemExit(f"--tunix_devices={args.tunix_devices} must be >= 1.")
  # Before JAX initialises its backend; the Tunix worker inherits them too
  # (but for the device count), so both JAX stacks compile alike.
  cpu_flags.use_project_settings()
  import torch  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(args.threads)
  names = (["peak", "sampler", "train", "step"] if args.benchmark == "all"
           else [args.benchmark])
  records = []
  peak = measure_peak()
  for name in names:
    for record in BENCHMARKS[name](args, peak):
      print(json.dumps(record), flush=True)
      records.append(record)
  if args.markdown:
    print(markdown_table(records), file=sys.stderr)


if __name__ == "__main__":
  main()
