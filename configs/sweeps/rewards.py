"""The registered comparison of curriculum rewards on the teaching demo
(docs/experiment.md, "Registered comparison of rewards on the teaching demo
(amendment 2)"): does training the simulator help, and with which reward?

  nice python launch/sweep.py --sweep=configs/sweeps/rewards.py --sweep_dir=runs/rewards --parallel=2
  python -m train.tools.sweep_report --sweep_dir=runs/rewards --out=docs/results/rewards --frontier_levels=3,4

  nice python launch/sweep.py --sweep=configs/sweeps/rewards.py:maze --sweep_dir=runs/rewards_maze --parallel=2
  python -m train.tools.sweep_report --sweep_dir=runs/rewards_maze --out=docs/results/rewards_maze --frontier_levels=4,5,6,7,8,9,10

Both commands resume: rerun the same one after an interruption. Append
`--dry_run` to the sweep command to print the runs still to run.

Arms (configs/default.py's ARMS): genenv, uncertainty and learnability (the
simulator trained by RWR on the α, R-Zero and Absolute Zero rewards),
frozen_env, static, uniform and oracle_learnability; in arithmetic also
variance and rzero (the variance reward, R-Zero's reward with its repetition
penalty), admitted by amendment 1 after the pilot. Replicates: warm-start
seeds 5-10 (config.seed; the seed data follows it), none of which an earlier
sweep or a documented demo run used, each at stage-2 seed 0: six independent
replicates, and every arm's replicate s starts from the same shared
warm-start SWEEP_DIR/_warmstart/s<s>, so arms are paired by replicate.

Every run is its domain's demo exactly as a user runs it, with its arm, its
seed and the shared warm-start the only fields set: configs/default.py
(`./launch/local.sh`; 960 steps of 400 agent rollouts, held-out evaluation
every 40 steps with 8 sampled answers per task) or configs/maze.py (120 steps
of 320 rollouts, every 20 steps with 4 sampled episodes). The genenv run of
replicate s is `./launch/local.sh --config.seed=s` (`configs/maze.py` for the
maze). 54 runs and 6 warm-starts in arithmetic, 42 and 6 in mazes.

`:pilot` (arithmetic) and `:maze_pilot` run every arm once at warm-start seed
0, a developer seed that is not a replicate, and the candidate rewards
(CANDIDATE_ARMS) beside them: they check that each arm runs to its end at the
demo's settings and measure its wall time before the sweep, into their own
sweep directories (runs/rewards_pilot, runs/rewards_maze_pilot), and do not
enter the comparison.

Estimate on this 2-core machine, two runs at a time (docs/experiment.md gives
the sources): arithmetic at most 54 x 10.7 min / 2 = 4 h 50 min, maze about
42 x 8.8 min / 2 + 6 warm-starts = 3 h 15 min; each pilot up to 50 min.
"""

from __future__ import annotations

from configs.sweeps import make_sweep

ARMS = ("genenv", "uncertainty", "learnability", "frozen_env", "static",
        "uniform", "oracle_learnability")
# The literature's rewards that were not arms at registration
# (genenv_jax/curriculum.py): the variance p̂(1 − p̂) and R-Zero's
# uncertainty with its repetition penalty. The pilots run them beside the
# arms; one enters a comparison only by an amendment registered before that
# sweep.
CANDIDATE_ARMS = ("variance", "rzero")
# Amendment 1 (docs/experiment.md, before any replicate ran): both candidates
# met the admission rule in the arithmetic pilot, so they join every
# arithmetic replicate; the maze comparison waits for its own pilot.
ADMITTED_ARMS = {"": ("variance", "rzero"), "maze": ()}
# The arms whose simulator is trained (by RWR, each on its own reward).
TRAINED_SIMULATOR_ARMS = ("genenv", "uncertainty", "learnability",
                          "variance", "rzero")
# Fresh: earlier sweep files ran seeds 0-4 (configs/sweeps/claim.py the
# highest), the documented demo runs outside sweep files seeds 3 and 4
# (HAND_RUN_SEEDS); tests/test_sweep.py checks the sets are disjoint.
REPLICATE_SEEDS = (5, 6, 7, 8, 9, 10)
# Seeds the docs' demo figures ran by hand, outside any sweep file:
# `./launch/local.sh --config.seed=3` and `=4` (docs/demo.md) and
# configs/maze.py at seed 3 (docs/episodes.md).
HAND_RUN_SEEDS = (3, 4)
PILOT_SEED = 0  # the demos' first developer seed; not a replicate
# The primary outcome's levels, fixed in advance (sweep_report
# --frontier_levels): arithmetic d3-d4, the demo's step-0 frontier at four of
# its five documented seeds; mazes d4-d10, the levels the registered maze
# sweep's step-0 rule chose.
FRONTIER_LEVELS = (3, 4)
MAZE_FRONTIER_LEVELS = (4, 5, 6, 7, 8, 9, 10)
# The margin of "no difference" in the verdict rule: a contrast's 95%
# interval inside [-margin, +margin] of frontier sampled success.
NO_DIFFERENCE_MARGIN = 0.03
MAZE_CONFIG = "configs/maze.py"

_VARIANTS = {
    # arg: (the runs' config file, their warm-start seeds)
    "": ("configs/default.py", REPLICATE_SEEDS),
    "maze": (MAZE_CONFIG, REPLICATE_SEEDS),
    "pilot": ("configs/default.py", (PILOT_SEED,)),
    "maze_pilot": (MAZE_CONFIG, (PILOT_SEED,)),
}


def get_config(arg: str | None = None):
  """arg: None or "" for the arithmetic comparison, "maze" for the same on
  configs/maze.py, "pilot" / "maze_pilot" for every arm once at the pilot
  seed."""
  if (arg or "") not in _VARIANTS:
    raise ValueError(f"configs/sweeps/rewards.py: arg {arg!r}; expected "
                     "none, 'maze', 'pilot' or 'maze_pilot'.")
  config_file, seeds = _VARIANTS[arg or ""]
  arms = (ARMS + CANDIDATE_ARMS if "pilot" in (arg or "")
          else ARMS + ADMITTED_ARMS[arg or ""])
  # Stage-2 seed 0 (coevolve.rl_seed): each replicate's stage-2 stream is
  # the one its warm-start's seed gives, as in the demo itself.
  return make_sweep(
      base_arg="", overrides={}, base_config=config_file,
      runs=[(arm, seed, {}) for seed in seeds for arm in arms],
      share_warmstart=True)
