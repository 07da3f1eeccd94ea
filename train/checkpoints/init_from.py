"""Starting stage 2 from another run's warm-started players.

Every arm of a sweep at one seed warm-starts identically, so one run can do
the warm-start and the others start co-evolution from its step-0 checkpoint
(`config.warmstart.init_from`). The source's config.json must agree with this
run's on every field that shapes step 0; the step-0 state and its metrics
(warm-start losses, held-out accuracy) are taken over as they are.
"""

from __future__ import annotations

import json
from typing import Any

from etils import epath
import ml_collections
import orbax.checkpoint as ocp

from configs import flatten
from train.checkpoints import checkpointing
from train.outputs import metrics_log
from train.checkpoints import state_checkpoint
from train.checkpoints import workdir as workdir_lib

# Config fields (dotted prefixes) that shape a run's step-0 state: the seed
# data, both players' architectures, the warm-start, and the pools' shapes
# and base data.
STEP0_FIELDS = (
    "seed", "task.", "data.", "warmstart.",
    "agent.model", "agent.hf_dir", "agent.model_overrides.",
    "simulator.model", "simulator.hf_dir", "simulator.model_overrides.",
    "pool.capacity", "pool.num_base", "pool.base_max_difficulty",
    "pool.generation_capacity",
)
# The agent's reward in stage 2 (exact or partial credit) does not enter the
# supervised warm-start or the held-out evaluation's exact scoring. The
# simulator's start is compared apart (`simulator_start_pending`): a run may
# move a "matched" source's simulator to its own start.
_NOT_COMPARED = ("warmstart.init_from", "data.tfds_dir", "task.reward",
                 "warmstart.simulator_start")
_SIMULATOR_START = "warmstart.simulator_start"
_START_FIELDS = ("warmstart.simulator_start_steps",
                 "warmstart.simulator_start_offsets.")
def _step0_fields(flat: dict[str, Any]) -> dict[str, Any]:
  return {k: v for k, v in flat.items()
          if k not in _NOT_COMPARED
          and any(k == p or (p.endswith(".") and k.startswith(p))
                  for p in STEP0_FIELDS)}


def step0_conflicts(config: ml_collections.ConfigDict,
                    source: epath.Path) -> list[str]:
  """Step-0 fields on which source/config.json and `config` disagree, each
  as "field: source value != this run's value"."""
  saved = workdir_lib.read_saved_config(str(source))
  if saved is None:
    raise FileNotFoundError(
        f"config.warmstart.init_from={str(source)!r}: no "
        f"{source / workdir_lib.CONFIG_FILE} (not a run directory).")
  theirs = _step0_fields(flatten(saved))
  ours = _step0_fields(flatten(json.loads(config.to_json_best_effort())))
  for field, value in workdir_lib.ADDED_FIELDS.items():
    if field in ours:
      theirs.setdefault(field, value)
  their_start, our_start = _starts(source, config)
  if their_start != our_start:
    # The source's simulator is moved here: how it would be moved is ours.
    theirs = {k: v for k, v in theirs.items() if not _is_start_field(k)}
    ours = {k: v for k, v in ours.items() if not _is_start_field(k)}
    if their_start != "matched":
      theirs[_SIMULATOR_START], ours[_SIMULATOR_START] = their_start, our_start
  return [f"{k}: {theirs.get(k)!r} != {ours.get(k)!r}"
          for k in sorted(theirs.keys() | ours.keys())
          if theirs.get(k) != ours.get(k)]


def _is_start_field(field: str) -> bool:
  return any(field == p or (p.endswith(".") and field.startswith(p))
             for p in _START_FIELDS)


def _starts(source: epath.Path, config: ml_collections.ConfigDict
            ) -> tuple[str, str]:
  """(the source's, this run's) config.warmstart.simulator_start; "matched"
  for a source run made before the field."""
  theirs = workdir_lib.read_saved_config(str(source)) or {}
  return (theirs.get("warmstart", {}).get("simulator_start", "matched"),
          config.warmstart.simulator_start)


def simulator_start_pending(config: ml_collections.ConfigDict,
                            source: epath.Path) -> bool:
  """Whether this run moves the source's "matched" simulator to its own
  config.warmstart.simulator_start (warmstart.start_simulator) after
  restoring it; step0_conflicts refuses every other disagreement."""
  their_start, our_start = _starts(source, config)
  return their_start == "matched" and our_start != "matched"


def restore_step0(config: ml_collections.ConfigDict, target: Any,
                  source: epath.Path) -> tuple[Any, dict]:
  """(state, step-0 metrics) of the run in config.warmstart.init_from.

  Args:
    target: this run's state as jax.ShapeDtypeStructs with shardings; the
      source's checkpoint is restored into that layout.
    source: config.warmstart.init_from as an absolute path or a cloud URI
      (orbax refuses to restore from a relative path).
  """
  conflicts = step0_conflicts(config, source)
  if conflicts:
    raise ValueError(
        f"config.warmstart.init_from={str(source)!r}: that run's step 0 was "
        f"made with a different config: {'; '.join(conflicts)}.")
  manager = ocp.CheckpointManager(
      source / "checkpoints",
      options=ocp.CheckpointManagerOptions(read_only=True))
  with manager:
    if 0 not in manager.all_steps():
      raise FileNotFoundError(
          f"config.warmstart.init_from={str(source)!r}: no step-0 checkpoint "
          f"in {source / 'checkpoints'} (has that run finished its "
          "warm-start?).")
    problem = checkpointing.verify(source / "checkpoints" / "0")
    if problem:
      raise checkpointing.CorruptCheckpointError(
          f"config.warmstart.init_from={str(source)!r}: its step-0 "
          f"checkpoint is damaged: {problem}.")
    state = state_checkpoint.restore(manager, 0, target)
  metrics = {}
  for record in metrics_log.read_metrics(source / metrics_log.METRICS_FILE):
    if record["step"] == 0:
      metrics.update({k: v for k, v in record.items()
                      if k not in ("step", metrics_log.NONFINITE_KEY)
                      and v is not None})
  return state, metrics
