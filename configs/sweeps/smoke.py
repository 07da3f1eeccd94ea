"""A tiny sweep for tests: the smoke config, 2 arms × 2 seeds (seconds a run).

  python launch/sweep.py --sweep=configs/sweeps/smoke.py --sweep_dir=/tmp/sweep_smoke
  python -m train.tools.sweep_report --sweep_dir=/tmp/sweep_smoke --out=/tmp/sweep_smoke/report
"""

from __future__ import annotations

from configs.sweeps import make_sweep

ARMS = ("genenv", "frozen_env")
SEEDS = (0, 1)


def get_config():
  return make_sweep(
      base_arg="smoke", overrides={},
      runs=[(arm, seed, {}) for seed in SEEDS for arm in ARMS])
