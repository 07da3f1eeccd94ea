"""Benchmark scoring of model outputs: BFCL AST, API-Bank call match, QA EM/F1, and
Table 1's Bamboogle, API-Bank (levels 1-3) and TravelPlanner by generation.

  python -m train.tools.evaluate bfcl --category simple_python --data_dir DIR \
      --predictions FILE
  python -m train.tools.evaluate bfcl --generate (--run WORKDIR [--step N] | --hf_dir DIR) \
      [--mesh SHAPE] --category simple_python --data_dir DIR --predictions FILE [--limit K]
  python -m train.tools.evaluate apibank --data GOLD.jsonl --predictions FILE
  python -m train.tools.evaluate qa --data GOLD.jsonl --predictions FILE
  python -m train.tools.evaluate {bamboogle,api_bank,travelplanner} [--generate \
      (--run WORKDIR [--step N] | --hf_dir DIR)] (--data_dir DIR | --download) \
      [--limit K] --predictions FILE
  python -m train.tools.evaluate {bamboogle,api_bank,travelplanner} --write_fixture DIR
  python -m train.tools.evaluate table1 (--run WORKDIR [--step N] | --hf_dir DIR) \
      --out DIR [--data_root ROOT] [--benchmarks B,...] [--limit K]
  python -m train.tools.evaluate alfworld [--generate (--run WORKDIR [--step N] | \
      --hf_dir DIR)] [--data_dir DIR | --download] [--limit K] [--max_turns T] \
      --predictions FILE

Generating (--generate) takes the agent flags `--mesh SHAPE` (e.g.
`data=-1,fsdp=4,tensor=2`; default: the run's config.mesh, data-only for --hf_dir),
`--batch_size B` (prompts per decoding call, rounded up to a multiple of the
mesh's data x fsdp devices), `--temperature` and `--dtype` (default: the run's
compute dtype, float32 for --hf_dir): the agent's parameters are read straight
into their fsdp / tensor shards on the mesh (train/tools/agent_generate.py). The
command runs as one JAX job of several processes with train.main's job flags,
given before the benchmark's name:

  python -m train.tools.evaluate [--distributed {auto,true,false}] \
      [--coordinator_address HOST:PORT --num_processes N --process_id I] <benchmark> ...
  ./launch/multiprocess.sh N -m train.tools.evaluate <benchmark> ...   # N local processes

(on a TPU pod, the same command on every worker with --distributed=true:
docs/tpu_pods.md). Every process does the same host work and decodes its devices'
rows; only process 0 writes the predictions and verdicts files and prints the
summary.

The Table 1 commands read each benchmark's own files, answer its items with the
agent (train/tools/table1.py) and score them; alfworld plays ALFWorld-synthetic
(or with --data_dir / --download ALFWorld's official games) as episodes and
scores them by replaying the commands in the games (train/tools/alfworld_eval.py).
Their sources, licences, protocols and headline figures are in docs/benchmarks.md.
`table1` runs each of them whose data is present under ROOT/<name>/ (default: the
--download cache) and prints Table 1's row beside the paper's, with 95% intervals
(train/tools/table1_row.py; the checklist is docs/table1.md).

Predictions FILE is JSON lines, one `{"id": ..., "result": "<model output text>"}` per
example (BFCL's result-file fields). With `--generate` the bfcl command writes FILE
first: the agent of a training run or an HF directory answers each question with
the project's sampler, prompted as BFCL prompts a model (train/tools/bfcl_generate.py);
`--limit K` answers (and scores) the first K questions only, `--ids A,B` the named
ones. Every example of the data must have exactly one
prediction unless `--allow_missing` is given, in which case only predicted examples are
scored.

  bfcl     DIR is laid out as bfcl-eval's data directory: `BFCL_v<N>_<category>.json`
           and `possible_answer/BFCL_v<N>_<category>.json`; categories, output formats
           and rules in genenv_jax/scoring/bfcl.py. `--dots_as_underscores` expects
           dotted function names written with `_`. The multi-turn categories
           (multi_turn_base, _miss_func, _miss_param, _long_context; rules in
           genenv_jax/scoring/bfcl_multi_turn.py, and DIR/multi_turn_func_doc/) take
           BFCL's multi-turn records `{"id": ..., "result": [[step text, ...] per
           turn]}`; their verdict lines add "turns_passed" and "turns". With
           `--generate` the agent plays each entry's turns against the APIs
           (train/tools/bfcl_multi_turn_generate.py) and the command prints
           `generation_seconds_per_entry`.
  apibank  GOLD lines `{"id": ..., "api_name": ..., "param_dict": {...}}`; rules in
           genenv_jax/scoring/apibank.py.
  qa       GOLD lines `{"id": ..., "answers": ["...", ...]}`; rules in
           genenv_jax/scoring/qa.py. Accuracy is exact match; F1 is printed too.

Prints `key=value` summary lines, the last one `accuracy=<float>`, and writes one line
per scored example, in data order, to `FILE.verdicts.jsonl`: `{"id": ...,
"correct": bool, "verdict": "correct" | "incorrect: <why>" | "invalid: <why>"}` (QA
lines add "exact_match" and "f1"). Bad input exits with status 2 and a message
naming the file, id or category.
"""

