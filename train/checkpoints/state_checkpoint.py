"""The co-evolution state in checkpoints without the frozen weights.

Both references are the players' step-0 parameters (the agent's GRPO
reference and the simulator's initial model never change), and the step-0
checkpoint is kept for good (checkpointing.Checkpoints). So every checkpoint
is written without `ref_params`, and a restore reads them back as the
parameters of the step-0 checkpoint. A player with low-rank adapters
(models/lora.py) has no reference copy, and past step 0 its checkpoints hold
its adapters alone: its base weights never change after step 0, whose
checkpoint holds them (`saved_form`). Each step's checkpoint thus holds what
trained, the optimiser states and the pools, never another copy of frozen
weights.

It is also the one reader of a run's checkpoints apart from the run
(`read_parts`, `read_player_params`): the tools, the export and the tests
read the subtrees they need, on the host, from a local or gs:// workdir.
"""

from __future__ import annotations

from typing import Any, Sequence

from etils import epath
import jax
import numpy as np
import orbax.checkpoint as ocp

from genenv_jax import coevolve
from models import lora
from train.checkpoints import checkpointing

# The item under which the run's CheckpointManager saves the state.
STATE_ITEM = "default"


def _partial_restore(item: epath.Path, wanted: dict, restore_args: Any
                     ) -> dict:
  """The subtrees `wanted` (a nested dict of the state's fields, leaves
  ShapeDtypeStructs) of the state saved in directory `item`, and nothing
  else of it."""
  return ocp.PyTreeCheckpointer().restore(item, args=ocp.args.PyTreeRestore(
      item=wanted, restore_args=restore_args, partial_restore=True))


def saved_form(state: coevolve.CoevolveState, step: int
               ) -> coevolve.CoevolveState:
  """What the checkpoint of `state` (arrays or ShapeDtypeStructs) at `step`
  holds: both ref_params None and, past step 0, a player with adapters
  holding its adapters alone as `params`."""
  def player(p: coevolve.PlayerState) -> coevolve.PlayerState:
    p = p.replace(ref_params=None)
    if step and lora.has_adapters(p.params):
      p = p.replace(params=lora.split(p.params)[0])
    return p
  return state.replace(agent=player(state.agent),
                       simulator=player(state.simulator))


def _from_step0(target: coevolve.CoevolveState, step: int) -> dict:
  """The subtrees of the step-0 checkpoint a restore at `step` needs, per
  player (target's ShapeDtypeStructs): its parameters as the reference, or,
  with adapters, past step 0 its base."""
  wanted = {}
  for name in ("agent", "simulator"):
    p = getattr(target, name)
    if p.ref_params is not None:
      wanted[name] = {"params": p.ref_params}
    elif step:
      wanted[name] = {"params": lora.split(p.params)[1]}
  return wanted


def restore(manager: ocp.CheckpointManager, step: int,
            target: coevolve.CoevolveState) -> coevolve.CoevolveState:
  """The state saved at `step`, laid out as `target` (ShapeDtypeStructs with
  shardings), its references (and the base of a player with adapters) read
  from the step-0 checkpoint's parameters.

  Raises FileNotFoundError when the step-0 checkpoint is gone.
  """
  if 0 not in manager.all_steps():
    raise FileNotFoundError(
        f"{manager.directory}: no step-0 checkpoint, which holds the frozen "
        "references (the step-0 parameters) every later checkpoint needs.")
  try:
    state = manager.restore(
        step, args=ocp.args.StandardRestore(saved_form(target, step)))
  except Exception as e:
    raise RuntimeError(f"{manager.directory / str(step)}: the checkpoint could "
                       f"not be restored: {type(e).__name__}: {e}") from e
  wanted = _from_step0(target, step)
  try:
    step0 = _partial_restore(
        manager.directory / "0" / STATE_ITEM, wanted,
        ocp.checkpoint_utils.construct_restore_args(wanted)) if wanted else {}
  except Exception as e:
    raise RuntimeError(
        f"{manager.directory / '0'}: the step-0 parameters (the frozen "
        f"references) could not be restored: {type(e).__name__}: {e}") from e

  def player(name: str) -> coevolve.PlayerState:
    p = getattr(state, name)
    if name not in step0:
      return p
    if getattr(target, name).ref_params is not None:
      return p.replace(ref_params=step0[name]["params"])
    return p.replace(params=lora.join(p.params, step0[name]["params"]))
  return state.replace(agent=player("agent"), simulator=player("simulator"))


def checkpoint_step(workdir: str, step: int | None) -> tuple[int, epath.Path]:
  """(step, the directory of the state saved at `step`; None: the latest)
  of the run in `workdir` (a local path or gs:// URI). Raises
  FileNotFoundError naming the steps it holds."""
  path = checkpointing.workdir_path(workdir) / "checkpoints"
  steps = []
  if path.exists():
    manager = ocp.CheckpointManager(
        path, options=ocp.CheckpointManagerOptions(read_only=True))
    steps = sorted(manager.all_steps())
  if step is None and steps:
    step = steps[-1]
  if step not in steps:
    what = {0: "step-0 checkpoint (the warm-started players)",
            None: "checkpoint"}.get(step, f"step-{step} checkpoint")
    raise FileNotFoundError(
        f"{path} has no {what}; it holds steps {steps}. Run train.main on "
        "this workdir first.")
  return step, path / str(step) / STATE_ITEM


