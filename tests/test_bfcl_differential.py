"""Differential test of genenv_jax.scoring.bfcl against the official BFCL AST checker
(bfcl-eval's `ast_checker` and its prompt-style decoder `default_decode_ast_prompting`).

For a fixed sample of entries of every supported category, predictions are built from
the package's own `possible_answer` data: the first acceptable value of each parameter
(should pass) and systematic variants (other acceptable values, normalised-string
variants, int for float, swapped parallel order, wrong name, dropped required
parameter, wrong type, value outside the list, extra parameter, wrong call count).
Each prediction is rendered as Python-call text and scored end to end by both
implementations; every verdict must agree, and both decoders must read the same calls.

bfcl-eval's checker module imports its model registry (`constants.model_config`), which
pulls in every model handler and their SDKs; a stub with the one field the checker reads
(`underscore_to_dot`) replaces it. The decoder module imports tree-sitter parsers for
Java/JavaScript and `tenacity`, unused by Python decoding; stubs replace those too.
"""

from __future__ import annotations

import atexit
import copy
import importlib.util
import json
import os
import random
import shutil
import sys
import tempfile
import types

import pytest

from genenv_jax.scoring import bfcl

SAMPLE_PER_CATEGORY = 60
CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple",
              "live_simple", "live_multiple", "live_parallel",
              "live_parallel_multiple")
PLAIN_MODEL = "plain-model"          # keeps dotted function names
UNDERSCORE_MODEL = "underscore-model"  # BFCL's underscore_to_dot models

if importlib.util.find_spec("bfcl_eval") is None:
  pytest.skip("bfcl_eval is not installed (pip install --no-deps bfcl-eval)",
              allow_module_level=True)


def _stub(name: str, **attributes) -> None:
  if name not in sys.modules:
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    sys.modules[name] = module


def _official():
  """(ast_checker, decode, is_call_list, Language) with the heavy imports stubbed.

  Importing bfcl_eval.utils creates result/score/lock folders under
  BFCL_PROJECT_ROOT (by default next to the installed package); they go to a
  temporary folder instead.
  """
  if "BFCL_PROJECT_ROOT" not in os.environ:
    root = tempfile.mkdtemp(prefix="bfcl_project_root_")
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    os.environ["BFCL_PROJECT_ROOT"] = root
  config = {PLAIN_MODEL: types.SimpleNamespace(underscore_to_dot=False),
            UNDERSCORE_MODEL: types.SimpleNamespace(underscore_to_dot=True)}
  _stub("bfcl_eval.constants.model_config", MODEL_CONFIG_MAPPING=config)
  _stub("bfcl_eval.model_handler.parser.java_parser",
        parse_java_function_call=None)
  _stub("bfcl_eval.model_handler.parser.js_parser",
        parse_javascript_function_call=None)
  _stub("tenacity", retry=None, retry_if_exception_message=None,
        retry_if_exception_type=None, wait_random_exponential=None)
  from bfcl_eval.constants.enums import Language
  from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker
  from bfcl_eval.model_handler.utils import default_decode_ast_prompting
  from bfcl_eval.utils import is_function_calling_format_output
  return ast_checker, default_decode_ast_prompting, \
      is_function_calling_format_output, Language


AST_CHECKER, OFFICIAL_DECODE, IS_CALL_LIST, LANGUAGE = _official()
DATA_DIR = os.path.join(os.path.dirname(importlib.util.find_spec("bfcl_eval").origin),
                        "data")


def _official_verdict(question: dict, answer: list, text: str, category: str,
                      model: str = PLAIN_MODEL) -> bool:
  try:
    decoded = OFFICIAL_DECODE(text)
  except Exception:  # the official runner counts any decoder exception as a failure
    return False
  if not IS_CALL_LIST(decoded):
    return False
  result = AST_CHECKER(copy.deepcopy(question["function"]), decoded,
                       copy.deepcopy(answer), LANGUAGE.PYTHON, category, model)
  return bool(result["valid"])


