"""Task domains: a task format, its parser and its verifier, one file each.

`get_domain(config.task)` builds the domain a run uses; adding a domain is one file
in this package plus one line in `DOMAINS`.
"""

from __future__ import annotations

from typing import Any, Callable

from genenv_jax.tasks.arithmetic import ArithmeticDomain
from genenv_jax.tasks.bfcl_multi_turn import BfclMultiTurnDomain
from genenv_jax.tasks.base import ParsedTasks, TaskDomain
from genenv_jax.tasks.maze import MazeDomain
from genenv_jax.tasks.text import TextDomain

DOMAINS: dict[str, Callable[[Any], TaskDomain]] = {
    "arithmetic": ArithmeticDomain.from_config,
    "text": TextDomain.from_config,
    "maze": MazeDomain.from_config,
    "bfcl_multi_turn": BfclMultiTurnDomain.from_config,
}


def get_domain(config: Any) -> TaskDomain:
  """Builds the task domain named by `config.name` (the run's `config.task` section)."""
  if config.name not in DOMAINS:
    raise ValueError(
        f"config.task.name={config.name!r} is not a known task domain; known: {sorted(DOMAINS)}"
    )
  return DOMAINS[config.name](config)


__all__ = ["DOMAINS", "ArithmeticDomain", "BfclMultiTurnDomain", "MazeDomain", "ParsedTasks",
           "TaskDomain", "TextDomain", "get_domain"]
