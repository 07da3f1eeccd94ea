"""Baseline arms as config variants, sweep files and the sweep launcher (no
training: finished runs are faked, processes are stand-in commands)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import configs
from configs import default
from configs.sweeps import alpha as alpha_sweep
from configs.sweeps import arms as arms_sweep
from configs.sweeps import make_sweep
from configs.sweeps import smoke as smoke_sweep
from tests import sweep_launcher

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sweep = sweep_launcher.load()

# What each arm must set; every other field keeps the default.
_ARM_FIELDS = {
    "genenv": {"simulator_update.method": "rwr", "curriculum.reward": "alpha"},
    "genenv_pg": {"simulator_update.method": "pg", "curriculum.reward": "alpha"},
    "genenv_replay": {"simulator_update.method": "rwr", "curriculum.reward": "alpha",
                      "simulator_update.replay_share": 0.5},
    "frozen_env": {"simulator_update.method": "none"},
    "static": {"simulator_update.method": "none", "coevolve.generation": "static"},
    "uniform": {"simulator_update.method": "none", "coevolve.generation": "uniform"},
    "oracle_learnability": {"simulator_update.method": "none",
                            "coevolve.generation": "oracle_learnability"},
    "reference_code": {"simulator_update.method": "none", "coevolve.seed_trim": 0.1,
                       "coevolve.seed_selection": "uniform",
                       "pool.replay_selection": "uniform",
                       "pool.keep_generated": "latest"},
    "uncertainty": {"simulator_update.method": "rwr",
                    "curriculum.reward": "uncertainty"},
    "learnability": {"simulator_update.method": "rwr",
                     "curriculum.reward": "learnability"},
    "variance": {"simulator_update.method": "rwr",
                 "curriculum.reward": "variance"},
    "rzero": {"simulator_update.method": "rwr",
              "curriculum.reward": "uncertainty",
              "curriculum.repetition_penalty": 1.0},
}


def _flat(config):
  return configs.flatten(config.to_dict())


def test_arm_registry_is_the_tested_set():
  assert set(default.ARMS) == set(_ARM_FIELDS)


@pytest.mark.parametrize("arm", sorted(_ARM_FIELDS))
def test_arm_sets_its_fields_and_nothing_else(arm):
  base, variant = _flat(default.get_config()), _flat(default.get_config(arm))
  expected = dict(_ARM_FIELDS[arm], arm=arm)
  for name, value in expected.items():
    assert variant[name] == value, name
  changed = {k for k in base if base[k] != variant[k]}
  assert changed <= set(expected)
  assert base["arm"] == ""


@pytest.mark.parametrize("arg", ["smoke,frozen_env", "frozen_env,smoke",
                                 " smoke , frozen_env "])
def test_arm_combines_with_smoke(arg):
  smoke, combined = _flat(default.get_config("smoke")), _flat(
      default.get_config(arg))
  assert combined["simulator_update.method"] == "none"
  assert combined["arm"] == "frozen_env"
  assert {k for k in smoke if smoke[k] != combined[k]} == {
      "simulator_update.method", "arm"}


def test_config_flag_parses_combined_variants():
  config = sweep.parse_config("configs/default.py:smoke,learnability",
                              ("--config.curriculum.alpha=0.3",))
  assert config.curriculum.reward == "learnability"
  assert config.coevolve.num_steps == default.get_config("smoke").coevolve.num_steps
  assert config.curriculum.alpha == 0.3


@pytest.mark.parametrize("arg,message", [
    ("frozen", "unknown variant(s) ['frozen']"),
    ("smoke,bogus", "unknown variant(s) ['bogus']"),
    ("frozen_env,genenv", "at most one size of ['live', 'smoke'] and one arm"),
    ("smoke,smoke", "at most one size of ['live', 'smoke'] and one arm"),
    ("smoke,live", "at most one size of ['live', 'smoke'] and one arm"),
])
def test_bad_variant_names_arg_and_arms(arg, message):
  with pytest.raises(ValueError) as info:
    default.get_config(arg)
  text = str(info.value)
  assert message in text and repr(arg) in text
  if "unknown" in message:
    assert all(arm in text for arm in default.ARMS)


def _without_warmstarts(runs):
  return [r for r in runs if not r.name.startswith(sweep.WARMSTART_DIR)]


def test_arms_sweep_expansion():
  runs = sweep.expand(arms_sweep.get_config(), "/sweep")
  warmstarts = runs[:len(arms_sweep.SEEDS)]
  runs = runs[len(arms_sweep.SEEDS):]
  # One warm-start-only run per seed first; every run starts from its seed's.
  assert [w.name for w in warmstarts] == [
      f"_warmstart/s{seed}" for seed in arms_sweep.SEEDS]
  for w in warmstarts:
    assert w.config.coevolve.num_steps == 0 and w.config.arm == ""
  for run in runs:
    assert run.requires == f"_warmstart/s{run.seed}"
    assert run.config.warmstart.init_from == f"/sweep/_warmstart/s{run.seed}"
  assert len(runs) == len(default.ARMS) * len(arms_sweep.SEEDS)
  assert {r.name for r in runs} == {
      f"{arm}_a0.5_s{seed}" for arm in default.ARMS for seed in arms_sweep.SEEDS}
  sizing = configs.flatten(arms_sweep.OVERRIDES)
  for run in runs:
    flat = _flat(run.config)
    assert flat["arm"] == run.arm and flat["seed"] == run.seed
    for name, value in sizing.items():
      assert flat[name] == (list(value) if isinstance(value, tuple) else value)
    assert f"--config.seed={run.seed}" in run.overrides
    assert run.config_flag == f"configs/default.py:{run.arm}"


def test_alpha_sweep_expansion_shares_the_genenv_runs():
  runs = _without_warmstarts(sweep.expand(alpha_sweep.get_config(), "/sweep"))
  assert len(runs) == len(alpha_sweep.ALPHAS) * len(arms_sweep.SEEDS)
  assert sorted(r.name for r in runs) == sorted(
      f"genenv_a{a:g}_s{s}" for a in alpha_sweep.ALPHAS for s in arms_sweep.SEEDS)
  for run in runs:
    assert f"_a{run.config.curriculum.alpha:g}_" in run.name
    assert f"--config.curriculum.alpha={run.config.curriculum.alpha!r}" in (
        run.overrides)
  arms_runs = {r.name: r for r in sweep.expand(arms_sweep.get_config(),
                                               "/sweep")}
  shared = [r for r in runs if r.name in arms_runs]
  assert len(shared) == len(arms_sweep.SEEDS)
  with pytest.raises(ValueError, match="needs the sweep_dir"):
    sweep.expand(alpha_sweep.get_config())
  for run in shared:  # one workdir serves both sweeps
    assert run.config.to_dict() == arms_runs[run.name].config.to_dict()
  # So do the warm-starts, though the α sweep's first runs have α = 0.3.
  warmstarts = {r.name: r for r in sweep.expand(alpha_sweep.get_config(),
                                                "/sweep") if not r.requires}
  for name, run in warmstarts.items():
    assert run.config.to_dict() == arms_runs[name].config.to_dict()


def test_smoke_sweep_expansion():
  runs = sweep.expand(smoke_sweep.get_config())
  assert [r.name for r in runs] == [
      "genenv_a0.5_s0", "frozen_env_a0.5_s0", "genenv_a0.5_s1",
      "frozen_env_a0.5_s1"]
  assert all(r.config.coevolve.num_steps == 4 for r in runs)
  assert runs[1].config_flag == "configs/default.py:smoke,frozen_env"


def test_run_overrides_win_over_sweep_overrides():
  config = make_sweep("smoke", {"coevolve": {"num_steps": 7}}, [
      ("genenv", 0, {}), ("genenv", 1, {"coevolve": {"num_steps": 9}})])
  first, second = sweep.expand(config)
  assert (first.config.coevolve.num_steps, second.config.coevolve.num_steps) == (
      7, 9)


def test_runs_with_their_own_config_file_are_named_after_it():
  config = make_sweep("", {}, [("genenv", 0, {}),
                               ("genenv", 0, {}, "configs/maze.py")])
  runs = sweep.expand(config)
  assert [r.name for r in runs] == ["genenv_a0.5_s0",
                                    "maze_genenv_a0.5_s0_hard"]
  assert runs[1].config_flag == "configs/maze.py:genenv"
  assert runs[1].config.task.name == "maze"
  assert runs[0].config.task.name == "arithmetic"
  with pytest.raises(ValueError, match="share"):
    make_sweep("", {}, [("genenv", 0, {}, "configs/maze.py")],
               share_warmstart=True)


def test_duplicate_run_names_and_bad_overrides_are_errors():
  with pytest.raises(ValueError, match="both named 'genenv_a0.5_s0'"):
    sweep.expand(make_sweep("smoke", {}, [("genenv", 0, {}), ("genenv", 0, {})]))
  with pytest.raises(ValueError, match=r"sweep.runs\[0\].*no_such_field"):
    sweep.expand(make_sweep("smoke", {"coevolve": {"no_such_field": 1}},
                            [("genenv", 0, {})]))


def _fake_finished(sweep_dir, run, last_step=None, config=None):
  """A workdir as a run leaves it (config.json, report/summary.json)."""
  workdir = os.path.join(sweep_dir, run.name)
  os.makedirs(os.path.join(workdir, "report"), exist_ok=True)
  with open(os.path.join(workdir, "config.json"), "w") as f:
    f.write((config or run.config).to_json_best_effort(indent=2))
  steps = run.config.coevolve.num_steps if last_step is None else last_step
  with open(os.path.join(workdir, "report", "summary.json"), "w") as f:
    json.dump({"last_step": steps}, f)
  return workdir


def test_is_finished_reads_the_summary(tmp_path):
  run = sweep.expand(smoke_sweep.get_config())[0]
  num_steps = run.config.coevolve.num_steps
  assert not sweep.is_finished(str(tmp_path / run.name), num_steps)
  workdir = _fake_finished(tmp_path, run, last_step=num_steps - 1)
  assert not sweep.is_finished(workdir, num_steps)
  workdir = _fake_finished(tmp_path, run)
  assert sweep.is_finished(workdir, num_steps)


def test_dry_run_prints_commands_of_unfinished_runs(tmp_path):
  runs = sweep.expand(smoke_sweep.get_config())
  sweep_dir = tmp_path / "sweep"
  _fake_finished(sweep_dir, runs[0])
  result = subprocess.run(
      [sys.executable, "launch/sweep.py", "--sweep=configs/sweeps/smoke.py",
       f"--sweep_dir={sweep_dir}", "--dry_run"],
      cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
  assert result.returncode == 0, result.stderr
  lines = result.stdout.splitlines()
  commands = [l for l in lines if " -m train.main " in l]
  assert len(commands) == 3
  assert f"# {runs[0].name}: finished, skipped" in lines
  for run, line in zip(runs[1:], commands):
    assert f"--workdir={sweep_dir / run.name}" in line
    assert f"--config={run.config_flag}" in line
    assert line.endswith(f"--config.seed={run.seed}")
  assert sorted(os.listdir(sweep_dir)) == [runs[0].name]  # nothing created


def test_finished_runs_are_skipped_and_conflicts_fail(tmp_path, monkeypatch):
  runs = sweep.expand(smoke_sweep.get_config())
  for run in runs[:2]:
    _fake_finished(tmp_path, run)
  other = runs[2].config.copy_and_resolve_references()
  other.curriculum.band = 0.3
  _fake_finished(tmp_path, runs[2], last_step=0, config=other)
  started = []
  monkeypatch.setattr(
      sweep.Run, "command",
      lambda self, sweep_dir, python=sys.executable: started.append(self.name)
      or [python, "-c", "pass"])
  echoed = []
  failed = sweep.run_sweep(runs, str(tmp_path), parallel=2, echo=echoed.append)
  assert failed == [runs[2].name]
  assert started == [runs[3].name]
  assert any("curriculum.band" in e for e in echoed)
  assert not os.path.exists(tmp_path / runs[0].name / sweep.LOG_FILE)


def test_processes_log_and_failures_are_reported(tmp_path, monkeypatch):
  runs = sweep.expand(smoke_sweep.get_config())
  exit_codes = {runs[0].name: 0, runs[1].name: 3, runs[2].name: 0,
                runs[3].name: 5}
  monkeypatch.setattr(
      sweep.Run, "command",
      lambda self, sweep_dir, python=sys.executable: [
          python, "-c", f"print('hello from {self.name}'); "
          f"raise SystemExit({exit_codes[self.name]})"])
  failed = sweep.run_sweep(runs, str(tmp_path), parallel=2, echo=lambda _: None)
  assert sorted(failed) == sorted([runs[1].name, runs[3].name])
  for run in runs:
    with open(tmp_path / run.name / sweep.LOG_FILE) as f:
      assert f"hello from {run.name}" in f.read()


def test_runs_start_after_the_warm_start_they_require(tmp_path, monkeypatch):
  config = make_sweep("smoke", {}, [("genenv", 0, {}), ("static", 0, {}),
                                    ("genenv", 1, {})], share_warmstart=True)
  runs = sweep.expand(config, str(tmp_path))
  assert [r.name for r in runs] == [
      "_warmstart/s0", "_warmstart/s1", "genenv_a0.5_s0", "static_a0.5_s0",
      "genenv_a0.5_s1"]
  # Seed 1's warm-start fails: its run fails without starting; seed 0's runs
  # start only once their warm-start has finished.
  exit_codes = {"_warmstart/s1": 4}
  monkeypatch.setattr(
      sweep.Run, "command",
      lambda self, sweep_dir, python=sys.executable: [
          python, "-c", "import time; time.sleep(0.5); "
          f"raise SystemExit({exit_codes.get(self.name, 0)})"])
  echoed = []
  failed = sweep.run_sweep(runs, str(tmp_path), parallel=3, echo=echoed.append)
  assert sorted(failed) == ["_warmstart/s1", "genenv_a0.5_s1"]
  events = [e for e in echoed if not e.startswith("#")]
  assert events.index("finished _warmstart/s0") < events.index(
      "started genenv_a0.5_s0")
  assert events.index("finished _warmstart/s0") < events.index(
      "started static_a0.5_s0")
  assert "started genenv_a0.5_s1" not in events


def test_claim_sweep_expansion():
  from configs.sweeps import claim  # pylint: disable=g-import-not-at-top
  runs = sweep.expand(claim.get_config(), "/sweep")
  warmstarts = [r for r in runs if r.name.startswith(sweep.WARMSTART_DIR)]
  runs = _without_warmstarts(runs)
  # One warm-start per seed, then one moved simulator per seed and start,
  # which starts from its seed's warm-start.
  seeds = range(5)
  assert {w.name for w in warmstarts} == (
      {f"_warmstart/s{s}" for s in seeds}
      | {f"_warmstart/s{s}_{c}" for s in seeds for c in claim.CONDITIONS})
  for w in warmstarts:
    assert w.config.coevolve.num_steps == 0
    if "_" in w.name.split("/")[1]:
      start = w.name.rsplit("_", 1)[1]
      assert w.config.warmstart.simulator_start == start
      assert w.requires == f"_warmstart/s{w.seed}"
      assert w.config.warmstart.init_from == f"/sweep/_warmstart/s{w.seed}"
  # 5 + 5 + 6 x 3 runs per condition, and the α sweep's 2 x 3 under "hard".
  assert len(runs) == 2 * 28 + 6
  for run in runs:
    start = run.config.warmstart.simulator_start
    assert run.name.endswith(f"_{start}") and start in claim.CONDITIONS
    assert run.requires == f"_warmstart/s{run.seed}_{start}"
    assert run.config.coevolve.num_steps == 80
  names = {r.name for r in runs}
  assert {f"frozen_env_a0.5_s4_{c}" for c in claim.CONDITIONS} <= names
  assert {f"genenv_a{a:g}_s2_hard" for a in (0.3, 0.5, 0.7)} <= names
  assert "genenv_a0.3_s0_easy" not in names
  assert "static_a0.5_s3_hard" not in names
  pilot = _without_warmstarts(sweep.expand(claim.get_config("pilot"), "/p"))
  assert sorted(r.name for r in pilot) == sorted(
      f"{a}_a0.5_s0_{c}" for a in claim.PILOT_ARMS for c in claim.CONDITIONS)


def test_preregistered_sweep_pairs_replicates_across_arms():
  from configs.sweeps import preregistered  # pylint: disable=g-import-not-at-top
  runs = _without_warmstarts(sweep.expand(preregistered.get_config(), "/s"))
  assert len(runs) == 5 * 3 * 2
  replicates = {}
  for run in runs:
    rl_seed = run.config.coevolve.rl_seed
    assert run.name == (f"{run.arm}_a0.5_s{run.seed}"
                        + (f"r{rl_seed}" if rl_seed else "") + "_hard")
    assert run.config.agent.learning_rate == 1e-4
    assert run.config.coevolve.num_steps == 200
    assert run.config.eval.samples == 4
    replicates.setdefault((run.seed, rl_seed), []).append(run)
  # 6 replicates; every arm's replicate starts from the same players.
  assert sorted(replicates) == [(s, r) for s in range(3) for r in range(2)]
  for (seed, _), group in replicates.items():
    assert sorted(r.arm for r in group) == sorted(preregistered.ARMS)
    assert {r.requires for r in group} == {f"_warmstart/s{seed}_hard"}
  pilot = _without_warmstarts(
      sweep.expand(preregistered.get_config("pilot"), "/s"))
  assert [r.name for r in pilot] == ["uniform_a0.5_s0_hard"]
  assert pilot[0].config.to_dict() == next(
      r for r in runs if r.name == "uniform_a0.5_s0_hard").config.to_dict()
  # The amendment: the same runs, paired the same way, at 600 steps.
  amended = _without_warmstarts(
      sweep.expand(preregistered.get_config("amended"), "/s"))
  assert sorted(r.name for r in amended) == sorted(r.name for r in runs)
  for run in amended:
    registered = next(r for r in runs if r.name == run.name).config
    registered.coevolve.num_steps = 600
    assert run.config.to_dict() == registered.to_dict()
  maze = _without_warmstarts(
      sweep.expand(preregistered.get_config("maze"), "/m"))
  assert len(maze) == 30
  assert all(r.config.task.name == "maze" and
             r.requires == f"_warmstart/s{r.seed}" for r in maze)


# Every sweep file registered before configs/sweeps/rewards.py, with the args
# its get_config takes: the seeds they ran, which the rewards comparison must
# not reuse.
_EARLIER_SWEEPS = {
    "arms": (None,), "alpha": (None,), "claim": (None, "pilot"),
    "preregistered": (None, "pilot", "amended", "maze"), "demo": ("",),
    "smoke": (None,),
}


def _seeds_of(sweep_config):
  """(config.seed values, data.seed values) of a sweep's runs, read from the
  sweep file alone: data.seed follows config.seed unless the sweep or a run
  sets it."""
  seeds, data_seeds = set(), set()
  pinned = sweep_config.overrides.get("data", {}).get("seed")
  for spec in sweep_config.runs:
    seeds.add(spec.seed)
    own = spec.overrides.get("data", {}).get("seed")
    data_seeds.add(own if own is not None else
                   pinned if pinned is not None else spec.seed)
  return seeds, data_seeds


def _earlier_seeds():
  import importlib  # pylint: disable=g-import-not-at-top
  from configs.sweeps import rewards  # pylint: disable=g-import-not-at-top
  seeds, data_seeds = set(rewards.HAND_RUN_SEEDS), set(rewards.HAND_RUN_SEEDS)
  for name, args in _EARLIER_SWEEPS.items():
    module = importlib.import_module(f"configs.sweeps.{name}")
    for arg in args:
      config = module.get_config() if arg is None else module.get_config(arg)
      run_seeds, run_data_seeds = _seeds_of(config)
      seeds |= run_seeds
      data_seeds |= run_data_seeds
  return seeds, data_seeds


@pytest.mark.parametrize("arg,config_file", [
    ("", "configs/default.py"), ("maze", "configs/maze.py")])
def test_rewards_sweep_is_the_demo_paired_on_fresh_seeds(arg, config_file):
  from configs import maze  # pylint: disable=g-import-not-at-top
  from configs.sweeps import rewards  # pylint: disable=g-import-not-at-top
  expanded = sweep.expand(rewards.get_config(arg), "/s")
  warmstarts = [r for r in expanded if r.name.startswith(sweep.WARMSTART_DIR)]
  runs = _without_warmstarts(expanded)
  assert set(rewards.ARMS) == {
      "genenv", "uncertainty", "learnability", "frozen_env", "static",
      "uniform", "oracle_learnability"}
  # Amendment 1: the candidates admitted after the pilot join every
  # replicate of their domain.
  admitted = rewards.ADMITTED_ARMS[arg]
  assert set(admitted) <= set(rewards.CANDIDATE_ARMS)
  assert admitted == (("variance", "rzero") if arg == "" else ())
  arms = rewards.ARMS + admitted
  assert set(rewards.TRAINED_SIMULATOR_ARMS) <= set(
      rewards.ARMS + rewards.CANDIDATE_ARMS)
  assert len(rewards.REPLICATE_SEEDS) >= 6
  assert len(runs) == len(arms) * len(rewards.REPLICATE_SEEDS)
  # One shared warm-start per replicate, no moved simulator: the maze's
  # "hard" start is its config's own, the demo's "matched".
  assert [w.name for w in warmstarts] == [
      f"_warmstart/s{seed}" for seed in rewards.REPLICATE_SEEDS]
  for w in warmstarts:
    assert w.config.coevolve.num_steps == 0 and w.config.arm == ""
    assert w.config_flag == config_file
  get_demo = {"configs/default.py": default.get_config,
              "configs/maze.py": maze.get_config}[config_file]
  replicates = {}
  for run in runs:
    replicates.setdefault(run.seed, []).append(run)
    assert run.config_flag == f"{config_file}:{run.arm}"
    # The demo exactly as a user runs it: only the seed (which the seed data
    # follows) and the shared warm-start differ from the config file's arm.
    expected = get_demo(run.arm)
    expected.seed = run.seed
    expected.warmstart.init_from = f"/s/_warmstart/s{run.seed}"
    assert run.config.to_dict() == expected.to_dict()
    assert run.config.data.seed == run.seed
    assert run.config.coevolve.rl_seed == 0
  # Paired: each replicate holds every arm, all from one warm-start.
  assert sorted(replicates) == sorted(rewards.REPLICATE_SEEDS)
  for seed, group in replicates.items():
    assert sorted(r.arm for r in group) == sorted(arms)
    assert {r.requires for r in group} == {f"_warmstart/s{seed}"}
    assert {r.config.warmstart.init_from for r in group} == {
        f"/s/_warmstart/s{seed}"}
  # Fresh: no earlier sweep (nor documented hand-run demo) used these seeds,
  # for the initialisation or for the seed data.
  earlier_seeds, earlier_data_seeds = _earlier_seeds()
  assert not {r.config.seed for r in expanded} & earlier_seeds
  assert not {r.config.data.seed for r in expanded} & earlier_data_seeds
  assert rewards.PILOT_SEED not in rewards.REPLICATE_SEEDS
  # The docstring's report commands read the levels fixed in advance.
  levels = (rewards.MAZE_FRONTIER_LEVELS if arg == "maze"
            else rewards.FRONTIER_LEVELS)
  assert ("--frontier_levels=" + ",".join(map(str, levels))) in (
      rewards.__doc__)


@pytest.mark.parametrize("arg,domain", [("pilot", "arithmetic"),
                                        ("maze_pilot", "maze")])
def test_rewards_pilots_run_every_arm_once_outside_the_replicates(arg, domain):
  from configs.sweeps import rewards  # pylint: disable=g-import-not-at-top
  runs = _without_warmstarts(sweep.expand(rewards.get_config(arg), "/p"))
  # The registered arms, and the literature's candidates that have not yet
  # earned an arm.
  assert sorted(r.arm for r in runs) == sorted(rewards.ARMS
                                               + rewards.CANDIDATE_ARMS)
  assert not set(rewards.CANDIDATE_ARMS) & set(rewards.ARMS)
  assert {r.seed for r in runs} == {rewards.PILOT_SEED}
  assert all(r.config.task.name == domain for r in runs)
  # The same runs as the comparison's, at the pilot seed.
  full = sweep.expand(rewards.get_config("maze" if domain == "maze" else ""),
                      "/p")
  flags = {r.arm: r.config_flag for r in full}
  assert all(r.config_flag == flags[r.arm] for r in runs if r.arm in flags)
  with pytest.raises(ValueError, match="'maze_pilot'"):
    rewards.get_config("bogus")
