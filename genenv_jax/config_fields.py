"""Checks of single config fields, shared by the run's validation (train/config_validation.py)
and each domain's `check_config`: each raises ValueError naming the field
(`config.<section>.<field>=<value>`) and what it allows."""

from __future__ import annotations

import math
from typing import Any, Iterable


def get(config, field: str) -> Any:
  value = config
  for part in field.split("."):
    value = value[part]
  return value


def fail(field: str, value: Any, allowed: str) -> None:
  raise ValueError(f"config.{field}={value!r}: expected {allowed}.")


def is_number(value: Any) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool)


def integer(config, field: str, low: int | None = None,
            high: int | None = None) -> None:
  value = get(config, field)
  if (not isinstance(value, int) or isinstance(value, bool)
      or (low is not None and value < low) or (high is not None and value > high)):
    fail(field, value, "an integer" + _range(low, high, False, False))


def number(config, field: str, low: float | None = None, high: float | None = None,
           open_low: bool = False, open_high: bool = False) -> None:
  value = get(config, field)
  ok = is_number(value) and math.isfinite(value)
  if ok and low is not None:
    ok = value > low if open_low else value >= low
  if ok and high is not None:
    ok = value < high if open_high else value <= high
  if not ok:
    fail(field, value, "a finite number" + _range(low, high, open_low, open_high))


def _range(low, high, open_low: bool, open_high: bool) -> str:
  if low is not None and high is not None:
    return f" in {'(' if open_low else '['}{low}, {high}{')' if open_high else ']'}"
  if low is not None:
    return f" {'>' if open_low else '>='} {low}"
  if high is not None:
    return f" {'<' if open_high else '<='} {high}"
  return ""


def choice(config, field: str, allowed: Iterable[str]) -> None:
  value = get(config, field)
  allowed = tuple(allowed)
  if value not in allowed:
    fail(field, value, f"one of {allowed}")


def boolean(config, field: str) -> None:
  value = get(config, field)
  if not isinstance(value, bool):
    fail(field, value, "True or False")


def level_weights(config, levels_field: str) -> None:
  """warmstart.agent_level_weights: 1 to <levels_field> weights >= 0, not
  all 0."""
  levels = get(config, levels_field)
  weights = tuple(config.warmstart.agent_level_weights)
  if (len(weights) > levels or not weights
      or any(not is_number(w) or w < 0 for w in weights) or sum(weights) <= 0):
    fail("warmstart.agent_level_weights", weights,
         f"1 to {levels_field}={levels} weights >= 0, not all 0")
