"""Task domains, one package each, and the registry the driver builds them from.

A domain is everything the driver needs to run GenEnv on one kind of task, behind
`TaskDomain` (`base.py`): the written-task format the simulator writes, `parse`
(validity and difficulty), `verify` or an environment the agent acts in, the
simulator's and the agent's prompts, the seed data and held-out set
(`seed_splits`), the warm-start's lessons (`agent_demonstration`,
`edit_variations`) and the checks of its config fields (`check_config`). The
driver (train/) calls these without knowing which domain it runs.

  arithmetic/       additions (domain.py; data.py: the tensorflow-datasets builder)
  maze/             grids the agent walks (domain.py: parse and the JAX environment;
                    data.py: random seed grids and the warm-start's edits)
  text/             prompt/answer text tasks on a real tokenizer (domain.py,
                    verifiers.py, data.py: JSONL / parquet / BFCL records)
  bfcl_multi_turn/  BFCL multi-turn tool use (domain.py; env.py: the host
                    environment over BFCL's APIs; data.py: seeds and held-out entries)

Adding one: a package here, a config file in configs/, and one line in `DOMAINS`
(docs/domains.md walks through the maze).
"""

from __future__ import annotations

from typing import Any

from genenv_jax.domains.arithmetic.domain import ArithmeticDomain
from genenv_jax.domains.base import ParsedTasks, TaskDomain
from genenv_jax.domains.bfcl_multi_turn.domain import BfclMultiTurnDomain
from genenv_jax.domains.maze.domain import MazeDomain
from genenv_jax.domains.text.domain import TextDomain

DOMAINS: dict[str, type[TaskDomain]] = {
    "arithmetic": ArithmeticDomain,
    "text": TextDomain,
    "maze": MazeDomain,
    "bfcl_multi_turn": BfclMultiTurnDomain,
}


def get_domain(config: Any) -> TaskDomain:
  """Builds the task domain named by `config.name` (the run's `config.task` section)."""
  if config.name not in DOMAINS:
    raise ValueError(
        f"config.task.name={config.name!r} is not a known task domain; known: {sorted(DOMAINS)}"
    )
  return DOMAINS[config.name].from_config(config)


__all__ = ["DOMAINS", "ArithmeticDomain", "BfclMultiTurnDomain", "MazeDomain", "ParsedTasks",
           "TaskDomain", "TextDomain", "get_domain"]
