"""What sharing each prompt's keys and values among its samples saves.

  python -m train.bench.prompt_sharing --preset=qwen2.5-7b --dtype=bfloat16 \
      --prompts=8 --prompt_len=1024 --new_tokens=256 --samples=4,8,16
  python -m train.bench.prompt_sharing --preset=small --time_repeats=5

For each number of samples G, the sampler (`genenv_jax/sampling.py`) is
compiled on this process's backend from abstract arguments (no weights), with
`SamplingConfig.share_prompt` on and off, and XLA's memory analysis gives its
temporaries (the KV cache among them). With `--time_repeats=R` the two
samplers also run R times each, alternately, on random weights (small presets
only), and the median seconds are printed. One JSON line per G on stdout:
{"preset", "prompts", "prompt_len", "new_tokens", "samples", "shared_temp_gib",
"copied_temp_gib", "kv_cache_copies_gib", ["shared_s", "copied_s"]}, where
kv_cache_copies_gib is what the G - 1 extra copies of each prompt's keys and
values take (layers x 2 x kv heads x head dim x P x dtype bytes a copy).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np

from genenv_jax import sampling
from models import config as model_config_lib
from models import decoder
from train.bench import common


def _abstract_params(model):
  """The decoder's parameters as ShapeDtypeStructs (nothing initialised)."""
  return jax.eval_shape(
      lambda: decoder.init_params(model, jax.random.PRNGKey(0)))


def _temp_gib(model, sampling_config, samples, params, prompts) -> float:
  compiled = sampling.make_sampler(model, sampling_config, samples).lower(
      params, prompts[0], prompts[1], jax.random.key(0)).compile()
  return compiled.memory_analysis().temp_size_in_bytes / 2**30


def _prompt_copies_gib(model, prompts: int, prompt_len: int, samples: int
                       ) -> float:
  per_copy = (model.num_layers * 2 * model.num_kv_heads * model.head_dim
              * prompt_len * jnp.dtype(model.dtype).itemsize)
  return prompts * (samples - 1) * per_copy / 2**30


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--preset", default="small",
                      help="a models/config.py preset")
  parser.add_argument("--dtype", default="float32",
                      help="compute dtype (XLA:CPU runs no bfloat16 x "
                      "bfloat16 = float32 dot: bfloat16 for memory only)")
  parser.add_argument("--prompts", type=int, default=8)
  parser.add_argument("--prompt_len", type=int, default=256)
  parser.add_argument("--new_tokens", type=int, default=32)
  parser.add_argument("--samples", default="4,8",
                      help="comma-separated numbers of samples a prompt")
  parser.add_argument("--time_repeats", type=int, default=0,
                      help="> 0: also time both samplers (random weights)")
  args = parser.parse_args(argv)
  if args.time_repeats and args.dtype != "float32" and (
      jax.default_backend() == "cpu"):
    parser.error(f"--time_repeats runs the sampler: --dtype={args.dtype} "
                 "does not run on XLA:CPU; use float32.")
  model = model_config_lib.get_preset(args.preset, dtype=args.dtype,
                                      scan_layers=True)
  tokens = jax.ShapeDtypeStruct((args.prompts, args.prompt_len), jnp.int32)
  mask = jax.ShapeDtypeStruct((args.prompts, args.prompt_len), jnp.bool_)
  params = _abstract_params(model)
  shared = sampling.SamplingConfig(max_new_tokens=args.new_tokens,
                                   temperature=1.0)
  copied = dataclasses.replace(shared, share_prompt=False)
  if args.time_repeats:
    rng = np.random.default_rng(0)
    real_params = jax.tree.map(
        lambda s: jnp.asarray(0.02 * rng.standard_normal(s.shape), s.dtype),
        params)
    real_tokens = jnp.asarray(rng.integers(1, model.vocab_size, tokens.shape),
                              jnp.int32)
    real_mask = jnp.ones(mask.shape, bool)
  for samples in (int(s) for s in args.samples.split(",")):
    record = dict(
        preset=args.preset, prompts=args.prompts, prompt_len=args.prompt_len,
        new_tokens=args.new_tokens, samples=samples,
        shared_temp_gib=_temp_gib(model, shared, samples, params,
                                  (tokens, mask)),
        copied_temp_gib=_temp_gib(model, copied, samples, params,
                                  (tokens, mask)),
        kv_cache_copies_gib=_prompt_copies_gib(model, args.prompts,
                                               args.prompt_len, samples))
    if args.time_repeats:
      runners = {}
      for name, config in (("shared", shared), ("copied", copied)):
        run = sampling.make_sampler(model, config, samples)
        call = lambda r, run=run: jax.block_until_ready(run(
            real_params, real_tokens, real_mask, jax.random.key(r)))
        call(0)  # compile
        runners[name] = call
      times = common.time_alternately(runners, args.time_repeats)
      record.update(shared_s=times.get("shared"), copied_s=times.get("copied"))
    print(json.dumps(record), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
