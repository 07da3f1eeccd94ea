"""Table 1's row from one agent: `python -m train.tools.evaluate table1`.

  python -m train.tools.evaluate table1 (--run WORKDIR [--step N] | --hf_dir DIR) \\
      --out DIR [--data_root ROOT] [--benchmarks alfworld,bfcl,api_bank,bamboogle,travelplanner] \\
      [--bfcl_categories C,...] [--travelplanner_split validation] [--limit K] \\
      [--batch_size B] [--mesh SHAPE] [--dtype D] [--max_turns T]

For each of Table 1's benchmarks whose data is present, the agent answers it
with the benchmark's own command (`python -m train.tools.evaluate <name>
--generate`, docs/benchmarks.md: the same prompts, decoding and scoring), its
predictions and verdicts written to OUT/<name>*.jsonl; then the row is printed
beside the paper's, with each score's items, correct count and 95% interval
(Wilson's), as a markdown table, and written to OUT/table1.md and
OUT/table1.json. The last line printed is `table1=<JSON>`.

Where each benchmark's data is looked for, under ROOT (default: the cache
that each command's `--download` fills, `<cache>/benchmarks/`,
train/tools/bench_download.py):
  alfworld       ROOT/alfworld: ALFWorld's official games (a directory named
                 valid_unseen below it, as `--download` extracts them); the
                 paper's 134 unseen games. ALFWorld-synthetic, this project's
                 own held-out set, is not Table 1's and is not scored here.
  bfcl           ROOT/bfcl (BFCL_v<N>_<category>.json, possible_answer/,
                 multi_turn_func_doc/), else the bfcl_eval wheel's data; the
                 categories of --bfcl_categories that are present
                 (default: every single-turn AST and multi-turn category
                 this project scores), their entries pooled into one score
  api_bank       ROOT/api_bank: level-1-api.json, level-2-api.json,
                 level-3.json (directly or in json_test_data/); all levels
  bamboogle      ROOT/bamboogle: the parquet (or CSV) of its 125 questions
  travelplanner  ROOT/travelplanner: <split>.csv and <split>_ref_info.jsonl
                 (--travelplanner_split, default validation, 180 queries)
A benchmark without its data gets a row saying what is missing where.

Every process of a job (train.main's job flags before `table1`) decodes its
devices' rows of every benchmark; only process 0 scores, prints and writes.
`--limit K` answers the first K items of each benchmark (of each BFCL
category, each API-Bank level): a smoke test, not Table 1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import os
import re
import sys
from typing import Any, Callable, Sequence

from genenv_jax.scoring import InputError, apibank_levels, bfcl, bfcl_multi_turn

# The paper's Table 1 (GenEnv, Qwen2.5-7B-Instruct), in percent.
PAPER = {"alfworld": 54.5, "bfcl": 41.8, "api_bank": 79.1, "bamboogle": 76.0,
         "travelplanner": 16.6}
TITLES = {"alfworld": "ALFWorld", "bfcl": "BFCL", "api_bank": "API-Bank",
          "bamboogle": "Bamboogle", "travelplanner": "TravelPlanner"}
BENCHMARKS = tuple(PAPER)
BFCL_CATEGORIES = bfcl.SUPPORTED_CATEGORIES + bfcl_multi_turn.CATEGORIES
ALFWORLD_SPLIT = "valid_unseen"
Z95 = 1.959964


@dataclasses.dataclass
class Score:
  """One benchmark's part of the row."""

  name: str
  data: str = ""          # where its data came from ("" when absent)
  missing: str = ""       # what is missing where, when absent
  items: int = 0
  correct: int = 0
  parts: list = dataclasses.field(default_factory=list)  # (label, items, correct)

  @property
  def score(self) -> float | None:
    return self.correct / self.items if self.items else None

  def as_dict(self) -> dict[str, Any]:
    low, high = wilson(self.correct, self.items)
    return {"benchmark": self.name, "data": self.data, "missing": self.missing,
            "items": self.items, "correct": self.correct,
            "score": self.score, "ci95": [low, high] if self.items else None,
            "paper": PAPER[self.name] / 100, "parts": self.parts}


def wilson(correct: int, n: int, z: float = Z95) -> tuple[float, float]:
  """Wilson's score interval of a proportion correct / n (0, 1 for n = 0)."""
  if n <= 0:
    return 0.0, 1.0
  p = correct / n
  centre = (p + z * z / (2 * n)) / (1 + z * z / n)
  half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
  return max(0.0, centre - half), min(1.0, centre + half)