from __future__ import annotations

import argparse
import functools
import sys
from typing import Any, Callable

from genenv_jax.scoring import INVALID, InputError, Verdict, apibank, bfcl, qa
from genenv_jax.scoring import bfcl_multi_turn
from genenv_jax.scoring import read_jsonl, write_jsonl
from train.tools import alfworld_eval
from train.tools import table1
from train.tools import table1_row


def read_predictions(path: str, ids: list[Any], source: str,
                     allow_missing: bool, multi_turn: bool = False) -> dict[Any, Any]:
  """The prediction of each id, restricted to `ids` (the ids of `source`): its
  text, or with `multi_turn` its turns of step texts.

  Raises:
    InputError: a record without an id or a string 'result' (with `multi_turn`, a
      list of lists of strings), an id not in `source`, an id predicted twice, no
      predictions, or (unless `allow_missing`) an id of `source` without a
      prediction.
  """
  known = set(ids)
  texts = {}
  for record in read_jsonl(path):
    entry_id = record.get("id")
    if entry_id not in known:
      raise InputError(f"{path}: prediction id {entry_id!r} is not in {source}")
    if multi_turn:
      try:
        bfcl_multi_turn.check_result(record.get("result"), entry_id)
      except InputError as e:
        raise InputError(f"{path}: {e}") from e
    elif not isinstance(record.get("result"), str):
      raise InputError(f"{path}: id {entry_id!r} has no string 'result'")
    if entry_id in texts:
      raise InputError(f"{path}: id {entry_id!r} is predicted twice")
    texts[entry_id] = record["result"]
  if not texts:
    raise InputError(f"{path}: no predictions")
  missing = [i for i in ids if i not in texts]
  if missing and not allow_missing:
    shown = ", ".join(repr(i) for i in missing[:5])
    raise InputError(f"{path}: {len(missing)} id(s) of {source} have no prediction "
                     f"(e.g. {shown}); pass --allow_missing to score only the "
                     "predicted ones")
  return texts


def _verdict_row(entry_id: Any, verdict: Verdict) -> dict[str, Any]:
  return {"id": entry_id, "correct": verdict.correct, "verdict": str(verdict)}


def _report(args, rows: list[dict[str, Any]], summary: dict[str, Any]) -> None:
  write_jsonl(args.predictions + ".verdicts.jsonl", rows)
  correct = sum(row["correct"] for row in rows)
  for key, value in {**summary, "examples": len(rows), "correct": correct}.items():
    print(f"{key}={value}")
  print(f"accuracy={correct / len(rows):.6f}")


def _generate_bfcl(args) -> None:
  from train.tools import bfcl_generate  # pylint: disable=import-outside-toplevel
  from train.tools import bfcl_multi_turn_generate  # pylint: disable=import-outside-toplevel

  ids = [i for i in args.ids.split(",") if i]
  agent = bfcl_generate.load_agent(args.run_dir, args.hf_dir, args.step, args.dtype,
                                   args.mesh, args.batch_size)
  if args.category in bfcl_multi_turn.CATEGORIES:
    count, seconds = bfcl_multi_turn_generate.write_predictions(
        args.data_dir, args.category, agent, args.predictions,
        args.max_new_tokens, args.batch_size, args.limit, args.temperature, ids)
    print(f"generated={count}")
    print(f"generation_seconds_per_entry={seconds / max(count, 1):.1f}")
    return
  count = bfcl_generate.write_predictions(
      args.data_dir, args.category, agent, args.predictions, args.max_new_tokens,
      args.batch_size, args.limit, args.temperature, ids)
  print(f"generated={count}")


