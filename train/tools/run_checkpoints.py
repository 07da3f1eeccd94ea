"""Reading a player or a pool out of a finished (or running) run's
checkpoints, for the tools that study them apart from the run:
`train.tools.agent_probe`, `train.tools.agent_breakdown`,
`train.tools.pool_breakdown`, `train.tools.maze_plans`."""

from __future__ import annotations

import json
import os

from absl import app
from absl import flags
import jax
from ml_collections import config_flags
import numpy as np
import orbax.checkpoint as ocp

from genenv_jax import sharding


def _restore(workdir: str, step: int | None) -> tuple[int, dict]:
  """(step, checkpoint `step` of the run in `workdir` as nested dicts of
  arrays); step None reads the latest."""
  path = os.path.join(os.path.abspath(workdir), "checkpoints")
  manager = ocp.CheckpointManager(
      path, options=ocp.CheckpointManagerOptions(read_only=True))
  if step is None and manager.latest_step() is not None:
    step = manager.latest_step()
  if step not in manager.all_steps():
    what = {0: "step-0 checkpoint (the warm-started players)",
            None: "checkpoint"}.get(step, f"step-{step} checkpoint")
    raise FileNotFoundError(
        f"{path} has no {what}; it holds steps "
        f"{sorted(manager.all_steps())}. Run train.main on this workdir first.")
  return step, manager.restore(step, args=ocp.args.StandardRestore())


def agent_params(workdir: str, mesh, step: int = 0):
  """The agent's parameters in checkpoint `step` of the run in `workdir`
  (0: the warm-started agent), replicated over `mesh`."""
  _, raw = _restore(workdir, step)
  return jax.device_put(jax.tree.map(np.asarray, raw["agent"]["params"]),
                        sharding.replicated(mesh))


def task_pool(workdir: str, step: int | None = None
              ) -> tuple[int, dict[str, np.ndarray]]:
  """(step, D_train in checkpoint `step` of the run in `workdir`; None: the
  latest), on the host: the TaskPool's fields "tasks" int32[C, L],
  "difficulty" int32[C], "success" f32[C], "size", "cursor", "total_added"."""
  step, raw = _restore(workdir, step)
  return step, {k: np.asarray(v) for k, v in raw["pool"].items()}


def generation_pool(workdir: str, step: int | None = None
                    ) -> tuple[int, dict[str, np.ndarray]]:
  """(step, D_env in checkpoint `step` of the run in `workdir`; None: the
  latest), on the host: the GenerationPool's fields "prompt" int32[C, Pe],
  "prompt_mask", "task" int32[C, L], "task_mask", "reward" f32[C], "size",
  "cursor"."""
  step, raw = _restore(workdir, step)
  return step, {k: np.asarray(v) for k, v in raw["generation_pool"].items()}


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
