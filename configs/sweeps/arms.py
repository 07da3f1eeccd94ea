"""The baseline comparison: every arm of configs.default.ARMS × seeds {0, 1, 2}.

  python launch/sweep.py --sweep=configs/sweeps/arms.py --sweep_dir=runs/sweep
  python launch/sweep.py --sweep=configs/sweeps/alpha.py --sweep_dir=runs/sweep
  python -m train.tools.sweep_report --sweep_dir=runs/sweep --out=docs/results

Every run has the demo's agent, simulator and warm-start (one shared
warm-start per seed: every arm at a seed starts from the same players) and the
same agent rollouts: 60 co-evolution steps of (8·4 + 8)·10 = 400 rollouts,
24,000 in all, held-out evaluation every 10 steps. Measured on the 2-core
machine with --parallel=2: the 3 warm-starts 16.5 min, the 21 runs 32.5 min;
with the α sweep's 6 more runs (9 min) about 58 min in all.
"""

from __future__ import annotations

from configs import default
from configs.sweeps import make_sweep

SEEDS = (0, 1, 2)
# Shared by the α sweep, so that runs with the same name are the same run.
OVERRIDES = {
    # The agent settings the sweep ran with (configs/default.py's before
    # the pre-registered pilot).
    "agent": {"learning_rate": 3e-5},
    "grpo": {"kl_coef": 0.001},
    "coevolve": {"num_steps": 60},
    "eval": {"every_steps": 10},
    "checkpoint_every": 20,
}


def get_config():
  return make_sweep(
      base_arg="", overrides=OVERRIDES,
      runs=[(arm, seed, {}) for seed in SEEDS for arm in default.ARMS],
      share_warmstart=True)
