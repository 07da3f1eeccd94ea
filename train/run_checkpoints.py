"""Reading a player out of a finished (or running) run's checkpoints, for the
tools that study it apart from the run: `train.agent_probe`,
`train.agent_breakdown`."""

from __future__ import annotations

import os

import jax
import numpy as np
import orbax.checkpoint as ocp

from genenv_jax import sharding


def agent_params(workdir: str, mesh, step: int = 0):
  """The agent's parameters in checkpoint `step` of the run in `workdir`
  (0: the warm-started agent), replicated over `mesh`."""
  path = os.path.join(os.path.abspath(workdir), "checkpoints")
  manager = ocp.CheckpointManager(
      path, options=ocp.CheckpointManagerOptions(read_only=True))
  if step not in manager.all_steps():
    what = " (the warm-started players)" if step == 0 else ""
    raise FileNotFoundError(
        f"{path} has no step-{step} checkpoint{what}; it holds steps "
        f"{sorted(manager.all_steps())}. Run train.main on this workdir first.")
  raw = manager.restore(step, args=ocp.args.StandardRestore())
  return jax.device_put(jax.tree.map(np.asarray, raw["agent"]["params"]),
                        sharding.replicated(mesh))
