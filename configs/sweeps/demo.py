"""The demos across seeds: `./launch/local.sh` (configs/default.py,
arithmetic), configs/maze.py and configs/chat.py, each exactly as a user runs it (its own
warm-start) at seeds 0, 1 and 2 (`--config.seed`), the maze's frozen
simulator (arm frozen_env) and the chat demo's frozen simulator and uniform
sampling beside them at the same seeds, and the table of each
seed's figures with their range:

  python launch/sweep.py --sweep=configs/sweeps/demo.py --sweep_dir=runs/demo_sweep
  python -m train.tools.sweep_report --sweep_dir=runs/demo_sweep --out=runs/demo_sweep/report

`--sweep=configs/sweeps/demo.py:arithmetic`, `:maze` or `:chat` runs one
domain's runs only. The report's "Seed by seed, and the range" table is what
docs/demo.md and the README quote: per run, the share of second-half log
windows in the α band, the frontier levels' held-out tasks fixed / broken
against the step-0 agent, the paired change in sampled success there, and the
wall time; per arm, the range over the seeds and the frontier counts pooled
over them. Other seeds: `--config.seed=N` on either demo's command.
"""

from __future__ import annotations

from configs.sweeps import make_sweep

SEEDS = (0, 1, 2)
# domain: (its config file, "" for the sweep's base configs/default.py; arms).
DEMOS = {
    "arithmetic": ("", ("genenv",)),
    # The frozen simulator beside the maze's: what the simulator's training
    # adds to the curriculum its seed selection already makes.
    "maze": ("configs/maze.py", ("genenv", "frozen_env")),
    # The chat-model demo (SmolLM2-135M-Instruct as both players) with both
    # controls: the frozen simulator and uniform task sampling.
    "chat": ("configs/chat.py", ("genenv", "frozen_env", "uniform")),
}


def get_config(arg: str = ""):
  """arg: "" (both domains), or one name of DEMOS."""
  if arg and arg not in DEMOS:
    raise ValueError(f"configs/sweeps/demo.py:{arg}: the domain is one of "
                     f"{sorted(DEMOS)} (or none for both).")
  domains = [arg] if arg else list(DEMOS)
  return make_sweep(
      base_arg="", overrides={},
      runs=[(arm, seed, {}, DEMOS[domain][0])
            for domain in domains for seed in SEEDS for arm in DEMOS[domain][1]])
