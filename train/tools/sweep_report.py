"""A sweep's report: results table and plots over every run in a directory.

  python -m train.tools.sweep_report --sweep_dir=runs/sweep --out=docs/results

Reads each <sweep_dir>/<run>/config.json and metrics.jsonl (the runs written by
launch/sweep.py, or any train.main workdirs), groups the runs by arm and α,
and writes <out>/README.md with PNG plots beside it. Finished runs only (their
last held-out evaluation is at their last step); the others are listed.
Both directories may be local or on object storage (gs://...).
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import math
import re

from etils import epath
import numpy as np
from scipy import stats

from train import heldout
from train.checkpoints import workdir as workdir_lib
from train.outputs import metrics_log
from train.outputs import run_report

REFERENCE_ARM = "genenv"


@dataclasses.dataclass
class RunResult:
  """One finished run. summary: run_report.summarize of its records."""
  name: str
  arm: str
  alpha: float
  band: float
  seed: int
  num_steps: int
  rollouts_per_step: int
  records: list[dict]
  summary: dict
  start: str = "matched"  # config.warmstart.simulator_start
  rl_seed: int = 0  # config.coevolve.rl_seed
  domain: str = "arithmetic"  # config.task.name
  # The run's wall time (report/summary.json), None when not recorded.
  wall_time_s: float | None = None

  @property
  def replicate(self) -> str:
    """What pairs runs across arms: the seed (of the shared warm-start) and
    the stage-2 seed, "2" or "2r1"."""
    return f"{self.seed}" + (f"r{self.rl_seed}" if self.rl_seed else "")

  @property
  def label(self) -> str:
    """The arm, with its simulator start when not "matched" and its domain
    when not arithmetic: "genenv [hard]", "maze: genenv"."""
    return arm_label(self.arm, self.start, self.domain)

  @property
  def rollouts(self) -> int:
    """Agent rollouts over the whole run (up to its final evaluation)."""
    return self.num_steps * self.rollouts_per_step


def arm_label(arm: str, start: str, domain: str = "arithmetic") -> str:
  """An arm under one simulator start (a condition of the sweep), in one
  domain."""
  label = arm if start == "matched" else f"{arm} [{start}]"
  return label if domain == "arithmetic" else f"{domain}: {label}"


def _condition(label: str) -> tuple[str, str, str]:
  """(domain prefix "maze: " or "", arm, " [start]" or "") of an arm label."""
  domain, colon, rest = label.rpartition(": ")
  arm, bracket, start = rest.partition(" [")
  return f"{domain}{colon}", arm, (f" [{start}" if bracket else "")


def reference_of(label: str) -> str:
  """The reference arm's label under the same condition (and domain) as
  `label`."""
  domain, _, condition = _condition(label)
  return f"{domain}{REFERENCE_ARM}{condition}"


def paired_interval(differences, level: float = 0.95
                    ) -> tuple[float, float, float]:
  """(mean, low, high): the t-interval (scipy.stats.ttest_1samp) of the mean
  of paired differences (nan bounds for fewer than 2)."""
  values = np.asarray(differences, float)
  mean = float(np.mean(values))
  if len(values) < 2:
    return mean, math.nan, math.nan
  if np.ptp(values) <= 1e-12 * max(1.0, abs(mean)):  # no spread: a point
    return mean, mean, mean
  interval = stats.ttest_1samp(values, 0.0).confidence_interval(level)
  return mean, float(interval.low), float(interval.high)


def format_interval(differences, signed: bool = True) -> str:
  """"+0.012 [-0.004, +0.028]": mean and 95% t-interval; the mean alone for
  one value. signed=False: without the + signs (a level, not a
  difference)."""
  mean, low, high = paired_interval(differences)
  spec = "+.3f" if signed else ".3f"
  if math.isnan(low):
    return f"{mean:{spec}}"
  return f"{mean:{spec}} [{low:{spec}}, {high:{spec}}]"


def rollouts_per_step(config: dict) -> int:
  """Agent rollouts per co-evolution step of a config (as in config.json):
  (num_seeds · variations + replay_tasks) · attempts."""
  cc = config["coevolve"]
  return ((cc["num_seeds"] * cc["variations"] + config["pool"]["replay_tasks"])
          * cc["attempts"])


def series(records: list[dict], name: str) -> dict[int, float]:
  """{step: value} of one metric (last record per step wins)."""
  return {r["step"]: r[name] for r in records if r.get(name) is not None}


def load_runs(sweep_dir: str) -> tuple[list[RunResult], list[str]]:
  """(finished runs, names of the other run directories) in sweep_dir."""
  finished, unfinished = [], []
  for workdir in sorted(epath.Path(sweep_dir).iterdir()):
    name = workdir.name
    config = workdir_lib.read_saved_config(str(workdir))
    if config is None:
      continue
    records = metrics_log.read_metrics(workdir / metrics_log.METRICS_FILE)
    num_steps = config["coevolve"]["num_steps"]
    evals = series(records, "eval/accuracy")
    if not evals or max(evals) < num_steps:
      unfinished.append(name)
      continue
    cur = config["curriculum"]
    summary_path = workdir / "report" / "summary.json"
    wall_time = (json.loads(summary_path.read_text()).get(
        "wall_time_s_this_process") if summary_path.is_file() else None)
    finished.append(RunResult(
        name=name, arm=config.get("arm") or "default", alpha=cur["alpha"],
        band=cur["band"], seed=config["seed"], num_steps=num_steps,
        rollouts_per_step=rollouts_per_step(config), records=records,
        summary=run_report.summarize(records, cur["alpha"], cur["band"]),
        start=config.get("warmstart", {}).get("simulator_start", "matched"),
        rl_seed=config["coevolve"].get("rl_seed", 0),
        domain=config["task"]["name"], wall_time_s=wall_time))
  return finished, unfinished


def group_runs(runs: list[RunResult]) -> dict[tuple[str, float], list[RunResult]]:
  """Runs by (arm label, α), the label naming the simulator start when it is
  not "matched"; conditions in turn, each with the reference arm first; each
  group in seed order."""
  groups = {}
  for run in runs:
    groups.setdefault((run.label, run.alpha), []).append(run)
  order = sorted(groups, key=lambda k: (reference_of(k[0]),
                                        k[0] != reference_of(k[0]), k[0], k[1]))
  return {k: sorted(groups[k], key=lambda r: (r.seed, r.rl_seed))
          for k in order}


def mean_std(values) -> tuple[float, float, int]:
  """(mean, sample std with ddof=1 (nan for one value), n)."""
  values = np.asarray(values, float)
  std = float(np.std(values, ddof=1)) if len(values) > 1 else math.nan
  return float(np.mean(values)), std, len(values)


def format_mean_std(values) -> str:
  """"0.523 ± 0.012" over the values; "0.523" for a single value."""
  mean, std, n = mean_std(values)
  return f"{mean:.3f}" if n == 1 else f"{mean:.3f} ± {std:.3f}"


def _levels(runs: list[RunResult]) -> list[int]:
  keys = {k for run in runs for k in run.summary
          if re.fullmatch(r"eval/accuracy_d\d+_end", k)}
  return sorted(int(k.split("_d")[1].split("_")[0]) for k in keys)


def _label(arm: str, alpha: float) -> str:
  return f"{arm} (α={alpha:g})"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
  return (["| " + " | ".join(header) + " |",
           "|" + "|".join("---" for _ in header) + "|"]
          + ["| " + " | ".join(row) + " |" for row in rows])


def results_table(groups) -> list[str]:
  """Held-out accuracy (final evaluation; overall and per difficulty), mean ±
  std over seeds per (arm, α), with the agent rollouts behind it."""
  levels = _levels([r for runs in groups.values() for r in runs])
  header = (["arm", "α", "n", "seeds", "agent rollouts", "held-out acc. (step 0)",
             "held-out acc. (final)"] + [f"d{d}" for d in levels]
            + ["success rate (2nd half)"])
  rows = []
  for (arm, alpha), runs in groups.items():
    rollouts = sorted({r.rollouts for r in runs})
    row = [arm, f"{alpha:g}", str(len(runs)),
           ",".join(r.replicate for r in runs),
           " / ".join(f"{x:,}" for x in rollouts),
           format_mean_std([r.summary["eval/accuracy_start"] for r in runs]),
           format_mean_std([r.summary["eval/accuracy_end"] for r in runs])]
    for d in levels:
      values = [r.summary.get(f"eval/accuracy_d{d}_end") for r in runs]
      row.append(format_mean_std([v for v in values if v is not None])
                 if any(v is not None for v in values) else "–")
    success = [r.summary["success_rate_second_half_mean"] for r in runs
               if "success_rate_second_half_mean" in r.summary]
    row.append(format_mean_std(success) if success else "–")
    rows.append(row)
  return _table(header, rows)


def comparison_table(groups) -> list[str]:
  """Each arm minus the reference arm at the same α and simulator start,
  paired by seed: the mean of the per-seed differences in final held-out
  accuracy with its 95% t-interval, wins, and the same per difficulty level.
  A difference whose interval excludes 0 is marked real ("yes")."""
  levels = _levels([r for runs in groups.values() for r in runs])
  rows = []
  for (arm, alpha), runs in groups.items():
    reference = {r.replicate: r
                 for r in groups.get((reference_of(arm), alpha), [])}
    pairs = [(r, reference[r.replicate]) for r in runs
             if r.replicate in reference]
    if arm == reference_of(arm) or not pairs:
      continue

    def diffs(key):
      return [r.summary[key] - ref.summary[key] for r, ref in pairs
              if key in r.summary and key in ref.summary]

    overall = diffs("eval/accuracy_end")
    wins = sum(d > 0 for d in overall)
    _, low, high = paired_interval(overall)
    real = "–" if math.isnan(low) else ("yes" if low > 0 or high < 0 else "no")
    row = [arm, f"{alpha:g}", str(len(pairs)),
           ",".join(r.replicate for r, _ in pairs),
           format_interval(overall), f"{wins}/{len(pairs)}", real]
    for d in levels:
      level = diffs(f"eval/accuracy_d{d}_end")
      row.append(format_interval(level) if level else "–")
    rows.append(row)
  if not rows:
    return []
  return _table(["arm", "α", "n pairs", "seeds",
                 f"Δ held-out acc. vs {REFERENCE_ARM} [95% CI]",
                 "seeds better", "CI excludes 0"]
                + [f"Δ d{d} [95% CI]" for d in levels], rows)


def fixed_broken_table(groups) -> list[str]:
  """Task by task against each run's warm-started agent (its step 0): per
  (arm, α) and level, the held-out tasks the final agent answers right and
  its warm-start did not (fixed) and the other way round (broken), summed over
  the seeds, with the sign test's p on those sums (train/heldout.py)."""
  levels = [d for d in _levels([r for runs in groups.values() for r in runs])
            if any(f"eval/fixed_d{d}" in r.summary
                   for runs in groups.values() for r in runs)]
  if not levels:
    return []
  rows = []
  for (arm, alpha), runs in groups.items():
    row = [arm, f"{alpha:g}", str(len(runs))]
    for d in levels:
      paired = [r for r in runs if f"eval/fixed_d{d}" in r.summary]
      if not paired:
        row.append("–")
        continue
      fixed = sum(int(r.summary[f"eval/fixed_d{d}"]) for r in paired)
      broken = sum(int(r.summary[f"eval/broken_d{d}"]) for r in paired)
      row.append(f"{fixed} / {broken} (p={heldout.sign_test_p(fixed, broken):.2g})")
    rows.append(row)
  return _table(["arm", "α", "n"] + [f"d{d} fixed / broken (sign test)"
                                     for d in levels], rows)


