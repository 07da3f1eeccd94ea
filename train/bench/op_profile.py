"""Where a benchmarked program's time goes, op by op, from a `jax.profiler` trace.

  python -m train.bench.op_profile {sampler,train} [--size tiny] [--top 25]
      [--repeats 3] [--markdown]

Compiles the program `train.bench.compare` times (sampler: batch 64, 32-token random
prompts, 32 new tokens at temperature 1; train: forward + backward of the
next-token loss on 64 x 64 tokens) for a random model of the preset, on one
CPU device (the benchmark runs on one device per core, each with its share
of the rows or of the weights: `train.bench.common.mesh_shape`), runs it once to
warm up, then traces --repeats runs and attributes every traced
event whose name is an instruction of the compiled HLO module (a fusion, a
library call, a while loop, ...) to that instruction. One JSON line per
instruction, most time first:

  {"program": "sampler", "size": "tiny", "op": "ynn_fusion.4",
   "source": "jit(run)/while/body/Decoder/layers_1/mlp/down_proj/dot_general",
   "calls_per_run": 31.0, "ms_per_run": 21.6, "us_per_call": 697.7,
   "share": 0.15}

`source` is the JAX operation the instruction was lowered from (its HLO
metadata); `share` is its part of the summed time of all attributed events.
Times are summed over the threads that ran them: XLA:CPU may run independent
instructions side by side, so shares compare ops with each other rather than
adding up to wall time. Instructions inside a while loop (the decode loop)
appear once per iteration, so `calls_per_run` counts loop trips.
A plain dot (not a library fusion) may show only its launch: in the
small training program the embedding's 132-GFLOP gradient records 0.5 ms.

XLA:CPU records one trace event per executed instruction only when compiled
with --xla_cpu_enable_xprof_traceme, which `main` adds to XLA_FLAGS before
JAX starts (with the project's usual flags, `train.runtime.cpu_flags`).
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import re
import sys
import tempfile
from typing import Callable, Iterable

TRACEME_FLAG = "--xla_cpu_enable_xprof_traceme=true"
PROGRAMS = ("sampler", "train")

# An instruction line: `[ROOT ]%name = <shape> <opcode>(...), ...`, with
# `metadata={op_name="..." ...}` when it came from a JAX operation.
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%(\S+) = ")
_OP_NAME = re.compile(r"metadata=\{op_name=\"([^\"]*)\"")


def hlo_sources(hlo_text: str) -> dict[str, str]:
  """Instruction name -> the JAX op_name in its metadata ("" when it has
  none), for every instruction of an HLO module's text."""
  sources = {}
  for line in hlo_text.splitlines():
    instruction = _INSTRUCTION.match(line)
    if instruction:
      op_name = _OP_NAME.search(line)
      sources[instruction.group(1)] = op_name.group(1) if op_name else ""
  return sources


def event_durations(xspace_bytes: bytes) -> Iterable[tuple[str, float]]:
  """(event name, duration in seconds) of every event in a serialised XSpace
  (the `*.xplane.pb` file `jax.profiler.trace` writes)."""
  # TensorFlow ships the XSpace protobuf; it is a dependency already (clu).
  from tensorflow.tsl.profiler.protobuf import xplane_pb2  # pylint: disable=g-import-not-at-top
  space = xplane_pb2.XSpace()
  space.ParseFromString(xspace_bytes)
  for plane in space.planes:
    names = plane.event_metadata
    for line in plane.lines:
      for event in line.events:
        yield names[event.metadata_id].name, event.duration_ps * 1e-12


def op_table(events: Iterable[tuple[str, float]], sources: dict[str, str],
             runs: int) -> list[dict]:
  """Per HLO instruction: calls and time per run, time per call, share.

  Args:
    events: (name, seconds) pairs; names that are not instructions of the
      module (`sources`' keys) are ignored.
    sources: instruction name -> JAX op_name, from `hlo_sources`.
    runs: how many runs the events cover.

  Returns:
    One dict per instruction seen, most total time first.
  """
  if runs < 1:
    raise ValueError(f"runs={runs} must be >= 1.")
  seconds = collections.Counter()
  calls = collections.Counter()
  for name, duration in events:
    if name in sources:
      seconds[name] += duration
      calls[name] += 1
  total = sum(seconds.values())
  return [{"op": name, "source": sources[name],
           "calls_per_run": calls[name] / runs,
           "ms_per_run": round(1e3 * s / runs, 3),
           "us_per_call": round(1e6 * s / calls[name], 1),
           "share": s / total}
          for name, s in seconds.most_common()]


