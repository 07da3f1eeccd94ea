"""The co-evolution state in checkpoints without the frozen references.

Both references are the players' step-0 parameters (the agent's GRPO
reference and the simulator's initial model never change), and the step-0
checkpoint is kept for good (checkpointing.Checkpoints). So every checkpoint
is written without `ref_params` (`without_references`), and a restore reads them back as the
parameters of the step-0 checkpoint: each step's checkpoint holds the two
trained players, their optimiser states and the pools, not two more copies of
the weights.
"""

from __future__ import annotations

import jax
import orbax.checkpoint as ocp

from genenv_jax import coevolve


def without_references(state: coevolve.CoevolveState) -> coevolve.CoevolveState:
  """`state` (arrays or ShapeDtypeStructs) with both ref_params set to None."""
  return state.replace(agent=state.agent.replace(ref_params=None),
                       simulator=state.simulator.replace(ref_params=None))


def restore(manager: ocp.CheckpointManager, step: int,
            target: coevolve.CoevolveState) -> coevolve.CoevolveState:
  """The state saved at `step`, laid out as `target` (ShapeDtypeStructs with
  shardings), its references read from the step-0 checkpoint's parameters.

  Raises FileNotFoundError when the step-0 checkpoint is gone.
  """
  if 0 not in manager.all_steps():
    raise FileNotFoundError(
        f"{manager.directory}: no step-0 checkpoint, which holds the frozen "
        "references (the step-0 parameters) every later checkpoint needs.")
  try:
    state = manager.restore(
        step, args=ocp.args.StandardRestore(without_references(target)))
  except Exception as e:
    raise RuntimeError(f"{manager.directory / str(step)}: the checkpoint could "
                       f"not be restored: {type(e).__name__}: {e}") from e
  wanted = {"agent": {"params": target.agent.ref_params},
            "simulator": {"params": target.simulator.ref_params}}
  try:
    refs = ocp.PyTreeCheckpointer().restore(
        manager.directory / "0" / "default",
        args=ocp.args.PyTreeRestore(
            item=wanted,
            restore_args=ocp.checkpoint_utils.construct_restore_args(wanted),
            partial_restore=True))
  except Exception as e:
    raise RuntimeError(
        f"{manager.directory / '0'}: the step-0 parameters (the frozen "
        f"references) could not be restored: {type(e).__name__}: {e}") from e
  return state.replace(
      agent=state.agent.replace(ref_params=refs["agent"]["params"]),
      simulator=state.simulator.replace(
          ref_params=refs["simulator"]["params"]))


def copy_references(state: coevolve.CoevolveState) -> coevolve.CoevolveState:
  """A restored step-0 state (ref_params None) with its parameters copied as
  the references."""
  copy = lambda tree: jax.tree.map(lambda x: x.copy(), tree)
  return state.replace(
      agent=state.agent.replace(ref_params=copy(state.agent.params)),
      simulator=state.simulator.replace(
          ref_params=copy(state.simulator.params)))