def _chief() -> bool:
  """Whether this process scores and reports (process 0 of the job)."""
  from train.tools import agent_generate  # pylint: disable=import-outside-toplevel
  return agent_generate.chief()


def _generated_some(args) -> bool:
  """Whether --generate answered only some questions (--limit or --ids)."""
  return bool(args.generate and (args.limit or args.ids))


def _run_bfcl(args) -> None:
  if args.generate:
    _generate_bfcl(args)
    if not _chief():
      return
  elif args.run_dir or args.hf_dir:
    raise InputError("--run and --hf_dir need --generate")
  if args.category in bfcl_multi_turn.CATEGORIES:
    _score_bfcl_multi_turn(args)
    return
  entries = bfcl.load_category(args.data_dir, args.category)
  texts = read_predictions(args.predictions, [e.id for e in entries],
                           f"BFCL category {args.category!r}",
                           args.allow_missing or _generated_some(args))
  rows = []
  for entry in entries:
    if entry.id in texts:
      verdict = bfcl.score(entry, texts[entry.id], args.category,
                           args.dots_as_underscores)
      rows.append(_verdict_row(entry.id, verdict))
  invalid = sum(row["verdict"].startswith(INVALID) for row in rows)
  _report(args, rows, {"category": args.category, "invalid": invalid})


def _score_bfcl_multi_turn(args) -> None:
  entries = bfcl_multi_turn.load_category(args.data_dir, args.category)
  results = read_predictions(args.predictions, [e.id for e in entries],
                             f"BFCL category {args.category!r}",
                             args.allow_missing or _generated_some(args),
                             multi_turn=True)
  rows = []
  for entry in entries:
    if entry.id in results:
      scored = bfcl_multi_turn.score(entry, results[entry.id])
      rows.append({**_verdict_row(entry.id, scored.verdict),
                   "turns_passed": scored.turns_passed, "turns": scored.turns})
  invalid = sum(row["verdict"].startswith(INVALID) for row in rows)
  _report(args, rows, {"category": args.category, "invalid": invalid})


def _run_apibank(args) -> None:
  gold = apibank.load_gold(args.data)
  texts = read_predictions(args.predictions, list(gold), args.data,
                           args.allow_missing)
  rows = [_verdict_row(i, apibank.score(call, texts[i]))
          for i, call in gold.items() if i in texts]
  invalid = sum(row["verdict"].startswith(INVALID) for row in rows)
  _report(args, rows, {"invalid": invalid})


def _run_qa(args) -> None:
  answers = qa.load_answers(args.data)
  texts = read_predictions(args.predictions, list(answers), args.data,
                           args.allow_missing)
  rows = []
  for entry_id, gold in answers.items():
    if entry_id in texts:
      result = qa.score(gold, texts[entry_id])
      rows.append({**_verdict_row(entry_id, result.verdict),
                   "exact_match": result.exact_match, "f1": result.f1})
  f1 = sum(row["f1"] for row in rows) / len(rows)
  _report(args, rows, {"f1": f"{f1:.6f}"})


def table1_commands() -> list[tuple[str, "table1.Benchmark", int, str]]:
  """(command, benchmark, default --max_new_tokens, help) of the Table 1
  benchmarks scored by train/tools/table1.py."""
  return [
      ("bamboogle", table1.BAMBOOGLE, 128,
       "Bamboogle: the model's answers, exact match and F1"),
      ("api_bank", table1.API_BANK, 96,
       "API-Bank levels 1-3: the model's API calls in the dialogue"),
      ("travelplanner", table1.TRAVELPLANNER, 1024,
       "TravelPlanner (sole planning): the model's plans, constraint pass rates"),
  ]


def _run_table1(args, bench) -> None:
  table1.run(args, bench, read_predictions, _report)


def _run_alfworld(args) -> None:
  alfworld_eval.run(args, _report, _verdict_row)