def _span(values, spec: str) -> str:
  """"low – high" of the values in `spec` format ("low" when they agree)."""
  low, high = min(values), max(values)
  if f"{low:{spec}}" == f"{high:{spec}}":
    return f"{low:{spec}}"
  return f"{low:{spec}} – {high:{spec}}"


def _valid(summary: dict) -> str:
  """The share of the simulator's generations that were valid tasks over the
  run's second half ("–" for a run that logged none: scripted arms)."""
  value = summary.get("valid_fraction_second_half_mean")
  return "–" if value is None else f"{value:.0%}"


def seeds_table(groups) -> list[str]:
  """The demo's figures run by run (one row per seed), then per (arm, α)
  their range over the seeds and the frontier counts pooled over them: the
  share of second-half log windows with success in the α band; the share of
  valid generations over the second half; the step-0
  frontier levels (train/heldout.FRONTIER) and, pooled over them, the
  held-out tasks fixed / broken against the step-0 agent with the one-sided
  sign test's p; the paired change in sampled success there with its 95%
  interval; overall held-out accuracy from step 0 to the end; the run's wall
  time. Only runs whose evaluation compared the frontier (eval/frontier_*)."""
  rows = []
  for (arm, alpha), runs in groups.items():
    runs = [r for r in runs if "eval/frontier_fixed" in r.summary]
    if not runs:
      continue
    for r in runs:
      s = r.summary
      gain = ("–" if "eval/frontier_sampled_gain" not in s else
              f"{s['eval/frontier_sampled_gain']:+.3f} "
              f"[{s['eval/frontier_sampled_gain_low']:+.3f}, "
              f"{s['eval/frontier_sampled_gain_high']:+.3f}]")
      rows.append([
          arm, f"{alpha:g}", r.replicate,
          f"{s['second_half_in_band_frac']:.0%}", _valid(s),
          ", ".join(f"d{d}" for d in s["frontier_levels"]) or "none",
          f"{s['eval/frontier_fixed']:.0f} / {s['eval/frontier_broken']:.0f}"
          f" (p={s['eval/frontier_sign_test_p']:.2g})", gain,
          f"{s['eval/accuracy_start']:.3f} → {s['eval/accuracy_end']:.3f}",
          "–" if r.wall_time_s is None else f"{r.wall_time_s / 60:.1f}"])
    summaries = [r.summary for r in runs]
    fixed = sum(int(s["eval/frontier_fixed"]) for s in summaries)
    broken = sum(int(s["eval/frontier_broken"]) for s in summaries)
    gains = [s["eval/frontier_sampled_gain"] for s in summaries
             if "eval/frontier_sampled_gain" in s]
    walls = [r.wall_time_s / 60 for r in runs if r.wall_time_s is not None]
    valids = [s["valid_fraction_second_half_mean"] for s in summaries
              if "valid_fraction_second_half_mean" in s]
    rows.append([
        f"**{arm}: range over {len(runs)} seeds**", f"{alpha:g}",
        ", ".join(r.replicate for r in runs),
        _span([s["second_half_in_band_frac"] for s in summaries], ".0%"),
        _span(valids, ".0%") if valids else "–",
        "",
        f"pooled {fixed} / {broken} "
        f"(p={heldout.sign_test_p(fixed, broken, 'greater'):.2g})",
        _span(gains, "+.3f") if gains else "–",
        _span([s["eval/accuracy_end"] - s["eval/accuracy_start"]
               for s in summaries], "+.3f") + " (change)",
        _span(walls, ".1f") if walls else "–"])
  if not rows:
    return []
  return _table(["arm", "α", "seed", "2nd-half windows in band",
                 "valid generations (2nd half)", "frontier levels", "frontier fixed / broken (one-sided p)",
                 "frontier sampled success, change [95% CI]",
                 "held-out accuracy (step 0 → end)", "wall time (min)"],
                rows)


