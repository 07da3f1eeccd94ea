"""Sampler vs trainer log-probs of a bfloat16 player, with the output
projection's result in bfloat16 and in float32 (`ModelConfig.logits_dtype`).

  python -m train.bench.logp_mismatch --hf_dir DIR [--new_tokens 32]
  python -m train.bench.logp_mismatch --preset tiny --head_scale 100

Samples responses (temperature 1) to a batch of chat prompts (with --hf_dir;
random prompts with --preset) with the bf16 sampler (prefill + KV-cached
decode), scores the same responses with `policy.response_logprobs` (the
trainer's full forward) at bf16 and with the float32 twin, and prints per
logits_dtype the mean over generated tokens of
  sampler_vs_trainer: |sampler log-prob - trainer log-prob|, both bf16 (what
    biases the PPO ratio, the KL terms and the simulator's KL cap);
  bf16_vs_f32: |bf16 trainer log-prob - f32 trainer log-prob|.
--head_scale multiplies a random preset's output embedding so its logits
reach a real model's magnitudes (|logit| ~ 10-30).
"""

from __future__ import annotations

import argparse
import json

import jax
import jax.numpy as jnp
import numpy as np

from genenv_jax import generate
from genenv_jax import policy
from genenv_jax import sampling
from models import decoder
from models import hf
from models.config import ModelConfig, get_preset

CHAT_PROMPTS = (
    "What is the capital of France?",
    "Write a short poem about the sea.",
    "Explain in two sentences why the sky is blue.",
    "List three prime numbers greater than ten and say why they are prime.",
)


def mismatch(config: ModelConfig, params, prompt: jax.Array,
             prompt_mask: jax.Array, new_tokens: int,
             seed: int = 0) -> dict[str, float]:
  """Mean |sampler - trainer| and |bf16 - f32| log-prob over the generated
  tokens of a bf16 player (`config` with dtype bfloat16; params f32).

  Args:
    prompt: int32[B, P] left-padded; prompt_mask: bool[B, P].
  """
  if config.dtype != "bfloat16":
    raise ValueError(f"mismatch: config.dtype={config.dtype!r}, expected "
                     "'bfloat16' (the float32 twin is made here).")
  settings = sampling.SamplingConfig(max_new_tokens=new_tokens,
                                     temperature=1.0)
  out = jax.jit(lambda p, t, m: sampling.sample(
      config, p, t, m, jax.random.key(seed), settings))(params, prompt,
                                                        prompt_mask)
  score = lambda cfg: jax.jit(lambda p: policy.response_logprobs(
      cfg, p, prompt, prompt_mask, out.tokens, out.mask).logp)(params)
  trainer = score(config)
  twin = score(config.replace(dtype="float32", logits_dtype="float32"))
  mask = np.asarray(out.mask)
  mean = lambda x: float(np.abs(np.asarray(x))[mask].mean())
  return {"sampler_vs_trainer": mean(out.logprobs - trainer),
          "bf16_vs_f32": mean(trainer - twin),
          "tokens": int(mask.sum())}


def both_heads(config: ModelConfig, params, prompt, prompt_mask,
               new_tokens: int, seed: int = 0) -> dict[str, dict]:
  """`mismatch` with the head's result in bfloat16 and in float32."""
  return {dtype: mismatch(config.replace(logits_dtype=dtype), params, prompt,
                          prompt_mask, new_tokens, seed)
          for dtype in ("bfloat16", "float32")}


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(prog="python -m train.bench.logp_mismatch")
  source = parser.add_mutually_exclusive_group(required=True)
  source.add_argument("--hf_dir")
  source.add_argument("--preset")
  parser.add_argument("--head_scale", type=float, default=1.0)
  parser.add_argument("--new_tokens", type=int, default=32)
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args(argv)
  if args.hf_dir:
    params, config = hf.load_hf_params(args.hf_dir, scan_layers=True)
    tokenizer = hf.load_tokenizer(args.hf_dir)
    rows = [generate.prompt_ids(tokenizer, {"prompt": p})
            for p in CHAT_PROMPTS]
    prompt, prompt_mask = generate.left_pad(rows, hf.stop_token_ids(
        args.hf_dir)[0])
  else:
    config = get_preset(args.preset)
    params = decoder.init_params(config, jax.random.key(args.seed))
    head = "embed" if config.tie_embeddings else "lm_head"
    leaf = "embedding" if config.tie_embeddings else "kernel"
    params[head][leaf] = params[head][leaf] * args.head_scale
    rng = np.random.default_rng(args.seed)
    prompt = rng.integers(0, config.vocab_size, (4, 12), dtype=np.int32)
    prompt_mask = np.arange(12)[None, :] >= np.array([0, 3, 6, 9])[:, None]
  config = config.replace(dtype="bfloat16")
  result = both_heads(config, params, jnp.asarray(prompt),
                      jnp.asarray(prompt_mask), args.new_tokens, args.seed)
  print(json.dumps(result, indent=2))


if __name__ == "__main__":
  main()
