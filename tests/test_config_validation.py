"""train/config_validation.py: every shipped config passes; each bad value fails
naming its field, before anything is built."""

from __future__ import annotations

import math

import pytest

from configs import default, qwen_tpu, text
from train import config_validation, loop

SHIPPED = (
    [(f"default.py:{v}", lambda v=v: default.get_config(v), 8)
     for v in ["", "smoke", "live", *default.ARMS,
               *(f"{size},{a}" for size in ("smoke", "live") for a in default.ARMS)]]
    + [("default.py on 1 device", default.get_config, 1),
       ("default.py on 2 devices", default.get_config, 2),
       ("text.py", text.get_config, 8),
       ("text.py:cpu", lambda: text.get_config("cpu"), 8),
       ("text.py:api_bank", lambda: text.get_config("api_bank"), 8),
       ("text.py:api_bank_smoke", lambda: text.get_config("api_bank_smoke"), 8),
       ("qwen_tpu.py:cpu", lambda: qwen_tpu.get_config("cpu"), 8)]
    # qwen_tpu.py's sizes on the chip counts its docstring names.
    + [(f"qwen_tpu.py:{size} on {chips}", lambda s=size: qwen_tpu.get_config(s), chips)
       for size, counts in (("7b", (32, 64)), ("1.5b", (8, 16, 64)),
                            ("0.5b", (4, 8, 32)), ("7b_bfcl_multi_turn", (32, 64)),
                            ("7b_alfworld", (32, 64)))
       for chips in counts])


@pytest.mark.parametrize("name, make, devices", SHIPPED, ids=[s[0] for s in SHIPPED])
def test_every_shipped_config_passes(name, make, devices):
  config_validation.validate(make(), devices)


def _set(config, field, value):
  *sections, last = field.split(".")
  target = config
  for section in sections:
    target = target[section]
  target[last] = value


@pytest.mark.parametrize("field, value, message", [
    ("curriculum.alpha", 1.5, r"config\.curriculum\.alpha=1\.5: expected a finite "
     r"number in \[0\.0, 1\.0\]"),
    ("curriculum.alpha", -1.0, r"config\.curriculum\.alpha=-1\.0"),
    ("curriculum.alpha", math.nan, r"config\.curriculum\.alpha=nan"),
    ("curriculum.band", -0.1, r"config\.curriculum\.band=-0\.1: .*>= 0"),
    ("curriculum.beta", -1.0, r"config\.curriculum\.beta"),
    ("curriculum.reward", "alfa", r"config\.curriculum\.reward='alfa'.*'alpha'"),
    ("eval.rows_per_pass", -1, r"config\.eval\.rows_per_pass=-1: expected an "
     "integer >= 0"),
    ("coevolve.attempts", 0, r"config\.coevolve\.attempts=0: expected an integer "
     ">= 1"),
    ("coevolve.num_seeds", 0, r"config\.coevolve\.num_seeds=0"),
    ("coevolve.variations", 0, r"config\.coevolve\.variations=0"),
    ("simulator_update.method", "rwrr",
     r"config\.simulator_update\.method='rwrr': expected one of \('rwr', 'pg', "
     r"'none'\)"),
    ("coevolve.generation", "offline", r"config\.coevolve\.generation='offline'"),
    ("coevolve.sampling_layout", "fsdp", r"config\.coevolve\.sampling_layout"),
    ("coevolve.scripted_bank_per_level", 0,
     r"config\.coevolve\.scripted_bank_per_level=0"),
    ("coevolve.oracle_explore", 1.5, r"config\.coevolve\.oracle_explore=1\.5"),
    ("coevolve.level_success_ema", 0.0,
     r"config\.coevolve\.level_success_ema=0\.0"),
    ("coevolve.seed_trim", 0.5, r"config\.coevolve\.seed_trim=0\.5.*0\.5\)"),
    ("pool.keep_generated", "none", r"config\.pool\.keep_generated='none'"),
    ("agent.learning_rate", math.inf, r"config\.agent\.learning_rate=inf"),
    ("simulator.learning_rate", 0.0, r"config\.simulator\.learning_rate=0\.0: .*> 0"),
    ("warmstart.learning_rate", math.nan, r"config\.warmstart\.learning_rate=nan"),
    ("coevolve.agent_temperature", 0.0, r"config\.coevolve\.agent_temperature"),
    ("grpo.kl_estimator", "k4", r"config\.grpo\.kl_estimator='k4'"),
    ("log_every", 0, r"config\.log_every=0"),
    ("cpu_devices", -1, r"config\.cpu_devices=-1"),
    ("checkpoint_every", 3, r"config\.checkpoint_every=3: expected a multiple of "
     r"config\.log_every=2"),
    ("mesh.tensor", 3, r"config\.mesh=.*8 devices are not divisible"),
    ("mesh.model", 2, r"config\.mesh\.model=2: .*no such axis"),
    # Batches the mesh's batch axes (data x fsdp = 8 devices) cannot split:
    ("coevolve.num_seeds", 3, r"num_seeds \* coevolve\.variations = 6 rows .*"
     "data x fsdp = 8 x 1"),
    ("pool.replay_tasks", 5, r"pool\.replay_tasks\) \* coevolve\.attempts = 52 rows"),
    ("coevolve.agent_minibatches", 5, r"config\.coevolve\.agent_minibatches=5: "
     r"expected a divisor of the 48 agent attempts"),
    ("coevolve.agent_minibatches", 12, r"/ coevolve\.agent_minibatches = 4 rows"
     r".*expected a multiple of 8"),
    ("warmstart.batch_size", 12, r"warmstart\.batch_size = 12 rows"),
    # Dynamic sampling trains on K of the step's 12 task groups (4 attempts
    # each), split as the mesh's batch axes can.
    ("grpo.dynamic_sampling_groups", -1,
     r"config\.grpo\.dynamic_sampling_groups=-1: expected an integer >= 0"),
    ("grpo.dynamic_sampling_groups", 13,
     r"config\.grpo\.dynamic_sampling_groups=13: expected at most the 12 task "
     r"groups"),
    ("grpo.dynamic_sampling_groups", 3,
     r"dynamic_sampling_groups \* coevolve\.attempts / "
     r"coevolve\.agent_minibatches = \d+ rows"),
    # The smoke task has 2 levels: one weight per level at most, none < 0,
    # not all 0.
    ("warmstart.agent_level_weights", (1, 1, 1),
     r"config\.warmstart\.agent_level_weights=\(1, 1, 1\): expected 1 to "
     r"task\.max_digits=2 weights >= 0, not all 0"),
    ("warmstart.agent_level_weights", (0, 0),
     r"config\.warmstart\.agent_level_weights=\(0, 0\)"),
    ("warmstart.agent_level_weights", (2, -1),
     r"config\.warmstart\.agent_level_weights=\(2, -1\)"),
    ("pool.num_base", 257, r"config\.pool\.num_base=257: expected an integer in "
     r"\[1, 256\]"),
    ("curriculum.success_threshold", 0.0,
     r"config\.curriculum\.success_threshold=0\.0: expected a finite number in "
     r"\(0\.0, 1\.0\]"),
    ("curriculum.success_threshold", 1.5,
     r"config\.curriculum\.success_threshold=1\.5"),
    ("warmstart.simulator_lessons", "copied",
     r"config\.warmstart\.simulator_lessons='copied'"),
    # Edited lessons edit mazes only (the smoke task is arithmetic).
    ("warmstart.simulator_lessons", "edited",
     r"config\.warmstart\.simulator_lessons='edited': expected 'drawn' for "
     r"task 'arithmetic'"),
    # Greedy writing only for a simulator that is never updated.
    ("coevolve.simulator_temperature", 0.0,
     r"config\.coevolve\.simulator_temperature=0\.0: expected a finite number "
     r"> 0\.0"),
])
def test_bad_value_fails_naming_the_field(field, value, message):
  config = default.get_config("smoke")
  if field == "checkpoint_every":
    config.log_every = 2
  if field.startswith("mesh."):
    config.mesh.data = -1
  _set(config, field, value)
  with pytest.raises(ValueError, match=message):
    config_validation.validate(config, 8)


