"""Scorers on adversarial outputs: a verdict (never an exception) in time linear in
the input, and size limits that score as invalid.

Each timing test compares an adversarial text with a benign text of the same length
that takes the same parser's slowest linear path, in the same test: the adversarial
one must take at most SLOWDOWN times as long (best of REPEATS runs each). The
patterns fixed here took quadratic or cubic time: at 2 KB the unclosed fence took
18 s, a sum of 200 string products 6 s and API-Bank's reading of a digit string
0.6 s, against well under a millisecond now.
"""

from __future__ import annotations

import json
import time

import pytest

from genenv_jax.domains.text import verifiers as text_verifiers
from genenv_jax.scoring import apibank, bfcl, qa
from train.tools import evaluate

SIZE = 16_384  # characters of each adversarial and benign text
SLOWDOWN = 50
REPEATS = 5

SCHEMA = {"name": "f", "parameters": {
    "type": "dict", "required": ["a"],
    "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}}
ENTRY = bfcl.BfclEntry("t", {"f": SCHEMA}, [{"f": {"a": ["x"], "b": [""]}}])
GOLD = apibank.ApiCall("f", {"a": "1"})


def padded(prefix: str, filler: str, suffix: str, size: int = SIZE) -> str:
  """prefix + filler repeated + suffix, `size` characters or just over."""
  count = -(-(size - len(prefix) - len(suffix)) // len(filler))
  return prefix + filler * max(count, 0) + suffix


def best_time(function, text) -> float:
  times = []
  for _ in range(REPEATS):
    start = time.perf_counter()
    function(text)
    times.append(time.perf_counter() - start)
  return min(times)


def assert_linear(function, adversarial: str, benign: str) -> None:
  assert len(adversarial) >= 8192 and abs(len(adversarial) - len(benign)) < 64
  slow, fast = best_time(function, adversarial), best_time(function, benign)
  assert slow <= SLOWDOWN * fast, (slow, fast)


# A benign call list of SIZE characters: one long string argument, which JSON
# rejects and `ast` parses (the decoder's slowest linear path).
BENIGN_CALLS = padded("[f(a='", "y", "')]")


def bfcl_verdict(text):
  return bfcl.score(ENTRY, text, "simple_python")


LONG_STRING = ("[f(a='", "y", "')]")


@pytest.mark.parametrize("name, adversarial, reason, benign_parts", [
    ("unclosed fence then blanks", padded("```", " ", "x"), "not a call",
     LONG_STRING),
    ("unclosed json fence, blank lines", padded("```json\n", " \n", "["),
     "never closed", LONG_STRING),
    ("unclosed <tool_call> repeated", padded("", "<tool_call>", ""), "not closed",
     LONG_STRING),
    ("<tool_call> with partial closers", padded("<tool_call>", "</tool_cal", ""),
     "not closed", LONG_STRING),
    ("chained string products", padded("[f(a='x'", "*9", ")]"), "too deeply",
     ("[f(a=[", "1,", "1])]")),
    ("sum of string products", padded("[f(a=", "'" + "x" * 40 + "'*2499+", "'')]"),
     "MAX_ARITHMETIC_SIZE", ("[f(a=[", "'" + "x" * 40 + "'*2,", "''])]")),
    ("many string products", padded("[f(a=[", "'x'*99999,", "])]"),
     "add up to more", ("[f(a=[", "'x'*99,", "])]")),
    ("long digit string", padded("[f(a=", "9", ")]"), "4300 digits", LONG_STRING),
    ("long hex literal", padded("[f(a=0x", "f", ")]"), "MAX_INT_DIGITS",
     LONG_STRING),
])
def test_bfcl_adversarial_output_is_invalid_in_linear_time(name, adversarial, reason,
                                                           benign_parts):
  """`benign_parts` (prefix, filler, suffix) make a same-size benign text with about
  as many tokens per character (`ast` takes time per token)."""
  result = bfcl_verdict(adversarial)
  assert result.status == "invalid" and reason in result.reason, (name, result)
  benign = padded(*benign_parts, len(adversarial))
  assert bfcl_verdict(benign).status == "incorrect", benign[:100]
  assert_linear(bfcl_verdict, adversarial, benign)


@pytest.mark.parametrize("text, reason", [
    ("[f(a=2**20000)]", "MAX_INT_DIGITS"),
    ("[f(a=(10**3000)*(10**3000))]", "MAX_INT_DIGITS"),
    ("[f(a='%09999999d' % 1)]", "unsupported operands"),
    ("[f(a='x'*10**9)]", "MAX_ARITHMETIC_SIZE"),
    ("x" * (bfcl.MAX_OUTPUT_CHARS + 1), "MAX_OUTPUT_CHARS"),
    ("[" + ", ".join(["f(a='x')"] * (bfcl.MAX_CALLS + 1)) + "]", "MAX_CALLS"),
    ("".join(['<tool_call>{"name": "f", "arguments": {"a": "x"}}</tool_call>']
             * (bfcl.MAX_CALLS + 1)), "MAX_CALLS"),
    ('{"name": "f", "arguments": {"a": ' + "[" * 5000 + "]" * 5000 + "}}",
     "nested too deeply"),
])
def test_bfcl_outputs_past_a_limit_are_invalid(text, reason):
  result = bfcl_verdict(text)
  assert result.status == "invalid" and reason in result.reason, result
  assert text_verifiers.bfcl_score(text, json.dumps(
      {"function": [SCHEMA], "ground_truth": ENTRY.ground_truth})) == 0.0


def test_bfcl_values_within_the_limits_still_decode():
  assert bfcl.decode_calls("[f(a='ab'*3+'c', b=2**100-1)]") == [
      bfcl.Call("f", {"a": "abababc", "b": 2**100 - 1})]
  big = 10 ** (bfcl.MAX_INT_DIGITS - 1)
  assert bfcl.decode_calls(f"[f(b={big})]") == [bfcl.Call("f", {"b": big})]
  assert bfcl_verdict("[f(a='x')]").status == "correct"


def test_apibank_long_digit_string_is_linear():
  adversarial = padded('<tool_call>{"name": "f", "arguments": {"a": "', "1",
                       'x"}}</tool_call>')
  benign = padded('<tool_call>{"name": "f", "arguments": {"a": "', "y",
                  'x"}}</tool_call>')
  score = lambda text: apibank.score(GOLD, text)
  assert score(adversarial).status == "incorrect"
  assert score(benign).status == "incorrect"
  assert_linear(score, adversarial, benign)
  assert apibank.canonical("1" * 200 + ".5e3") == float("1" * 200 + ".5e3")
  too_long = "API-Request: [f(a='1')]" + " " * bfcl.MAX_OUTPUT_CHARS
  assert "MAX_OUTPUT_CHARS" in apibank.score(GOLD, too_long).reason


def test_qa_is_linear_and_bounded():
  adversarial = padded("", "a an the ", "")
  benign = padded("", "cat dog ", "", len(adversarial))
  score = lambda text: qa.score(["the cat"], text)
  assert score(adversarial).verdict.status == "incorrect"
  assert_linear(score, adversarial, benign)
  result = qa.score(["x"], "x" * (qa.MAX_PREDICTION_CHARS + 1))
  assert result.verdict.status == "invalid" and result.f1 == 0.0


def test_host_verifiers_are_linear_and_score_zero_on_garbage():
  tool_reference = '<tool_call>{"name": "f", "arguments": {"a": "1"}}</tool_call>'
  digits = padded('<tool_call>{"name": "f", "arguments": {"a": "', "1",
                  'x"}}</tool_call>')
  letters = padded('<tool_call>{"name": "f", "arguments": {"a": "', "y",
                   'x"}}</tool_call>')
  tool_score = lambda text: text_verifiers.tool_call_score(text, tool_reference)
  assert tool_score(digits) == 0.0
  assert tool_score(padded("", "<tool_call>", "")) == 0.0
  assert_linear(tool_score, digits, letters)
  boxed_score = lambda text: text_verifiers.boxed_score(text, "\\boxed{1}")
  nested = padded("\\boxed{", "{", "")
  assert boxed_score(nested) == 0.0
  assert_linear(boxed_score, nested, padded("\\boxed{", "y", ""))
  reference = json.dumps({"function": [SCHEMA], "ground_truth": ENTRY.ground_truth})
  bfcl_score = lambda text: text_verifiers.bfcl_score(text, reference)
  fence = padded("```", " ", "x")
  assert bfcl_score(fence) == 0.0
  assert_linear(bfcl_score, fence, padded("[f(a='", "y", "')]", len(fence)))


def test_cli_scores_huge_integers_and_names_the_line_of_one_in_a_file(tmp_path,
                                                                      capsys):
  (tmp_path / "possible_answer").mkdir()
  question = {"id": "simple_python_0", "function": [SCHEMA]}
  (tmp_path / "BFCL_v4_simple_python.json").write_text(json.dumps(question))
  (tmp_path / "possible_answer" / "BFCL_v4_simple_python.json").write_text(
      json.dumps({"id": "simple_python_0", "ground_truth": ENTRY.ground_truth}))
  predictions = tmp_path / "pred.jsonl"
  predictions.write_text(json.dumps(
      {"id": "simple_python_0", "result": "[f(a='x', b=2**20000)]"}) + "\n")
  args = ["bfcl", "--category", "simple_python", "--data_dir", str(tmp_path),
          "--predictions", str(predictions)]
  assert evaluate.main(args) == 0
  out, _ = capsys.readouterr()
  assert "invalid=1" in out.splitlines()
  predictions.write_text('{"id": "simple_python_0", "result": "x", "n": '
                         + "7" * 5000 + "}\n")
  assert evaluate.main(args) == 2
  _, err = capsys.readouterr()
  assert f"{predictions}:1:" in err
