"""One player of a training run -> a Hugging Face directory (`train.checkpoints.export`).

  python -m train.tools.export_player --run DIR [--step N] \
      --player agent|simulator --out DIR [--dtype bfloat16|float32]

Prints a JSON summary (step, files written, dtype) when done.
"""

from __future__ import annotations

import argparse
import json

from models import hf
from train.checkpoints import export


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(prog="python -m train.tools.export_player",
                                   description=__doc__.split("\n")[0])
  parser.add_argument("--run", required=True, help="a training run's workdir "
                      "(train.main --workdir), local or gs://")
  parser.add_argument("--player", required=True, choices=export.PLAYERS)
  parser.add_argument("--out", required=True, help="HF directory to write "
                      "(local or gs://)")
  parser.add_argument("--step", type=int, default=None,
                      help="the checkpoint's step (default: the latest)")
  parser.add_argument("--dtype", choices=("bfloat16", "float32"),
                      default="bfloat16", help="weights on disk")
  parser.add_argument("--max_shard_bytes", type=int,
                      default=hf.MAX_SHARD_BYTES,
                      help="largest safetensors file")
  return parser


def main(argv: list[str] | None = None) -> int:
  args = _parser().parse_args(argv)
  summary = export.export_player(args.run, args.player, args.out, args.step,
                                 args.dtype, args.max_shard_bytes)
  print(json.dumps(summary))
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
