"""The chat arithmetic domain: questions read from what a chat model writes
(valid, malformed, out of range), the answer the domain computes, the level
rule, the drawn seed and held-out splits, a reply's score, and the chat
config's co-evolution steps compiled once on tiny players of SmolLM2's kind."""

from __future__ import annotations

import numpy as np
import pytest

from configs import chat as chat_config
from genenv_jax.domains import get_domain
from genenv_jax.domains.chat_arithmetic import data
from genenv_jax.domains.chat_arithmetic import domain as chat
from tests import step_runs

LIMITS = dict(max_operand_digits=4, max_operands=3, max_difficulty=4)


@pytest.fixture(scope="module")
def config(smollm2_dir):
  config = chat_config.get_config("smoke")
  config.task.tokenizer_dir = smollm2_dir
  return config


@pytest.fixture(scope="module")
def domain(config):
  return get_domain(config.task)


@pytest.mark.parametrize("written, line, value, level", [
    ("What is 3 + 5?", "What is 3 + 5?", 8, 1),
    ("Here's a different question: What is 7 + 8.",
     "Here's a different question: What is 7 + 8.", 15, 1),
    ("1. What is 47 - 12?", "What is 47 - 12?", 35, 2),
    ("A simpler question would be:\nWhat's 23 + 10?", "What's 23 + 10?", 33, 2),
    ("Question: What is 6*7?\n\nExample question: What is 6*7?", "What is 6*7?", 42, 2),
    ("A simple question: 23 + 58 = ?", "A simple question: 23 + 58 = ?", 81, 2),
    ("What is 2 plus 3 times 4?", "What is 2 plus 3 times 4?", 14, 3),
    ("What is 9 - 4 - 7?", "What is 9 - 4 - 7?", -2, 2),
    ("What is 6 multiplied by 7?", "What is 6 multiplied by 7?", 42, 2),
    ("Calculate 312 \u00d7 7.", "Calculate 312 \u00d7 7.", 2184, 4),
    ("What is 4096 \u2212 27?", "What is 4096 \u2212 27?", 4069, 4),
])
def test_a_question_is_read_and_its_answer_computed(written, line, value, level):
  question = chat.read_question(written, **LIMITS)
  assert (question.text, question.value, question.level) == (line, value, level)


@pytest.mark.parametrize("written, why", [
    ("The answer is 12.", "0 expressions"),
    ("I'm not sure how to answer this one.", "no line holds a number"),
    ("6 \u00d7 7 = 42", "outside its expression"),       # states the result
    ("1. 6 \u00d7 7 is 42", "outside its expression"),
    ("What is 3 + 5 / 2?", "outside its expression"),    # an operator it cannot read
    ("What is -3 + 5?", "0 expressions"),                # a negative operand
    ("What is 3 + 4? And 5 + 6?", "2 expressions"),
    ("What is 1,234 + 5?", "whole numbers"),
    ("What is 3.5 + 2?", "whole numbers"),
    ("What is 12345 + 1?", "more than 4 digits"),        # out of range
    ("What is 5 \u00d7 10 + 6 \u00d7 0?", "4 operands"),
    ("What is 1234 \u00d7 56?", "level 5 is above"),     # out of range
    ("What is 3 + 4 = seven?", "states a result"),
])
def test_a_malformed_or_out_of_range_question_is_refused_with_its_reason(written, why):
  with pytest.raises(chat.QuestionError, match=why):
    chat.read_question(written, **LIMITS)


def test_levels_and_values_follow_the_rule():
  assert chat.level_of([3, 5], ["+"]) == 1
  assert chat.level_of([6, 7], ["*"]) == 2
  assert chat.level_of([2, 3, 4], ["+", "+"]) == 2
  assert chat.level_of([512, 97], ["-"]) == 3
  assert chat.level_of([45, 6, 3], ["*", "+"]) == 4
  assert chat.evaluate([2, 3, 4], ["+", "*"]) == 14
  assert chat.evaluate([2, 3, 4], ["*", "-"]) == 2
  assert chat.evaluate([10, 4, 3], ["-", "-"]) == 3


