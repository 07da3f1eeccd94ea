"""Chat completions from a Hugging Face directory with our decoder and sampler.

  python -m train.tools.generate --hf_dir DIR --prompts FILE.jsonl \
      --max_new_tokens N [--temperature T] [--dtype bfloat16|float32]

Each input line is {"prompt": "..."} or {"messages": [...]}; one JSON line per
prompt comes out (`genenv_jax.generate.generate_jsonl`): `completion`,
`tokens` (the stop token excluded) and `stopped`.
"""

from __future__ import annotations

import argparse
import json

from genenv_jax import generate


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(prog="python -m train.tools.generate",
                                   description=__doc__.split("\n")[0])
  parser.add_argument("--hf_dir", required=True)
  parser.add_argument("--prompts", required=True, help='JSONL: {"prompt": '
                      '...} or {"messages": [...]} per line')
  parser.add_argument("--max_new_tokens", type=int, required=True)
  parser.add_argument("--temperature", type=float, default=0.0,
                      help="0 (default): greedy")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--dtype", choices=("bfloat16", "float32"),
                      default="float32", help="compute dtype")
  return parser


def main(argv: list[str] | None = None) -> int:
  args = _parser().parse_args(argv)
  for line in generate.generate_jsonl(args.hf_dir, args.prompts,
                                      args.max_new_tokens, args.temperature,
                                      args.seed, args.dtype):
    print(json.dumps(line), flush=True)
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
