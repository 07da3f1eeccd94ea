"""Both demos across seeds: `./launch/local.sh` (configs/default.py,
arithmetic) and configs/maze.py, each exactly as a user runs it (its own
warm-start) at seeds 0, 1 and 2 (`--config.seed`), and the table of each
seed's figures with their range:

  python launch/sweep.py --sweep=configs/sweeps/demo.py --sweep_dir=runs/demo_sweep
  python -m train.tools.sweep_report --sweep_dir=runs/demo_sweep --out=runs/demo_sweep/report

The report's "Seed by seed, and the range" table is what docs/demo.md and the
README quote: per run, the share of second-half log windows in the α band, the
frontier levels' held-out tasks fixed / broken against the step-0 agent, the
paired change in sampled success there, and the wall time; per domain, the
range over the seeds and the frontier counts pooled over them. Other seeds:
`--config.seed=N` on either demo's command.
"""

from __future__ import annotations

from configs.sweeps import make_sweep

SEEDS = (0, 1, 2)
DEMOS = ("configs/default.py", "configs/maze.py")


def get_config():
  return make_sweep(
      base_arg="", overrides={},
      runs=[("genenv", seed, {}, "" if demo == "configs/default.py" else demo)
            for demo in DEMOS for seed in SEEDS])
