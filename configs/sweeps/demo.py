"""The demo itself across seeds: genenv at α ∈ {0.5, 0.3} × seeds {0, 1, 2},
each run exactly `configs/default.py` (240 steps) but for α and the seed.

  python launch/sweep.py --sweep=configs/sweeps/demo.py --sweep_dir=runs/demo_sweep --parallel=2
  python -m train.tools.sweep_report --sweep_dir=runs/demo_sweep --out=runs/demo_sweep/report

Seed 0 at α = 0.5 is `./launch/local.sh`'s run. The report's dynamics table gives, per run, what the demo is judged
by: where the success rate starts, how much of the second half it spends in the α band, whether the simulator's
difficulty rises, and the agent's held-out accuracy on the harder levels before and after.
"""

from __future__ import annotations

from configs.sweeps import make_sweep

ALPHAS = (0.5, 0.3)
SEEDS = (0, 1, 2)


def get_config():
  return make_sweep(
      base_arg="", overrides={},
      runs=[("genenv", seed, {"curriculum": {"alpha": alpha}})
            for seed in SEEDS for alpha in ALPHAS],
      share_warmstart=True)