def dynamics_table(groups) -> list[str]:
  """One row per run: what a co-evolution run is judged by. The success rate
  in its first log window and over the second half of the logged steps, the
  share of second-half windows inside the α band, the simulator's mean
  difficulty over the first and the last quarter, and held-out accuracy per
  level at step 0 and at the end ("start → end")."""
  levels = _levels([r for runs in groups.values() for r in runs])
  rows = []
  for (arm, alpha), runs in groups.items():
    for r in runs:
      s = r.summary
      row = [arm, f"{alpha:g}", r.replicate,
             f"{s['success_rate_first']:.2f}",
             f"{s['success_rate_second_half_mean']:.2f}",
             f"{s['second_half_in_band_frac']:.0%}",
             f"{s['difficulty_first_quarter_mean']:.2f} → "
             f"{s['difficulty_last_quarter_mean']:.2f}"]
      for d in levels:
        start, end = (s.get(f"eval/accuracy_d{d}_{k}")
                      for k in ("start", "end"))
        row.append("–" if start is None or end is None
                   else f"{start:.3f} → {end:.3f}")
      rows.append(row)
  return _table(["arm", "α", "seed", "success (first window)",
                 "success (2nd half)", "2nd-half windows in band",
                 "difficulty (first → last quarter)"]
                + [f"d{d} (step 0 → end)" for d in levels], rows)


