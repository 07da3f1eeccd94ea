"""The official BFCL multi-turn verdict, as the oracle of the differential tests.

`official_verdict` runs bfcl-eval's own scoring path for one result record: the
decode loop of `eval_checker.eval_runner._evaluate_single_multi_turn_entry` (the
turn-count check, BFCL's prompt-mode execution decoder on every step, skipping
steps that fail to decode or decode to nothing; reproduced here because importing
eval_runner pulls in pandas and every model handler), then
`multi_turn_checker.multi_turn_checker` itself, which `eval`s the decoded calls on
the API classes. It runs only on texts the tests write.

The checker keeps its API instances in module globals keyed on the model name and
entry id; every call uses a model name of its own, so that runs do not share state.
Run as a module (`main`), it checks the verdicts of a scored result file against
the official ones.

The heavy imports the decoder module pulls in (Java/JavaScript
parsers, tenacity) are stubbed as in tests/test_bfcl_differential.py.
"""

from __future__ import annotations

import atexit
import copy
import itertools
import os
import shutil
import sys
import tempfile
import types


def _stub(name: str, **attributes) -> None:
  if name not in sys.modules:
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    sys.modules[name] = module


if "BFCL_PROJECT_ROOT" not in os.environ:
  _ROOT = tempfile.mkdtemp(prefix="bfcl_project_root_")
  atexit.register(shutil.rmtree, _ROOT, ignore_errors=True)
  os.environ["BFCL_PROJECT_ROOT"] = _ROOT
_stub("bfcl_eval.model_handler.parser.java_parser", parse_java_function_call=None)
_stub("bfcl_eval.model_handler.parser.js_parser", parse_javascript_function_call=None)
_stub("tenacity", retry=None, retry_if_exception_message=None,
      retry_if_exception_type=None, wait_random_exponential=None)

# pylint: disable=wrong-import-position
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import is_empty_execute_response
from bfcl_eval.model_handler.utils import default_decode_execute_prompting

_RUNS = itertools.count()


def official_verdict(question: dict, ground_truth: list, result: list) -> bool:
  """Whether BFCL's multi-turn scoring passes `result` (per turn, step texts) on
  the question line `question` with `ground_truth`."""
  if not isinstance(result, list) or len(result) != len(ground_truth):
    return False  # BFCL: inference error / force-terminated
  decoded = []
  for turn in result:
    steps = []
    for text in turn:
      try:
        calls = default_decode_execute_prompting(text, has_tool_call_tag=False)
      except Exception:  # pylint: disable=broad-except  # BFCL skips the step
        continue
      if not is_empty_execute_response(calls):
        steps.append(calls)
    decoded.append(steps)
  model_name = f"oracle_run_{next(_RUNS)}"
  verdict = multi_turn_checker(decoded, copy.deepcopy(ground_truth),
                               copy.deepcopy(question), "multi_turn", model_name)
  return bool(verdict["valid"])


def main(argv: list[str] | None = None) -> int:
  """Compares the verdicts `train.tools.evaluate` wrote for a multi-turn result
  file (FILE.verdicts.jsonl) with the official checker's on the same records:

    python -m tests.bfcl_multi_turn_oracle --category multi_turn_base \
        --data_dir DIR --predictions FILE

  Prints one line per record and `agree=<n> disagree=<n>`; exits 1 on a
  disagreement."""
  import argparse  # pylint: disable=import-outside-toplevel
  import json  # pylint: disable=import-outside-toplevel
  from genenv_jax.scoring import bfcl_multi_turn, read_jsonl  # pylint: disable=import-outside-toplevel
  parser = argparse.ArgumentParser(prog="python -m tests.bfcl_multi_turn_oracle")
  parser.add_argument("--category", required=True)
  parser.add_argument("--data_dir", required=True)
  parser.add_argument("--predictions", required=True)
  args = parser.parse_args(argv)
  questions_path, answers_path = bfcl_multi_turn.category_files(args.data_dir,
                                                                args.category)
  questions = {r["id"]: r for r in read_jsonl(questions_path)}
  answers = {r["id"]: r["ground_truth"] for r in read_jsonl(answers_path)}
  ours = {r["id"]: r["correct"] for r in read_jsonl(args.predictions + ".verdicts.jsonl")}
  agree = disagree = 0
  for record in read_jsonl(args.predictions):
    official = official_verdict(questions[record["id"]], answers[record["id"]],
                                record["result"])
    same = official == ours[record["id"]]
    agree, disagree = agree + same, disagree + (not same)
    print(json.dumps({"id": record["id"], "official": official,
                      "ours": ours[record["id"]]}))
  print(f"agree={agree} disagree={disagree}")
  return 0 if disagree == 0 else 1


if __name__ == "__main__":
  sys.exit(main())
