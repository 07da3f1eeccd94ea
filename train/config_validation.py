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

import math
from typing import Any, Iterable

from genenv_jax import (coevolve, curriculum, episodes, losses, scripted,
                        sharding)
from genenv_jax import pool as pool_lib
from genenv_jax.tasks import DOMAINS, arithmetic, bfcl_multi_turn, text_verifiers
from train import bfcl_multi_turn_data
from train import text_datasets
from train.warmstart import SIMULATOR_LESSONS, SIMULATOR_STARTS


def validate(config, num_devices: int) -> None:
  """Checks every field of `config` (configs/default.py's layout; the text domain's
  task and data sections as configs/text.py's) for a run on `num_devices` devices.

  Raises:
    ValueError: the message names the field, its value and the allowed values.
  """
  _integer(config, "seed")
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
  _integer(config, "eval.every_steps", low=1)
  _integer(config, "log_every", low=1)
  _integer(config, "checkpoint_every", low=1)
  if config.checkpoint_every % config.log_every:
    # A logged value is the mean over the steps since the last log; a resumed run
    # must start at a window's start to log the same values.
    _fail("checkpoint_every", config.checkpoint_every,
          f"a multiple of config.log_every={config.log_every}: logged metrics are "
          "means over log_every steps, and a run resumes from a checkpoint")
  _integer(config, "max_checkpoints", low=1)
  _integer(config, "profile_first_step", low=0)
  _integer(config, "max_skipped_updates", low=0)


# ----------------------------------------------------------------- sections


def _mesh(config, num_devices: int) -> tuple[int, int, int]:
  for axis, size in dict(config.mesh).items():
    if axis not in sharding.MESH_AXES:
      _fail(f"mesh.{axis}", size, f"no such axis; the axes are {sharding.MESH_AXES}")
    _integer(config, f"mesh.{axis}")
  try:
    return sharding.mesh_dims(dict(config.mesh), num_devices)
  except ValueError as e:
    raise ValueError(f"config.mesh={dict(config.mesh)}: {e}") from e


def _task_and_data(config) -> None:
  _choice(config, "task.name", DOMAINS)
  if config.task.name == "arithmetic":
    _integer(config, "task.max_digits", low=1, high=arithmetic.MAX_SUPPORTED_DIGITS)
    _choice(config, "task.reward", arithmetic.REWARDS)
    _integer(config, "data.num_train", low=1)
    _integer(config, "data.num_test_per_level", low=1)
    _level_weights(config, "task.max_digits")
  elif config.task.name == "maze":
    _integer(config, "task.size", low=2, high=16)
    _integer(config, "task.level_width", low=1)
    _integer(config, "task.levels", low=1)
    _integer(config, "task.max_turns",
             low=config.task.level_width * config.task.levels)
    _boolean(config, "task.summary_signals")
    _integer(config, "data.num_train", low=1)
    _integer(config, "data.num_test_per_level", low=1)
    _choice(config, "episodes.reward", episodes.EPISODE_REWARDS)
    _choice(config, "episodes.truncated", episodes.TRUNCATED)
    _integer(config, "eval.samples", low=0)
    _level_weights(config, "task.levels")
  elif config.task.name == "bfcl_multi_turn":
    for field in ("max_prompt_tokens", "max_written_tokens", "max_turns",
                  "max_action_tokens", "max_observation_tokens", "calls_per_level",
                  "max_difficulty"):
      _integer(config, f"task.{field}", low=1)
    _choice(config, "task.function_docs", bfcl_multi_turn.FUNCTION_DOCS)
    categories = tuple(config.data.categories)
    if not categories or not set(categories) <= set(bfcl_multi_turn_data.CATEGORIES):
      _fail("data.categories", categories,
            f"some of {bfcl_multi_turn_data.CATEGORIES}")
    _integer(config, "data.max_seed_turns", low=0)
    _number(config, "data.test_fraction", low=0.0, high=1.0, open_low=True,
            open_high=True)
    _choice(config, "episodes.reward", episodes.EPISODE_REWARDS)
    _choice(config, "episodes.truncated", episodes.TRUNCATED)
  else:
    _choice(config, "task.verifier", text_verifiers.VERIFIERS)
    for field in ("max_task_tokens", "max_answer_tokens", "max_written_tokens",
                  "max_difficulty"):
      _integer(config, f"task.{field}", low=1)
    _choice(config, "data.format", text_datasets.FORMATS)
    _number(config, "data.test_fraction", low=0.0, high=1.0, open_high=True)
  _integer(config, "data.seed")


def _level_weights(config, levels_field: str) -> None:
  """warmstart.agent_level_weights: 1 to <levels_field> weights >= 0, not
  all 0."""
  levels = _get(config, levels_field)
  weights = tuple(config.warmstart.agent_level_weights)
  if (len(weights) > levels or not weights
      or any(not _is_number(w) or w < 0 for w in weights) or sum(weights) <= 0):
    _fail("warmstart.agent_level_weights", weights,
          f"1 to {levels_field}={levels} weights >= 0, not all 0")