def _render(calls: list[tuple[str, dict]]) -> str:
  return "[" + ", ".join(
      f"{name}(" + ", ".join(f"{k}={v!r}" for k, v in args.items()) + ")"
      for name, args in calls) + "]"


# --------------------------------------------------------------------- variants


def _pick(values: list, which: str):
  """(the first or last acceptable value,); None to leave the parameter out (that
  value is "", or there is no acceptable value)."""
  if not values:
    return None
  value = values[0] if which == "first" else values[-1]
  return None if value == "" else (value,)


def _calls_from_answer(answer: list, which: str = "first") -> list[tuple[str, dict]]:
  calls = []
  for expected in answer:
    (name, params), = expected.items()
    args = {}
    for param, values in params.items():
      picked = _pick(values, which)
      if picked is not None:
        args[param] = copy.deepcopy(picked[0])
    calls.append((name, args))
  return calls


def _with_all_optional(answer: list) -> list[tuple[str, dict]]:
  calls = []
  for expected in answer:
    (name, params), = expected.items()
    args = {}
    for param, values in params.items():
      given = [v for v in values if v != ""]
      if given:
        args[param] = copy.deepcopy(given[0])
    calls.append((name, args))
  return calls


def _retyped(value):
  if isinstance(value, bool):
    return "true" if value else "false"
  if isinstance(value, int):
    return float(value)
  if isinstance(value, float):
    return str(value)
  if isinstance(value, str):
    return 7
  if isinstance(value, list):
    return tuple(value)
  if isinstance(value, dict):
    return list(value.items())
  return 0


def _outside(value):
  if isinstance(value, bool):
    return not value
  if isinstance(value, (int, float)):
    return value + 1000
  if isinstance(value, str):
    return value + " zz extra"
  if isinstance(value, list):
    return value + [value[0]] if value else [1]
  if isinstance(value, dict):
    return {**value, "zz_extra": 1}
  return "zz"


def _string_variant(value):
  if isinstance(value, str):
    return value.upper().replace(" ", "  ").replace("-", " - ") + "."
  if isinstance(value, list):
    return [_string_variant(v) for v in value]
  return value


def _int_for_float(value):
  if isinstance(value, float) and value.is_integer():
    return int(value)
  if isinstance(value, list):
    return [_int_for_float(v) for v in value]
  return value


def _map_first_param(calls, rng, change):
  """`calls` with `change` applied to one argument (chosen by `rng`) of call 0."""
  calls = copy.deepcopy(calls)
  name, args = calls[0]
  if args:
    param = rng.choice(sorted(args))
    args[param] = change(args[param])
  return calls


def _map_all(calls, change):
  return [(name, {k: change(v) for k, v in args.items()})
          for name, args in copy.deepcopy(calls)]


def _variants(question: dict, answer: list, rng: random.Random) -> dict[str, list]:
  base = _calls_from_answer(answer)
  schemas = {f["name"]: f for f in question["function"]}
  first_name, first_args = base[0]
  required = [p for p in schemas[first_name]["parameters"].get("required", [])
              if p in first_args]
  variants = {
      "first_values": base,
      "last_values": _calls_from_answer(answer, "last"),
      "all_optional": _with_all_optional(answer),
      "string_variant": _map_all(base, _string_variant),
      "int_for_float": _map_all(base, _int_for_float),
      "wrong_name": [(first_name + "_v2", first_args)] + base[1:],
      "wrong_type": _map_first_param(base, rng, _retyped),
      "outside_list": _map_first_param(base, rng, _outside),
      "extra_param": [(first_name, {**first_args, "zz_unexpected": 1})] + base[1:],
      "extra_call": base + base[:1],
      "missing_call": base[:-1],
  }
  if required:
    dropped = dict(first_args)
    del dropped[rng.choice(required)]
    variants["drop_required"] = [(first_name, dropped)] + base[1:]
  if len(base) > 1:
    variants["reversed_order"] = base[::-1]
    variants["shuffled_order"] = rng.sample(base, len(base))
  return variants


