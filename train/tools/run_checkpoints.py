"""Reading a player or a pool out of a finished (or running) run's
checkpoints (`state_checkpoint.read_parts`), for the tools that study them
apart from the run: `train.tools.agent_probe`, `train.tools.agent_breakdown`,
`train.tools.pool_breakdown`, `train.tools.maze_plans`."""

from __future__ import annotations

import json

from absl import app
from absl import flags
import jax
from ml_collections import config_flags
import numpy as np

from genenv_jax import sharding
from train.checkpoints import state_checkpoint


def agent_params(workdir: str, mesh, step: int = 0):
  """The agent's parameters in checkpoint `step` of the run in `workdir`
  (0: the warm-started agent), replicated over `mesh`."""
  _, params = state_checkpoint.read_player_params(workdir, step, "agent")
  return jax.device_put(params, sharding.replicated(mesh))


def _pool(workdir: str, step: int | None, name: str
          ) -> tuple[int, dict[str, np.ndarray]]:
  step, parts = state_checkpoint.read_parts(workdir, step, [name])
  return step, {k: np.asarray(v) for k, v in parts[name].items()}


def task_pool(workdir: str, step: int | None = None
              ) -> tuple[int, dict[str, np.ndarray]]:
  """(step, D_train in checkpoint `step` of the run in `workdir`; None: the
  latest), on the host: the TaskPool's fields "tasks" int32[C, L],
  "difficulty" int32[C], "success" f32[C], "size", "cursor", "total_added"."""
  return _pool(workdir, step, "pool")


def generation_pool(workdir: str, step: int | None = None
                    ) -> tuple[int, dict[str, np.ndarray]]:
  """(step, D_env in checkpoint `step` of the run in `workdir`; None: the
  latest), on the host: the GenerationPool's fields "prompt" int32[C, Pe],
  "prompt_mask", "task" int32[C, L], "task_mask", "reward" f32[C], "size",
  "cursor"."""
  return _pool(workdir, step, "generation_pool")


def checkpoint_tool_main(run, read: str) -> None:
  """The command line of a tool that reads one checkpoint of a run: flags
  --config (the run's config), --workdir and --step (default: the latest),
  then run(config, workdir, step), whose records (dicts) it prints as JSON
  lines. read: what the tool reads, for --step's help. Its flags exist only
  when the tool runs as a command."""
  config = config_flags.DEFINE_config_file("config", None, "The run's config.")
  workdir = flags.DEFINE_string("workdir", None, "A run's workdir with its "
                                "checkpoints (and seed data).")
  step = flags.DEFINE_integer("step", None, f"Checkpoint step whose {read} "
                              "is read (default: the latest).")
  flags.mark_flags_as_required(["config", "workdir"])

  def run_from_flags(argv):
    del argv
    for record in run(config.value, workdir.value, step.value):
      print(json.dumps(record), flush=True)

  app.run(run_from_flags)