@pytest.mark.parametrize("fields, message", [
    # Per-seed p̂ gives a seed's variations one R_env: a per-seed baseline
    # leaves every advantage 0.
    (dict(method="pg", pg_baseline="seed"),
     r"pg_baseline='seed' with config\.curriculum\.per_seed=True"),
    (dict(method="pg", replay_share=0.5),
     r"config\.simulator_update\.replay_share=0\.5: expected 0 unless "
     r"config\.simulator_update\.method='rwr'"),
    (dict(method="none", replay_share=0.5),
     r"config\.simulator_update\.replay_share=0\.5.*method='rwr'"),
])
def test_simulator_update_fields_that_exclude_each_other_are_refused(
    fields, message):
  config = default.get_config("smoke")
  config.simulator_update.update(fields)
  with pytest.raises(ValueError, match=message):
    config_validation.validate(config, 8)
  # Each alone is accepted.
  for name, value in fields.items():
    alone = default.get_config("smoke")
    alone.simulator_update[name] = value
    config_validation.validate(alone, 8)


def test_pg_seed_baseline_is_accepted_with_per_task_success():
  config = default.get_config("smoke,genenv_pg")
  config.simulator_update.pg_baseline = "seed"
  config.curriculum.per_seed = False
  config_validation.validate(config, 8)


def test_greedy_writing_is_accepted_for_a_frozen_simulator():
  config = default.get_config("smoke,frozen_env")
  config.coevolve.simulator_temperature = 0.0
  config_validation.validate(config, 8)


def test_static_generation_needs_a_frozen_simulator():
  config = default.get_config("smoke,static")
  config.simulator_update.method = "rwr"
  with pytest.raises(ValueError, match="config.coevolve.generation='static'.*'rwr'"):
    config_validation.validate(config, 8)


def test_text_fields_are_checked():
  config = text.get_config("cpu")
  config.task.verifier = "regex"
  with pytest.raises(ValueError, match=r"config\.task\.verifier='regex'"):
    config_validation.validate(config, 8)


def test_driver_refuses_a_bad_config_before_building_anything(tmp_path):
  config = default.get_config("smoke")
  config.curriculum.alpha = 1.5
  workdir = tmp_path / "run"
  with pytest.raises(ValueError, match=r"config\.curriculum\.alpha=1\.5"):
    loop.train_and_evaluate(config, str(workdir))
  assert not workdir.exists()
