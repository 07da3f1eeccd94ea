"""The α sweep: the full method (genenv) at α ∈ {0.3, 0.5, 0.7} × seeds {0, 1, 2}.

  python launch/sweep.py --sweep=configs/sweeps/alpha.py --sweep_dir=runs/sweep
  python -m train.tools.sweep_report --sweep_dir=runs/sweep --out=docs/results

Runs are sized as in configs/sweeps/arms.py (same overrides and seeds), so in
the same sweep directory the α = 0.5 runs are the arms sweep's genenv runs and
are not run twice, and the warm-starts are shared too. Measured on the 2-core
machine with --parallel=2: 9 min for the 6 runs beyond the arms sweep.
"""

from __future__ import annotations

from configs.sweeps import arms
from configs.sweeps import make_sweep

ALPHAS = (0.3, 0.5, 0.7)


def get_config():
  return make_sweep(
      base_arg="", overrides=arms.OVERRIDES,
      runs=[("genenv", seed, {"curriculum": {"alpha": alpha}})
            for seed in arms.SEEDS for alpha in ALPHAS],
      share_warmstart=True)
