"""Benchmarks against peer stacks on this machine, printed as JSON lines.

  python -m train.bench.compare {peak,sampler,train,step,all} [--sizes tiny,small]
      [--repeats 3] [--layout auto] [--tunix_devices 1] [--markdown]
  python -m train.bench.compare table RESULTS.jsonl   # markdown table of saved output

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
  step: seconds per jitted co-evolution step (`train/bench/step.py`), with
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
names a Python with `google-tunix` installed: it runs `train/bench/tunix_side.py`
as a worker process (Tunix pins library versions this project's environment
does not have) on --tunix_devices CPU devices (default 1). Without
TUNIX_PYTHON, or where the worker fails, the Tunix keys are absent. Our side
runs on every device the process has (one per core, `train.runtime.cpu_flags`)
in the layout --layout names (`mesh_shape`; each record's `mesh`): by default
the batch split over them, but for decoding (sampler, step) a model whose
weights outgrow the cores' caches, the weights split over them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Callable, Iterable

import jax
import jax.numpy as jnp
import numpy as np

from genenv_jax import sampling
from genenv_jax import sharding
from models import config as model_config_lib
from train.runtime import cpu_flags
from train.bench import common
from train.bench import step as step_lib


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
      seconds = common.seconds_of(lambda: fn(repeat))  # pylint: disable=cell-var-from-loop
      if repeat:
        best[name] = min(best[name], seconds)
  return {name: 2 * m * k * n / s / 1e9 for name, s in best.items()}


def bench_peak(args: argparse.Namespace, peak: float) -> Iterable[dict]:
  """The peak every limit uses, then JAX against torch at that square shape
  and at the output projection of the small preset's training benchmark (its
  largest matmuls: [batch x length, hidden] x [hidden, vocab])."""
  yield common.make_record("peak", str(common.PEAK_SIZE), "gflops", peak,
                    repeats=common.PEAK_REPEATS, dtype="float32",
                    backend=jax.default_backend())
  small = model_config_lib.get_preset("small")
  for m, k, n in ((common.PEAK_SIZE, common.PEAK_SIZE, common.PEAK_SIZE),
                  (common.TRAIN_BATCH * common.TRAIN_LENGTH, small.hidden_size,
                   small.vocab_size)):
    rates = matmul_gflops(m, k, n, args.repeats)
    yield common.make_record("peak", f"{m}x{k}x{n}", "gflops", rates["ours"],
                      hf=rates["hf"], mode="matmul", repeats=args.repeats,
                      torch_threads=args.threads, dtype="float32",
                      backend=jax.default_backend())


def bench_sampler(args: argparse.Namespace, peak: float) -> Iterable[dict]:
  """Generated tokens/s of our sampler vs HF generate (and Tunix)."""
  with common.tunix_worker(args.tunix_devices) as tunix:
    for size in args.sizes:
      yield from _sampler_records(args, peak, tunix, size)


def _sampler_records(args: argparse.Namespace, peak: float,
                     tunix: common.TunixWorker | None, size: str) -> Iterable[dict]:
  import torch  # pylint: disable=g-import-not-at-top
  batch, prompt_length, new_tokens = (args.batch, args.prompt_length,
                                      args.new_tokens)
  config = model_config_lib.get_preset(size)
  mesh = sharding.make_mesh(common.mesh_shape(config, args.layout, decoding=True))
  params, hf_model = common.twin_models(config, args.seed, mesh)
  rng = np.random.default_rng(args.seed)
  host_prompts = rng.integers(0, config.vocab_size, (batch, prompt_length),
                              dtype=np.int32)
  placed = sharding.shard_batch(
      {"prompts": host_prompts,
       "prompt_mask": np.ones_like(host_prompts, bool)}, mesh, common.RULES)
  prompts, prompt_mask = placed["prompts"], placed["prompt_mask"]
  hf_prompts = torch.from_numpy(host_prompts.astype(np.int64))
  hf_mask = torch.ones_like(hf_prompts)
  limit = peak * 1e9 / common.forward_flops_per_token(
      config, common.sampler_context(prompt_length, new_tokens))
  for mode, temperature in (("sample", 1.0), ("greedy", 0.0)):
    sampler = sampling.make_sampler(
        config, sampling.SamplingConfig(max_new_tokens=new_tokens,
                                        temperature=temperature),
        mesh=mesh, rules=common.RULES)
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
    tunix_run = common.tunix_side(
        tunix, bench="sampler", model=common.model_shapes(config), batch=batch,
        prompt_length=prompt_length, new_tokens=new_tokens,
        temperature=temperature, seed=args.seed)
    if tunix_run is not None:
      sides["tunix"] = tunix_run
    seconds = common.time_alternately(sides, args.repeats)
    tokens = batch * new_tokens
    rates = {name: tokens / s for name, s in seconds.items()}
    # FLOP/s of every forward pass our runs made, prefill included.
    ours_gflops = (common.generation_flops(config, prompt_length, new_tokens)
                   * rates["ours"] / new_tokens / 1e9)
    yield common.make_record(
        "sampler", size, "tokens_per_s", rates["ours"], hf=rates.get("hf"),
        tunix=rates.get("tunix"), limit=limit, mode=mode,
        ours_gflops=common.round_figure(ours_gflops), batch=batch,
        prompt_length=prompt_length, new_tokens=new_tokens,
        repeats=args.repeats, torch_threads=args.threads,
        devices=jax.device_count(), mesh=common.describe_mesh(mesh),
        backend=jax.default_backend())




def bench_train(args: argparse.Namespace, peak: float) -> Iterable[dict]:
  """Forward + backward tokens/s on TRAIN_BATCH x TRAIN_LENGTH tokens."""
  with common.tunix_worker(args.tunix_devices) as tunix:
    for size in args.sizes:
      yield _train_record(args, peak, tunix, size)


def _train_record(args: argparse.Namespace, peak: float,
                  tunix: common.TunixWorker | None, size: str) -> dict:
  import torch  # pylint: disable=g-import-not-at-top
  config = model_config_lib.get_preset(size)
  mesh = sharding.make_mesh(common.mesh_shape(config, args.layout, decoding=False))
  params, hf_model = common.twin_models(config, args.seed, mesh)
  host_tokens = np.random.default_rng(args.seed).integers(
      0, config.vocab_size, (common.TRAIN_BATCH, common.TRAIN_LENGTH), dtype=np.int32)
  tokens = sharding.shard_batch({"tokens": host_tokens}, mesh,
                                common.RULES)["tokens"]
  # The gradients come back laid out as the parameters, as an update uses
  # them (replicated on the data layout: summed over the devices).
  grad_fn = jax.jit(
      sharding.in_mesh(mesh, common.RULES)(jax.value_and_grad(
          lambda p, t: common.next_token_loss(config, p, t))),
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
  tunix_run = common.tunix_side(tunix, bench="train", model=common.model_shapes(config),
                         batch=common.TRAIN_BATCH, length=common.TRAIN_LENGTH,
                         seed=args.seed)
  if tunix_run is not None:
    sides["tunix"] = tunix_run
  seconds = common.time_alternately(sides, args.repeats)
  tokens_per_step = common.TRAIN_BATCH * common.TRAIN_LENGTH
  rates = {name: tokens_per_step / s for name, s in seconds.items()}
  limit = peak * 1e9 / common.train_flops_per_token(config,
                                             common.causal_context(common.TRAIN_LENGTH))
  return common.make_record(
      "train", size, "tokens_per_s", rates["ours"], hf=rates.get("hf"),
      tunix=rates.get("tunix"), limit=limit, batch=common.TRAIN_BATCH,
      length=common.TRAIN_LENGTH, repeats=args.repeats, torch_threads=args.threads,
      devices=jax.device_count(), mesh=common.describe_mesh(mesh),
      backend=jax.default_backend())


def bench_step(args: argparse.Namespace, peak: float) -> Iterable[dict]:
  with common.tunix_worker(args.tunix_devices) as tunix:
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
  unknown = [s for s in sizes if s not in common.SIZES]
  if unknown or not sizes:
    raise argparse.ArgumentTypeError(
        f"--sizes {text!r}: expected a comma-separated subset of {common.SIZES}.")
  return sizes


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog="python -m train.bench.compare",
      description="Benchmarks against HF transformers and Tunix; each prints "
                  "JSON lines.")
  parser.add_argument("benchmark", choices=sorted(BENCHMARKS) + ["all",
                                                                 "table"])
  parser.add_argument("results", nargs="?",
                      help="table: a file of saved JSON lines")
  parser.add_argument("--sizes", type=_sizes, default=list(common.SIZES),
                      help="comma-separated model presets: tiny,small")
  parser.add_argument("--repeats", type=int, default=3,
                      help="timed runs per side; the median is reported")
  parser.add_argument("--batch", type=int, default=common.SAMPLER_BATCH)
  parser.add_argument("--prompt_length", type=int,
                      default=common.SAMPLER_PROMPT_LENGTH)
  parser.add_argument("--new_tokens", type=int,
                      default=common.SAMPLER_NEW_TOKENS)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--layout", choices=common.LAYOUTS, default="auto",
                      help="our side's device layout (see common.mesh_shape): auto "
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
      print(common.markdown_table(json.loads(line) for line in f if line.strip()))
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
  peak = common.measure_peak()
  for name in names:
    for record in BENCHMARKS[name](args, peak):
      print(json.dumps(record), flush=True)
      records.append(record)
  if args.markdown:
    print(common.markdown_table(records), file=sys.stderr)


if __name__ == "__main__":
  main()
