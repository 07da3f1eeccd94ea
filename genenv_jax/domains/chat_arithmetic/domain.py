"""Arithmetic questions in natural language, written by a chat model, answered by one.

The simulator is shown a seed question through the chat template and writes a
new one in its own words ("What is 47 + 38?", "Calculate 6 × 7."); the domain
reads the arithmetic expression out of it and computes the reference itself,
so a simulator that cannot add still writes tasks whose answers are right. The
agent answers once (a one-turn episode of the host environment) and is scored
by the `numeric` verifier: its reply's last number against the computed value.

Reading a generation (`read_question`), on its text up to EOS:

  * the question is the first line holding a digit, without a leading list
    marker or label ("1.", "-", "Question:", "Q:");
  * it holds exactly one expression: integer operands joined by `+`, `-`, `−`,
    `*`, `×`, `x`, or the words plus, minus, times, "multiplied by"; `×`
    binds before `+` and `-`;
  * every number in the line is an operand of that expression, so a line that
    states a result ("6 × 7 = 42", "6 × 7 is 42") or carries other numbers is
    no question; an `=` may only be followed by `?` or nothing ("23 + 58 = ?");
  * operands are whole numbers of at most `max_operand_digits` digits, written
    without separators or decimals; at most `max_operands` of them;
  * its level (below) is at most `max_difficulty`.

Anything else is invalid (`QuestionError`), counted by the step, never raised.

Level: the digits of the longest operand, plus one when the expression
multiplies, plus one per operand beyond two:

    level 1   3 + 5, 9 - 4
    level 2   47 + 38, 6 × 7, 2 + 3 + 4
    level 3   512 - 97, 23 × 4, 12 + 30 + 7
    level 4   4096 + 27, 312 × 7, 45 × 6 + 3

The canonical written-task row is the question line (stripped) and EOS; the
agent's prompt is the chat template around the line and `agent_instruction`.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple, Sequence

import numpy as np

from genenv_jax import config_fields as fields
from genenv_jax import episodes
from genenv_jax.domains.host_text import (HostTextDomain, HostTextTransition,
                                          WrittenTask)
from genenv_jax.domains.text import domain as text
from genenv_jax.domains.text import verifiers
from genenv_jax.envs.host import HostStep

DEFAULT_SIMULATOR_INSTRUCTION = (
    "Here is a math question:\n{seed}\n\nWrite one new question like it, with "
    "different numbers. Write only the question.")
DEFAULT_AGENT_INSTRUCTION = "{question}\nAnswer with just the number."
QUESTION_SLOT = "{question}"

# Operator spellings, longest first, and what each means.
_OPERATORS = (("multiplied by", "*"), ("plus", "+"), ("minus", "-"),
              ("times", "*"), ("+", "+"), ("-", "-"), ("\u2212", "-"),
              ("*", "*"), ("\u00d7", "*"), ("x", "*"), ("X", "*"))
_OPERATOR = "|".join(re.escape(spelling) for spelling, _ in _OPERATORS)
_MEANING = dict(_OPERATORS)
_NUMBER = r"\d+(?:[.,]\d+)*"
# One operand, then one or more (operator, operand) pairs.
_EXPRESSION = re.compile(
    rf"(?<![\w.,+\-\u2212])({_NUMBER})((?:\s*(?:{_OPERATOR})\s*{_NUMBER})+)(?![\w]|[.,]\d)")
_PAIR = re.compile(rf"\s*({_OPERATOR})\s*({_NUMBER})")
_ANY_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_LABEL = re.compile(r"^\s*(?:(?:\d+[.)]|[-*•])\s+|(?:question|q)\s*\d*\s*[:.]\s*)",
                    re.IGNORECASE)


class QuestionError(ValueError):
  """A generation's text that is no question of the domain (the reason)."""