def _player(config, player: str) -> None:
  _number(config, f"{player}.learning_rate", low=0.0, open_low=True)
  _number(config, f"{player}.weight_decay", low=0.0)
  _number(config, f"{player}.b1", low=0.0, high=1.0, open_high=True)
  _number(config, f"{player}.b2", low=0.0, high=1.0, open_high=True)
  _number(config, f"{player}.grad_clip", low=0.0, open_low=True)


def _warmstart(config, dims) -> None:
  ws = config.warmstart
  _integer(config, "warmstart.agent_steps", low=0)
  _integer(config, "warmstart.simulator_steps", low=0)
  _integer(config, "warmstart.batch_size", low=1)
  _number(config, "warmstart.learning_rate", low=0.0, open_low=True)
  _integer(config, "warmstart.simulator_difficulty_step")
  _integer(config, "warmstart.checkpoint_every", low=0)
  _choice(config, "warmstart.simulator_start", SIMULATOR_STARTS)
  _choice(config, "warmstart.simulator_lessons", SIMULATOR_LESSONS)
  if ws.simulator_lessons == "edited":
    if config.task.name != "maze":
      _fail("warmstart.simulator_lessons", ws.simulator_lessons,
            f"'drawn' for task {config.task.name!r} ('edited' edits mazes)")
    if ws.simulator_difficulty_step < 0:
      _fail("warmstart.simulator_lessons", ws.simulator_lessons,
            "'drawn' with warmstart.simulator_difficulty_step < 0 (targets "
            "independent of their seed are not edits of it)")
  _integer(config, "warmstart.simulator_start_steps", low=0)
  for name in ("hard", "easy"):
    _integer(config, f"warmstart.simulator_start_offsets.{name}")
  if ws.agent_steps or ws.simulator_steps:
    _divides_batch_axes(config, "warmstart.batch_size", ws.batch_size, dims)