def _files(root: str) -> list[str]:
  found = []
  for base, _, names in os.walk(root):
    found += [os.path.join(base, n) for n in names]
  return found


def locate(name: str, root: str, args) -> tuple[list[tuple[str, list[str]]], str]:
  """(runs, missing) for benchmark `name` under `root`: each run is (label,
  the benchmark command's arguments after its name, without the agent's and
  --predictions); `missing` says what is absent where when there is none."""
  where = os.path.join(root, name)
  if name == "bfcl":
    from genenv_jax.scoring import bfcl_prompt  # pylint: disable=import-outside-toplevel
    data = where if os.path.isdir(where) else ""
    if not data:
      try:
        data = bfcl_prompt.wheel_data_dir()
      except InputError:
        return [], f"{where}/ (BFCL_v<N>_<category>.json) or the bfcl_eval wheel"
    names = os.listdir(data) if os.path.isdir(data) else []
    runs = []
    for category in args.bfcl_categories:
      pattern = re.compile(rf"BFCL_v\d+_{re.escape(category)}\.json")
      if any(pattern.fullmatch(n) for n in names):
        runs.append((category, ["--category", category, "--data_dir", data]))
    return runs, "" if runs else (
        f"{data}/BFCL_v<N>_<category>.json for any of {list(args.bfcl_categories)}")
  if not os.path.isdir(where):
    return [], f"{where}/ (python -m train.tools.evaluate {name} --download fills it)"
  files = _files(where)
  if name == "alfworld":
    splits = [base for base, dirs, _ in os.walk(where)
              if os.path.basename(base) == ALFWORLD_SPLIT]
    if not splits:
      return [], f"{where}/.../{ALFWORLD_SPLIT}/ (ALFWorld's official games)"
    return [(ALFWORLD_SPLIT, ["--data_dir", where, "--split", ALFWORLD_SPLIT]
             + (["--max_turns", str(args.max_turns)] if args.max_turns else []))], ""
  if name == "api_bank":
    if not apibank_levels.find_file(where, apibank_levels.LEVEL_FILES[1]):
      return [], (f"{where}/ {list(apibank_levels.LEVEL_FILES.values())} (directly "
                  "or in json_test_data/)")
    return [("levels 1-3", ["--data_dir", where])], ""
  if name == "bamboogle":
    if not any(f.endswith((".parquet", ".csv")) for f in files):
      return [], f"{where}/ (Bamboogle's parquet or CSV)"
    return [("test", ["--data_dir", where])], ""
  if name == "travelplanner":
    split = args.travelplanner_split
    wanted = [f"{split}.csv", f"{split}_ref_info.jsonl"]
    if not all(os.path.isfile(os.path.join(where, w)) for w in wanted):
      return [], f"{where}/ {wanted}"
    return [(split, ["--data_dir", where, "--split", split])], ""
  raise InputError(f"--benchmarks: unknown benchmark {name!r}; known: {BENCHMARKS}")


class _Tee(io.TextIOBase):
  """Writes to a stream and keeps a copy."""

  def __init__(self, stream):
    self.stream, self.copy = stream, io.StringIO()

  def write(self, text):
    self.copy.write(text)
    return self.stream.write(text)

  def flush(self):
    self.stream.flush()


def _summary(text: str) -> dict[str, str]:
  """The key=value lines a benchmark command printed."""
  return dict(line.split("=", 1) for line in text.splitlines()
              if re.fullmatch(r"[a-z_0-9]+=.*", line))


def _agent_flags(args) -> list[str]:
  flags = []
  for flag, value in (("--run", args.run_dir), ("--hf_dir", args.hf_dir),
                      ("--mesh", args.mesh), ("--dtype", args.dtype)):
    if value:
      flags += [flag, value]
  if args.step is not None:
    flags += ["--step", str(args.step)]
  flags += ["--batch_size", str(args.batch_size),
            "--temperature", str(args.temperature)]
  if args.limit:
    flags += ["--limit", str(args.limit)]
  return flags