class Question(NamedTuple):
  """A question read from text.

  Attributes:
    text: the question line, stripped (the written-task row's text).
    operands: its operands, in order.
    operators: "+", "-" or "*" between them (len(operands) - 1).
    value: the expression's value, ✕ before + and -.
    level: its difficulty (module docstring).
  """

  text: str
  operands: tuple[int, ...]
  operators: tuple[str, ...]
  value: int
  level: int


def level_of(operands: Sequence[int], operators: Sequence[str]) -> int:
  """Digits of the longest operand, + 1 if any operator is "*", + 1 per
  operand beyond two."""
  digits = max(len(str(abs(int(n)))) for n in operands)
  return digits + int("*" in operators) + max(0, len(operands) - 2)


def evaluate(operands: Sequence[int], operators: Sequence[str]) -> int:
  """The value of operands[0] operators[0] operands[1] ..., "*" first."""
  terms, signs = [int(operands[0])], [1]
  for operator, operand in zip(operators, operands[1:]):
    if operator == "*":
      terms[-1] *= int(operand)
    else:
      terms.append(int(operand))
      signs.append(1 if operator == "+" else -1)
  return sum(sign * term for sign, term in zip(signs, terms))


def question_line(written: str) -> str:
  """The first line of `written` holding a digit, its leading list marker or
  label dropped; QuestionError when no line holds one."""
  for line in written.splitlines():
    if any(c.isdigit() for c in line):
      return _LABEL.sub("", line, count=1).strip()
  raise QuestionError("no line holds a number")


def read_question(written: str, *, max_operand_digits: int, max_operands: int,
                  max_difficulty: int) -> Question:
  """The question `written` asks (module docstring).

  Raises:
    QuestionError: naming why `written` is no question.
  """
  line = question_line(written)
  found = list(_EXPRESSION.finditer(line))
  if len(found) != 1:
    raise QuestionError(f"{len(found)} expressions in {line!r}; expected one")
  match = found[0]
  pairs = _PAIR.findall(match.group(2))
  numbers = [match.group(1)] + [number for _, number in pairs]
  if len(_ANY_NUMBER.findall(line)) != len(numbers):
    raise QuestionError(f"{line!r} holds numbers outside its expression")
  if not all(number.isdigit() for number in numbers):
    raise QuestionError(f"operands {numbers} must be whole numbers without "
                        "separators")
  if any(len(number.lstrip("0") or "0") > max_operand_digits for number in numbers):
    raise QuestionError(f"an operand of {numbers} has more than "
                        f"{max_operand_digits} digits")
  if len(numbers) > max_operands:
    raise QuestionError(f"{len(numbers)} operands; at most {max_operands}")
  after = line[match.end():]
  if "=" in after and after.split("=", 1)[1].strip(" ?") != "":
    raise QuestionError(f"{line!r} states a result")
  operands = tuple(int(number) for number in numbers)
  operators = tuple(_MEANING[operator] for operator, _ in pairs)
  level = level_of(operands, operators)
  if level > max_difficulty:
    raise QuestionError(f"level {level} is above max_difficulty={max_difficulty}")
  return Question(line, operands, operators, evaluate(operands, operators), level)