def alpha_arms(groups) -> dict[str, list[float]]:
  """Arms run at two or more α values: {arm: sorted α values}."""
  alphas = {}
  for arm, alpha in groups:
    alphas.setdefault(arm, []).append(alpha)
  return {arm: sorted(a) for arm, a in alphas.items() if len(a) > 1}


def alpha_table(groups) -> list[str]:
  """For arms swept over α: final success rate (mean over the second half of
  the steps) and in-band share against α."""
  rows = []
  for arm, alphas in alpha_arms(groups).items():
    for alpha in alphas:
      runs = groups[(arm, alpha)]
      rows.append([
          arm, f"{alpha:g}", str(len(runs)),
          ",".join(r.replicate for r in runs),
          format_mean_std([r.summary["success_rate_second_half_mean"]
                           for r in runs]),
          format_mean_std([r.summary["second_half_in_band_frac"]
                           for r in runs]),
          format_mean_std([r.summary["eval/accuracy_end"] for r in runs])])
  if not rows:
    return []
  return _table(["arm", "α", "n", "seeds", "success rate (2nd half)",
                 "steps in band (2nd half)", "held-out acc. (final)"], rows)


# The registered designs (docs/experiment.md): the primary statistics are
# read from the held-out sampled success per level; the contrasts are the
# (arm, arm) pairs they compare, paired by replicate under one condition.
# A contrast is reported when the sweep ran both of its arms.
PRIMARY_METRIC = "eval/sampled_success"
FRONTIER_RANGE = (0.05, 0.95)
CONTRASTS = (
    # "Pre-registered design", C1-C6.
    ("genenv", "frozen_env"), ("genenv", "static"),
    ("static", "frozen_env"), ("oracle_learnability", "uniform"),
    ("genenv", "uniform"), ("oracle_learnability", "genenv"),
    # "Registered comparison of rewards on the teaching demo": each trained
    # simulator against the frozen one, and the α reward against the others.
    ("uncertainty", "frozen_env"), ("learnability", "frozen_env"),
    ("genenv", "uncertainty"), ("genenv", "learnability"),
    # Its amendment 1: the variance and R-Zero rewards, the same way.
    ("variance", "frozen_env"), ("rzero", "frozen_env"),
    ("genenv", "variance"), ("genenv", "rzero"))


