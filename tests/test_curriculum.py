"""Curriculum signals against hand-counted examples."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import default
from genenv_jax import curriculum

# Four tasks, four attempts each; task 2 is invalid.
REWARDS = jnp.array([[1.0, 0.0, 1.0, 1.0],   # 3 / 4
                     [0.0, 0.0, 0.0, 0.0],   # 0 / 4
                     [1.0, 1.0, 1.0, 1.0],   # invalid
                     [1.0, 1.0, 0.0, 0.0]])  # 2 / 4
VALID = jnp.array([True, True, False, True])


def _cfg(**fields):
  """The configs' curriculum block, p̂ per task unless fields say otherwise."""
  cfg = default.get_config().curriculum
  cfg.per_seed = False
  cfg.update(fields)
  return cfg


def test_success_rate_per_task_zeroes_invalid_tasks():
  p_hat = curriculum.success_rate(REWARDS, VALID)
  np.testing.assert_allclose(p_hat, [0.75, 0.0, 0.0, 0.5])


def test_success_rate_threshold_counts_partial_rewards():
  rewards = jnp.array([[0.9, 0.5, 1.0, 0.79]])
  p_hat = curriculum.success_rate(rewards, jnp.array([True]), threshold=0.8)
  np.testing.assert_allclose(p_hat, [0.5])


def test_success_rate_pools_valid_tasks_of_each_seed():
  # Seed 0: tasks 0 and 2 (invalid) -> 3 / 4. Seed 1: tasks 1 and 3 -> 2 / 8.
  # Seed 2 has no task.
  group_ids = jnp.array([0, 1, 0, 1], jnp.int32)
  pooled = jax.jit(curriculum.success_rate, static_argnums=(3,))(
      REWARDS, VALID, group_ids, 3)
  np.testing.assert_allclose(pooled, [0.75, 0.25, 0.0, 0.25])


def test_success_rate_rejects_bad_shapes():
  with pytest.raises(ValueError, match="valid"):
    curriculum.success_rate(REWARDS, VALID[:3])
  with pytest.raises(ValueError, match="num_groups"):
    curriculum.success_rate(REWARDS, VALID, jnp.zeros(4, jnp.int32))


def test_alpha_reward_values():
  p_hat = jnp.array([0.5, 0.25, 0.0, 0.4, 1.0])
  reward = curriculum.alpha_reward(p_hat, alpha=0.5, beta=20.0)
  expected = [1.0, math.exp(-1.25), math.exp(-5.0), math.exp(-0.2),
              math.exp(-5.0)]
  np.testing.assert_allclose(reward, expected, rtol=1e-6)


def test_uncertainty_and_learnability_rewards():
  p_hat = jnp.array([0.0, 0.25, 0.5, 0.75, 1.0])
  np.testing.assert_allclose(curriculum.uncertainty_reward(p_hat),
                             [0.0, 0.5, 1.0, 0.5, 0.0])
  np.testing.assert_allclose(curriculum.learnability_reward(p_hat),
                             [0.0, 0.75, 0.5, 0.25, 0.0])


def test_curriculum_reward_dispatch_and_unknown_name():
  cfg = _cfg()
  p_hat = jnp.array([0.0, 0.25, 0.75])
  for name, expected in (("alpha", [math.exp(-5.0), math.exp(-1.25),
                                    math.exp(-1.25)]),
                         ("uncertainty", [0.0, 0.5, 0.5]),
                         ("learnability", [0.0, 0.75, 0.25]),
                         ("variance", [0.0, 0.1875, 0.1875])):
    cfg.reward = name
    np.testing.assert_allclose(curriculum.curriculum_reward(p_hat, cfg),
                               expected, rtol=1e-6)
  cfg.reward = "novelty"
  with pytest.raises(ValueError, match=r"config\.curriculum\.reward.*alpha"):
    curriculum.curriculum_reward(p_hat, cfg)


def test_variance_reward_peaks_at_a_quarter_and_is_0_at_0_and_1():
  p_hat = jnp.array([0.0, 0.25, 0.5, 0.75, 1.0])
  np.testing.assert_allclose(curriculum.variance_reward(p_hat),
                             [0.0, 0.1875, 0.25, 0.1875, 0.0])


def test_an_unknown_reward_is_refused_by_the_config_check_naming_the_choices():
  from train import config_validation  # pylint: disable=g-import-not-at-top
  config = default.get_config()
  config.curriculum.reward = "novelty"
  with pytest.raises(ValueError, match=r"curriculum\.reward.*'alpha'.*'variance'"):
    config_validation.validate(config, 8)


