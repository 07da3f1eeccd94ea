"""Text verifiers on hand-written cases: in-graph exact match on token ids, the
host verifiers of chat answers (SQuAD F1, exact match and containment, the last
number) and of calls (tool call, boxed, BFCL) in Python and through
`jax.pure_callback` inside a jitted function on the 8-device mesh."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from genenv_jax import sharding
from genenv_jax.domains.text import verifiers as tv
from genenv_jax.domains.text.domain import TextDomain
from tests.test_text_domain import make_tokenizer

WIDTH = 12


@pytest.fixture(scope="module")
def domain(tmp_path_factory):
  tokenizer = make_tokenizer(tmp_path_factory.mktemp("tokenizer"))
  return TextDomain(tokenizer, max_task_tokens=8, max_answer_tokens=WIDTH - 1,
                    max_written_tokens=32)


def _row(domain, text: str, eos: bool = True, after: str = "") -> tuple[np.ndarray, np.ndarray]:
  """One answer row: text ids, EOS, optional ids after it, pad; and its mask."""
  ids = domain.tokenizer(text, add_special_tokens=False)["input_ids"]
  ids = ids + ([domain.eos_id] if eos else [])
  ids += domain.tokenizer(after, add_special_tokens=False)["input_ids"] if after else []
  assert len(ids) <= WIDTH, text
  row = np.full(WIDTH, domain.pad_id, np.int32)
  row[:len(ids)] = ids
  return row, np.arange(WIDTH) < len(ids)


def _batch(domain, pairs):
  """(response, response_mask, reference, reference_mask) for (response, reference)
  texts; a response given as (text, eos, after) is built with `_row(...)`."""
  responses = [_row(domain, *(r if isinstance(r, tuple) else (r,))) for r, _ in pairs]
  references = [_row(domain, ref) for _, ref in pairs]
  return tuple(np.stack(x) for x in (*zip(*responses), *zip(*references)))


def test_exact_match_on_normalised_token_spans(domain):
  pairs = [
      ("Paris", "Paris"),
      (" Paris", "paris"),           # the leading space and case do not matter
      ("PARIS", "Paris"),
      ("Paris \n", "Paris"),         # whitespace-only tokens are dropped
      ("London", "Paris"),
      ("Paris Paris", "Paris"),
      (("Paris", False, ""), "Paris"),         # no EOS: cut off
      (("Paris", True, " Rome"), "Paris"),     # tokens after EOS are ignored
      ("Paris", " "),                # an empty reference matches nothing
  ]
  for word in ("Paris", " Paris", "paris", "PARIS"):  # one token each: a token-level case
    assert len(domain.tokenizer(word, add_special_tokens=False)["input_ids"]) == 1
  scores = jax.jit(domain.verify)(*_batch(domain, pairs))
  assert np.asarray(scores).tolist() == [1, 1, 1, 1, 0, 0, 0, 1, 0]


# Hand-written chat answers: (response, reference, f1, squad_exact, contains,
# numeric).
CHAT_ANSWERS = [
    ("Paris", "Paris", 1.0, 1.0, 1.0, 0.0),
    ("The capital of France is Paris.", "Paris", 2 / 6, 0.0, 1.0, 0.0),
    ("Parisian food", "Paris", 0.0, 0.0, 0.0, 0.0),
    ("the answer is 85", "85", 2 / 4, 0.0, 1.0, 1.0),
    ("58", "85", 0.0, 0.0, 0.0, 0.0),            # the right digits, wrong number
    ("The answer is 1,234.", "1234", 0.5, 0.0, 1.0, 1.0),
    ("47 + 38 = 85", "85", 0.5, 0.0, 1.0, 1.0),   # the last number counts
    ("85, or maybe 86", "85", 0.4, 0.0, 1.0, 0.0),
    ("I don't know.", "85", 0.0, 0.0, 0.0, 0.0),  # no answer
    ("", "Paris", 0.0, 0.0, 0.0, 0.0),
]


@pytest.mark.parametrize("response,reference,f1,exact,contains,numeric",
                         CHAT_ANSWERS)
def test_chat_answer_verifiers(response, reference, f1, exact, contains, numeric):
  assert tv.f1_score(response, reference) == pytest.approx(f1)
  assert tv.squad_exact_score(response, reference) == exact
  assert tv.contains_score(response, reference) == contains
  assert tv.numeric_score(response, reference) == numeric


@pytest.mark.parametrize("text,value", [
    ("The answer is 1,234.", 1234), ("-12", -12), ("\u221212 degrees", -12),
    ("It is +5", 5), ("3.50", 3.5), ("It costs $1,200.", 1200), ("12kg", 12),
    ("3, 4", 4), ("It is 12.", 12), ("3 + 4 = 7", 7), ("10-3", 3),
    ("x = -4", -4), ("12,345,678 apples", 12345678), ("no number", None),
])
def test_last_number_reads_what_chat_models_write(text, value):
  assert tv.last_number(text) == value


def test_numeric_reference_is_one_number():
  assert tv.numeric_reference_ok(" -3 ") and tv.numeric_reference_ok("1,234")
  assert not tv.numeric_reference_ok("85 apples")
  assert not tv.numeric_reference_ok("")
  assert tv.numeric_score("12.0", "12") == 1.0 and tv.numeric_score("0.5", "1/2") == 0.0
  assert not tv.words_reference_ok("the .") and tv.words_reference_ok("Paris")


def test_f1_through_a_digit_by_digit_tokenizer(smollm2_dir):
  # SmolLM2 writes numbers a digit a token: as token bags "58" and "85" are
  # equal; SQuAD's words are not. A reply without its EOS was cut off: 0.
  from models import hf  # pylint: disable=import-outside-toplevel
  tokenizer = hf.load_tokenizer(smollm2_dir)
  assert len(tokenizer("58", add_special_tokens=False)["input_ids"]) == 2
  domain = TextDomain(tokenizer, verifier="f1", max_task_tokens=8,
                      max_answer_tokens=WIDTH - 1, max_written_tokens=32,
                      eos_token="<|im_end|>", pad_token="<|endoftext|>")
  pairs = [("58", "85"), ("85", "85"), ("The answer is 85", "85"),
           (("85", False, ""), "85")]
  scores = np.asarray(jax.jit(domain.verify)(*_batch(domain, pairs)))
  np.testing.assert_allclose(scores, [0.0, 1.0, 0.5, 0.0])


CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}</tool_call>'


@pytest.mark.parametrize("response,score", [
    (CALL, 1.0),
    ('Let me check. <tool_call>{"name": "get_weather", "arguments": '
     '{"days": "3", "city": " paris"}}</tool_call>', 1.0),
    ('<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\", '
     '\\"days\\": 3}"}</tool_call>', 1.0),
    ('<tool_call>{"name": "get_weather", "arguments": {"city": "Rome", "days": 3}}'
     '</tool_call>', 0.0),
    ('<tool_call>{"name": "get_time", "arguments": {"city": "Paris", "days": 3}}'
     '</tool_call>', 0.0),
    ('<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>', 0.0),
    (CALL + CALL, 0.0),
    ('{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}', 0.0),
    ('<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}', 0.0),
    ("<tool_call>not json</tool_call>", 0.0),
])
def test_tool_call_match(response, score):
  assert tv.tool_call_score(response, CALL) == score


def test_tool_calls_match_in_any_order():
  other = '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
  assert tv.tool_call_score(other + CALL, CALL + other) == 1.0
  assert tv.tool_call_reference_ok(CALL)
  assert not tv.tool_call_reference_ok("Paris")
  assert not tv.tool_call_reference_ok("<tool_call>[1, 2]</tool_call>")


@pytest.mark.parametrize("response,reference,score", [
    ("so the answer is \\boxed{12}", "\\boxed{12}", 1.0),
    ("\\boxed{1} then \\boxed{ 12 }", "12", 1.0),          # the last box counts
    ("\\boxed{\\frac{1}{2}}", "$\\frac{1}{2}$", 1.0),       # nested braces, $ stripped
    ("\\boxed{13}", "\\boxed{12}", 0.0),
    ("12", "12", 0.0),                                     # no box in the response
    ("\\boxed{12", "12", 0.0),                             # not closed
    ("\\boxed{12}", "\\boxed{}", 0.0),                     # empty reference box
])
def test_boxed_match(response, reference, score):
  assert tv.boxed_score(response, reference) == score


WEATHER = {"name": "get_weather", "description": "Weather forecast.",
           "parameters": {"type": "dict", "required": ["city"], "properties": {
               "city": {"type": "string"},
               "days": {"type": "integer"},
               "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}}}
BFCL_REFERENCE = json.dumps(tv.bfcl_reference([WEATHER], [
    {"get_weather": {"city": ["Paris", "Paris, France"], "days": [3],
                     "unit": ["celsius", ""]}}]))


def test_bfcl_reference_keeps_only_what_the_check_reads():
  assert json.loads(BFCL_REFERENCE) == {
      "ground_truth": [{"get_weather": {"city": ["Paris", "Paris, France"],
                                        "days": [3], "unit": ["celsius", ""]}}],
      "types": {"get_weather": {"city": "string", "days": "integer",
                                "unit": "string"}},
      "required": {"get_weather": ["city"]}}
  listed = {"name": "f", "parameters": {"properties": {
      "xs": {"type": "array", "items": {"type": "float"}},
      "unused": {"type": "string", "description": "not in the ground truth"}}}}
  compact = tv.bfcl_reference([listed, WEATHER], [{"f": {"xs": [[1.5, 2.0]]}}])
  assert compact["types"] == {"f": {"xs": "array[float]"}}
  assert tv.bfcl_score("[f(xs=[1.5, 2.0])]", json.dumps(compact)) == 1.0
  assert tv.bfcl_score("[f(xs=['a', 'b'])]", json.dumps(compact)) == 0.0
  untyped = tv.bfcl_reference([WEATHER], [{"get_weather": {"city": ["Paris"],
                                                          "hours": [1, ""]}}])
  assert untyped["types"] == {"get_weather": {"city": "string"}}
  assert tv.bfcl_score("[get_weather(city='Paris')]", json.dumps(untyped)) == 1.0
  assert tv.bfcl_score("[get_weather(city='Paris', hours=1)]", json.dumps(untyped)) == 0.0
  with pytest.raises(KeyError):
    tv.bfcl_reference([WEATHER], [{"get_time": {"city": ["Paris"]}}])
  # A dict parameter's acceptable value lists acceptable values per key.
  update = {"name": "update", "parameters": {"required": ["info"], "properties": {
      "info": {"type": "dict"}}}}
  nested = json.dumps(tv.bfcl_reference([update], [
      {"update": {"info": [{"name": ["Ann", "Anne"], "age": ["", 30]}]}}]))
  assert tv.bfcl_reference_ok(nested)
  assert tv.bfcl_score("[update(info={'name': 'Anne'})]", nested) == 1.0
  assert tv.bfcl_score("[update(info={'name': 'Bob'})]", nested) == 0.0


@pytest.mark.parametrize("response,score", [
    ("[get_weather(city='Paris', days=3, unit='celsius')]", 1.0),
    ("get_weather(city='paris, france', days=3)", 1.0),     # "" makes unit optional
    ('{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}', 1.0),
    ("[get_weather(city='Paris', days=4)]", 0.0),
    ("[get_weather(city='Paris', days='3')]", 0.0),         # wrong type
    ("[get_weather(city='Paris')]", 0.0),                   # days not optional
    ("[get_weather(city='Paris', days=3, hours=2)]", 0.0),  # unknown parameter
    ("[get_time(city='Paris', days=3)]", 0.0),
    ("[get_weather(city='Paris', days=3), get_weather(city='Paris', days=3)]", 0.0),
    ("get_weather(city=", 0.0),
])
def test_bfcl_ast_match(response, score):
  assert tv.bfcl_score(response, BFCL_REFERENCE) == score


def test_bfcl_parallel_calls_and_reference_checks():
  reference = json.dumps(tv.bfcl_reference([WEATHER], [
      {"get_weather": {"city": ["Paris"], "days": [1]}},
      {"get_weather": {"city": ["Rome"], "days": [2]}}]))
  assert tv.bfcl_score("[get_weather(city='Rome', days=2), get_weather(city='Paris', "
                       "days=1)]", reference) == 1.0
  assert tv.bfcl_score("[get_weather(city='Rome', days=2)]", reference) == 0.0
  assert tv.bfcl_reference_ok(BFCL_REFERENCE) and tv.bfcl_reference_ok(reference)
  unsolvable = json.dumps(tv.bfcl_reference([WEATHER], [
      {"get_weather": {"days": [3]}}]))  # misses the required city
  untyped = json.dumps({"ground_truth": [{"get_weather": {"city": ["Paris"]}}],
                        "types": {"get_weather": {"city": "text"}}})
  for bad in (unsolvable, untyped, "[get_weather(city='Paris')]", "{}", '{"types": 3}'):
    assert not tv.bfcl_reference_ok(bad)
    assert tv.bfcl_score("[get_weather(city='Paris', days=3)]", bad) == 0.0


def test_host_verifier_inside_jit_on_the_mesh_and_on_garbage(domain):
  """Shape-stable scores from sharded inputs; random ids (specials, ids beyond the
  vocabulary, no EOS) score 0 without an error."""
  boxed = TextDomain(domain.tokenizer, verifier="boxed", max_task_tokens=8,
                     max_answer_tokens=WIDTH - 1, max_written_tokens=32)
  pairs = [("\\boxed{12}", "12"), ("\\boxed{13}", "12"), ("12", "\\boxed{12}"),
           ("\\boxed{Paris}", "\\boxed{ Paris }")]
  response, response_mask, reference, reference_mask = _batch(boxed, pairs)
  rng = np.random.default_rng(0)
  garbage = rng.integers(0, boxed.vocab_size + 40, (4, WIDTH)).astype(np.int32)
  response = np.concatenate([response, garbage])
  response_mask = np.concatenate([response_mask, np.ones((4, WIDTH), bool)])
  reference = np.concatenate([reference, garbage[::-1]])
  reference_mask = np.concatenate([reference_mask, np.ones((4, WIDTH), bool)])
  mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  rules = sharding.DEFAULT_RULES
  batch = sharding.shard_batch((response, response_mask, reference, reference_mask),
                               mesh, rules)
  verify = jax.jit(sharding.in_mesh(mesh, rules)(boxed.verify))
  scores = np.asarray(verify(*batch))
  assert scores.shape == (8,) and scores.dtype == np.float32
  assert scores.tolist() == [1, 0, 0, 1, 0, 0, 0, 0]
