"""Every field of a run's config checked at once, before anything is built or compiled.

`validate(config, num_devices)` raises ValueError naming the first bad field
(`config.<section>.<field>=<value>`) and what it allows. It covers ranges (finite
values in their intervals, positive counts), names chosen from a set, the relations
between fields, and the batch sizes split over the mesh's batch axes (data x fsdp,
sharding.DEFAULT_RULES' "batch"): the simulator's M = num_seeds * variations written
tasks, the agent's N = (M + pool.replay_tasks) * attempts attempts and each of its
N / agent_minibatches GRPO minibatches, and the warm-start batch.
"""

from __future__ import annotations

from genenv_jax import (coevolve, curriculum, config_fields as fields, losses,
                        scripted, sharding)
from genenv_jax import pool as pool_lib
from genenv_jax.domains import DOMAINS
from models.config import PROJECTIONS
from train.warmstart import SIMULATOR_LESSONS, SIMULATOR_STARTS


def validate(config, num_devices: int) -> None:
  """Checks every field of `config` (configs/default.py's layout; the text domain's
  task and data sections as configs/text.py's) for a run on `num_devices` devices.

  Raises:
    ValueError: the message names the field, its value and the allowed values.
  """
  fields.integer(config, "seed")
  dims = _mesh(config, num_devices)
  _task_and_data(config)
  for player in ("agent", "simulator"):
    _player(config, player)
  _warmstart(config, dims)
  _coevolve(config, dims)
  _curriculum(config)
  _grpo(config)
  _simulator_update(config)
  _pool(config)
  fields.integer(config, "eval.every_steps", low=1)
  if "rows_per_pass" in config.eval:
    fields.integer(config, "eval.rows_per_pass", low=0)
  fields.integer(config, "cpu_devices", low=0)
  fields.integer(config, "log_every", low=1)
  fields.integer(config, "checkpoint_every", low=1)
  if config.checkpoint_every % config.log_every:
    # A logged value is the mean over the steps since the last log; a resumed run
    # must start at a window's start to log the same values.
    fields.fail("checkpoint_every", config.checkpoint_every,
                f"a multiple of config.log_every={config.log_every}: logged metrics are "
                "means over log_every steps, and a run resumes from a checkpoint")
  fields.integer(config, "max_checkpoints", low=1)
  fields.integer(config, "profile_first_step", low=0)
  fields.integer(config, "max_skipped_updates", low=0)


# ----------------------------------------------------------------- sections


def _mesh(config, num_devices: int) -> tuple[int, int, int]:
  for axis, size in dict(config.mesh).items():
    if axis not in sharding.MESH_AXES:
      fields.fail(f"mesh.{axis}", size, f"no such axis; the axes are {sharding.MESH_AXES}")
    fields.integer(config, f"mesh.{axis}")
  try:
    return sharding.mesh_dims(dict(config.mesh), num_devices)
  except ValueError as e:
    raise ValueError(f"config.mesh={dict(config.mesh)}: {e}") from e


def _task_and_data(config) -> None:
  fields.choice(config, "task.name", DOMAINS)
  DOMAINS[config.task.name].domain.check_config(config)
  fields.integer(config, "data.seed")


def _player(config, player: str) -> None:
  fields.number(config, f"{player}.learning_rate", low=0.0, open_low=True)
  fields.number(config, f"{player}.weight_decay", low=0.0)
  fields.number(config, f"{player}.b1", low=0.0, high=1.0, open_high=True)
  fields.number(config, f"{player}.b2", low=0.0, high=1.0, open_high=True)
  fields.number(config, f"{player}.grad_clip", low=0.0, open_low=True)
  fields.integer(config, f"{player}.lora.rank", low=0)
  fields.number(config, f"{player}.lora.alpha", low=0.0, open_low=True)
  targets = config[player].lora.targets
  names = [t.strip() for t in str(targets).split(",") if t.strip()]
  if not names or any(t not in PROJECTIONS for t in names):
    fields.fail(f"{player}.lora.targets", targets,
                f"comma-separated names from {PROJECTIONS}")


