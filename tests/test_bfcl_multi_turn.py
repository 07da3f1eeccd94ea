"""BFCL multi-turn: the scorer against the official checker (differential), the
environment's contract, injected text, and the evaluate command.

The differential test builds result records from the ground truth of a fixed sample
of every category's entries and perturbs them (dropped, reordered, delayed,
duplicated and changed calls, unknown functions, chatter steps, empty turns, one
turn short, calls in a turn without ground truth, positional arguments, JSON
steps, injected text); each record is scored by genenv_jax.scoring.bfcl_multi_turn
and by bfcl-eval's own checker (tests/bfcl_multi_turn_oracle.py), and every verdict
must agree.
"""

from __future__ import annotations

import copy
import importlib.util
import inspect
import json
import os
import random

import pytest

from genenv_jax.domains.bfcl_multi_turn import env as env
from genenv_jax.scoring import bfcl_apis
from genenv_jax.scoring import bfcl_multi_turn as mt
from tests.bfcl_multi_turn_oracle import official_verdict
from train.tools import evaluate

SAMPLE_PER_CATEGORY = 40
DATA_DIR = os.path.join(os.path.dirname(importlib.util.find_spec("bfcl_eval").origin),
                        "data")
CHATTER = "I have completed the requested operations."


def _questions(category: str) -> dict[str, dict]:
  path, _ = mt.category_files(DATA_DIR, category)
  with open(path, encoding="utf-8") as f:
    return {r["id"]: r for r in map(json.loads, filter(str.strip, f))}


def _keyword_call(entry: mt.MultiTurnEntry, text: str) -> tuple[str, dict]:
  """A ground-truth call with its positional arguments named."""
  name, args, kwargs = bfcl_apis.ground_truth_call(text)
  method = entry.session().methods[name]
  return name, {**dict(zip(inspect.signature(method).parameters, args)), **kwargs}


def _render(calls: list[tuple[str, dict]]) -> str:
  return "[" + ", ".join(
      f"{name}(" + ", ".join(f"{k}={v!r}" for k, v in args.items()) + ")"
      for name, args in calls) + "]"


def _changed(value):
  if isinstance(value, bool):
    return not value
  if isinstance(value, (int, float)):
    return value + 1
  if isinstance(value, str):
    return value + "_v2"
  if isinstance(value, list):
    return value[:-1] if value else ["x"]
  return "zz"


def _variants(entry: mt.MultiTurnEntry, rng: random.Random) -> dict[str, list]:
  """Result records (per turn, step texts) built from the entry's ground truth."""
  truth = [[_keyword_call(entry, c) for c in turn] for turn in entry.ground_truth]
  one_step = [[_render(t)] if t else [CHATTER] for t in truth]
  busy = [i for i, t in enumerate(truth) if t]
  turn = rng.choice(busy)
  at = rng.randrange(len(truth[turn]))
  variants = {
      "exact": one_step,
      "call_per_step": [[_render([c]) for c in t] + [CHATTER] for t in truth],
      "chatter_steps": [[CHATTER] + s + ["Let me check.", "[]"] for s in one_step],
      "one_turn_short": one_step[:-1],
      "injected_step": [s + ["[__import__('os').system(command='true')]"]
                        for s in one_step],
      "json_steps": [[json.dumps([{"name": n, "arguments": a} for n, a in t])]
                     for t in truth],
  }

  def edited(change) -> list:
    calls = copy.deepcopy(truth)
    change(calls)
    return [[_render(t)] if t else [CHATTER] for t in calls]

  variants["dropped"] = edited(lambda c: c[turn].pop(at))
  variants["reordered"] = edited(lambda c: rng.shuffle(c[turn]))
  variants["duplicated"] = edited(lambda c: c[turn].insert(at, c[turn][at]))
  variants["unknown_function"] = edited(
      lambda c: c[turn].__setitem__(at, ("archive_" + c[turn][at][0], c[turn][at][1])))
  variants["empty_turn"] = edited(lambda c: c[turn].clear())
  name, args = truth[turn][at]
  if args:
    key = rng.choice(sorted(args))
    variants["changed_argument"] = edited(
        lambda c: c[turn][at][1].__setitem__(key, _changed(args[key])))
    variants["dropped_argument"] = edited(lambda c: c[turn][at][1].pop(key))
  if turn + 1 < len(truth):
    def delayed(c):
      c[turn + 1].insert(0, c[turn].pop())
    variants["delayed"] = edited(delayed)
  if turn > 0:
    def early(c):
      c[turn - 1].extend(c[turn])
      c[turn].clear()
    variants["early"] = edited(early)
  positional = list(one_step)
  positional[turn] = ["[" + ", ".join(entry.ground_truth[turn]) + "]"]
  variants["ground_truth_text"] = positional
  return variants