def _sample(category: str):
  """(question, answer) pairs of a deterministic sample of `category`."""
  questions_path, answers_path = bfcl.category_files(DATA_DIR, category)
  with open(questions_path, encoding="utf-8") as f:
    questions = [json.loads(line) for line in f if line.strip()]
  with open(answers_path, encoding="utf-8") as f:
    answers = {r["id"]: r["ground_truth"]
               for r in (json.loads(line) for line in f if line.strip())}
  chosen = random.Random(category).sample(
      questions, min(SAMPLE_PER_CATEGORY, len(questions)))
  return [(q, answers[q["id"]]) for q in chosen]


# ------------------------------------------------------------------------ tests


@pytest.mark.parametrize("category", CATEGORIES)
def test_verdicts_agree_with_the_official_checker(category):
  entries = {e.id: e for e in bfcl.load_category(DATA_DIR, category)}
  disagreements, compared, passed = [], 0, 0
  for question, answer in _sample(category):
    rng = random.Random(question["id"])
    for variant, calls in _variants(question, answer, rng).items():
      text = _render(calls)
      official = _official_verdict(question, answer, text, category)
      ours = bfcl.score(entries[question["id"]], text, category)
      compared += 1
      passed += official
      if ours.correct != official:
        disagreements.append(f"{question['id']} {variant}: official={official} "
                             f"ours={ours} text={text[:300]}")
  print(f"{category}: {compared} cases compared, {passed} correct, "
        f"{len(disagreements)} disagreements")
  assert not disagreements, "\n".join(disagreements[:20])
  # The sample exercises both verdicts in earnest.
  assert 0.2 * compared < passed < 0.8 * compared


@pytest.mark.parametrize("category", CATEGORIES)
def test_both_decoders_read_the_same_calls(category):
  for question, answer in _sample(category)[:20]:
    for calls in _variants(question, answer, random.Random(0)).values():
      text = _render(calls)
      official = [next(iter(c.items())) for c in OFFICIAL_DECODE(text)]
      assert [tuple(c) for c in bfcl.decode_calls(text)] == official, text


def test_dotted_names_written_with_underscores_agree():
  category = "simple_python"
  entries = {e.id: e for e in bfcl.load_category(DATA_DIR, category)}
  compared = 0
  for question, answer in _sample(category):
    base = _calls_from_answer(answer)
    if "." not in base[0][0]:
      continue
    for calls in (base, [(n.replace(".", "_"), a) for n, a in base]):
      text = _render(calls)
      for model, dots in ((PLAIN_MODEL, False), (UNDERSCORE_MODEL, True)):
        official = _official_verdict(question, answer, text, category, model)
        ours = bfcl.score(entries[question["id"]], text, category,
                          dots_as_underscores=dots)
        assert ours.correct == official, (model, text, str(ours))
        compared += 1
  assert compared >= 20


@pytest.mark.parametrize("text", [
    "[]", "f(a=1)", "```\n[f(a=1)]\n```", "[f(a=1), g(b='x')]\n",
    "math.sqrt(x=2*3, y=-4, z=2**10 - 1, w='ab' + 'c')",
    "[f(a=x, b=g(1), c=g(k=2), d=(1, 2), e={'k': [1, None]}, h=arr[0])]",
    "[f(a=1, a=2)]", "['f(a=1)']", "[1, 2]", "f(1, a=...)", "a.b.c(d=True)",
    "Sure! [f(a=1)]", "[f(a=1)", "f(a=1)]", "[f(a=[1, 2][0:1])]",
    "[f(a=lambda: 1)]", "[f(a={1, 2})]", "[f(a=-x)]", "[f(a=1 / 0)]",
])
def test_decoders_agree_on_hand_written_texts(text):
  try:
    official = [next(iter(c.items())) for c in OFFICIAL_DECODE(text)]
    official_ok = IS_CALL_LIST(OFFICIAL_DECODE(text))
  except Exception:  # a decode failure is the verdict being compared
    official, official_ok = None, False
  try:
    ours = [tuple(c) for c in bfcl.decode_calls(text)]
  except bfcl.DecodeError:
    ours = None
  assert (ours is not None) == official_ok, (ours, official)
  if ours is not None:
    assert ours == official