def _warmstart(config, dims) -> None:
  ws = config.warmstart
  fields.integer(config, "warmstart.agent_steps", low=0)
  fields.integer(config, "warmstart.simulator_steps", low=0)
  fields.integer(config, "warmstart.batch_size", low=1)
  fields.number(config, "warmstart.learning_rate", low=0.0, open_low=True)
  fields.integer(config, "warmstart.simulator_difficulty_step")
  fields.integer(config, "warmstart.checkpoint_every", low=0)
  fields.choice(config, "warmstart.simulator_start", SIMULATOR_STARTS)
  fields.choice(config, "warmstart.simulator_lessons", SIMULATOR_LESSONS)
  if ws.simulator_lessons == "edited":
    if DOMAINS[config.task.name].edit_variations is None:
      fields.fail("warmstart.simulator_lessons", ws.simulator_lessons,
                  f"'drawn' for task {config.task.name!r} (its domain does not "
                  "edit seeds)")
    if ws.simulator_difficulty_step < 0:
      fields.fail("warmstart.simulator_lessons", ws.simulator_lessons,
                  "'drawn' with warmstart.simulator_difficulty_step < 0 (targets "
                  "independent of their seed are not edits of it)")
  fields.integer(config, "warmstart.simulator_start_steps", low=0)
  for name in ("hard", "easy"):
    fields.integer(config, f"warmstart.simulator_start_offsets.{name}")
  if ws.agent_steps or ws.simulator_steps:
    _divides_batch_axes(config, "warmstart.batch_size", ws.batch_size, dims)


