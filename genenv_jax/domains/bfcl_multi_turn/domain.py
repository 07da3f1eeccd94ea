"""BFCL multi-turn tool use as an episodic domain: the simulator writes a
variation of an entry, the agent plays it against the real APIs.

Written task. The simulator is shown a seed task (a variation of a wheel entry,
genenv_jax/scoring/bfcl_variations.py has the format) through the chat template
and writes a new one in the same format:

    Classes: <API classes>
    State: <initial state, JSON>
    User: <turn 1>
    Calls: [<ground-truth calls of turn 1>]
    ...<EOS>

Text before the first line starting `Classes:` is ignored (it may reason first).
`parse` runs on the host (`jax.pure_callback`, each device its own rows;
genenv_jax/domains/host_text.py) and keeps a generation only if `bfcl_variations.read` reads it and `bfcl_variations.check`
replays its ground truth on the APIs without an error; the ground-truth episode
must also fit the turn limit (`steps_needed <= max_turns`), and the canonical
text (the pool's written-task row), the agent's prompt must fit their widths.
Difficulty is computed from the replay: the number of ground-truth calls, in
levels of `calls_per_level` (capped at `max_difficulty`).

Episode (`BfclHost`, a `HostTransition` behind `HostEnvironment`). The agent's
prompt is BFCL's prompt-mode system prompt with the classes' function docs
(`function_docs="bfcl"`; "names" lists the function names only, for tiny runs)
and the first user turn, through the chat template. Each action is one step of
BFCL's prompt-mode loop, decoded to text without its stop token and played by
`genenv_jax.domains.bfcl_multi_turn.env.transition` (calls decoded by the project's AST
decoder and dispatched to the episode's own API instances; nothing is
evaluated): the observation is the execution results (tool messages) or, after a
step without a call, the next user turn, rendered as the chat template renders
those messages after an assistant message, through the next assistant header.
An action cut at `max_action_tokens` without its stop token counts as an
invalid action (it is still played).
An observation over `max_observation_tokens` keeps its head and the template's
closing tokens. After the last turn the episode is done: success is the official
checker's verdict, and the turn reward is the share of turns passed
(`config.episodes.reward`: "success" trains on the verdict, "turn_sum" on the
share).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from genenv_jax import config_fields as fields
from genenv_jax import episodes
from genenv_jax.domains.bfcl_multi_turn import env as env_lib
from genenv_jax.domains.host_text import (HostTextDomain, HostTextTransition,
                                          WrittenTask, require_positive)
from genenv_jax.domains.text import domain as text
from genenv_jax.envs.host import HostStep
from genenv_jax.scoring import CORRECT
from genenv_jax.scoring import bfcl_multi_turn as mt
from genenv_jax.scoring import bfcl_prompt
from genenv_jax.scoring import bfcl_variations as bv

# BFCL's multi-turn categories this domain seeds from (config.data.categories).
CATEGORIES = ("multi_turn_base", "multi_turn_miss_param")
FUNCTION_DOCS = ("bfcl", "names")
DEFAULT_SIMULATOR_INSTRUCTION = (
    "Here is a multi-turn tool-use task: the API classes, their initial state as "
    "JSON, then each user turn with the function calls that answer it ([] when "
    "the user leaves out something the calls need).\n\n{seed}\n\n"
    "Write one new task of the same kind: change the state, the requests and their "
    "calls. Every call must succeed on the state you write. Use exactly this "
    "format, one field a line:\nClasses: ...\nState: ...\nUser: ...\nCalls: [...]")
NAMES_PROMPT = ("You can call these functions: {names}. Answer a request with a "
                "list of calls, e.g. [f(a=1), g(b='x')], and with plain text when "
                "it is done.")


class BfclMultiTurnDomain(HostTextDomain):
  """BFCL multi-turn variations (format and rules in the module docstring).

  Args: `HostTextDomain`'s (an action is one step of BFCL's prompt-mode
  loop), and
    data_dir: BFCL's data directory (function docs); "" the bfcl_eval wheel's.
    function_docs: one of FUNCTION_DOCS, what the agent's system prompt lists.
    calls_per_level: with max_difficulty, the levels of ground-truth calls.
  """

  domain_title = "BFCL multi-turn"
  task_noun = "variation"
  task_error = bv.VariationError

  def __init__(self, tokenizer: Any, *, data_dir: str = "",
               function_docs: str = "bfcl", max_prompt_tokens: int = 8192,
               max_written_tokens: int = 1536,
               max_simulator_tokens: int | None = None, max_turns: int = 8,
               max_action_tokens: int = 256, max_observation_tokens: int = 512,
               calls_per_level: int = 2, max_difficulty: int = 4,
               simulator_system_prompt: str = "",
               simulator_instruction: str = DEFAULT_SIMULATOR_INSTRUCTION,
               eos_token: str = "", pad_token: str = ""):
    if function_docs not in FUNCTION_DOCS:
      raise ValueError(f"config.task.function_docs={function_docs!r}; expected one "
                       f"of {FUNCTION_DOCS}")
    require_positive(calls_per_level=calls_per_level)
    super().__init__(
        tokenizer, BfclHost(self), max_prompt_tokens=max_prompt_tokens,
        max_written_tokens=max_written_tokens,
        max_simulator_tokens=max_simulator_tokens, max_turns=max_turns,
        max_action_tokens=max_action_tokens,
        max_observation_tokens=max_observation_tokens,
        max_difficulty=max_difficulty,
        simulator_system_prompt=simulator_system_prompt,
        simulator_instruction=simulator_instruction, eos_token=eos_token,
        pad_token=pad_token)
    self.function_docs = function_docs
    self.func_docs = mt.load_func_docs(data_dir or bfcl_prompt.wheel_data_dir(),
                                       bv.CLASSES)
    self.calls_per_level = int(calls_per_level)

  @classmethod
  def from_config(cls, config: Any) -> BfclMultiTurnDomain:
    """Builds the domain from `config.task` (`text.from_task_config`)."""
    return text.from_task_config(cls, config, "the bfcl_multi_turn domain")

  @staticmethod
  def check_config(config: Any) -> None:
    for field in ("max_prompt_tokens", "max_written_tokens", "max_turns",
                  "max_action_tokens", "max_observation_tokens", "calls_per_level",
                  "max_difficulty"):
      fields.integer(config, f"task.{field}", low=1)
    fields.choice(config, "task.function_docs", FUNCTION_DOCS)
    categories = tuple(config.data.categories)
    if not categories or not set(categories) <= set(CATEGORIES):
      fields.fail("data.categories", categories, f"some of {CATEGORIES}")
    fields.integer(config, "data.max_seed_turns", low=0)
    fields.number(config, "data.test_fraction", low=0.0, high=1.0,
                  open_low=True, open_high=True)
    fields.choice(config, "episodes.reward", episodes.EPISODE_REWARDS)
    fields.choice(config, "episodes.truncated", episodes.TRUNCATED)

  # ------------------------------------------------------------------ host side

  def system_prompt(self, functions: Sequence[dict[str, Any]]) -> str:
    """The agent's system prompt for these function docs (`function_docs`)."""
    if self.function_docs == "bfcl":
      return bfcl_prompt.bfcl_system_prompt(functions)
    return NAMES_PROMPT.format(names=", ".join(f["name"] for f in functions))

  def prompt_ids(self, entry: mt.MultiTurnEntry) -> list[int]:
    """The agent's prompt: the system prompt, the first user turn, the
    assistant header (the chat template's)."""
    return self.chat_prompt_ids(
        [{"role": "system", "content": self.system_prompt(entry.functions)},
         *env_lib.transition(entry, []).messages])

  def read_task(self, written: str) -> tuple[bv.Variation, mt.MultiTurnEntry]:
    """The variation written in `written` (text before its `Classes:` line
    ignored) and its checked entry.

    Raises:
      bv.VariationError: not a valid variation, or one whose ground-truth
        episode needs more than max_turns steps.
    """
    at = written.find(bv.CLASSES_FIELD)
    while at > 0 and written[at - 1] != "\n":
      at = written.find(bv.CLASSES_FIELD, at + 1)
    if at < 0:
      raise bv.VariationError(f"no line starts {bv.CLASSES_FIELD!r}")
    variation = bv.read(written[at:])
    if variation.steps_needed > self.max_turns:
      raise bv.VariationError(f"its ground truth takes {variation.steps_needed} "
                              f"steps; max_turns is {self.max_turns}")
    return variation, bv.check(variation, self.func_docs)

  def written_task(self, written: str) -> WrittenTask:
    """The canonical variation of `written` (`read_task`), its level of
    ground-truth calls and the agent's prompt."""
    variation, entry = self.read_task(written)
    level = min(self.max_difficulty, -(-variation.num_calls // self.calls_per_level))
    return WrittenTask(variation.text(), level, lambda: self.prompt_ids(entry))


class BfclHost(HostTextTransition):
  """The episode of a written variation as a pure function of its steps."""

  def task_of_text(self, written: str) -> mt.MultiTurnEntry:
    """The checked entry of a pool row's variation."""
    return self.domain.read_task(written)[1]

  def play(self, task: mt.MultiTurnEntry, actions: Sequence[np.ndarray],
           cut_short: bool) -> HostStep:
    """One step of BFCL's prompt-mode loop (`env_lib.transition`); after the
    last turn, the share of turns passed and the official checker's verdict."""
    outcome = env_lib.transition(task, [self.domain.text_of(a) for a in actions])
    if outcome.done:
      score = outcome.score
      return HostStep((), score.turns_passed / max(score.turns, 1), True,
                      score.verdict.status == CORRECT, cut_short)
    ids = self.domain.observation_ids(outcome.messages,
                                      self.domain.environment.observation_len)
    return HostStep(ids, 0.0, False, False, cut_short)