def _run_table1_row(args) -> None:
  table1_row.run(args, _parser().parse_args, _chief)


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog="python -m train.tools.evaluate",
      description="Score model outputs; the last line printed is accuracy=<float>.")
  job = parser.add_argument_group(
      "job", "several processes as one JAX job (before the command), as train.main's "
      "flags: launch/multiprocess.sh N -m train.tools.evaluate ... names them")
  job.add_argument("--distributed", default="auto", choices=("auto", "true", "false"),
                   help="initialise multi-process JAX: auto when the environment names "
                        "several hosts or a coordinator, or these flags a job")
  job.add_argument("--coordinator_address", default="",
                   help="HOST:PORT of process 0 (default: $JAX_COORDINATOR_ADDRESS)")
  job.add_argument("--num_processes", type=int, default=0,
                   help="processes in the job (default: $JAX_NUM_PROCESSES)")
  job.add_argument("--process_id", type=int, default=-1,
                   help="this process's index (default: $JAX_PROCESS_ID)")
  job.add_argument("--heartbeat_timeout_s", type=int, default=120,
                   help="seconds without a process's heartbeat before the others stop")
  job.add_argument("--initialization_timeout_s", type=int, default=300,
                   help="seconds each process waits at start-up for the others")
  commands = parser.add_subparsers(dest="benchmark", required=True)

  def command(name: str, run: Callable, help_text: str) -> argparse.ArgumentParser:
    sub = commands.add_parser(name, help=help_text)
    sub.set_defaults(run=run)
    sub.add_argument("--predictions", required=True,
                     help='JSONL of {"id": ..., "result": "<model output>"}')
    sub.add_argument("--allow_missing", action="store_true",
                     help="score only the examples that have a prediction")
    return sub

  sub = command("bfcl", _run_bfcl,
                "BFCL single-turn AST categories (Python) and multi-turn categories")
  sub.add_argument("--category", required=True, help="one of " + ", ".join(
      bfcl.SUPPORTED_CATEGORIES + bfcl_multi_turn.CATEGORIES))
  sub.add_argument("--data_dir", required=True,
                   help="directory holding BFCL_v<N>_<category>.json and "
                        "possible_answer/")
  sub.add_argument("--dots_as_underscores", action="store_true",
                   help="expect dotted function names written with '_'")
  sub.add_argument("--generate", action="store_true",
                   help="write --predictions first by decoding an agent's answers")
  table1.add_agent_arguments(sub)
  sub.add_argument("--max_new_tokens", type=int, default=256)
  sub.add_argument("--limit", type=int, default=0,
                   help="answer only the first K questions (0: all)")
  sub.add_argument("--ids", default="",
                   help="with --generate: answer only these comma-separated ids")
  for name, bench, max_new_tokens, help_text in table1_commands():
    sub = commands.add_parser(name, help=help_text)
    sub.set_defaults(run=functools.partial(_run_table1, bench=bench))
    table1.add_arguments(sub)
    sub.add_argument("--max_new_tokens", type=int, default=max_new_tokens)
    if name == "api_bank":
      sub.add_argument("--levels", default="1,2,3",
                       help="the API-Bank levels to load (comma-separated)")
    if name == "travelplanner":
      sub.add_argument("--split", default="validation",
                       choices=("train", "validation", "test"))
  sub = commands.add_parser(
      "alfworld", help="ALFWorld-synthetic (or the official games): the model's "
                       "episodes, success rate")
  sub.set_defaults(run=_run_alfworld)
  alfworld_eval.add_arguments(sub)
  sub = commands.add_parser(
      "table1", help="Table 1's row: the agent on every benchmark whose data is "
                     "present, beside the paper's (train/tools/table1_row.py)")
  sub.set_defaults(run=_run_table1_row, generate=True)
  table1.add_agent_arguments(sub)
  table1_row.add_arguments(sub)
  sub = command("apibank", _run_apibank, "API-Bank call match")
  sub.add_argument("--data", required=True, help="JSONL of gold API calls")
  sub = command("qa", _run_qa, "question answering exact match / F1")
  sub.add_argument("--data", required=True, help="JSONL of gold answers")
  return parser


def _start_job(args) -> None:
  """jax.distributed.initialize for a job the flags or the environment name
  (train.main's rules), before any device is touched.

  Raises:
    InputError: job flags that are incomplete or out of range.
  """
  from train import main as train_main  # pylint: disable=import-outside-toplevel
  try:
    job = train_main.named_job(args.coordinator_address, args.num_processes,
                               args.process_id)
    timeouts = train_main.job_timeouts(args.heartbeat_timeout_s,
                                       args.initialization_timeout_s)
    train_main.maybe_initialize_distributed(args.distributed, job=job, timeouts=timeouts)
  except ValueError as e:
    raise InputError(str(e)) from e


def main(argv: list[str] | None = None) -> int:
  args = _parser().parse_args(argv)
  try:
    if getattr(args, "generate", False):
      _start_job(args)
    args.run(args)
  except InputError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  return 0


if __name__ == "__main__":
  sys.exit(main())