def _sample(category: str) -> list[mt.MultiTurnEntry]:
  entries = mt.load_category(DATA_DIR, category)
  return random.Random(category).sample(entries, SAMPLE_PER_CATEGORY)


@pytest.mark.parametrize("category", mt.CATEGORIES)
def test_verdicts_agree_with_the_official_checker(category):
  questions = _questions(category)
  _, answers_path = mt.category_files(DATA_DIR, category)
  with open(answers_path, encoding="utf-8") as f:
    answers = {r["id"]: r["ground_truth"] for r in map(json.loads, filter(str.strip, f))}
  disagreements, compared, passed = [], 0, 0
  for entry in _sample(category):
    for variant, result in _variants(entry, random.Random(entry.id)).items():
      official = official_verdict(questions[entry.id], answers[entry.id], result)
      ours = mt.score(entry, result)
      compared += 1
      passed += official
      if ours.verdict.correct != official:
        disagreements.append(f"{entry.id} {variant}: official={official} "
                             f"ours={ours.verdict} result={str(result)[:300]}")
  print(f"{category}: {compared} records compared, {passed} correct, "
        f"{len(disagreements)} disagreements")
  assert not disagreements, "\n".join(disagreements[:10])
  assert 0.2 * compared < passed < 0.8 * compared


HAND_WRITTEN = [
    "[cd(folder=document), mkdir(dir_name=temp)]", "cd(folder='document')",
    "```\n[cd(folder='document')]\n```", "[cd(folder={})]", "[cd(folder={'a': {}})]",
    "[cd(folder={'a': {'b': 1}, 'c': {}})]", "[cd(folder={'a': 1, 'b': {}})]",
    "[cd(folder={'a': {'b': 1}})]", "[mkdir(dir_name={1: 'x'})]", "[cd(folder=1e999)]",
    "[cd(folder='document'), cd(folder='..')]", "[cd('document')]", "[cd(folder=-1)]",
    "[cd(folder='document', extra=1)]", "[pwd(), ls(a=True), pwd()]", "[]", "ls",
    "[cd(folder='doc' + 'ument')]", "[cd(folder=documents[0])]", "[echo(content=f(x))]",
]


@pytest.mark.parametrize("text", HAND_WRITTEN)
def test_hand_written_steps_agree_with_the_official_checker(text):
  category = "multi_turn_base"
  entry = mt.load_category(DATA_DIR, category)[0]
  question = _questions(category)[entry.id]
  truth = [[_render([_keyword_call(entry, c) for c in t])] if t else [CHATTER]
           for t in entry.ground_truth]
  rest = _render([_keyword_call(entry, c) for c in entry.ground_truth[0][1:]])
  for first in ([text], [text] + truth[0], [text, rest]):
    result = [first] + truth[1:]
    official = official_verdict(question, [list(t) for t in entry.ground_truth], result)
    assert mt.score(entry, result).verdict.correct == official, (first, official)


# ------------------------------------------------------------------ environment


def _entry(category: str = "multi_turn_base", index: int = 0) -> mt.MultiTurnEntry:
  return mt.load_category(DATA_DIR, category)[index]


def _truth_steps(entry: mt.MultiTurnEntry) -> list[str]:
  """Ground-truth play: each turn's calls in one step, then a step without calls."""
  steps = []
  for turn in entry.ground_truth:
    if turn:
      steps.append(_render([_keyword_call(entry, c) for c in turn]))
    steps.append(CHATTER)
  return steps