def _coevolve(config, dims) -> None:
  cc = config.coevolve
  _integer(config, "coevolve.num_steps", low=0)
  for field in ("num_seeds", "variations", "attempts", "agent_epochs",
                "agent_minibatches"):
    _integer(config, f"coevolve.{field}", low=1)
  if "logprob_chunk_size" in cc:
    _integer(config, "coevolve.logprob_chunk_size", low=1)
  _integer(config, "coevolve.decode_windows", low=1)
  _number(config, "coevolve.agent_temperature", low=0.0, open_low=True)
  simulator_trained = config.simulator_update.method != "none"
  _number(config, "coevolve.simulator_temperature", low=0.0,
          open_low=simulator_trained)
  _choice(config, "coevolve.generation", coevolve.GENERATIONS)
  if cc.generation == "static" and config.simulator_update.method != "none":
    _fail("coevolve.generation", cc.generation,
          "'static' only with config.simulator_update.method='none' (its tasks come "
          "from the frozen warm-started simulator), not "
          f"{config.simulator_update.method!r}")
  if (cc.generation in scripted.SCRIPTED_GENERATIONS
      and config.simulator_update.method != "none"):
    _fail("coevolve.generation", cc.generation,
          f"{cc.generation!r} only with config.simulator_update.method='none' "
          "(scripted tasks are no simulator's generations, so there is "
          f"nothing to train it on), not {config.simulator_update.method!r}")
  _integer(config, "coevolve.rl_seed", low=0)
  _integer(config, "coevolve.scripted_bank_per_level", low=1)
  _number(config, "coevolve.oracle_explore", low=0.0, high=1.0)
  _number(config, "coevolve.level_success_ema", low=0.0, high=1.0,
          open_low=True)
  _choice(config, "coevolve.sampling_layout", coevolve.SAMPLING_LAYOUTS)
  _number(config, "coevolve.seed_trim", low=0.0, high=0.5, open_high=True)
  _choice(config, "coevolve.seed_selection", pool_lib.SELECTIONS)
  if cc.seed_trim and cc.seed_selection != "uniform":
    _fail("coevolve.seed_trim", cc.seed_trim,
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
    _fail("coevolve.agent_minibatches", cc.agent_minibatches,
          f"a divisor of the {attempts} agent attempts per step ({attempts_name})")
  _divides_batch_axes(config, f"{attempts_name} / coevolve.agent_minibatches",
                      attempts // cc.agent_minibatches, dims)


def _curriculum(config) -> None:
  _number(config, "curriculum.alpha", low=0.0, high=1.0)
  _number(config, "curriculum.beta", low=0.0)
  _number(config, "curriculum.band", low=0.0)
  _number(config, "curriculum.rwr_temperature", low=0.0, open_low=True)
  _choice(config, "curriculum.reward", curriculum.REWARDS)
  _boolean(config, "curriculum.per_seed")
  _choice(config, "curriculum.keep", curriculum.KEEPS)
  _number(config, "curriculum.success_threshold", low=0.0, high=1.0, open_low=True)


def _grpo(config) -> None:
  _number(config, "grpo.clip_low", low=0.0)
  _number(config, "grpo.clip_high", low=0.0)
  _number(config, "grpo.kl_coef", low=0.0)
  _choice(config, "grpo.kl_estimator", losses.KL_ESTIMATORS)
  _number(config, "grpo.entropy_coef")
  _choice(config, "grpo.aggregation", losses.AGGREGATIONS)
  _boolean(config, "grpo.normalize_std")
  _choice(config, "grpo.pg_normalizer", losses.PG_NORMALIZERS)


def _simulator_update(config) -> None:
  _choice(config, "simulator_update.method", coevolve.SIMULATOR_UPDATES)
  _number(config, "simulator_update.kl_coef", low=0.0)
  _choice(config, "simulator_update.kl_estimator", losses.KL_ESTIMATORS)
  _number(config, "simulator_update.kl_cap")
  _choice(config, "simulator_update.pg_baseline", losses.PG_BASELINES)
  _boolean(config, "simulator_update.pg_normalize_std")
  _choice(config, "simulator_update.pg_normalizer", losses.PG_NORMALIZERS)
  _number(config, "simulator_update.replay_share", low=0.0, high=1.0,
          open_high=True)
  if config.simulator_update.method == "pg":
    losses.check_pg_baseline(config.simulator_update.pg_baseline,
                             config.curriculum.per_seed)
  if config.simulator_update.replay_share and (
      config.simulator_update.method != "rwr"):
    _fail("simulator_update.replay_share", config.simulator_update.replay_share,
          "0 unless config.simulator_update.method='rwr' (it replays earlier "
          "generations into the RWR batch)")


def _pool(config) -> None:
  pool = config.pool
  _integer(config, "pool.capacity", low=1)
  _integer(config, "pool.num_base", low=1, high=pool.capacity)
  _integer(config, "pool.base_max_difficulty", low=1)
  _integer(config, "pool.replay_tasks", low=0)
  _choice(config, "pool.replay_selection", pool_lib.SELECTIONS)
  _number(config, "pool.learnability_floor", low=0.0, open_low=True)
  _integer(config, "pool.generation_capacity", low=1)
  _choice(config, "pool.keep_generated", coevolve.KEEP_GENERATED)
  _choice(config, "pool.admit", coevolve.ADMIT_GENERATED)


# ------------------------------------------------------------------ checks


def _get(config, field: str) -> Any:
  value = config
  for part in field.split("."):
    value = value[part]
  return value


def _fail(field: str, value: Any, allowed: str) -> None:
  raise ValueError(f"config.{field}={value!r}: expected {allowed}.")


def _is_number(value: Any) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool)


def _integer(config, field: str, low: int | None = None,
             high: int | None = None) -> None:
  value = _get(config, field)
  if (not isinstance(value, int) or isinstance(value, bool)
      or (low is not None and value < low) or (high is not None and value > high)):
    _fail(field, value, "an integer" + _range(low, high, False, False))


def _number(config, field: str, low: float | None = None, high: float | None = None,
            open_low: bool = False, open_high: bool = False) -> None:
  value = _get(config, field)
  ok = _is_number(value) and math.isfinite(value)
  if ok and low is not None:
    ok = value > low if open_low else value >= low
  if ok and high is not None:
    ok = value < high if open_high else value <= high
  if not ok:
    _fail(field, value, "a finite number" + _range(low, high, open_low, open_high))


def _range(low, high, open_low: bool, open_high: bool) -> str:
  if low is not None and high is not None:
    return f" in {'(' if open_low else '['}{low}, {high}{')' if open_high else ']'}"
  if low is not None:
    return f" {'>' if open_low else '>='} {low}"
  if high is not None:
    return f" {'<' if open_high else '<='} {high}"
  return ""


def _choice(config, field: str, allowed: Iterable[str]) -> None:
  value = _get(config, field)
  allowed = tuple(allowed)
  if value not in allowed:
    _fail(field, value, f"one of {allowed}")


def _boolean(config, field: str) -> None:
  value = _get(config, field)
  if not isinstance(value, bool):
    _fail(field, value, "True or False")


def _divides_batch_axes(config, name: str, size: int, dims) -> None:
  """`size` rows split over the batch axes (data x fsdp) must divide evenly."""
  data, fsdp, _ = dims
  if size % (data * fsdp):
    raise ValueError(
        f"config: {name} = {size} rows are split over the mesh's batch axes "
        f"data x fsdp = {data} x {fsdp} (config.mesh={dict(config.mesh)}); expected "
        f"a multiple of {data * fsdp}.")
