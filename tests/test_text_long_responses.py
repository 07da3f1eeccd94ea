"""Text tasks as chat models write them: the agent's own response budget with the
answer found inside a long response, the simulator's own writing budget, and the
delimiter spellings chat models use (`**New Task:**`, `New task:`, `## New Task`)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from genenv_jax.domains.text import verifiers as tv
from genenv_jax.domains.text.domain import TextDomain
from tests.test_text_domain import make_tokenizer

RESPONSE = 24


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
  return make_tokenizer(tmp_path_factory.mktemp("tokenizer"))


def _rows(domain, texts, width, eos=True):
  rows = np.full((len(texts), width), domain.pad_id, np.int32)
  for i, text in enumerate(texts):
    ids = domain.tokenizer(text, add_special_tokens=False)["input_ids"]
    ids = ids + [domain.eos_id] if eos else ids
    assert len(ids) <= width, text
    rows[i, :len(ids)] = ids
  return rows


def _answers(domain, texts):
  rows = _rows(domain, texts, domain.answer_len)
  return rows, rows != domain.pad_id


def _final_answer_domain(tokenizer, verifier):
  return TextDomain(tokenizer, max_task_tokens=8, max_answer_tokens=4,
                    max_response_tokens=RESPONSE - 1, max_written_tokens=32,
                    answer_from="final_answer", final_answer_marker="Answer:",
                    verifier=verifier)


def test_final_answer_line_inside_a_long_response(tokenizer):
  domain = _final_answer_domain(tokenizer, "exact")
  assert (domain.answer_len, domain.response_len) == (5, RESPONSE)
  responses = [
      "Paris is the capital of France. New Answer: Paris",  # marker matched inside
      "Rome? No. Answer: Rome\nAnswer: Paris",               # the last marker counts
      "Answer: Paris\nthe capital of France",                # only the marker's line
      "Answer: Rome",
      "Paris",                                               # no marker: 0
  ]
  response = _rows(domain, responses, RESPONSE)
  reference, reference_mask = _answers(domain, ["Paris"] * len(responses))
  for verifier, expected in (("exact", [1, 1, 1, 0, 0]), ("f1", [1, 1, 1, 0, 0])):
    domain = _final_answer_domain(tokenizer, verifier)  # in-graph, host
    scores = jax.jit(domain.verify)(response, response != domain.pad_id, reference,
                                    reference_mask)
    assert np.asarray(scores).tolist() == expected, verifier
  with pytest.raises(ValueError, match=r"response must have shape \[M, 24\]"):
    domain.verify(reference, reference_mask, reference, reference_mask)


def test_host_answer_extraction():
  assert tv.final_answer_text("think\nFinal answer: 12 \nbye", "Final answer:") == "12"
  assert tv.final_answer_text("no marker", "Final answer:") is None
  assert tv.last_boxed_text("\\boxed{1} so \\boxed{\\frac{1}{2}}.") == "\\boxed{\\frac{1}{2}}"
  calls = ("I could call <tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>. "
           "Final: <tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>\n"
           "<tool_call>{\"name\": \"c\", \"arguments\": {}}</tool_call> done")
  assert [c.name for c in tv.bfcl.decode_calls(tv.last_tool_call_text(calls))] == ["b", "c"]
  python = "First [f(a=1)] fails; so [g(xs=[1, 2]), h(s='[x]')] it is."
  assert tv.last_tool_call_text(python) == "[g(xs=[1, 2]), h(s='[x]')]"
  assert tv.last_tool_call_text("a list [1, 2] only") is None
  with pytest.raises(ValueError, match="config.task.answer_from='last'"):
    tv.answer_extractor("last", "Answer:", "bfcl")
  with pytest.raises(ValueError, match="needs a host verifier"):
    tv.answer_extractor("last_boxed", "Answer:", "exact")
  with pytest.raises(ValueError, match="final_answer_marker"):
    tv.answer_extractor("final_answer", " ", "exact")


def test_host_verifier_scores_the_last_tool_call(tokenizer):
  domain = TextDomain(tokenizer, verifier="tool_call", max_task_tokens=8,
                      max_answer_tokens=40, max_response_tokens=95,
                      max_written_tokens=64, answer_from="last_tool_call")
  call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
  wrong = call.replace("Paris", "Rome")
  response = _rows(domain, [f"Maybe {wrong}? No: {call}", f"{call} or {wrong}"],
                   domain.response_len)
  reference, reference_mask = _answers(domain, [call, call])
  scores = jax.jit(domain.verify)(response, response != domain.pad_id, reference,
                                  reference_mask)
  assert np.asarray(scores).tolist() == [1.0, 0.0]


VARIANTS = dict(task_delimiter_variants=["**New Task:**", "New task:", "## New Task:"],
                answer_delimiter_variants=["**New Answer:**", "New answer:"])


def test_delimiter_spellings_of_chat_models(tokenizer):
  plain = TextDomain(tokenizer, max_task_tokens=16, max_answer_tokens=6,
                     max_written_tokens=40)
  chatty = TextDomain(tokenizer, max_task_tokens=16, max_answer_tokens=6,
                      max_written_tokens=40, **VARIANTS)
  texts = ["New Task: What is 2 plus 3?\nNew Answer: 5",
           "**New Task:** What is 2 plus 3?\n**New Answer:** 5",
           "Sure!\n\n## New Task: What is 2 plus 3?\nNew answer: 5",
           "New task: What is 2 plus 3?\nNew Answer: 5",
           "**New Task:** What is 2 plus 3? **New Task:** again\nNew Answer: 5"]
  rows = _rows(plain, texts, 40)
  mask = rows != plain.pad_id
  # (This toy tokenizer keeps `**` apart from `:`, so the plain domain reads row 1;
  # real ones merge `:**`.)
  assert jax.jit(plain.parse)(rows, mask).valid.tolist()[2:] == [0, 0, 0]
  parsed = jax.jit(chatty.parse)(rows, mask)
  assert parsed.valid.tolist() == [1, 1, 1, 1, 0]
  assert parsed.delimiter.tolist() == [0, 1, 3, 2, -1]
  reference = np.asarray(parsed.reference)[:4]
  assert chatty.decode(reference) == ["5<|im_end|>"] * 4
  # The pool row is what was written from the delimiter on; it parses again.
  again = jax.jit(chatty.parse)(np.asarray(parsed.task), np.asarray(parsed.task) != chatty.pad_id)
  assert again.valid.tolist() == [1, 1, 1, 1, 0]
  assert again.delimiter.tolist() == [0, 1, 3, 2, -1]


def test_simulator_writes_more_than_a_task_row(tokenizer):
  domain = TextDomain(tokenizer, max_task_tokens=16, max_answer_tokens=6,
                      max_written_tokens=24, max_simulator_tokens=48)
  assert (domain.task_len, domain.simulator_len) == (24, 48)
  reasoning = "The capital of France is Paris. What is 2 plus 3? "
  texts = [reasoning + "New Task: What is 2 plus 3?\nNew Answer: 5",
           "New Task: " + "What is 2 plus 3? " * 3 + "\nNew Answer: 5"]  # row too long
  rows = _rows(domain, texts, 48)
  parsed = jax.jit(domain.parse)(rows, rows != domain.pad_id)
  assert parsed.valid.tolist() == [True, False]
  assert parsed.task.shape == (2, 24)
  assert domain.decode(np.asarray(parsed.task[0]))[0] == (
      "New Task: What is 2 plus 3?\nNew Answer: 5<|im_end|>")
  with pytest.raises(ValueError, match=r"simulator_tokens must have shape \[M, 48\]"):
    domain.parse(rows[:, :30], rows[:, :30] != domain.pad_id)
  with pytest.raises(ValueError, match="max_simulator_tokens=3"):
    TextDomain(tokenizer, max_written_tokens=24, max_simulator_tokens=3)
  with pytest.raises(ValueError, match="task_delimiter_variants must be a list"):
    TextDomain(tokenizer, task_delimiter_variants="**New Task:**")