def _coevolve(config, dims) -> None:
  cc = config.coevolve
  fields.integer(config, "coevolve.num_steps", low=0)
  for field in ("num_seeds", "variations", "attempts", "agent_epochs",
                "agent_minibatches"):
    fields.integer(config, f"coevolve.{field}", low=1)
  if "logprob_chunk_size" in cc:
    fields.integer(config, "coevolve.logprob_chunk_size", low=1)
  fields.integer(config, "coevolve.decode_windows", low=1)
  fields.number(config, "coevolve.agent_temperature", low=0.0, open_low=True)
  simulator_trained = config.simulator_update.method != "none"
  fields.number(config, "coevolve.simulator_temperature", low=0.0,
                open_low=simulator_trained)
  fields.choice(config, "coevolve.generation", coevolve.GENERATIONS)
  if cc.generation == "static" and config.simulator_update.method != "none":
    fields.fail("coevolve.generation", cc.generation,
                "'static' only with config.simulator_update.method='none' (its tasks come "
                "from the frozen warm-started simulator), not "
                f"{config.simulator_update.method!r}")
  if (cc.generation in scripted.SCRIPTED_GENERATIONS
      and config.simulator_update.method != "none"):
    fields.fail("coevolve.generation", cc.generation,
                f"{cc.generation!r} only with config.simulator_update.method='none' "
                "(scripted tasks are no simulator's generations, so there is "
                f"nothing to train it on), not {config.simulator_update.method!r}")
  fields.integer(config, "coevolve.rl_seed", low=0)
  fields.integer(config, "coevolve.scripted_bank_per_level", low=1)
  fields.number(config, "coevolve.oracle_explore", low=0.0, high=1.0)
  fields.number(config, "coevolve.level_success_ema", low=0.0, high=1.0,
                open_low=True)
  fields.choice(config, "coevolve.sampling_layout", coevolve.SAMPLING_LAYOUTS)
  fields.number(config, "coevolve.seed_trim", low=0.0, high=0.5, open_high=True)
  fields.choice(config, "coevolve.seed_selection", pool_lib.SELECTIONS)
  fields.choice(config, "coevolve.seed_level_estimate",
                coevolve.SEED_LEVEL_ESTIMATES)
  if cc.seed_trim and cc.seed_selection != "uniform":
    fields.fail("coevolve.seed_trim", cc.seed_trim,
                "0 with config.coevolve.seed_selection="
                f"{cc.seed_selection!r} (the trim is a rule of uniform seeds)")
  written = cc.num_seeds * cc.variations
  _divides_batch_axes(config, "coevolve.num_seeds * coevolve.variations", written,
                      dims)
  replay = config.pool.replay_tasks
  attempts = (written + replay) * cc.attempts
  attempts_name = ("(coevolve.num_seeds * coevolve.variations + pool.replay_tasks)"
                   " * coevolve.attempts")
  _divides_batch_axes(config, attempts_name, attempts, dims)
  if attempts % cc.agent_minibatches:
    fields.fail("coevolve.agent_minibatches", cc.agent_minibatches,
                f"a divisor of the {attempts} agent attempts per step ({attempts_name})")
  _divides_batch_axes(config, f"{attempts_name} / coevolve.agent_minibatches",
                      attempts // cc.agent_minibatches, dims)
  fields.integer(config, "grpo.dynamic_sampling_groups", low=0)
  kept_groups = config.grpo.dynamic_sampling_groups
  if kept_groups:  # the update's batch: K groups of attempts, not all of them
    if kept_groups > written + replay:
      fields.fail("grpo.dynamic_sampling_groups", kept_groups,
                  f"at most the {written + replay} task groups a step samples "
                  "(coevolve.num_seeds * coevolve.variations + pool.replay_tasks)")
    kept = kept_groups * cc.attempts
    kept_name = "grpo.dynamic_sampling_groups * coevolve.attempts"
    if kept % cc.agent_minibatches:
      fields.fail("coevolve.agent_minibatches", cc.agent_minibatches,
                  f"a divisor of the {kept} attempts the update trains on "
                  f"({kept_name})")
    _divides_batch_axes(config, f"{kept_name} / coevolve.agent_minibatches",
                        kept // cc.agent_minibatches, dims)


def _curriculum(config) -> None:
  fields.number(config, "curriculum.alpha", low=0.0, high=1.0)
  fields.number(config, "curriculum.beta", low=0.0)
  fields.number(config, "curriculum.band", low=0.0)
  fields.number(config, "curriculum.rwr_temperature", low=0.0, open_low=True)
  fields.choice(config, "curriculum.reward", curriculum.REWARDS)
  fields.number(config, "curriculum.repetition_penalty", low=0.0)
  fields.number(config, "curriculum.repetition_similarity", low=0.0, high=1.0,
                open_low=True)
  fields.boolean(config, "curriculum.per_seed")
  fields.choice(config, "curriculum.keep", curriculum.KEEPS)
  fields.number(config, "curriculum.success_threshold", low=0.0, high=1.0, open_low=True)


def _grpo(config) -> None:
  fields.number(config, "grpo.clip_low", low=0.0)
  fields.number(config, "grpo.clip_high", low=0.0)
  fields.number(config, "grpo.kl_coef", low=0.0)
  fields.choice(config, "grpo.kl_estimator", losses.KL_ESTIMATORS)
  fields.number(config, "grpo.entropy_coef")
  fields.choice(config, "grpo.aggregation", losses.AGGREGATIONS)
  fields.boolean(config, "grpo.normalize_std")
  fields.choice(config, "grpo.pg_normalizer", losses.PG_NORMALIZERS)


def _simulator_update(config) -> None:
  fields.choice(config, "simulator_update.method", coevolve.SIMULATOR_UPDATES)
  fields.number(config, "simulator_update.kl_coef", low=0.0)
  fields.choice(config, "simulator_update.kl_estimator", losses.KL_ESTIMATORS)
  fields.number(config, "simulator_update.kl_cap")
  fields.choice(config, "simulator_update.pg_baseline", losses.PG_BASELINES)
  fields.boolean(config, "simulator_update.pg_normalize_std")
  fields.choice(config, "simulator_update.pg_normalizer", losses.PG_NORMALIZERS)
  fields.number(config, "simulator_update.replay_share", low=0.0, high=1.0,
                open_high=True)
  if config.simulator_update.method == "pg":
    losses.check_pg_baseline(config.simulator_update.pg_baseline,
                             config.curriculum.per_seed)
  if config.simulator_update.replay_share and (
      config.simulator_update.method != "rwr"):
    fields.fail("simulator_update.replay_share", config.simulator_update.replay_share,
                "0 unless config.simulator_update.method='rwr' (it replays earlier "
                "generations into the RWR batch)")


def _pool(config) -> None:
  pool = config.pool
  fields.integer(config, "pool.capacity", low=1)
  fields.integer(config, "pool.num_base", low=1, high=pool.capacity)
  fields.integer(config, "pool.base_max_difficulty", low=1)
  fields.integer(config, "pool.replay_tasks", low=0)
  fields.choice(config, "pool.replay_selection", pool_lib.SELECTIONS)
  fields.number(config, "pool.learnability_floor", low=0.0, open_low=True)
  fields.integer(config, "pool.generation_capacity", low=1)
  fields.choice(config, "pool.keep_generated", coevolve.KEEP_GENERATED)
  fields.choice(config, "pool.admit", coevolve.ADMIT_GENERATED)


# ------------------------------------------------------------------ checks


def _divides_batch_axes(config, name: str, size: int, dims) -> None:
  """`size` rows split over the batch axes (data x fsdp) must divide evenly."""
  data, fsdp, _ = dims
  if size % (data * fsdp):
    raise ValueError(
        f"config: {name} = {size} rows are split over the mesh's batch axes "
        f"data x fsdp = {data} x {fsdp} (config.mesh={dict(config.mesh)}); expected "
        f"a multiple of {data * fsdp}.")