def _level_curve(run: RunResult, levels: list[int]) -> dict[int, float]:
  """{eval step: mean over `levels` of the run's held-out sampled success}
  at the steps where every level was evaluated."""
  curves = [series(run.records, f"{PRIMARY_METRIC}_d{d}") for d in levels]
  steps = sorted(set.intersection(*(set(c) for c in curves)))
  return {t: float(np.mean([c[t] for c in curves])) for t in steps}


def frontier_levels(runs: list[RunResult]) -> list[int]:
  """The levels that can move: those whose held-out sampled success at step
  0, averaged over the runs (their warm-starts; the same for every arm),
  lies in FRONTIER_RANGE. Empty when no run evaluated sampled success."""
  keys = {k for run in runs for r in run.records for k in r
          if re.fullmatch(re.escape(PRIMARY_METRIC) + r"_d\d+", k)}
  levels = []
  for d in sorted(int(k.rsplit("_d", 1)[1]) for k in keys):
    start = [series(r.records, f"{PRIMARY_METRIC}_d{d}").get(0) for r in runs]
    start = [v for v in start if v is not None]
    if start and FRONTIER_RANGE[0] <= np.mean(start) <= FRONTIER_RANGE[1]:
      levels.append(d)
  return levels


def frontier_auc(run: RunResult, levels: list[int]) -> float:
  """The primary statistic: the area under the run's frontier held-out
  curve (mean sampled success over `levels`, trapezoid rule over its
  evaluation steps from 0 to its last) divided by that span, i.e. the
  frontier success averaged over the run. nan without two evaluations."""
  curve = _level_curve(run, levels)
  if len(curve) < 2:
    return math.nan
  steps = np.array(list(curve), float)
  values = np.array(list(curve.values()))
  area = float(np.sum((values[1:] + values[:-1]) / 2 * np.diff(steps)))
  return area / (steps[-1] - steps[0])


def frontier_gain(run: RunResult, levels: list[int]) -> float:
  """Frontier held-out sampled success at the run's last evaluation minus
  at step 0."""
  curve = _level_curve(run, levels)
  return (curve[max(curve)] - curve[min(curve)]) if curve else math.nan


def primary_table(groups, levels: list[int]) -> list[str]:
  """Per (arm, α): the primary statistic and the frontier gain over step 0,
  each as the mean over replicates with its 95% t-interval, and the
  mechanism figures: the share of generated tasks whose attempts disagree
  (env/informative_frac, mean over all logged windows) and the share of
  second-half windows in the α band."""
  rows = []
  for (arm, alpha), runs in groups.items():
    informative = [np.mean(list(series(r.records,
                                       "env/informative_frac").values()))
                   for r in runs
                   if series(r.records, "env/informative_frac")]
    in_band = [r.summary["second_half_in_band_frac"] for r in runs
               if "second_half_in_band_frac" in r.summary]
    rows.append([arm, f"{alpha:g}", str(len(runs)),
                 ",".join(r.replicate for r in runs),
                 format_interval([frontier_auc(r, levels) for r in runs],
                                 signed=False),
                 format_interval([frontier_gain(r, levels) for r in runs]),
                 format_mean_std(informative) if informative else "–",
                 format_mean_std(in_band) if in_band else "–"])
  return _table(["arm", "α", "n", "replicates",
                 "frontier AUC [95% CI]", "frontier gain, end − step 0 "
                 "[95% CI]", "informative tasks", "2nd-half windows in band"],
                rows)


def _interval_says(a: str, b: str, low: float, high: float) -> str:
  """What a 95% interval of a − b says: "a > b" (above 0), "a < b" (below
  0), "not distinguished" (it holds 0), "–" (no interval)."""
  if math.isnan(low):
    return "–"
  return (f"{a} > {b}" if low > 0 else f"{a} < {b}" if high < 0
          else "not distinguished")


