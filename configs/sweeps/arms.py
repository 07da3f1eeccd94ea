"""The baseline comparison: every arm of configs.default.ARMS × seeds {0, 1, 2}.

  python launch/sweep.py --sweep=configs/sweeps/arms.py --sweep_dir=runs/sweep
  python launch/sweep.py --sweep=configs/sweeps/alpha.py --sweep_dir=runs/sweep
  python -m train.report --sweep_dir=runs/sweep --out=docs/results

Every run has the demo's agent, simulator and warm-start (the same for every
arm at a given seed) and the same agent rollouts: 60 co-evolution steps of
(8·4 + 8)·10 = 400 rollouts, 24,000 in all, held-out evaluation every 10 steps.
Time on the 2-core machine when idle, one run at a time (from the demo's
timings: about 3.9 min of start-up, data, warm-start and compilation, then
0.7 s a step): about 4.6 min a run, so the 5 arms × 3 seeds take about 70 min;
with the α sweep in the same directory (6 more runs) about 97 min, and about
2 h once two more arms join ARMS.
"""

from __future__ import annotations

from configs import default
from configs.sweeps import make_sweep

SEEDS = (0, 1, 2)
# Shared by the α sweep, so that runs with the same name are the same run.
OVERRIDES = {
    "coevolve": {"num_steps": 60},
    "eval": {"every_steps": 10},
    "checkpoint_every": 20,
}


def get_config():
  return make_sweep(
      base_arg="", overrides=OVERRIDES,
      runs=[(arm, seed, {}) for seed in SEEDS for arm in default.ARMS],
      share_warmstart=True)
