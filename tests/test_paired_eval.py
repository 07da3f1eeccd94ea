"""The held-out evaluation's paired statistics (train/heldout.py) against
scipy and hand-computed counts, and the run report's frontier figures."""

import numpy as np
import pytest
from scipy import stats

from train import heldout
from train.outputs import run_report


def test_one_sided_sign_test_matches_the_binomial_tail_by_hand():
  # P(X >= 7 | n = 8, ½) = (8 + 1) / 256.
  assert heldout.sign_test_p(7, 1, "greater") == pytest.approx(9 / 256)
  # The other tail: P(X >= 1) = 1 - 1/256.
  assert heldout.sign_test_p(1, 7, "greater") == pytest.approx(255 / 256)
  assert heldout.sign_test_p(7, 1) == pytest.approx(18 / 256)
  assert heldout.sign_test_p(0, 0, "greater") == 1.0


def test_paired_gain_is_scipys_paired_t_test():
  rng = np.random.default_rng(3)
  before = rng.integers(0, 9, 200) / 8  # sampled success of K = 8 answers
  now = np.clip(before + rng.integers(-1, 3, 200) / 8, 0, 1)
  gain = heldout.paired_gain(before, now)
  reference = stats.ttest_rel(now, before)
  assert gain["gain"] == pytest.approx(np.mean(now - before))
  assert gain["gain_t"] == pytest.approx(reference.statistic)
  assert gain["gain_p"] == pytest.approx(reference.pvalue)
  interval = reference.confidence_interval(0.95)
  assert gain["gain_low"] == pytest.approx(interval.low)
  assert gain["gain_high"] == pytest.approx(interval.high)
  assert gain["gain_se"] == pytest.approx(
      np.std(now - before, ddof=1) / np.sqrt(200))


def test_paired_gain_without_variation_is_no_evidence():
  same = np.full(5, 0.25)
  assert heldout.paired_gain(same, same + 0.125) == dict(
      gain=pytest.approx(0.125), gain_se=0.0, gain_t=0.0, gain_p=1.0,
      gain_low=pytest.approx(0.125), gain_high=pytest.approx(0.125))
  assert heldout.paired_gain(np.array([0.5]), np.array([1.0]))["gain_p"] == 1.0
  with pytest.raises(ValueError, match=r"f32\[t\]"):
    heldout.paired_gain(np.zeros((2, 2)), np.zeros((2, 2)))


def test_frontier_levels_are_those_with_step0_accuracy_in_the_interval():
  difficulty = np.repeat([1, 2, 3, 4], 20)
  correct = np.concatenate([np.ones(20), np.r_[np.ones(16), np.zeros(4)],
                            np.r_[np.ones(1), np.zeros(19)], np.zeros(20)]
                           ).astype(bool)
  # Accuracies 1.0, 0.8 (the closed upper end), 0.05 (the lower end), 0.
  assert heldout.frontier_levels(difficulty, correct) == [2, 3]


def test_report_names_the_frontier_levels_and_their_figures():
  records = [
      {"step": 0, "eval/accuracy": 0.5, "eval/accuracy_d1": 1.0,
       "eval/accuracy_d2": 0.4, "eval/accuracy_d3": 0.0},
      {"step": 10, "env/success_rate": 0.5, "env/difficulty_mean": 2.0},
      {"step": 10, "eval/accuracy": 0.55, "eval/accuracy_d2": 0.5,
       "eval/frontier_fixed": 12.0, "eval/frontier_broken": 3.0,
       "eval/frontier_sign_test_p": heldout.sign_test_p(12, 3, "greater"),
       "eval/frontier_sampled_gain": 0.04,
       "eval/frontier_sampled_gain_low": 0.01,
       "eval/frontier_sampled_gain_high": 0.07,
       "eval/frontier_sampled_gain_p": 0.01},
  ]
  summary = run_report.summarize(records, 0.5, 0.1)
  assert summary["frontier_levels"] == [2]
  assert summary["eval/frontier_fixed"] == 12.0
  line = run_report.frontier_line(summary)
  assert line.startswith("frontier (levels [2]): 12 fixed / 3 broken (p = 0.018)")
  assert "+0.040 [+0.010, +0.070]" in line
  assert run_report.frontier_line({}) == ""
