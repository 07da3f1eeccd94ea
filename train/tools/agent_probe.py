"""Trains the agent alone from a run's warm-started players, to measure how
fast it can learn at all, apart from what the simulator gives it.

  python -m train.tools.agent_probe --config=configs/default.py --workdir=runs/default \
      --method=grpo --levels=2 --steps=100 --learning_rate=1e-4

Reads the step-0 checkpoint (the players after stage 1) and the seed data of
`--workdir`, then runs `--steps` updates on training tasks of `--levels` only:
`grpo` uses the co-evolution step's own GRPO update (`--tasks_per_step` tasks,
`config.coevolve.attempts` attempts each, no simulator; evaluated every
`--eval_every` steps; with `--fixed_tasks` the same tasks at every update);
`sft` uses stage 1's supervised update (its warm-up + cosine schedule) on the
same number of tasks per step, evaluated at the start and the end. Prints one
JSON line per evaluation with the held-out accuracy per difficulty level
(greedy).
"""

from __future__ import annotations

import functools
import json
import os

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
from ml_collections import config_flags
import numpy as np

from genenv_jax import coevolve
from genenv_jax import sharding
from genenv_jax.domains import get_domain
from genenv_jax.domains.arithmetic import data as datasets
from train import build
from train import heldout
from train import warmstart
from train.runtime import dispatch
from train.tools import run_checkpoints



def training_batches(rows: np.ndarray, rng: np.random.Generator,
                     tasks_per_step: int, steps: int, fixed: bool):
  """The task rows of each update: fresh draws from `rows` every update, or
  (fixed) one draw repeated, to see whether the update fits what it sees.

  Yields int32[tasks_per_step, task_len] `steps` times."""
  batch = rows[rng.integers(0, len(rows), tasks_per_step)]
  for _ in range(steps):
    yield batch
    if not fixed:
      batch = rows[rng.integers(0, len(rows), tasks_per_step)]


def _grpo_step(config, domain, players, mesh, rules):
  """The co-evolution step's agent half (stages 3-4 and 6) on given tasks:
  (agent, int32[n, task_len] task rows, key) -> (agent, mean reward)."""

  @jax.jit
  @sharding.in_mesh(mesh, rules)
  def step(agent, rows, key):
    sample_key, update_key = jax.random.split(key)
    tasks = domain.parse(rows, rows != domain.pad_id)
    attempts = coevolve.attempt_stage(domain)(config, domain, players, agent,
                                              tasks, sample_key)
    batch = coevolve.grpo_batch(config, players, agent, attempts)
    agent, _ = coevolve.agent_update(config, players, agent, batch,
                                     update_key)
    return agent, jnp.mean(attempts.rewards)

  return step


def run(config, workdir: str, method: str, levels: list[int], steps: int,
        learning_rate: float | None, tasks_per_step: int,
        eval_every: int, fixed_tasks: bool = False) -> list[dict]:
  """Runs the probe; returns the printed records."""
  if fixed_tasks and method != "grpo":
    raise ValueError(f"--fixed_tasks applies to --method=grpo, not {method!r}.")
  mesh = sharding.make_mesh(dict(config.mesh))
  rules = sharding.DEFAULT_RULES
  domain = get_domain(config.task)
  if learning_rate is not None and method == "grpo":
    config.agent.learning_rate = learning_rate
  players = build.build_players(config, domain)
  data_dir = config.data.tfds_dir or os.path.join(workdir, "tfds")
  builder_config = datasets.builder_config_from(config)
  train = datasets.load_split(builder_config, "train", data_dir)
  test = datasets.load_split(builder_config, "test", data_dir)
  chosen = np.isin(train["difficulty"], levels)
  if not chosen.any():
    raise ValueError(f"--levels={levels}: the seed data has no such level.")
  evaluate = heldout.HeldoutEval(
      domain, players.agent_model, test["task"], test["difficulty"], mesh,
      rules, config.curriculum.success_threshold)
  params = run_checkpoints.agent_params(workdir, mesh)
  records = []

  def report(step, **extra):
    record = dict(step=step, method=method, levels=levels, **extra)
    record.update({k: round(v, 4) for k, v in evaluate(params).items()})
    print(json.dumps(record), flush=True)
    records.append(record)

  report(0)
  rng = np.random.default_rng(config.seed)
  if method == "sft":
    weights = [float(level in levels)
               for level in range(1, domain.max_difficulty + 1)]
    data = warmstart.agent_data(domain, train["task"], train["difficulty"],
                                weights, rng, tasks_per_step * steps)
    params, losses = warmstart.train_supervised(
        players.agent_model, params, data, steps=steps,
        batch_size=tasks_per_step,
        learning_rate=learning_rate or config.warmstart.learning_rate,
        seed=config.seed, mesh=mesh, rules=rules)
    report(steps, loss=round(float(np.mean(losses[-eval_every:])), 4))
    return records

  agent = jax.jit(functools.partial(coevolve.new_player_state,
                                    optimizer=players.agent_opt))(params)
  step_fn = _grpo_step(config, domain, players, mesh, rules)
  window = dispatch.DispatchWindow()
  rewards = []
  batches = training_batches(train["task"][chosen], rng, tasks_per_step, steps,
                             fixed_tasks)
  for step, batch_rows in enumerate(batches, start=1):
    agent, reward = step_fn(agent, jnp.asarray(batch_rows),
                            jax.random.PRNGKey(step))
    window.push(reward)
    rewards.append(reward)
    if step % eval_every == 0 or step == steps:
      params = agent.params
      report(step, train_reward=round(float(np.mean(
          jax.device_get(rewards[-eval_every:]))), 4))
  return records


def main(argv):
  del argv
  f = flags.FLAGS
  run(f.config, f.workdir, f.method, [int(x) for x in f.levels], f.steps,
      f.learning_rate, f.tasks_per_step, f.eval_every, f.fixed_tasks)


def define_flags() -> None:
  """The command line's flags (defined when run as a program, so that
  importing this module beside train.main defines no flag twice)."""
  config_flags.DEFINE_config_file("config", None, "The run's config.")
  flags.DEFINE_string("workdir", None, "A run's workdir with its "
                      "step-0 checkpoint and seed data.")
  flags.DEFINE_enum("method", "grpo", ["grpo", "sft"], "Update rule.")
  flags.DEFINE_list("levels", ["2"], "Difficulty levels trained on.")
  flags.DEFINE_integer("steps", 100, "Updates.")
  flags.DEFINE_float("learning_rate", None, "Defaults to the config's "
                     "agent (grpo) or warm-start (sft) learning rate.")
  flags.DEFINE_integer("tasks_per_step", 40, "Tasks per update.")
  flags.DEFINE_integer("eval_every", 20, "Steps between evals.")
  flags.DEFINE_bool("fixed_tasks", False, "grpo: train on the same "
                    "--tasks_per_step tasks at every update (does the "
                    "update fit what it sees?) instead of fresh ones.")
  flags.mark_flags_as_required(["config", "workdir"])


if __name__ == "__main__":
  define_flags()
  app.run(main)
