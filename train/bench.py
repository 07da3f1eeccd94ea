"""Benchmarks, printed as one JSON object per line.

  python -m train.bench sampler [--sizes tiny,small] [--repeats 3]

Sub-benchmarks (positional name):
  sampler: tokens/s of `genenv_jax.sampling` against transformers'
    `generate` on the same Qwen2 shapes (presets `tiny` and `small`), random
    weights, batch 64, 32-token random prompts, 32 new tokens, no stop token,
    once sampling at temperature 1 and once greedy. Both sides are warmed up
    (compiled), then timed alternately; the median of the repeats is
    reported. torch runs on --threads threads (default: all cores) with
    OMP_WAIT_POLICY=PASSIVE unless set otherwise. Our parameters are read from the HF model's saved checkpoint
    when `models.hf.load_hf_params` is available, else drawn at random (the
    speed does not depend on the weights' values); the "weights" field says
    which.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from typing import Callable

import jax
import numpy as np

from genenv_jax import sampling
from models import config as model_config_lib
from models import decoder

SAMPLER_SIZES = ("tiny", "small")


def _emit(record: dict) -> None:
  print(json.dumps(record), flush=True)


def _seconds(fn: Callable[[], object]) -> float:
  start = time.perf_counter()
  fn()
  return time.perf_counter() - start


def _qwen2_hf_config(config: model_config_lib.ModelConfig):
  """The transformers Qwen2Config with `config`'s shapes (Qwen2: q/k/v bias)."""
  import transformers  # pylint: disable=g-import-not-at-top
  if not config.qkv_bias:
    raise ValueError("Qwen2 needs ModelConfig.qkv_bias=True.")
  if config.rope_scaling is not None:
    raise ValueError("The sampler benchmark expects rope_scaling=None.")
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


def _twin_models(size: str, seed: int):
  """A random HF Qwen2ForCausalLM and our parameters for the same model.

  Returns:
    (ModelConfig, our params, HF model in eval mode, weights source: "hf"
    when ours were loaded from the HF checkpoint, "random" otherwise).
  """
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  config = model_config_lib.get_preset(size)
  torch.manual_seed(seed)
  hf_model = transformers.Qwen2ForCausalLM(_qwen2_hf_config(config)).eval()
  try:
    from models.hf import load_hf_params  # pylint: disable=g-import-not-at-top
  except ImportError:
    load_hf_params = None
  if load_hf_params is None:
    params = decoder.init_params(config, jax.random.key(seed))
    return config, params, hf_model, "random"
  with tempfile.TemporaryDirectory() as hf_dir:
    hf_model.save_pretrained(hf_dir)
    params, _ = load_hf_params(hf_dir, config)
  return config, jax.device_put(params), hf_model, "hf"


def bench_sampler(args: argparse.Namespace) -> None:
  """Tokens/s of our sampler vs HF generate, per size and mode."""
  import torch  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(args.threads)
  batch, prompt_length, new_tokens = (args.batch, args.prompt_length,
                                      args.new_tokens)
  for size in args.sizes:
    config, params, hf_model, weights = _twin_models(size, args.seed)
    rng = np.random.default_rng(args.seed)
    prompts = rng.integers(0, config.vocab_size, (batch, prompt_length),
                           dtype=np.int32)
    prompt_mask = np.ones_like(prompts, bool)
    hf_prompts = torch.from_numpy(prompts.astype(np.int64))
    hf_mask = torch.ones_like(hf_prompts)
    for mode, temperature in (("sample", 1.0), ("greedy", 0.0)):
      sampler = sampling.make_sampler(
          config, sampling.SamplingConfig(max_new_tokens=new_tokens,
                                          temperature=temperature))
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
      our_times, hf_times = [], []
      for repeat in range(1, args.repeats + 1):
        our_times.append(_seconds(lambda: ours(repeat)))  # pylint: disable=cell-var-from-loop
        hf_times.append(_seconds(lambda: hf(repeat)))  # pylint: disable=cell-var-from-loop
      tokens = batch * new_tokens
      ours_rate = tokens / statistics.median(our_times)
      hf_rate = tokens / statistics.median(hf_times)
      _emit({"bench": "sampler", "size": size, "metric": "tokens_per_s",
             "mode": mode, "ours": round(ours_rate, 1),
             "hf": round(hf_rate, 1), "ratio_hf": round(ours_rate / hf_rate, 3),
             "batch": batch, "prompt_length": prompt_length,
             "new_tokens": new_tokens, "repeats": args.repeats,
             "weights": weights, "torch_threads": args.threads,
             "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
             "backend": jax.default_backend()})


BENCHMARKS: dict[str, Callable[[argparse.Namespace], None]] = {
    "sampler": bench_sampler,
}


def _sizes(text: str) -> list[str]:
  sizes = [s for s in text.split(",") if s]
  unknown = [s for s in sizes if s not in SAMPLER_SIZES]
  if unknown or not sizes:
    raise argparse.ArgumentTypeError(
        f"--sizes {text!r}: expected a comma-separated subset of "
        f"{SAMPLER_SIZES}.")
  return sizes


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog="python -m train.bench",
      description="Benchmarks; each prints JSON lines.")
  parser.add_argument("benchmark", choices=sorted(BENCHMARKS))
  parser.add_argument("--sizes", type=_sizes, default=list(SAMPLER_SIZES),
                      help="comma-separated model presets: tiny,small")
  parser.add_argument("--repeats", type=int, default=3,
                      help="timed runs per side; the median is reported")
  parser.add_argument("--batch", type=int, default=64)
  parser.add_argument("--prompt_length", type=int, default=32)
  parser.add_argument("--new_tokens", type=int, default=32)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--threads", type=int, default=os.cpu_count(),
                      help="torch intra-op threads (default: all cores)")
  return parser


def main(argv: list[str] | None = None) -> None:
  args = _parser().parse_args(argv)
  if args.repeats < 1:
    raise SystemExit(f"--repeats={args.repeats} must be >= 1.")
  # Spinning OpenMP workers make torch many times slower whenever the cores
  # are shared (e.g. with XLA's own thread pool); read when torch loads.
  os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
  BENCHMARKS[args.benchmark](args)


if __name__ == "__main__":
  main()
