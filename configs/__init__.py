"""Run configs (default.py, text.py, qwen_tpu.py) and sweep files (sweeps/)."""

from __future__ import annotations

from typing import Any, Mapping

import ml_collections


def flatten(nested: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
  """{"a": {"b": 1}} -> {"a.b": 1}: the dotted field names of leaf values."""
  flat = {}
  for key, value in nested.items():
    if isinstance(value, (Mapping, ml_collections.ConfigDict)):
      flat.update(flatten(value, f"{prefix}{key}."))
    else:
      flat[f"{prefix}{key}"] = value
  return flat