# Five written tasks (token rows, 0 the pad): 0 and 1 the same question, 2 the
# same question with its last number changed, 3 another question, 4 invalid.
TASKS = jnp.array([[5, 6, 7, 8, 9, 0],
                   [5, 6, 7, 8, 9, 0],
                   [5, 6, 7, 8, 3, 0],
                   [11, 12, 13, 0, 0, 0],
                   [5, 6, 7, 8, 9, 0]])
TASK_MASK = TASKS != 0
TASK_VALID = jnp.array([True, True, True, True, False])


def test_task_similarity_is_the_jaccard_index_of_token_bigrams():
  sim = curriculum.task_similarity(TASKS, TASK_MASK)
  # 0, 1: the same 4 bigrams; 0, 2: 3 shared of 4 + 4 - 3 = 5 distinct;
  # 0, 3: none shared.
  np.testing.assert_allclose(sim[0, 1], 1.0)
  np.testing.assert_allclose(sim[0, 2], 3 / 5, rtol=1e-6)
  np.testing.assert_allclose(sim[0, 3], 0.0)
  np.testing.assert_allclose(sim, sim.T)
  # Pad is not a token: the same task with more pad after it is the same.
  padded = jnp.array([[11, 12, 13, 0, 0, 0], [11, 12, 13, 0, 0, 0]])
  np.testing.assert_allclose(
      curriculum.task_similarity(padded, padded != 0)[0, 1], 1.0)
  # A repeated bigram counts as often as it occurs (multisets).
  rep = jnp.array([[1, 2, 1, 2, 0], [1, 2, 0, 0, 0]])
  np.testing.assert_allclose(curriculum.task_similarity(rep, rep != 0)[0, 1],
                             1 / 3, rtol=1e-6)


def test_repetition_penalty_counts_the_near_duplicates_of_each_valid_task():
  # At threshold 0.5: tasks 0, 1, 2 are one another's neighbours (3 each),
  # task 3 only its own (1); the invalid copy 4 neither counts nor is
  # penalised. B = 4 valid tasks, λ = 0.8.
  penalty = curriculum.repetition_penalty(TASKS, TASK_MASK, TASK_VALID, 0.8,
                                          0.5)
  np.testing.assert_allclose(penalty, [0.6, 0.6, 0.6, 0.2, 0.0], rtol=1e-6)
  # At 0.9 the changed number splits task 2 off: 0 and 1 keep each other.
  penalty = curriculum.repetition_penalty(TASKS, TASK_MASK, TASK_VALID, 0.8,
                                          0.9)
  np.testing.assert_allclose(penalty, [0.4, 0.4, 0.2, 0.2, 0.0], rtol=1e-6)