def test_generations_parse_on_the_host_into_prompt_row_and_level(domain):
  rows = domain.encode_tasks(["Sure! What is 23 + 45?\nIt is easy.",
                              "6 \u00d7 7 = 42", "What is 9 - 4?"])
  packed = np.stack([domain.parse_row(r, r != domain.pad_id) for r in rows])
  p, t = domain.agent_prompt_len, domain.task_len
  assert packed[:, -2].tolist() == [1, 0, 1]
  assert packed[:, -1].tolist() == [2, 0, 1]
  assert domain.text_of(packed[0, p:p + t]) == "Sure! What is 23 + 45?"
  assert (packed[1, :-2] == domain.pad_id).all()  # invalid: all pad
  prompt = domain.tokenizer.decode(packed[2, :p][packed[2, :p] != domain.pad_id])
  assert "What is 9 - 4?\nAnswer with just the number." in prompt
  assert prompt.endswith("<|im_start|>assistant\n")


def _play(domain, question, reply, stop=True):
  row = domain.encode_tasks([question])[0]
  ids = domain.tokenizer(reply, add_special_tokens=False)["input_ids"]
  action = np.asarray(ids + ([domain.eos_id] if stop else []), np.int32)
  return domain.environment.host.transition(row, [action])


def test_the_agent_system_prompt_replaces_the_templates_own(config):
  def prompt(system):
    task = config.task.copy_and_resolve_references()
    task.agent_system_prompt = system
    domain = get_domain(task)
    written = domain.encode_tasks(["What is 9 - 4?"])[0]
    row = domain.parse_row(written, written != domain.pad_id)
    ids = row[:domain.agent_prompt_len]
    return domain.tokenizer.decode(ids[ids != domain.pad_id])

  default, calculator = prompt(""), prompt("Reply with the number only.")
  assert "<|im_start|>system\nYou are a helpful AI assistant named SmolLM" in default
  assert calculator.startswith("<|im_start|>system\nReply with the number only.<|im_end|>")
  assert "SmolLM" not in calculator
  assert "What is 9 - 4?\nAnswer with just the number." in calculator


def test_a_reply_scores_by_its_last_number(domain):
  question = "What is 47 + 38?"
  for reply, right in (("85", True), ("47 + 38 = 85", True),
                       ("The answer is 85.", True), ("58", False),
                       ("I don't know.", False), ("85, or maybe 86", False)):
    step = _play(domain, question, reply)
    assert (step.success, step.reward) == (right, float(right)), reply
    assert step.done and not step.invalid_action
  cut = _play(domain, question, "The answer is 85", stop=False)
  assert cut.invalid_action and not cut.success and cut.reward == 0.0


def test_the_splits_are_drawn_per_level_distinct_and_deterministic(config, domain):
  train, test = data.seed_splits(domain, config, "")
  levels = np.arange(1, config.task.max_difficulty + 1)
  assert np.bincount(train["difficulty"], minlength=5)[1:].tolist() == [
      config.data.num_train_per_level] * len(levels)
  assert np.bincount(test["difficulty"], minlength=5)[1:].tolist() == [
      config.data.num_test_per_level] * len(levels)
  train_text = set(domain.decode(train["task"]))
  test_text = set(domain.decode(test["task"]))
  assert len(train_text) == len(train["task"]) and not train_text & test_text
  for row, level in zip(test["task"], test["difficulty"]):
    assert domain.read(domain.text_of(row)).level == level
  again, _ = data.seed_splits(domain, config, "")
  np.testing.assert_array_equal(again["task"], train["task"])
  other = config.copy_and_resolve_references()
  other.data.seed = 1
  assert not np.array_equal(data.seed_splits(domain, other, "")[0]["task"],
                            train["task"])


def test_the_chat_config_runs_two_steps_with_one_compile(config, domain):
  train, _ = data.seed_splits(domain, config, "")
  players, state, shardings, mesh = step_runs.start(config, domain, train["task"],
                                                    train["difficulty"])
  _, history, traces = step_runs.run_steps(config, domain, players, state,
                                           shardings, mesh, 2)
  assert traces == 1 and len(history) == 2
  for metrics in history:
    for name, value in metrics.items():
      assert np.isfinite(value), name
    assert metrics["episode/errors"] == 0.0 and metrics["episode/turns"] == 1.0
  assert domain.environment.host_errors == 0


def test_the_configs_validate(config):
  from train import config_validation  # pylint: disable=import-outside-toplevel
  config_validation.validate(config, 8)
  for variant in (None, "frozen_env", "smoke,uniform"):
    other = chat_config.get_config(variant)
    other.task.tokenizer_dir = config.task.tokenizer_dir
    config_validation.validate(other, 8)
  bad = config.copy_and_resolve_references()
  bad.task.max_operands = 1
  with pytest.raises(ValueError, match="task.max_operands"):
    config_validation.validate(bad, 8)