def test_ground_truth_play_observes_results_then_turns_and_passes():
  entry = _entry()
  steps = _truth_steps(entry)
  first = env.transition(entry, [])
  assert first.observation == entry.turns[0][0]["content"] and not first.done
  after_call = env.transition(entry, steps[:1])
  assert [m["role"] for m in after_call.messages] == ["tool"] * len(entry.ground_truth[0])
  session = entry.session()
  expected = [session.execute_ground_truth(c) for c in entry.ground_truth[0]]
  assert [m["content"] for m in after_call.messages] == expected
  assert after_call.observation == repr(list(after_call.messages))
  assert env.transition(entry, steps[:2]).observation == entry.turns[1][0]["content"]
  end = env.transition(entry, steps)
  assert end.done and end.score.verdict.correct
  assert end.score.turns_passed == end.score.turns == len(entry.turns)
  turns = env.result_turns(entry, steps)
  assert len(turns) == len(entry.turns)
  question = _questions("multi_turn_base")[entry.id]
  assert official_verdict(question, [list(t) for t in entry.ground_truth], turns)


def test_transition_is_a_pure_function_of_the_history():
  entry = _entry()
  steps = _truth_steps(entry)
  steps[0] = steps[0].replace("document", "documents")  # a failing cd, for variety
  histories = [steps[:n] for n in range(len(steps) + 1)]
  fresh = [env.transition(entry, h) for h in histories]
  env._cache.clear()  # pylint: disable=protected-access
  order = list(range(len(histories))) * 2
  random.Random(0).shuffle(order)
  for n in order:
    assert env.transition(entry, histories[n]) == fresh[n]
  other = _entry(index=1)
  interleaved = [env.transition(other, _truth_steps(other)[:1]), env.transition(entry, steps)]
  assert interleaved[1] == fresh[-1]
  env.transition(entry, histories[1]).messages[0]["content"] = "changed by a caller"
  assert env.transition(entry, histories[1]) == fresh[1]


def test_held_out_functions_are_revealed_at_their_turn_as_bfcl_does():
  from bfcl_eval.constants import default_prompts  # pylint: disable=import-outside-toplevel
  entry = _entry("multi_turn_miss_func")
  (turn, docs), = entry.held_out.items()
  assert not entry.turns[turn] and docs[0]["name"] not in {f["name"] for f in entry.functions}
  steps = _truth_steps(entry)
  ended_turns = [i for i, s in enumerate(steps) if s == CHATTER]
  shown = env.transition(entry, steps[:ended_turns[turn - 1] + 1])
  assert shown.observation == default_prompts.DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING.format(
      functions=list(docs))
  assert env.MAX_STEPS_PER_TURN == default_prompts.MAXIMUM_STEP_LIMIT
  assert env.transition(entry, steps).score.verdict.correct


@pytest.mark.parametrize("text", [
    "I moved the file.", "[]", "[cd(folder={})]", "[cd(folder={'a': {'b': {}}})]",
    '[{"name": "cd", "arguments": {"folder": "document"}}]', "[cd(folder=document.x)]",
    "[cd(folder=lambda: 1)]", "[1, cd(folder='document')]"])
def test_a_step_bfcl_does_not_decode_to_calls_ends_the_turn(text):
  entry = _entry()
  step = env.transition(entry, [text])
  assert step.messages == tuple(entry.turns[1]) and not step.done


def test_the_step_limit_force_quits_the_episode():
  entry = _entry()
  steps = ["[pwd()]"] * env.MAX_STEPS_PER_TURN
  assert not env.transition(entry, steps).done
  end = env.transition(entry, steps + ["[pwd()]"])
  assert end.done and not end.score.verdict.correct
  assert "force-terminated" in end.score.verdict.reason
  assert env.result_turns(entry, steps + ["[pwd()]", "[ls()]"]) == [steps + ["[pwd()]"]]


