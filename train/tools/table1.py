"""The Table 1 benchmarks besides BFCL scored by generation, for
`python -m train.tools.evaluate {bamboogle,api_bank,travelplanner}`.

Each benchmark is a `Benchmark`: how its items load from a data directory in
the source's own file format, the chat prompt of an item, how the replies are
scored, a hand-written fixture in the same format and the official files that
`--download` fetches (train/tools/bench_download.py). `run` is the command:

  1. `--write_fixture DIR` writes the fixture and stops;
  2. the data directory is `--data_dir`, or with `--download` the cache the
     official files are fetched into;
  3. with `--generate`, the agent (train/tools/agent_generate.py) answers the
     items (the first `--limit K`, or those named by `--ids`), one reply per
     item decoded greedily (or at `--temperature`), prompts grouped by width so
     the sampler compiles once per width bucket, and the replies are written
     to `--predictions` as `{"id": ..., "result": "<reply>"}` lines; it prints
     `generated=<n>` and `generation_seconds_per_item=<s>`. In a job of
     several processes each decodes its devices' rows of every batch and only
     process 0 writes the file and goes on;
  4. the predictions are scored: one verdict line per item to
     `FILE.verdicts.jsonl`, then `key=value` summary lines, the last one
     `accuracy=<headline>` (train/tools/evaluate.py's convention).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Any, Callable, Sequence

from genenv_jax.scoring import INVALID, InputError, apibank_levels, bamboogle
from genenv_jax.scoring import travelplanner


@dataclasses.dataclass(frozen=True)
class Benchmark:
  """How `run` handles one benchmark.

  Attributes:
    name: the benchmark's cache name.
    files: args -> the official files, path in the data directory -> URL.
    load: (args, data_dir) -> (the items, each with an `id`; what scoring
      needs besides them).
    messages: item -> its chat prompt.
    score: (items, {id: reply}, what load returned besides the items) ->
      (verdict rows, summary {key: value}); each row has "id", "correct" and
      "verdict".
    write_fixture: directory -> the paths written.
    limit: (items, K) -> the items `--limit K` keeps.
  """

  name: str
  files: Callable[[Any], dict[str, str]]
  load: Callable[[Any, str], tuple[list, Any]]
  messages: Callable[[Any], list[dict[str, str]]]
  score: Callable[[list, dict, Any], tuple[list[dict[str, Any]], dict[str, Any]]]
  write_fixture: Callable[[str], list[str]]
  limit: Callable[[list, int], list] = lambda items, k: items[:k]


def _mean(values: Sequence[float]) -> float:
  return sum(values) / len(values) if values else 0.0


def _bamboogle_score(items, replies, _):
  rows = []
  for item in items:
    answer, result = bamboogle.score(item, replies[item.id])
    rows.append({"id": item.id, "correct": result.verdict.correct,
                 "verdict": str(result.verdict), "answer": answer,
                 "exact_match": result.exact_match, "f1": result.f1})
  return rows, {"f1": f"{_mean([r['f1'] for r in rows]):.6f}",
                "exact_match": f"{_mean([r['exact_match'] for r in rows]):.6f}"}


BAMBOOGLE = Benchmark(
    name=bamboogle.NAME, files=lambda args: bamboogle.FILES,
    load=lambda args, data_dir: (bamboogle.load(data_dir), None),
    messages=bamboogle.messages, score=_bamboogle_score,
    write_fixture=bamboogle.write_fixture)


def _api_bank_load(args, data_dir_: str):
  try:
    levels = [int(level) for level in args.levels.split(",") if level.strip()]
  except ValueError as e:
    raise InputError(f"--levels={args.levels!r}: expected e.g. 1,2,3") from e
  data = apibank_levels.load(data_dir_, levels)
  return data.items, data.catalogue


def _api_bank_score(items, replies, catalogue):
  rows = []
  for item in items:
    verdict = apibank_levels.score(item, replies[item.id], catalogue)
    rows.append({"id": item.id, "correct": verdict.correct, "verdict": str(verdict),
                 "level": item.level, "api_name": item.gold.name})
  summary = {}
  for level in sorted({item.level for item in items}):
    level_rows = [row for row in rows if row["level"] == level]
    summary[f"level{level}_calls"] = len(level_rows)
    summary[f"level{level}_accuracy"] = (
        f"{_mean([row['correct'] for row in level_rows]):.6f}")
  dialogues: dict[str, list[bool]] = {}
  calls = {}
  for item, row in zip(items, rows):
    if item.dialogue:
      dialogues.setdefault(item.dialogue, []).append(row["correct"])
      calls[item.dialogue] = item.dialogue_calls
  if dialogues:
    # A dialogue is correct when every one of its calls is (API-Bank's level-3
    # "sample accuracy"), over the dialogues whose calls were all scored.
    complete = [d for d, results in dialogues.items() if len(results) == calls[d]]
    summary["level3_dialogues"] = len(complete)
    summary["level3_dialogue_accuracy"] = (
        f"{_mean([all(dialogues[d]) for d in complete]):.6f}")
  summary["invalid"] = sum(row["verdict"].startswith(INVALID) for row in rows)
  return rows, summary


API_BANK = Benchmark(
    name=apibank_levels.NAME, files=lambda args: apibank_levels.FILES, load=_api_bank_load,
    messages=apibank_levels.messages, score=_api_bank_score,
    write_fixture=apibank_levels.write_fixture, limit=apibank_levels.limit_per_level)


def _travelplanner_score(items, replies, _):
  rows, evaluations = [], []
  for item in items:
    evaluation, verdict = travelplanner.score(item, replies[item.id])
    evaluations.append(evaluation)
    rows.append({"id": item.id, "correct": verdict.correct, "verdict": str(verdict),
                 "level": item.level, "days": item.days,
                 **travelplanner.row_fields(evaluation)})
  return rows, travelplanner.summary(items, evaluations)


TRAVELPLANNER = Benchmark(
    name=travelplanner.NAME, files=lambda args: travelplanner.files(args.split),
    load=lambda args, data_dir_: (travelplanner.load(data_dir_, args.split), None),
    messages=travelplanner.messages, score=_travelplanner_score,
    write_fixture=lambda directory: [  # train too: configs/travelplanner.py's seeds
        path for split in ("train", "validation")
        for path in travelplanner.write_fixture(directory, split)])


def data_dir(args, bench: Benchmark) -> str:
  """`--data_dir`, or the download cache with `--download`.

  Raises:
    InputError: neither or both given, or a download failed.
  """
  if bool(args.data_dir) == bool(args.download):
    raise InputError(f"{bench.name}: give exactly one of --data_dir and --download")
  if args.data_dir:
    return args.data_dir
  from train.tools import bench_download  # pylint: disable=import-outside-toplevel
  return str(bench_download.fetch(bench.name, bench.files(args)))


def _select(bench: Benchmark, items: list, args) -> list:
  ids = [i for i in args.ids.split(",") if i]
  if ids:
    known = {str(item.id): item for item in items}
    unknown = [i for i in ids if i not in known]
    if unknown:
      raise InputError(f"--ids: {', '.join(map(repr, unknown[:5]))} not in "
                       f"{bench.name}'s data")
    items = [item for item in items if str(item.id) in set(ids)]
  if args.limit:
    items = bench.limit(items, args.limit)
  return items


def _generate(bench: Benchmark, items: list, args) -> None:
  from train.tools import agent_generate  # pylint: disable=import-outside-toplevel

  if not items:
    raise InputError(f"{bench.name}: no items to answer")
  agent = agent_generate.load_agent(args.run_dir, args.hf_dir, args.step, args.dtype,
                                    args.mesh, args.batch_size)
  prompts = [bench.messages(item) for item in items]
  limit = agent.model.max_position_embeddings
  long = [f"{item.id} ({n} tokens)" for item, prompt in zip(items, prompts)
          if (n := len(agent_generate.prompt_ids(agent.tokenizer, prompt)))
          + args.max_new_tokens > limit]
  if long:
    print(f"warning: {len(long)} prompt(s) with --max_new_tokens={args.max_new_tokens} "
          f"exceed the model's max_position_embeddings={limit}: {', '.join(long[:5])}",
          file=sys.stderr)
  began = time.perf_counter()
  texts = agent_generate.generate_bucketed(
      agent, prompts, args.max_new_tokens, args.batch_size, args.temperature)
  seconds = time.perf_counter() - began
  agent_generate.write_records(args.predictions, [
      {"id": item.id, "result": text} for item, text in zip(items, texts)])
  print(f"generated={len(items)}")
  print(f"generation_seconds_per_item={seconds / len(items):.2f}")


def _chief() -> bool:
  from train.tools import agent_generate  # pylint: disable=import-outside-toplevel
  return agent_generate.chief()


def wrote_fixture(args, write_fixture: Callable[[str], list[str]]) -> bool:
  """What a generating benchmark command does first: with --write_fixture, it
  writes the fixture there (`write_fixture(DIR)` -> its paths), prints them
  and is done (True); otherwise it checks --predictions and --generate's flags.

  Raises:
    InputError: no --predictions, or --run / --hf_dir without --generate.
  """
  if args.write_fixture:
    for path in write_fixture(args.write_fixture):
      print(f"wrote={path}")
    return True
  if not args.predictions:
    raise InputError("--predictions is required (unless --write_fixture)")
  if (args.run_dir or args.hf_dir) and not args.generate:
    raise InputError("--run and --hf_dir need --generate")
  return False


def run(args, bench: Benchmark, read_predictions, report) -> None:
  """The command (module docstring); `read_predictions` and `report` are
  train/tools/evaluate.py's."""
  if wrote_fixture(args, bench.write_fixture):
    return
  items, context = bench.load(args, data_dir(args, bench))
  some = False
  if args.generate:
    chosen = _select(bench, items, args)
    some = len(chosen) < len(items)
    _generate(bench, chosen, args)
    if not _chief():
      return
  replies = read_predictions(args.predictions, [item.id for item in items],
                             f"{bench.name}'s data", args.allow_missing or some)
  scored = [item for item in items if item.id in replies]
  rows, summary = bench.score(scored, replies, context)
  report(args, rows, summary)


