"""Task domains, one package each, and the registry the driver builds them from.

A domain is everything the driver needs to run GenEnv on one kind of task. Its
package holds two layers: `domain.py`, the `TaskDomain` (`base.py`) the jitted step
calls (the written-task format, `parse`, `verify` or an environment, the prompts,
the warm-start's agent lessons, the checks of its config fields), and `data.py`,
the host-side seed data built on it (`seed_splits(domain, config, data_dir)`, and
for the maze the warm-start's edited lessons). `DOMAINS` pairs them; the driver
(train/) calls `get_domain`, `seed_splits` and `edit_variations` without knowing
which domain it runs.

  arithmetic/       additions (domain.py; data.py: the tensorflow-datasets builder)
  maze/             grids the agent walks (domain.py: parse and the JAX environment;
                    data.py: random seed grids and the warm-start's edits)
  chat_arithmetic/  arithmetic questions in words for chat models, answers
                    computed by the domain (domain.py; data.py: drawn questions)
  text/             prompt/answer text tasks on a real tokenizer (domain.py,
                    verifiers.py, data.py: JSONL / parquet / BFCL records)
  bfcl_multi_turn/  BFCL multi-turn tool use (domain.py; env.py: the host
                    environment over BFCL's APIs; data.py: seeds and held-out entries)
  alfworld/         ALFWorld games the simulator writes as specs (domain.py;
                    game.py: specs, PDDL problems, the planner, TextWorld games;
                    data.py: seeds and the held-out ALFWorld-synthetic set)
  travelplanner/    TravelPlanner plans (domain.py: variations of its train
                    queries, scored by its constraints; data.py: seeds and the
                    held-out validation queries)
  host_text.py      the shared base of bfcl_multi_turn, alfworld and
                    travelplanner: tasks the host reads as text and plays as
                    episodes

Adding one: a package here, a config file in configs/, and one entry in `DOMAINS`
(docs/domains.md walks through the maze).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np

from genenv_jax.domains.alfworld import data as alfworld_data
from genenv_jax.domains.alfworld.domain import AlfworldDomain
from genenv_jax.domains.arithmetic import data as arithmetic_data
from genenv_jax.domains.arithmetic.domain import ArithmeticDomain
from genenv_jax.domains.base import ParsedTasks, TaskDomain
from genenv_jax.domains.chat_arithmetic import data as chat_arithmetic_data
from genenv_jax.domains.chat_arithmetic.domain import ChatArithmeticDomain
from genenv_jax.domains.bfcl_multi_turn import data as bfcl_multi_turn_data
from genenv_jax.domains.bfcl_multi_turn.domain import BfclMultiTurnDomain
from genenv_jax.domains.maze import data as maze_data
from genenv_jax.domains.maze.domain import MazeDomain
from genenv_jax.domains.seed_data import SeedData
from genenv_jax.domains.text import data as text_data
from genenv_jax.domains.text.domain import TextDomain
from genenv_jax.domains.travelplanner import data as travelplanner_data
from genenv_jax.domains.travelplanner.domain import TravelPlannerDomain

# edit(domain, seed_rows int32[n, L], wanted int[n], rng) -> int32[n, L].
EditVariations = Callable[[Any, np.ndarray, np.ndarray, np.random.Generator],
                          np.ndarray]


class Registered(NamedTuple):
  """One domain: its TaskDomain class, its seed data
  (seed_splits(domain, config, data_dir) -> (train, test), each {"task":
  int32[n, task_len], "difficulty": int32[n]}), when it edits seeds the
  warm-start's "edited" lessons, and when it reads seed files the config field
  they arrive in and the files it expects there (`SeedData`,
  genenv_jax/domains/seed_data.py; None: it draws or builds its seeds)."""
  domain: type[TaskDomain]
  seed_splits: Callable[[Any, Any, str], tuple[dict, dict]]
  edit_variations: EditVariations | None = None
  seed_data: SeedData | None = None


DOMAINS: dict[str, Registered] = {
    "arithmetic": Registered(ArithmeticDomain, arithmetic_data.seed_splits),
    "text": Registered(TextDomain, text_data.seed_splits,
                       seed_data=text_data.SEED_DATA),
    "chat_arithmetic": Registered(ChatArithmeticDomain,
                                  chat_arithmetic_data.seed_splits),
    "maze": Registered(MazeDomain, maze_data.seed_splits,
                       maze_data.edited_variations),
    "bfcl_multi_turn": Registered(BfclMultiTurnDomain,
                                  bfcl_multi_turn_data.seed_splits,
                                  seed_data=bfcl_multi_turn_data.SEED_DATA),
    "alfworld": Registered(AlfworldDomain, alfworld_data.seed_splits),
    "travelplanner": Registered(TravelPlannerDomain,
                                travelplanner_data.seed_splits,
                                seed_data=travelplanner_data.SEED_DATA),
}


def registered(name: str) -> Registered:
  """The registry entry of config.task.name `name`; ValueError naming the
  known ones otherwise."""
  if name not in DOMAINS:
    raise ValueError(
        f"config.task.name={name!r} is not a known task domain; known: {sorted(DOMAINS)}"
    )
  return DOMAINS[name]


def get_domain(config: Any) -> TaskDomain:
  """Builds the task domain named by `config.name` (the run's `config.task` section)."""
  return registered(config.name).domain.from_config(config)


def seed_splits(config: Any, domain: TaskDomain, data_dir: str
                ) -> tuple[dict, dict]:
  """The run's seed data: (train, test) splits, each {"task": int32[n,
  task_len] written-task rows, "difficulty": int32[n]}. The train split seeds
  D_train and the warm-start; the test split is the held-out set, never
  trained on. `data_dir`: where a tensorflow-datasets builder prepares its
  files. Deterministic in config.data.seed."""
  return registered(config.task.name).seed_splits(domain, config, data_dir)


__all__ = ["DOMAINS", "AlfworldDomain", "ArithmeticDomain", "BfclMultiTurnDomain",
           "ChatArithmeticDomain", "MazeDomain", "ParsedTasks",
           "Registered", "SeedData", "TaskDomain", "TextDomain", "TravelPlannerDomain", "get_domain", "registered",
           "seed_splits"]
