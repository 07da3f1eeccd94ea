"""Does a trained simulator teach better? Every arm, from a simulator that
starts away from α, at equal agent rollouts.

  python launch/sweep.py --sweep=configs/sweeps/claim.py --sweep_dir=runs/claim --parallel=2
  python -m train.tools.sweep_report --sweep_dir=runs/claim --out=docs/results

Conditions (config.warmstart.simulator_start): "hard", a simulator moved to
write tasks two levels above its seed's, which the warm-started agent rarely
solves (the paper starts at success 0.14), and "easy", one level below, which
it solves almost always. Only away from α can a trained simulator differ from
a frozen one. Arms under each condition: genenv and frozen_env × seeds 0-4,
static, reference_code, uncertainty, learnability, genenv_pg and
genenv_replay × seeds 0-2; and, under "hard", genenv at α ∈ {0.3, 0.7} ×
seeds 0-2 (with α = 0.5 above: the α sweep). 62 runs. Every run has the
demo's players, warm-start and batch ((8·4 + 8)·10 = 400 agent rollouts a
step) for 80 steps: 32,000 rollouts, held-out evaluation every 20 steps.
One warm-start per seed (5) is shared by every run of that seed, and one
moved simulator per seed and condition (10, 200 lessons each) by every run
of that seed and condition.

Estimate, for this 2-core machine alone with --parallel=2, from the arms
sweep's measurement (configs/sweeps/arms.py: 21 runs of 60 demo steps in
32.5 min, i.e. 3.1 s a step per process with two at a time, evaluation every
10 steps included; a warm-start 11 min per process): 62 runs × 80 steps ×
3.1 s / 2 = 128 min; 5 warm-starts × 11 min / 2 = 27.5 min; 10 moved
simulators (200 of a warm-start's 1,400 lessons each) × 1.6 min / 2 = 8 min;
about 2 h 45 min in all. `claim.py:pilot` (smoke players, genenv and
genenv_replay × seed 0 × both conditions) checks the whole path in minutes.
"""

from __future__ import annotations

from configs.sweeps import make_sweep

CONDITIONS = ("hard", "easy")
ARMS = ("genenv", "frozen_env", "static", "reference_code", "uncertainty",
        "learnability", "genenv_pg", "genenv_replay")
SEEDS = {"genenv": (0, 1, 2, 3, 4), "frozen_env": (0, 1, 2, 3, 4)}
OTHER_SEEDS = (0, 1, 2)
ALPHAS = (0.3, 0.7)  # beside 0.5, genenv under the "hard" start
OVERRIDES = {
    # The agent settings the sweep ran with (configs/default.py's before
    # the pre-registered pilot).
    "agent": {"learning_rate": 3e-5},
    "grpo": {"kl_coef": 0.001},
    "coevolve": {"num_steps": 80},
    "eval": {"every_steps": 20},
    "checkpoint_every": 20,
}
PILOT_ARMS = ("genenv", "genenv_replay")


def _start(condition: str, **more) -> dict:
  return {"warmstart": {"simulator_start": condition}, **more}


def get_config(arg: str | None = None):
  """arg: None or "" for the sweep, "pilot" for its smoke-sized check."""
  if arg == "pilot":
    return make_sweep(
        base_arg="smoke", overrides={},
        runs=[(arm, 0, _start(c)) for c in CONDITIONS for arm in PILOT_ARMS],
        share_warmstart=True)
  if arg:
    raise ValueError(f"configs/sweeps/claim.py: arg {arg!r}; expected none "
                     "or 'pilot'.")
  runs = [(arm, seed, _start(c)) for c in CONDITIONS for arm in ARMS
          for seed in SEEDS.get(arm, OTHER_SEEDS)]
  runs += [("genenv", seed, _start("hard", curriculum={"alpha": alpha}))
           for alpha in ALPHAS for seed in OTHER_SEEDS]
  return make_sweep(base_arg="", overrides=OVERRIDES, runs=runs,
                    share_warmstart=True)