def run(args, parse: Callable[[Sequence[str]], Any], chief: Callable[[], bool]
        ) -> list[Score]:
  """The command (module docstring). `parse` parses a benchmark command's
  arguments (train/tools/evaluate.py's parser); `chief` tells process 0."""
  if bool(args.run_dir) == bool(args.hf_dir):
    raise InputError("table1: give exactly one of --run and --hf_dir")
  names = [n for n in args.benchmarks.split(",") if n]
  unknown = [n for n in names if n not in BENCHMARKS]
  if unknown or not names:
    raise InputError(f"--benchmarks={args.benchmarks!r}: expected some of {BENCHMARKS}")
  args.bfcl_categories = [c for c in args.bfcl_categories.split(",") if c]
  bad = [c for c in args.bfcl_categories if c not in BFCL_CATEGORIES]
  if bad:
    raise InputError(f"--bfcl_categories: {bad} not among {BFCL_CATEGORIES}")
  root = args.data_root or _default_root()
  os.makedirs(args.out, exist_ok=True)
  scores = []
  for name in names:
    runs, missing = locate(name, root, args)
    score = Score(name, missing=missing)
    for label, bench_args in runs:
      tag = name if len(runs) == 1 else f"{name}_{label}"
      argv = [name, "--generate", *_agent_flags(args), *bench_args,
              "--predictions", os.path.join(args.out, f"{tag}.jsonl")]
      sub = parse(argv)
      tee = _Tee(sys.stdout)
      with contextlib.redirect_stdout(tee):
        sub.run(sub)
      if not chief():
        continue
      summary = _summary(tee.copy.getvalue())
      items, correct = int(summary["examples"]), int(summary["correct"])
      score.items += items
      score.correct += correct
      score.parts.append((label, items, correct))
      score.data = bench_args[bench_args.index("--data_dir") + 1]
    scores.append(score)
  if chief():
    table = format_table(scores, args)
    print(table)
    with open(os.path.join(args.out, "table1.md"), "w") as f:
      f.write(table + "\n")
    row = [s.as_dict() for s in scores]
    with open(os.path.join(args.out, "table1.json"), "w") as f:
      json.dump(row, f, indent=1)
    print("table1=" + json.dumps({s.name: s.score for s in scores}))
  return scores


def _default_root() -> str:
  from train.tools import bench_download  # pylint: disable=import-outside-toplevel
  return str(bench_download.benchmark_dir("x").parent)


def _pct(value: float | None) -> str:
  return "-" if value is None else f"{100 * value:.1f}"


def format_table(scores: Sequence[Score], args=None) -> str:
  """The row as a markdown table, one line per benchmark, beside the paper."""
  agent = (f"--run {args.run_dir}" if args is not None and args.run_dir else
           f"--hf_dir {args.hf_dir}" if args is not None else "")
  lines = [f"Table 1, {agent}" + (f" (--limit {args.limit}: not Table 1)"
                                  if args is not None and args.limit else ""),
           "",
           "| benchmark | items | correct | score % | 95% interval % | paper % | data |",
           "|---|---|---|---|---|---|---|"]
  for s in scores:
    if not s.items:
      lines.append(f"| {TITLES[s.name]} | 0 | - | - | - | {PAPER[s.name]:.1f} | "
                   f"not present: {s.missing or 'nothing scored'} |")
      continue
    low, high = wilson(s.correct, s.items)
    parts = "; ".join(f"{label} {c}/{n}" for label, n, c in s.parts)
    lines.append(f"| {TITLES[s.name]} | {s.items} | {s.correct} | {_pct(s.score)} | "
                 f"{_pct(low)}-{_pct(high)} | {PAPER[s.name]:.1f} | {s.data} ({parts}) |")
  return "\n".join(lines)


def add_arguments(sub) -> None:
  """The table1 command's flags (the agent's are table1.add_agent_arguments')."""
  sub.add_argument("--out", required=True, help="directory for predictions, "
                   "verdicts, table1.md and table1.json")
  sub.add_argument("--data_root", default="", help="where each benchmark's data "
                   "is, ROOT/<name>/ (default: the --download cache)")
  sub.add_argument("--benchmarks", default=",".join(BENCHMARKS),
                   help="comma-separated, of " + ", ".join(BENCHMARKS))
  sub.add_argument("--bfcl_categories", default=",".join(BFCL_CATEGORIES),
                   help="the BFCL categories pooled into its score (those present)")
  sub.add_argument("--travelplanner_split", default="validation",
                   choices=("validation", "test", "train"))
  sub.add_argument("--limit", type=int, default=0,
                   help="the first K items of each benchmark (a smoke test)")
  sub.add_argument("--max_turns", type=int, default=0,
                   help="ALFWorld's commands per episode (0: its command's default)")