SENTINEL = "bfcl_injection_sentinel"
INJECTED = [
    f"[__import__('os').system(command='touch {SENTINEL}')]",
    f"[os.system(command='touch {SENTINEL}')]",
    f"[open(file='{SENTINEL}', mode='w')]",
    f"[exec(source=\"open('{SENTINEL}', 'w')\")]",
    f"[eval(source=\"__import__('os').system('touch {SENTINEL}')\")]",
    f"[cd(folder=__import__('os').system(command='touch {SENTINEL}'))]",
    "[_load_scenario(scenario={'root': 1})]",
    "[GorillaFileSystem.ls(a=True)]",
    "[cd(folder={'system': {'command': 'true'}})]",
    "[round_number(number=5, decimal_places=-1" + "0" * 60 + ")]",
    "[logarithm(value=10, base=2, precision=10**8)]",
    "[square_root(number=2, precision=10**9)]",
    "[power(base=10, exponent=10**9)]",
    "[mean(numbers=[1e999])]",
]


@pytest.mark.parametrize("text", INJECTED)
def test_injected_text_is_an_execution_error_and_never_runs(text, tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  entry = _entry("multi_turn_base", 0)
  if "round_number" in text or "logarithm" in text or "square_root" in text \
      or "power" in text or "mean" in text:
    entry = next(e for e in mt.load_category(DATA_DIR, "multi_turn_base")
                 if "MathAPI" in e.involved_classes)
  step = env.transition(entry, [text])
  assert not step.done
  contents = [m["content"] for m in step.messages]
  assert contents and all(c.startswith(bfcl_apis.ERROR_PREFIX) for c in contents), contents
  assert not os.path.exists(SENTINEL)


def test_a_call_without_keywords_as_an_argument_is_its_source_text(tmp_path, monkeypatch):
  # As in BFCL's decoder: the argument is data, the text of the call.
  monkeypatch.chdir(tmp_path)
  entry = _entry("multi_turn_base", 0)
  code = f"__import__('os').system('touch {SENTINEL}')"
  steps = [f"[touch(file_name={code})]", "[ls()]"]
  listing = env.transition(entry, steps).messages[0]["content"]
  assert code in json.loads(listing)["current_directory_content"]
  assert not os.path.exists(SENTINEL)


def test_math_precision_is_restored_after_a_call():
  import decimal  # pylint: disable=import-outside-toplevel
  import mpmath  # pylint: disable=import-outside-toplevel
  entry = next(e for e in mt.load_category(DATA_DIR, "multi_turn_base")
               if "MathAPI" in e.involved_classes)
  before = (mpmath.mp.dps, decimal.getcontext().prec)
  step = env.transition(entry, ["[logarithm(value=10, base=2, precision=500), "
                                "square_root(number=2, precision=300)]"])
  assert len(step.messages[0]["content"]) > 400
  assert (mpmath.mp.dps, decimal.getcontext().prec) == before


# ------------------------------------------------------------------ command


def test_evaluate_scores_multi_turn_records(tmp_path, capsys):
  entries = mt.load_category(DATA_DIR, "multi_turn_miss_param")[:3]
  records = [{"id": e.id, "result": env.result_turns(e, _truth_steps(e))} for e in entries]
  records[1]["result"][0] = [CHATTER]
  predictions = tmp_path / "predictions.jsonl"
  predictions.write_text("".join(json.dumps(r) + "\n" for r in records))
  assert evaluate.main(["bfcl", "--category", "multi_turn_miss_param", "--data_dir",
                        DATA_DIR, "--predictions", str(predictions),
                        "--allow_missing"]) == 0
  out = capsys.readouterr().out.splitlines()
  assert out[-1] == f"accuracy={2 / 3:.6f}"
  assert "category=multi_turn_miss_param" in out and "examples=3" in out
  rows = [json.loads(line) for line in
          (tmp_path / "predictions.jsonl.verdicts.jsonl").read_text().splitlines()]
  assert [r["correct"] for r in rows] == [True, False, True]
  assert rows[1]["verdict"].startswith("incorrect: turn 0") and rows[1]["turns_passed"] == 0
  records[0]["result"] = "[cd(folder='x')]"
  predictions.write_text("".join(json.dumps(r) + "\n" for r in records))
  assert evaluate.main(["bfcl", "--category", "multi_turn_miss_param", "--data_dir",
                        DATA_DIR, "--predictions", str(predictions),
                        "--allow_missing"]) == 2
  assert "not a list of turns" in capsys.readouterr().err