def add_agent_arguments(sub) -> None:
  """The flags that choose the agent, its mesh and how it decodes (the
  arguments of train/tools/agent_generate.py's load_agent and generate),
  shared by the generating benchmark commands."""
  sub.add_argument("--run", dest="run_dir", default="", help="training run workdir (its agent)")
  sub.add_argument("--step", type=int, default=None,
                   help="the run's checkpoint step (default: the latest)")
  sub.add_argument("--hf_dir", default="", help="HF model directory")
  sub.add_argument("--mesh", default="",
                   help="the devices' mesh, e.g. data=-1,fsdp=4,tensor=2 (default: the "
                        "run's config.mesh; data-only for --hf_dir)")
  sub.add_argument("--batch_size", type=int, default=8,
                   help="prompts per decoding call (rounded up to a multiple of the "
                        "mesh's data x fsdp devices)")
  sub.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
  sub.add_argument("--dtype", default="",
                   help="compute dtype of the agent (default: the run's; float32 for "
                        "--hf_dir)")


def add_arguments(sub) -> None:
  """The flags every benchmark of this module takes."""
  sub.add_argument("--predictions", default="",
                   help='JSONL of {"id": ..., "result": "<model reply>"}')
  sub.add_argument("--allow_missing", action="store_true",
                   help="score only the items that have a prediction")
  sub.add_argument("--data_dir", default="", help="the source's files (see docs/benchmarks.md)")
  sub.add_argument("--download", action="store_true",
                   help="fetch the official files into the cache (needs internet)")
  sub.add_argument("--write_fixture", default="", metavar="DIR",
                   help="write a small hand-written dataset in the source's format and stop")
  sub.add_argument("--generate", action="store_true",
                   help="write --predictions first by decoding an agent's replies")
  add_agent_arguments(sub)
  sub.add_argument("--limit", type=int, default=0,
                   help="with --generate: answer only the first K items (0: all; "
                        "API-Bank: of each level)")
  sub.add_argument("--ids", default="",
                   help="with --generate: answer only these comma-separated ids")
