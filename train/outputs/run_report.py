"""A run's report: PNG plots of the co-evolution dynamics and summary.json.

Reads only workdir/metrics.jsonl (and written_tasks.jsonl, the simulator's
tasks over the run, into written_tasks.md), so it can be regenerated at any time:
  python -m train.outputs.run_report --workdir=runs/default
"""

from __future__ import annotations

import json
import re

from etils import epath
import numpy as np

from train import heldout
from train.checkpoints import workdir as workdir_lib
from train.outputs import metrics_log
from train.outputs import written_tasks


def _series(records, name):
  """(steps, values) of one metric, in step order, last record per step wins."""
  points = {}
  for r in records:
    if r.get(name) is not None:
      points[r["step"]] = r[name]
  steps = sorted(points)
  return np.asarray(steps), np.asarray([points[s] for s in steps], float)


def _eval_levels(records, metric="accuracy"):
  names = {k for r in records for k in r
           if re.fullmatch(rf"eval/{metric}_d\d+", k)}
  return sorted(names, key=lambda n: int(n.rsplit("d", 1)[1]))


# The rollout's statistics of episodic domains (genenv_jax.coevolve.
# episode_metrics), summarised over the second half of the run.
EPISODE_METRICS = ("episode/turns", "episode/invalid_action_frac",
                   "episode/truncated_frac", "episode/observation_token_frac",
                   "episode/errors")


# Held-out evaluations averaged for a run's settled accuracy (one evaluation
# scores each test task once, so a single one is noisy).
EVAL_TAIL = 10