def contrast_table(groups, levels: list[int]) -> list[str]:
  """The registered contrasts (CONTRASTS) under each condition and α: arm a
  minus arm b, paired by replicate (same warm-start, same stage-2 seed), in
  the frontier gain (end − step 0) and in the frontier AUC, each the mean of
  the paired differences with its 95% t-interval and what the interval
  says."""
  rows = []
  for (label, alpha), runs in groups.items():
    domain, arm, condition = _condition(label)
    for a, b in CONTRASTS:
      if arm != a or (domain + b + condition, alpha) not in groups:
        continue
      other = {r.replicate: r for r in groups[(domain + b + condition, alpha)]}
      pairs = [(r, other[r.replicate]) for r in runs
               if r.replicate in other]
      if not pairs:
        continue
      row = [f"{domain}{a}{condition} − {b}{condition}", f"{alpha:g}",
             str(len(pairs))]
      for statistic in (frontier_gain, frontier_auc):
        diffs = [statistic(x, levels) - statistic(y, levels)
                 for x, y in pairs]
        _, low, high = paired_interval(diffs)
        row += [format_interval(diffs), _interval_says(a, b, low, high)]
      rows.append(row)
  if not rows:
    return []
  return _table(["contrast", "α", "n pairs", "Δ frontier gain [95% CI]",
                 "gain: 95% CI says", "Δ frontier AUC [95% CI]",
                 "AUC: 95% CI says"], rows)


def _mean_curve(runs: list[RunResult], name: str):
  """(steps, mean, std) of a metric over runs, at the steps all runs logged."""
  curves = [series(r.records, name) for r in runs]
  steps = sorted(set.intersection(*(set(c) for c in curves)))
  values = np.array([[c[s] for s in steps] for c in curves], float)
  if not steps:
    return np.array([]), np.array([]), np.array([])
  std = (values.std(axis=0, ddof=1) if len(runs) > 1
         else np.zeros(len(steps)))
  return np.asarray(steps), values.mean(axis=0), std


