"""ALFWorld as an episodic domain: the simulator writes a game, the agent plays
it in TextWorld with ALFWorld's own text and commands.

Written task. The simulator is shown a seed spec through the chat template and
writes a new one, one line (genenv_jax/domains/alfworld/game.py has the format):

    layout: FloorPlan1; task: pick_heat_then_place apple -> countertop; start: apple in fridge 1<EOS>

Text before the first line starting `layout:` is ignored (it may reason
first). `parse` runs on the host (`jax.pure_callback`, each device its own
rows; genenv_jax/domains/host_text.py) and keeps a generation iff `game.read_spec` reads that line and the
bundled planner solves its game in at least one and at most `max_turns`
steps; the canonical spec (the pool's row) and the agent's prompt must fit
their widths. Difficulty is the plan's length in levels (`level`): plans of
up to `first_level_steps` steps are level 1, each `steps_per_level` more
steps one level more, capped at `max_difficulty`.

Episode (`AlfworldHost`, a `HostTransition` behind `HostEnvironment`). The
agent's prompt is the system prompt (the commands it may type) and the game's
first text (ALFWorld's welcome, the room, "Your task is to: ..."), through the
chat template. Each action is one command, decoded to text without its stop
token (its first line, stripped), and played in the game: the observation is
ALFWorld's feedback, rendered as the chat template renders a user message
after an assistant message, through the next assistant header (over
`max_observation_tokens`: its head and the template's closing tokens). A
command ALFWorld does not admit is played too ("Nothing happens.") and counts
as an invalid action, as does an action cut at `max_action_tokens` without its
stop token. Winning ends the episode with reward 1 (ALFWorld's score); an
episode out of turns scores 0. Each row's game stays live between turns
(`game.GamePool`); `parse` loads no game (the first text of a layout's
games differs only in the task sentence, `GamePool.opening`).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from genenv_jax import config_fields as fields
from genenv_jax import episodes
from genenv_jax.domains.alfworld import game
from genenv_jax.domains.host_text import (HostTextDomain, HostTextTransition,
                                          WrittenTask, require_positive)
from genenv_jax.domains.text import domain as text
from genenv_jax.envs.host import HostStep

SPEC_FIELD = "layout:"
DEFAULT_SIMULATOR_INSTRUCTION = (
    "Here is a household task for a text game (ALFWorld): the room layout, the "
    "task with its object and target, and where the objects start.\n\n{seed}\n\n"
    "Write one new task of the same kind: change the task, its objects or where "
    "they start, using receptacles the room has. Use exactly this one-line "
    "format:\nlayout: FloorPlan<n>; task: <task type> <object> -> <target>; "
    "start: <object> in <receptacle> <n>, ...")
DEFAULT_AGENT_SYSTEM_PROMPT = (
    "You are in a household text game. Each turn, reply with one command and "
    "nothing else: look, inventory, go to <receptacle>, open <receptacle>, close "
    "<receptacle>, take <object> from <receptacle>, move <object> to "
    "<receptacle>, examine <something>, use <object>, heat <object> with "
    "<receptacle>, clean <object> with <receptacle>, cool <object> with "
    "<receptacle>. Name things with their numbers, e.g. take apple 1 from "
    "countertop 2.")


class AlfworldDomain(HostTextDomain):
  """ALFWorld games written as specs (format and rules in the module docstring).

  Args: `HostTextDomain`'s (an action is one command, max_turns ALFWorld's
  step limit), and
    first_level_steps, steps_per_level: with max_difficulty, the levels of
      plan lengths (`level`).
    live_games: the most TextWorld games kept live at once (`game.GamePool`).
    agent_system_prompt: the agent's system prompt ("" for none).
  """

  domain_title = "ALFWorld"
  task_noun = "spec"
  task_error = game.SpecError

  def __init__(self, tokenizer: Any, *, max_prompt_tokens: int = 768,
               max_written_tokens: int = 160,
               max_simulator_tokens: int | None = None, max_turns: int = 30,
               max_action_tokens: int = 24, max_observation_tokens: int = 128,
               first_level_steps: int = 4, steps_per_level: int = 2,
               max_difficulty: int = 4, live_games: int = 512,
               simulator_system_prompt: str = "",
               simulator_instruction: str = DEFAULT_SIMULATOR_INSTRUCTION,
               agent_system_prompt: str = DEFAULT_AGENT_SYSTEM_PROMPT,
               eos_token: str = "", pad_token: str = ""):
    require_positive(first_level_steps=first_level_steps,
                     steps_per_level=steps_per_level, live_games=live_games)
    super().__init__(
        tokenizer, AlfworldHost(self), max_prompt_tokens=max_prompt_tokens,
        max_written_tokens=max_written_tokens,
        max_simulator_tokens=max_simulator_tokens, max_turns=max_turns,
        max_action_tokens=max_action_tokens,
        max_observation_tokens=max_observation_tokens,
        max_difficulty=max_difficulty,
        simulator_system_prompt=simulator_system_prompt,
        simulator_instruction=simulator_instruction, eos_token=eos_token,
        pad_token=pad_token)
    self.first_level_steps = int(first_level_steps)
    self.steps_per_level = int(steps_per_level)
    self.agent_system_prompt = agent_system_prompt
    self.games = game.GamePool(int(live_games))

  @classmethod
  def from_config(cls, config: Any) -> AlfworldDomain:
    """Builds the domain from `config.task` (`text.from_task_config`)."""
    return text.from_task_config(cls, config, "the alfworld domain")

  @staticmethod
  def check_config(config: Any) -> None:
    for field in ("max_prompt_tokens", "max_written_tokens", "max_turns",
                  "max_action_tokens", "max_observation_tokens", "first_level_steps",
                  "steps_per_level", "max_difficulty", "live_games"):
      fields.integer(config, f"task.{field}", low=1)
    cc = config.coevolve
    episodes_per_step = ((cc.num_seeds * cc.variations + config.pool.replay_tasks)
                         * cc.attempts)
    if config.task.live_games < episodes_per_step:
      fields.fail("task.live_games", config.task.live_games,
                  f">= the episodes of a step ({episodes_per_step}: (coevolve."
                  "num_seeds * variations + pool.replay_tasks) * attempts), or "
                  "every turn replays its episode")
    fields.integer(config, "data.num_train", low=1)
    fields.integer(config, "data.test_per_task", low=1)
    fields.choice(config, "episodes.reward", episodes.EPISODE_REWARDS)
    fields.choice(config, "episodes.truncated", episodes.TRUNCATED)

  # ------------------------------------------------------------------ host side

  def level(self, plan_length: int) -> int:
    """The level of a plan of `plan_length` steps: 0 (no task) outside
    1..max_turns, else 1 + ceil((plan_length - first_level_steps) /
    steps_per_level) capped to 1..max_difficulty."""
    if plan_length < 1 or plan_length > self.max_turns:
      return 0
    above = max(0, plan_length - self.first_level_steps)
    return min(self.max_difficulty, 1 + math.ceil(above / self.steps_per_level))

  def read_task(self, written: str) -> tuple[game.Spec, int]:
    """The spec on the first line of `written` that starts `layout:` (text
    before it ignored) and its plan's length.

    Raises:
      game.SpecError: no such line, not a spec, or a game the planner does not
        solve in 1..max_turns steps.
    """
    lines = written.splitlines()
    line = next((l for l in lines if l.strip().lower().startswith(SPEC_FIELD)), None)
    if line is None:
      raise game.SpecError(f"no line starts {SPEC_FIELD!r}")
    spec = game.read_spec(line)
    steps = game.plan(spec)
    if steps is None:
      raise game.SpecError("the planner finds no plan")
    if not self.level(len(steps)):
      raise game.SpecError(f"its plan takes {len(steps)} steps; a task takes 1 to "
                           f"max_turns={self.max_turns}")
    return spec, len(steps)

  def written_task(self, written: str) -> WrittenTask:
    """The canonical spec of `written` (`read_task`), its plan's level and
    the agent's prompt."""
    spec, steps = self.read_task(written)
    return WrittenTask(spec.text(), self.level(steps), lambda: self.prompt_ids(spec))

  def prompt_ids(self, spec: game.Spec) -> list[int]:
    """The agent's prompt: the system prompt, the game's first text, the
    assistant header (the chat template's)."""
    return self.user_prompt_ids(self.agent_system_prompt, self.games.opening(spec))

  def command_of(self, ids: np.ndarray) -> str:
    """The command an action's tokens write: the first non-blank line of
    their text (up to the stop token), stripped."""
    ids = np.asarray(ids)
    stops = np.flatnonzero(np.isin(ids, self.stop_ids))
    written = self.text_of(ids[:stops[0]] if len(stops) else ids)
    return next((l.strip() for l in written.splitlines() if l.strip()), "")


class AlfworldHost(HostTextTransition):
  """The episode of a written spec as a pure function of its commands."""

  def task_of_text(self, written: str) -> game.Spec:
    """The spec of a pool row (read only: `parse` planned it)."""
    return game.read_spec(written)

  def play(self, task: game.Spec, actions: Sequence[np.ndarray], cut_short: bool
           ) -> HostStep:
    """ALFWorld's feedback on the last command, as a user message
    (`HostTextDomain.observation_ids`); a win ends the episode with reward 1."""
    step = self.domain.games.play(task, [self.domain.command_of(a) for a in actions])
    invalid = cut_short or not step.admissible
    if step.won:
      return HostStep((), 1.0, True, True, invalid)
    ids = self.domain.observation_ids([{"role": "user", "content": step.feedback}],
                                      self.domain.environment.observation_len)
    return HostStep(ids, 0.0, False, False, invalid)