def summarize(records, alpha: float, band: float) -> dict:
  """Figures the acceptance criteria read, computed from metrics records."""
  steps, success = _series(records, "env/success_rate")
  summary = {"alpha": alpha, "band": band}
  if records:  # the latest step logged (0 for a warm-start-only run)
    summary["last_step"] = max(int(r["step"]) for r in records)
  if len(steps):
    half = steps > steps.max() / 2
    in_band = np.abs(success - alpha) <= band + 1e-6
    summary.update({
        "num_logged_steps": int(len(steps)),
        "success_rate_first": float(success[0]),
        "success_rate_second_half_mean": float(success[half].mean()),
        "success_rate_last": float(success[-1]),
        "second_half_in_band_frac": float(in_band[half].mean()),
    })
    valid_steps, valid = _series(records, "env/valid_frac")
    if len(valid_steps):  # the share of generations that were valid tasks
      summary["valid_fraction_first"] = float(valid[0])
      summary["valid_fraction_second_half_mean"] = float(
          valid[valid_steps > steps.max() / 2].mean())
    _, difficulty = _series(records, "env/difficulty_mean")
    summary["difficulty_first"] = float(difficulty[0])
    summary["difficulty_last"] = float(difficulty[-1])
    quarter = max(len(difficulty) // 4, 1)
    summary["difficulty_first_quarter_mean"] = float(difficulty[:quarter].mean())
    summary["difficulty_last_quarter_mean"] = float(difficulty[-quarter:].mean())
    _, compiles = _series(records, "perf/compiles")
    summary["compiles"] = int(compiles.max()) if len(compiles) else None
    _, step_time = _series(records, "perf/step_time_s")
    summary["step_time_s_median"] = (float(np.median(step_time))
                                     if len(step_time) else None)
    for name in EPISODE_METRICS:
      s, v = _series(records, name)
      if len(s):
        summary[f"{name}_first"] = float(v[0])
        summary[f"{name}_second_half_mean"] = float(
            v[s > steps.max() / 2].mean())
  for name in (["eval/accuracy", "eval/sampled_success"] + _eval_levels(records)
               + _eval_levels(records, "sampled_success")):
    s, v = _series(records, name)
    if len(s):
      summary[f"{name}_start"] = float(v[0])
      summary[f"{name}_end"] = float(v[-1])
      summary[f"{name}_last{EVAL_TAIL}_mean"] = float(v[-EVAL_TAIL:].mean())
  # The last evaluation against the step-0 agent, task by task
  # (train/heldout.py): per level, and pooled over the frontier levels.
  paired = {k for r in records for k in r if re.fullmatch(
      r"eval/((fixed|broken|sign_test_p|sampled_gain(_se|_t|_p)?)_d\d+"
      r"|frontier_\w+)", k)}
  for name in sorted(paired):
    summary[name] = float(_series(records, name)[1][-1])
  summary["frontier_levels"] = frontier_levels(records)
  return summary


def frontier_levels(records) -> list[int]:
  """The levels whose step-0 held-out accuracy is heldout.on_frontier
  (those the frontier figures pool)."""
  step0 = [r for r in records if r.get("step") == 0]
  return [int(name.rsplit("d", 1)[1]) for name in _eval_levels(step0)
          if heldout.on_frontier(_series(step0, name)[1][0])]


def frontier_line(summary: dict) -> str:
  """One line of the frontier figures in `summary` ("" when it has none):
  fixed / broken with the one-sided sign test's p, and the sampled-success
  gain with its 95% interval and p."""
  if "eval/frontier_fixed" not in summary:
    return ""
  line = (f"frontier (levels {summary['frontier_levels']}): "
          f"{summary['eval/frontier_fixed']:.0f} fixed / "
          f"{summary['eval/frontier_broken']:.0f} broken "
          f"(p = {summary['eval/frontier_sign_test_p']:.2g})")
  if "eval/frontier_sampled_gain" in summary:
    line += (f"; sampled success {summary['eval/frontier_sampled_gain']:+.3f}"
             f" [{summary['eval/frontier_sampled_gain_low']:+.3f}, "
             f"{summary['eval/frontier_sampled_gain_high']:+.3f}] "
             f"(p = {summary['eval/frontier_sampled_gain_p']:.2g})")
  return line


# Step metrics are logged as means over each log window (train/outputs/metrics_log.py).
_STEP_AXIS = "co-evolution step (points: means over log windows)"


def plot(records, out_dir: str, alpha: float, band: float,
         summary: dict | None = None) -> list[str]:
  """Writes the dynamics plots as PNGs into out_dir; returns their paths."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  paths = []

  def save(fig, name):
    path = epath.Path(out_dir) / name
    fig.tight_layout()
    with path.open("wb") as f:
      fig.savefig(f, format="png", dpi=110)
    plt.close(fig)
    paths.append(str(path))

  fig, ax = plt.subplots(figsize=(7, 4))
  ax.axhspan(alpha - band, alpha + band, color="tab:green", alpha=0.15,
             label=f"α band [{alpha - band:.2f}, {alpha + band:.2f}]")
  ax.axhline(alpha, color="tab:green", lw=1)
  for name, label in (("env/success_rate", "success rate on generated tasks"),
                      ("env/in_band_frac", "fraction of tasks in band"),
                      ("env/informative_frac",
                       "fraction of tasks whose attempts disagree"),
                      ("env/valid_frac", "valid fraction")):
    s, v = _series(records, name)
    ax.plot(s, v, label=label)
  ax.set_xlabel(_STEP_AXIS)
  ax.set_ylim(-0.02, 1.02)
  ax.legend(loc="best", fontsize=8)
  ax.set_title("Simulator: success rate of the agent on what it writes")
  save(fig, "success_rate.png")

  fig, ax = plt.subplots(figsize=(7, 4))
  levels = sorted({int(k.rsplit("d", 1)[1]) for r in records for k in r
                   if k.startswith("env/difficulty_frac_d")})
  if levels:
    steps, _ = _series(records, f"env/difficulty_frac_d{levels[0]}")
    fracs = [_series(records, f"env/difficulty_frac_d{d}")[1] for d in levels]
    ax.stackplot(steps, *fracs, labels=[f"d{d}" for d in levels], alpha=0.8)
    ax.set_ylabel("share of valid generated tasks")
  ax2 = ax.twinx()
  s, v = _series(records, "env/difficulty_mean")
  ax2.plot(s, v, color="black", lw=2, label="mean difficulty")
  ax2.set_ylabel("mean difficulty")
  ax.set_xlabel(_STEP_AXIS)
  ax.legend(loc="upper left", fontsize=8)
  ax2.legend(loc="upper right", fontsize=8)
  ax.set_title("Simulator: difficulty of generated tasks")
  save(fig, "difficulty.png")

  fig, ax = plt.subplots(figsize=(7, 4))
  for name in ["eval/accuracy"] + _eval_levels(records):
    s, v = _series(records, name)
    line, = ax.plot(s, v, marker="o", ms=3,
                    lw=2.5 if name == "eval/accuracy" else 1,
                    label=name.replace("eval/accuracy_", "level ").replace(
                        "eval/accuracy", "overall"))
    s, v = _series(records, name.replace("accuracy", "sampled_success"))
    if len(s):
      ax.plot(s, v, ls="--", color=line.get_color(), lw=1)
  ax.set_xlabel("co-evolution step (0 = warm-started agent)")
  ax.set_ylabel("held-out accuracy (greedy; dashed: sampled success)")
  ax.set_ylim(-0.02, 1.02)
  ax.legend(fontsize=8)
  ax.set_title("Agent: held-out accuracy by difficulty")
  against_step0 = frontier_line(summary or {})
  if against_step0:  # under the axis label, so that tight_layout places it
    ax.set_xlabel("co-evolution step (0 = warm-started agent)\nvs step 0, "
                  + against_step0, fontsize=7)
  save(fig, "heldout_accuracy.png")

  fig, axes = plt.subplots(1, 3, figsize=(12, 3.5))
  for ax, names in zip(axes, (("agent/reward_mean", "agent/fresh_reward_mean"),
                              ("env/kl", "agent/kl"),
                              ("agent/loss", "env_update/loss"))):
    for name in names:
      s, v = _series(records, name)
      ax.plot(s, v, label=name)
    ax.set_xlabel(_STEP_AXIS)
    ax.legend(fontsize=8)
  save(fig, "training.png")

  if any("episode/turns" in r for r in records):
    fig, ax = plt.subplots(figsize=(7, 4))
    for name in EPISODE_METRICS[1:4]:
      s, v = _series(records, name)
      ax.plot(s, v, label=name)
    ax.set_ylim(-0.02, 1.02)
    ax.set_ylabel("share")
    ax2 = ax.twinx()
    s, v = _series(records, "episode/turns")
    ax2.plot(s, v, color="black", lw=2, label="turns per episode")
    ax2.set_ylabel("turns per episode")
    ax.set_xlabel(_STEP_AXIS)
    ax.legend(loc="upper left", fontsize=8)
    ax2.legend(loc="upper right", fontsize=8)
    ax.set_title("Agent: episodes on generated tasks")
    save(fig, "episodes.png")
  return paths


def write_report(workdir: str, config) -> dict:
  """Writes workdir/report/{*.png, summary.json}; returns the summary."""
  records = metrics_log.read_metrics(
      epath.Path(workdir) / metrics_log.METRICS_FILE)
  out_dir = epath.Path(workdir) / "report"
  out_dir.mkdir(parents=True, exist_ok=True)
  alpha, band = config.curriculum.alpha, config.curriculum.band
  summary = summarize(records, alpha, band)
  summary["plots"] = plot(records, out_dir, alpha, band, summary)
  written = written_tasks.markdown(written_tasks.read(workdir))
  if written:
    (out_dir / "written_tasks.md").write_text(written)
  (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
  return summary


def main():
  import argparse
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--workdir", required=True)
  workdir = parser.parse_args().workdir
  config = workdir_lib.read_run_config(workdir)
  print(json.dumps(write_report(workdir, config), indent=2))


if __name__ == "__main__":
  main()