def read_parts(workdir: str, step: int | None, parts: Sequence[str]
               ) -> tuple[int, dict[str, Any]]:
  """(step, {part: its subtree as host numpy arrays}) of the state saved at
  `step` (None: the latest) in `workdir`, reading only the named parts,
  each a dotted path into the CoevolveState ("agent.params", "pool",
  "generation_pool", "simulator.opt_state", ...): a player's weights are
  read without the other player, the optimiser states or the pools.
  Raises KeyError naming a part the checkpoint lacks."""
  step, item = checkpoint_step(workdir, step)
  tree = _saved_tree(item)
  wanted: dict = {}
  for part in parts:
    keys = part.split(".")
    node, target = tree, wanted
    for i, key in enumerate(keys):
      if not isinstance(node, dict) or key not in node:
        raise KeyError(f"{item}: the checkpoint has no {part!r} "
                       f"({'.'.join(keys[:i + 1])} is missing).")
      node = node[key]
      if i < len(keys) - 1:
        target = target.setdefault(key, {})
    target[keys[-1]] = jax.tree.map(
        lambda m: jax.ShapeDtypeStruct(tuple(m.shape), m.dtype), node)
  restored = _partial_restore(item, wanted, jax.tree.map(
      lambda _: ocp.RestoreArgs(restore_type=np.ndarray), wanted))
  out = {}
  for part in parts:
    node = restored
    for key in part.split("."):
      node = node[key]
    out[part] = node
  return step, out


def read_sharded(workdir: str, step: int | None, part: str, target: Any) -> Any:
  """The subtree `part` (a dotted path, as `read_parts`) of the state saved
  at `step` (None: the latest) in `workdir`, restored straight into the
  layout of `target` (its ShapeDtypeStructs with shardings, e.g.
  state_layout.abstract_params): each process reads only the shards its
  devices hold, whatever devices saved it.

  Raises:
    FileNotFoundError: no such checkpoint (naming the steps there are).
    ValueError: the saved subtree's shapes differ from `target`'s (naming
      the first leaf that does).
  """
  _, item = checkpoint_step(workdir, step)
  node = _saved_tree(item)
  for key in part.split("."):
    node = node[key]
  saved = jax.tree_util.tree_flatten_with_path(node)[0]
  wanted = jax.tree_util.tree_flatten_with_path(target)[0]
  for (path, meta), (_, want) in zip(saved, wanted):
    if tuple(meta.shape) != tuple(want.shape):
      raise ValueError(f"{item}: {part}{jax.tree_util.keystr(path)} has shape "
                       f"{tuple(meta.shape)}, expected {tuple(want.shape)}.")
  if len(saved) != len(wanted):
    raise ValueError(f"{item}: {part} has {len(saved)} arrays, expected "
                     f"{len(wanted)}.")
  tree: dict = {}
  node = tree
  keys = part.split(".")
  for key in keys[:-1]:
    node = node.setdefault(key, {})
  node[keys[-1]] = target
  restored = _partial_restore(
      item, tree, ocp.checkpoint_utils.construct_restore_args(tree))
  for key in keys:
    restored = restored[key]
  return restored


def read_player_params(workdir: str, step: int | None, player: str
                       ) -> tuple[int, Any]:
  """(step, the parameters of `player` ("agent" or "simulator") saved at
  `step` (None: the latest), as host numpy arrays): whole, its base read
  from step 0 where the checkpoint holds its adapters alone."""
  part = f"{player}.params"
  step, parts = read_parts(workdir, step, [part])
  params = parts[part]
  if step and lora.has_adapters(params) and not lora.split(params)[1]:
    _, step0 = read_parts(workdir, 0, [part])
    params = lora.join(params, lora.split(step0[part])[1])
  return step, params


def read_player_params_sharded(workdir: str, step: int | None, player: str,
                               target: Any) -> Any:
  """`read_player_params` restored straight into the layout of `target`
  (the player's parameters as ShapeDtypeStructs with shardings,
  state_layout.abstract_params), each process reading only its shards."""
  step, _ = checkpoint_step(workdir, step)
  part = f"{player}.params"
  if step and lora.has_adapters(target):
    adapters = read_sharded(workdir, step, part, lora.split(target)[0])
    base = lora.split(read_sharded(workdir, 0, part, target))[1]
    return lora.join(adapters, base)
  return read_sharded(workdir, step, part, target)


def read_state(workdir: str, step: int | None) -> tuple[int, dict[str, Any]]:
  """(step, every array of the state saved at `step` (None: the latest) in
  `workdir`, as host numpy arrays in nested dicts): both players'
  parameters and optimiser states, the pools, the rng, the step. Whatever
  devices saved it, on any host."""
  step, item = checkpoint_step(workdir, step)
  restore_args = jax.tree.map(
      lambda _: ocp.RestoreArgs(restore_type=np.ndarray), _saved_tree(item))
  return step, ocp.PyTreeCheckpointer().restore(
      item, args=ocp.args.PyTreeRestore(restore_args=restore_args))


def _saved_tree(item: epath.Path) -> dict:
  """The saved state's tree of array metadata (shape, dtype)."""
  metadata = ocp.PyTreeCheckpointer().metadata(item)
  tree = getattr(metadata, "item_metadata", metadata)
  return getattr(tree, "tree", tree)