def test_repetition_penalty_lowers_the_reward_under_every_reward_floored_at_0():
  # p̂ per task: .75, .5, .5, 1 (invalid: 0).
  rewards = jnp.array([[1.0, 1.0, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0],
                       [1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0],
                       [1.0, 1.0, 1.0, 1.0]])
  for reward in curriculum.REWARDS:
    plain = curriculum.compute(rewards, TASK_VALID, _cfg(reward=reward))
    out = curriculum.compute(
        rewards, TASK_VALID,
        _cfg(reward=reward, repetition_penalty=0.8, repetition_similarity=0.5),
        tasks=TASKS, task_mask=TASK_MASK)
    expected = np.maximum(np.asarray(plain.reward) - [0.6, 0.6, 0.6, 0.2, 0.0],
                          0.0)
    np.testing.assert_allclose(out.reward, expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(out.keep, plain.keep)  # p̂ decides the keep
  with pytest.raises(ValueError, match="repetition_penalty"):
    curriculum.compute(rewards, TASK_VALID, _cfg(repetition_penalty=0.8))


def test_in_band_includes_edges_and_excludes_invalid():
  p_hat = jnp.array([0.39, 0.4, 0.5, 0.6, 0.61, 0.6])
  valid = jnp.array([True, True, True, True, True, False])
  keep = curriculum.in_band(p_hat, valid, alpha=0.5, band=0.1)
  np.testing.assert_array_equal(keep, [False, True, True, True, False, False])


def test_rwr_weights_are_softmax_over_kept():
  reward = jnp.array([1.0, 0.5, 0.2, 0.9])
  keep = jnp.array([True, True, False, True])
  weights = curriculum.rwr_weights(reward, keep, temperature=2.0)
  total = math.exp(2.0) + math.exp(1.0) + math.exp(1.8)
  np.testing.assert_allclose(
      weights, [math.exp(2.0) / total, math.exp(1.0) / total, 0.0,
                math.exp(1.8) / total], rtol=1e-6)


def test_rwr_weights_nothing_kept_and_large_temperature():
  weights = curriculum.rwr_weights(jnp.array([1.0, 0.5]),
                                   jnp.array([False, False]), 1.0)
  np.testing.assert_array_equal(weights, [0.0, 0.0])
  # exp(200) overflows float32; the weights must not.
  weights = curriculum.rwr_weights(jnp.array([1.0, 0.9375]),
                                   jnp.array([True, True]), 200.0)
  small = math.exp(-12.5)
  np.testing.assert_allclose(weights, [1 / (1 + small), small / (1 + small)],
                             rtol=1e-6)


def test_default_config_holds_paper_values():
  cfg = _cfg()
  assert (cfg.alpha, cfg.band, cfg.rwr_temperature, cfg.reward) == (
      0.5, 0.1, 1.0, "alpha")
  # The band edge must get a visibly lower reward than α itself.
  edge = curriculum.alpha_reward(jnp.array(0.6), cfg.alpha, cfg.beta)
  assert float(edge) < 0.9


def test_compute_per_task():
  cfg = _cfg()
  out = jax.jit(lambda r, v: curriculum.compute(r, v, cfg))(REWARDS, VALID)
  np.testing.assert_allclose(out.p_hat, [0.75, 0.0, 0.0, 0.5])
  np.testing.assert_allclose(
      out.reward, [math.exp(-20 * 0.0625), math.exp(-5.0), 0.0, 1.0],
      rtol=1e-6)
  np.testing.assert_array_equal(out.keep, [False, False, False, True])
  np.testing.assert_allclose(out.weights, [0.0, 0.0, 0.0, 1.0])


def test_compute_per_seed():
  cfg = _cfg()
  cfg.per_seed = True
  cfg.band = 0.25
  group_ids = jnp.array([0, 1, 0, 1], jnp.int32)
  out = curriculum.compute(REWARDS, VALID, cfg, group_ids, 2)
  np.testing.assert_allclose(out.p_hat, [0.75, 0.25, 0.0, 0.25])
  r = math.exp(-1.25)
  np.testing.assert_allclose(out.reward, [r, r, 0.0, r], rtol=1e-6)
  np.testing.assert_array_equal(out.keep, [True, True, False, True])
  np.testing.assert_allclose(out.weights, [1 / 3, 1 / 3, 0.0, 1 / 3],
                             rtol=1e-6)
  with pytest.raises(ValueError, match="per_seed"):
    curriculum.compute(REWARDS, VALID, cfg)


# Six tasks, four attempts each; task 2 is invalid. p̂ = .75, 0, -, .5, .25, 1.
BAND_REWARDS = jnp.array([[1.0, 1.0, 0.0, 1.0],
                          [0.0, 0.0, 0.0, 0.0],
                          [1.0, 1.0, 1.0, 1.0],
                          [0.0, 1.0, 1.0, 0.0],
                          [0.0, 0.0, 1.0, 0.0],
                          [1.0, 1.0, 1.0, 1.0]])
BAND_VALID = jnp.array([True, True, False, True, True, True])
# R_env of each task under each reward, by hand (α = 0.5, β = 20; 0 where
# invalid): α: exp(-20 (p̂ - ½)²); uncertainty: 1 - 2|p̂ - ½|; learnability:
# 1 - p̂ when 0 < p̂ < 1, else 0; variance: p̂ (1 - p̂).
BAND_R = {
    "alpha": [math.exp(-1.25), math.exp(-5.0), 0.0, 1.0, math.exp(-1.25),
              math.exp(-5.0)],
    "uncertainty": [0.5, 0.0, 0.0, 1.0, 0.5, 0.0],
    "learnability": [0.25, 0.0, 0.0, 0.5, 0.75, 0.0],
    "variance": [0.1875, 0.0, 0.0, 0.25, 0.1875, 0.0],
}


def _softmax_over(rewards, kept):
  """exp(R_i) / Σ_kept exp(R_j) for the kept i (λ = 1), 0 elsewhere."""
  total = sum(math.exp(r) for r, k in zip(rewards, kept) if k)
  return [math.exp(r) / total if k else 0.0 for r, k in zip(rewards, kept)]


@pytest.mark.parametrize("reward", curriculum.REWARDS)
def test_keep_chooses_the_tasks_weighted_under_every_reward(reward):
  assert set(BAND_R) == set(curriculum.REWARDS)
  r = BAND_R[reward]
  # The band α ± 0.25 keeps p̂ = .75, .5 and .25 (edges included): three kept
  # tasks with rewards that differ under every reward.
  filtered = curriculum.compute(BAND_REWARDS, BAND_VALID,
                                _cfg(reward=reward, band=0.25))
  np.testing.assert_allclose(filtered.p_hat, [0.75, 0.0, 0.0, 0.5, 0.25, 1.0])
  np.testing.assert_allclose(filtered.reward, r, rtol=1e-6, atol=1e-7)
  kept = [True, False, False, True, True, False]
  np.testing.assert_array_equal(filtered.keep, kept)
  np.testing.assert_allclose(filtered.weights, _softmax_over(r, kept),
                             rtol=1e-6)
  # "informative": the valid tasks whose attempts disagree (0 < p̂ < 1),
  # whatever the band: the narrow band α ± 0.1 changes nothing here.
  informative = curriculum.compute(
      BAND_REWARDS, BAND_VALID,
      _cfg(reward=reward, band=0.1, keep="informative"))
  np.testing.assert_array_equal(informative.keep, kept)
  np.testing.assert_allclose(informative.weights, _softmax_over(r, kept),
                             rtol=1e-6)
  # "valid": every valid task is weighted by its reward alone, p̂ = 0 and 1
  # included.
  unfiltered = curriculum.compute(
      BAND_REWARDS, BAND_VALID, _cfg(reward=reward, band=0.25, keep="valid"))
  np.testing.assert_array_equal(unfiltered.keep, BAND_VALID)
  np.testing.assert_allclose(unfiltered.weights,
                             _softmax_over(r, np.asarray(BAND_VALID)),
                             rtol=1e-6)
  with pytest.raises(ValueError, match="curriculum.keep"):
    curriculum.compute(BAND_REWARDS, BAND_VALID, _cfg(keep="all"))


def test_informative_keeps_tasks_outside_a_narrow_band():
  # p̂ = .75 and .25 lie outside α ± 0.1 but carry a GRPO signal.
  band = curriculum.compute(BAND_REWARDS, BAND_VALID, _cfg(band=0.1))
  informative = curriculum.compute(BAND_REWARDS, BAND_VALID,
                                   _cfg(band=0.1, keep="informative"))
  np.testing.assert_array_equal(band.keep,
                                [False, False, False, True, False, False])
  np.testing.assert_array_equal(informative.keep,
                                [True, False, False, True, True, False])


def test_configs_default_filters_under_every_reward():
  assert default.get_config().curriculum.keep == "band"
  for arm in ("uncertainty", "learnability"):
    assert default.get_config(arm).curriculum.keep == "band"


def test_the_steps_curriculum_stage_penalises_repeats_of_the_written_rows():
  from genenv_jax import coevolve, domains  # pylint: disable=g-import-not-at-top
  from genenv_jax.domains.base import ParsedTasks  # pylint: disable=g-import-not-at-top
  config = default.get_config()
  config.curriculum.update(repetition_penalty=0.8, repetition_similarity=0.5)
  domain = domains.get_domain(config.task)
  num_tasks = config.coevolve.num_seeds * config.coevolve.variations
  # Every fresh task the same row, pad after it: each is near all B valid
  # ones, so the penalty λ B / B = λ takes every reward below 0.8 to 0.
  row = jnp.full((domain.task_len,), domain.pad_id, jnp.int32).at[:4].set(
      jnp.array([3, 4, 5, 6]))
  tasks = jnp.tile(row, (num_tasks, 1))
  fresh = ParsedTasks(
      prompt=None, prompt_mask=None, reference=None, reference_mask=None,
      valid=jnp.ones((num_tasks,), bool),
      difficulty=jnp.ones((num_tasks,), jnp.int32), task=tasks)
  success = jnp.tile(jnp.array([1.0, 0.0, 1.0, 0.0]), (num_tasks, 1))
  signals = coevolve.curriculum_signals(config, domain, fresh, success)
  np.testing.assert_allclose(signals.p_hat, 0.5)
  np.testing.assert_allclose(signals.reward, 1.0 - 0.8, rtol=1e-5)
  # Distinct rows (pad excluded from the overlap): each its own cluster.
  distinct = tasks.at[:, 0].set(jnp.arange(num_tasks) + 10).at[:, 1].set(
      jnp.arange(num_tasks) + 40).at[:, 2].set(jnp.arange(num_tasks) + 70)
  signals = coevolve.curriculum_signals(config, domain,
                                        fresh._replace(task=distinct), success)
  np.testing.assert_allclose(signals.reward, 1.0 - 0.8 / num_tasks, rtol=1e-5)