def plot(groups, out_dir: str) -> list[str]:
  """Writes the sweep's PNGs into out_dir; returns their file names."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  names = []

  def save(fig, name):
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110)
    (epath.Path(out_dir) / name).write_bytes(png.getvalue())
    plt.close(fig)
    names.append(name)

  cols = min(3, len(groups))
  rows = math.ceil(len(groups) / cols)
  fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows),
                           squeeze=False, sharey=True)
  for ax, ((arm, alpha), runs) in zip(axes.flat, groups.items()):
    band = runs[0].band
    ax.axhspan(alpha - band, alpha + band, color="tab:green", alpha=0.15,
               label=f"α band [{alpha - band:.2f}, {alpha + band:.2f}]")
    for run in runs:
      s = series(run.records, "env/success_rate")
      ax.plot(list(s), list(s.values()), lw=0.8, alpha=0.6,
              label=f"seed {run.replicate}")
    steps, mean, _ = _mean_curve(runs, "env/success_rate")
    ax.plot(steps, mean, color="black", lw=2, label="mean")
    ax.set_title(_label(arm, alpha), fontsize=10)
    ax.set_xlabel("co-evolution step")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=6, loc="best")
  for ax in axes.flat[len(groups):]:
    ax.axis("off")
  axes[0, 0].set_ylabel("success rate on generated tasks")
  save(fig, "success_rate.png")

  fig, ax = plt.subplots(figsize=(7, 4))
  for (arm, alpha), runs in groups.items():
    steps, mean, std = _mean_curve(runs, "env/difficulty_mean")
    ax.plot(steps, mean, label=_label(arm, alpha))
    ax.fill_between(steps, mean - std, mean + std, alpha=0.15)
  ax.set_xlabel("co-evolution step")
  ax.set_ylabel("mean difficulty of generated tasks")
  ax.set_title("Simulator difficulty (mean ± std over seeds)")
  ax.legend(fontsize=7)
  save(fig, "difficulty.png")

  fig, ax = plt.subplots(figsize=(7, 4))
  for (arm, alpha), runs in groups.items():
    steps, mean, std = _mean_curve(runs, "eval/accuracy")
    ax.errorbar(steps * runs[0].rollouts_per_step, mean, yerr=std, marker="o",
                ms=3, capsize=2, label=_label(arm, alpha))
  ax.set_xlabel("agent rollouts")
  ax.set_ylabel("held-out accuracy (greedy)")
  ax.set_title("Held-out accuracy vs agent rollouts (mean ± std over seeds)")
  ax.legend(fontsize=7)
  save(fig, "heldout_vs_rollouts.png")

  levels = [d for d in _levels([r for rs in groups.values() for r in rs])
            if any(series(r.records, f"agent/level_success_d{d}")
                   for rs in groups.values() for r in rs)]
  if levels:
    fig, axes = plt.subplots(1, len(levels), figsize=(3.6 * len(levels), 3.2),
                             squeeze=False, sharey=True)
    for ax, d in zip(axes.flat, levels):
      for (arm, alpha), runs in groups.items():
        steps, mean, _ = _mean_curve(runs, f"agent/level_success_d{d}")
        ax.plot(steps, mean, label=_label(arm, alpha))
      ax.set_title(f"level {d}", fontsize=10)
      ax.set_xlabel("co-evolution step")
      ax.set_ylim(-0.02, 1.02)
    axes[0, 0].set_ylabel("agent success on the step's tasks")
    axes[0, -1].legend(fontsize=6)
    save(fig, "level_success.png")

  swept = alpha_arms(groups)
  if swept:
    fig, ax = plt.subplots(figsize=(5, 4))
    for arm, alphas in swept.items():
      per_run = [(a, r.summary["success_rate_second_half_mean"])
                 for a in alphas for r in groups[(arm, a)]]
      ax.scatter(*zip(*per_run), s=12, alpha=0.5)
      spread = [mean_std([r.summary["success_rate_second_half_mean"]
                          for r in groups[(arm, a)]]) for a in alphas]
      ax.errorbar(alphas, [m for m, _, _ in spread],
                  yerr=[0.0 if math.isnan(s) else s for _, s, _ in spread],
                  marker="o", capsize=3, label=f"{arm} (mean ± std)")
    lo, hi = min(min(a) for a in swept.values()), max(max(a) for a in swept.values())
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="success rate = α")
    ax.set_xlabel("α")
    ax.set_ylabel("success rate on generated tasks (2nd half)")
    ax.set_title("Final success rate vs α")
    ax.legend(fontsize=7)
    save(fig, "success_vs_alpha.png")
  return names


def write_report(sweep_dir: str, out_dir: str, command: str,
                 fixed_frontier: list[int] | None = None) -> str:
  """Writes out_dir/README.md and its PNGs from the runs in sweep_dir;
  returns the README's path. fixed_frontier: the primary statistic's levels
  when a design fixed them in advance; None reads them from step 0
  (frontier_levels). Raises ValueError when no run has finished, or when a
  fixed level was never evaluated."""
  runs, unfinished = load_runs(sweep_dir)
  if not runs:
    raise ValueError(f"--sweep_dir={sweep_dir}: no finished run (a directory "
                     "with config.json and a final held-out evaluation in "
                     f"metrics.jsonl); unfinished: {unfinished}.")
  groups = group_runs(runs)
  epath.Path(out_dir).mkdir(parents=True, exist_ok=True)
  plotted = plot(groups, out_dir)
  rollouts = sorted({r.rollouts for r in runs})
  per_step = sorted({r.rollouts_per_step for r in runs})
  lines = [
      f"Generated by `{command}` from {len(runs)} finished runs.", "",
      "# Sweep results", "",
      "Held-out accuracy is the greedy exact-match accuracy on the held-out "
      "split at each run's final evaluation, overall and per difficulty level "
      "(d*); mean ± sample std (ddof=1) over the n seeds listed. "
      "Every run's final evaluation comes after "
      + " / ".join(f"{x:,}" for x in rollouts) + " agent rollouts ("
      + " / ".join(f"{x:,}" for x in per_step) + " per step). Success rate "
      "is the agent's exact-answer rate on the simulator's tasks, averaged "
      "over the second half of the logged steps.", ""]
  if len(rollouts) > 1:
    lines += ["**The runs differ in agent rollouts**; compare rows with the "
              "same count only.", ""]
  lines += results_table(groups) + [""]
  seeds = seeds_table(groups)
  if seeds:
    lines += ["## Seed by seed, and the range", "",
              "What each run shows on its own, then per arm the range over "
              "the seeds (what another seed or machine should fall within) "
              "and the frontier counts pooled over the seeds, with the "
              "one-sided sign test's p (more fixed than broken). Frontier: "
              "the held-out levels whose step-0 greedy accuracy lies in "
              f"[{heldout.FRONTIER[0]}, {heldout.FRONTIER[1]}]; sampled "
              "success: the share of the evaluation's sampled answers per "
              "task that are right, paired per task with the step-0 agent's "
              "(train/heldout.py).", ""] + seeds + [""]
  if fixed_frontier:
    evaluated = {int(k.rsplit("_d", 1)[1]) for r in runs for rec in r.records
                 for k in rec if k.startswith(f"{PRIMARY_METRIC}_d")}
    missing = sorted(set(fixed_frontier) - evaluated)
    if missing:
      raise ValueError(f"--frontier_levels: level(s) {missing} have no "
                       f"{PRIMARY_METRIC}_d<level> in any run of {sweep_dir} "
                       f"(evaluated: {sorted(evaluated)}).")
    frontier = list(fixed_frontier)
    chosen = "fixed in advance by the design"
  else:
    frontier = frontier_levels(runs)
    chosen = ("step-0 held-out sampled success, mean over the runs, in "
              f"[{FRONTIER_RANGE[0]}, {FRONTIER_RANGE[1]}]")
  if frontier:
    lines += ["## Primary statistic (pre-registered, docs/experiment.md)", "",
              f"Frontier levels ({chosen}): "
              + ", ".join(f"d{d}" for d in frontier) + ". Frontier AUC: the "
              "held-out sampled success averaged over those levels, "
              "integrated over the evaluation steps (trapezoid) and divided "
              "by the run's steps; frontier gain: that average at the last "
              "evaluation minus at step 0; each the mean over replicates "
              "with its 95% t-interval (which of them is a design's primary "
              "outcome, docs/experiment.md says). Informative tasks: share "
              "of generated tasks whose attempts disagree (nonzero GRPO "
              "advantages).", ""]
    lines += primary_table(groups, frontier) + [""]
    contrasts = contrast_table(groups, frontier)
    if contrasts:
      lines += ["Contrasts, paired by replicate (same warm-start and "
                "stage-2 seed):", ""] + contrasts + [""]
  comparison = comparison_table(groups)
  if comparison:
    lines += [f"## Arms against {REFERENCE_ARM}", "",
              "Per-seed difference in final held-out accuracy (same seed, "
              "same α, same simulator start), the mean over the seed pairs "
              "with its 95% t-interval; \"CI excludes 0\" marks the "
              "differences this many seeds show to be real. An arm label "
              "\"arm [start]\" names a simulator start other than "
              "\"matched\" (config.warmstart.simulator_start).", ""]
    lines += comparison + [""]
  fixed_broken = fixed_broken_table(groups)
  if fixed_broken:
    lines += ["## Against the warm-start, task by task", "",
              "Held-out tasks each run's final agent answers right where its "
              "warm-started agent (step 0) did not (fixed), and wrong where "
              "it did (broken), summed over the seeds; p: two-sided sign test "
              "on the sums.", ""] + fixed_broken + [""]
  alphas = alpha_table(groups)
  if alphas:
    lines += ["## α sweep", ""] + alphas + ["", "![success rate vs α]"
                                            "(success_vs_alpha.png)", ""]
  lines += ["## Dynamics per run", "",
            "Success rates are means over log windows; the band is "
            "[α − band, α + band].", ""] + dynamics_table(groups) + [""]
  lines += ["## Plots", "",
            "Success rate on generated tasks per arm, α band shaded:", "",
            "![success rate](success_rate.png)", "",
            "![simulator difficulty](difficulty.png)", "",
            "![held-out accuracy vs agent rollouts](heldout_vs_rollouts.png)",
            ""]
  if "level_success.png" in plotted:
    lines += ["Per-level success over time (agent/level_success_d*, the "
              "estimate scripted curricula read), mean over replicates:", "",
              "![per-level success](level_success.png)", ""]
  lines += ["## Runs", "",
            ", ".join(f"`{r.name}`" for r in runs) + ".", ""]
  if unfinished:
    lines += ["Unfinished, left out: "
              + ", ".join(f"`{n}`" for n in unfinished) + ".", ""]
  path = epath.Path(out_dir) / "README.md"
  path.write_text("\n".join(lines))
  return str(path)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--sweep_dir", required=True,
                      help="Directory with one workdir per run.")
  parser.add_argument("--out", default="docs/results",
                      help="Directory for README.md and the PNGs.")
  parser.add_argument("--frontier_levels", default="",
                      help="Comma-separated levels of the primary statistic, "
                      "when the design fixed them in advance (e.g. 2,3,4); "
                      "empty: the levels whose step-0 success can move.")
  args = parser.parse_args()
  try:
    fixed = [int(d) for d in args.frontier_levels.split(",") if d.strip()]
  except ValueError:
    parser.error(f"--frontier_levels={args.frontier_levels!r}: expected "
                 "comma-separated level numbers, e.g. 2,3,4.")
  command = (f"python -m train.tools.sweep_report --sweep_dir={args.sweep_dir} "
             f"--out={args.out}"
             + (f" --frontier_levels={args.frontier_levels}" if fixed else ""))
  print(write_report(args.sweep_dir, args.out, command, fixed or None))


if __name__ == "__main__":
  main()