def markdown(rows: list[dict]) -> str:
  lines = ["| op | calls / run | ms / run | us / call | share | source |",
           "|---|---|---|---|---|---|"]
  for r in rows:
    lines.append(f"| {r['op']} | {r['calls_per_run']:g} | {r['ms_per_run']:g} "
                 f"| {r['us_per_call']:g} | {100 * r['share']:.1f}% "
                 f"| {r['source']} |")
  return "\n".join(lines)


def _program(name: str, size: str, seed: int) -> tuple[Callable[[int], object],
                                                        str]:
  """(run(repeat) -> outputs, the compiled module's HLO text) for one of
  PROGRAMS at the shapes `train.bench.compare` times."""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from genenv_jax import sampling  # pylint: disable=g-import-not-at-top
  from models import config as model_config_lib  # pylint: disable=g-import-not-at-top
  from models import decoder  # pylint: disable=g-import-not-at-top
  from train.bench import common as bench  # pylint: disable=g-import-not-at-top
  config = model_config_lib.get_preset(size)
  params = decoder.init_params(config, jax.random.key(seed))
  rng = np.random.default_rng(seed)
  if name == "sampler":
    prompts = rng.integers(
        0, config.vocab_size, (bench.SAMPLER_BATCH, bench.SAMPLER_PROMPT_LENGTH),
        dtype=np.int32)
    prompt_mask = np.ones_like(prompts, bool)
    fn = sampling.make_sampler(config, sampling.SamplingConfig(
        max_new_tokens=bench.SAMPLER_NEW_TOKENS, temperature=1.0))
    args = lambda repeat: (params, prompts, prompt_mask,
                           jax.random.key(seed + repeat))
  elif name == "train":
    tokens = rng.integers(0, config.vocab_size,
                          (bench.TRAIN_BATCH, bench.TRAIN_LENGTH),
                          dtype=np.int32)
    fn = jax.jit(jax.value_and_grad(
        lambda p, t: bench.next_token_loss(config, p, t)))
    args = lambda repeat: (params, tokens)
  else:
    raise ValueError(f"program={name!r}; expected one of {PROGRAMS}.")
  hlo_text = fn.lower(*args(0)).compile().as_text()
  return lambda repeat: jax.block_until_ready(fn(*args(repeat))), hlo_text


def profile(name: str, size: str, repeats: int, seed: int = 0) -> list[dict]:
  """Traces `repeats` warm runs of a program; returns `op_table`'s rows."""
  import jax  # pylint: disable=g-import-not-at-top
  run, hlo_text = _program(name, size, seed)
  run(0)
  with tempfile.TemporaryDirectory() as trace_dir:
    with jax.profiler.trace(trace_dir):
      for repeat in range(repeats):
        run(repeat + 1)
    files = glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"),
                      recursive=True)
    if not files:
      raise RuntimeError(f"jax.profiler.trace wrote no *.xplane.pb under "
                         f"{trace_dir}.")
    with open(files[0], "rb") as f:
      events = list(event_durations(f.read()))
  rows = op_table(events, hlo_sources(hlo_text), repeats)
  if not rows:
    raise RuntimeError(
        "the trace holds no event named after an HLO instruction: was XLA "
        f"compiled with {TRACEME_FLAG} (set in XLA_FLAGS before JAX "
        "starts)?")
  return [{"program": name, "size": size, **row} for row in rows]


def main(argv: list[str] | None = None) -> None:
  parser = argparse.ArgumentParser(prog="python -m train.bench.op_profile",
                                   description=__doc__.split("\n")[0])
  parser.add_argument("program", choices=PROGRAMS)
  parser.add_argument("--size", default="tiny",
                      help="model preset (models.config), e.g. tiny, small")
  parser.add_argument("--top", type=int, default=25,
                      help="print the N ops with the most time (0: all)")
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--markdown", action="store_true",
                      help="also print the rows as a markdown table on "
                           "stderr")
  args = parser.parse_args(argv)
  if args.repeats < 1:
    raise SystemExit(f"--repeats={args.repeats} must be >= 1.")
  from train.runtime import cpu_flags  # pylint: disable=g-import-not-at-top
  cpu_flags.use_library_fusions()
  if TRACEME_FLAG.split("=")[0] not in os.environ["XLA_FLAGS"]:
    os.environ["XLA_FLAGS"] += " " + TRACEME_FLAG
  rows = profile(args.program, args.size, args.repeats, args.seed)
  if args.top:
    rows = rows[:args.top]
  for row in rows:
    print(json.dumps(row), flush=True)
  if args.markdown:
    print(markdown(rows), file=sys.stderr)


if __name__ == "__main__":
  main()