class ChatArithmeticDomain(HostTextDomain):
  """Arithmetic questions in words (module docstring) on a chat tokenizer.

  Args: `HostTextDomain`'s but max_turns and max_observation_tokens (one
    reply, nothing observed), and
    max_task_tokens: the question line's budget (EOS not counted); the
      written-task row is max_task_tokens + 1 wide.
    max_prompt_tokens: P, the agent's prompt width.
    max_response_tokens: the agent's reply budget, its stop token included.
    max_operand_digits, max_operands: the largest operand and the most
      operands a question may have.
    agent_system_prompt: the agent's system message; "" leaves the chat
      template's own (SmolLM2's names the assistant, Qwen's too).
    agent_instruction: the agent's message, holding `{question}` once.
  """

  domain_title = "chat arithmetic"
  task_noun = "question"
  task_error = QuestionError

  def __init__(self, tokenizer: Any, *, max_task_tokens: int = 48,
               max_prompt_tokens: int = 96, max_simulator_tokens: int = 48,
               max_response_tokens: int = 48, max_difficulty: int = 4,
               max_operand_digits: int = 4, max_operands: int = 3,
               simulator_system_prompt: str = "",
               simulator_instruction: str = DEFAULT_SIMULATOR_INSTRUCTION,
               agent_system_prompt: str = "",
               agent_instruction: str = DEFAULT_AGENT_INSTRUCTION,
               eos_token: str = "", pad_token: str = ""):
    if agent_instruction.count(QUESTION_SLOT) != 1:
      raise ValueError(f"config.task.agent_instruction must hold {QUESTION_SLOT} "
                       f"exactly once: {agent_instruction!r}")
    super().__init__(
        tokenizer, ChatArithmeticHost(self), max_prompt_tokens=max_prompt_tokens,
        max_written_tokens=int(max_task_tokens) + 1,
        max_simulator_tokens=max_simulator_tokens, max_turns=1,
        max_action_tokens=max_response_tokens, max_observation_tokens=1,
        max_difficulty=max_difficulty,
        simulator_system_prompt=simulator_system_prompt,
        simulator_instruction=simulator_instruction, eos_token=eos_token,
        pad_token=pad_token)
    self.max_operand_digits = int(max_operand_digits)
    self.max_operands = int(max_operands)
    self.agent_system_prompt = agent_system_prompt
    self.agent_instruction = agent_instruction

  @classmethod
  def from_config(cls, config: Any) -> ChatArithmeticDomain:
    """Builds the domain from `config.task` (`text.from_task_config`)."""
    return text.from_task_config(cls, config, "the chat_arithmetic domain")

  @staticmethod
  def check_config(config: Any) -> None:
    for field in ("max_task_tokens", "max_prompt_tokens", "max_simulator_tokens",
                  "max_response_tokens", "max_difficulty", "max_operand_digits"):
      fields.integer(config, f"task.{field}", low=1)
    fields.integer(config, "task.max_operands", low=2)
    if config.task.max_difficulty > 5:
      fields.fail("task.max_difficulty", config.task.max_difficulty,
                  "at most 5 (4-digit operands, multiplied, three operands)")
    for field in ("num_train_per_level", "num_test_per_level"):
      fields.integer(config, f"data.{field}", low=1)
    fields.choice(config, "episodes.reward", episodes.EPISODE_REWARDS)
    fields.choice(config, "episodes.truncated", episodes.TRUNCATED)

  def read(self, written: str) -> Question:
    """`read_question` with this domain's limits."""
    return read_question(written, max_operand_digits=self.max_operand_digits,
                         max_operands=self.max_operands,
                         max_difficulty=self.max_difficulty)

  def written_task(self, written: str) -> WrittenTask:
    """The question line of `written`, its level and the agent's prompt."""
    question = self.read(written)
    message = self.agent_instruction.replace(QUESTION_SLOT, question.text)
    return WrittenTask(question.text, question.level,
                       lambda: self.user_prompt_ids(self.agent_system_prompt,
                                                    message))


class ChatArithmeticHost(HostTextTransition):
  """The episode of a question: one reply, scored by its last number."""

  def task_of_text(self, written: str) -> Question:
    """The question of a pool row."""
    return self.domain.read(written)

  def play(self, task: Question, actions: Sequence[np.ndarray], cut_short: bool
           ) -> HostStep:
    """Reward 1 iff the reply ended (a stop token) and its last number is the
    question's value (`verifiers.numeric_score`); a reply cut off scores 0."""
    ids = np.asarray(actions[-1])
    stops = np.flatnonzero(np.isin(ids, self.domain.stop_ids))
    reply = self.domain.text_of(ids[:stops[0]] if len(stops) else ids)
    right = not cut_short and verifiers.numeric_score(reply, str(task.value)) == 1.0
    return HostStep((), float(right), True, right, cut_short)
