"""Losses against hand-computed values and analytic gradients."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import default
from genenv_jax import coevolve
from genenv_jax import losses

EPS = 1e-6


def _cfg(**overrides):
  cfg = default.get_config().grpo
  cfg.update(overrides)
  return cfg


def _simulator_pg_cfg(**simulator_update):
  """The simulator's PG settings (coevolve.simulator_pg_config) of the
  default config with these config.simulator_update fields."""
  config = default.get_config()
  config.simulator_update.update(simulator_update)
  return coevolve.simulator_pg_config(config)


# ---------------------------------------------------------------- advantages

GROUPED_REWARDS = jnp.array([1.0, 0.0, 0.0,    # mean 1/3, std sqrt(2)/3
                             0.3, 0.3, 0.3,    # no signal
                             2.0, 1.0, 0.0])   # mean 1, std sqrt(2/3)


def test_group_advantages_normalised():
  adv = jax.jit(losses.group_advantages, static_argnums=1)(GROUPED_REWARDS, 3)
  s1, s3 = math.sqrt(2) / 3 + EPS, math.sqrt(2 / 3) + EPS
  expected = [(2 / 3) / s1, (-1 / 3) / s1, (-1 / 3) / s1, 0.0, 0.0, 0.0,
              1 / s3, 0.0, -1 / s3]
  np.testing.assert_allclose(adv, expected, rtol=1e-6, atol=1e-7)
  assert adv[3] == 0.0 and adv[4] == 0.0 and adv[5] == 0.0


def test_group_advantages_unnormalised_and_invalid_groups():
  adv = losses.group_advantages(GROUPED_REWARDS, 3, normalize_std=False,
                                valid=jnp.array([True, True, False]))
  np.testing.assert_allclose(adv, [2 / 3, -1 / 3, -1 / 3, 0, 0, 0, 0, 0, 0],
                             rtol=1e-6, atol=1e-7)


def test_group_advantages_invalid_rows_leave_mean_and_std():
  valid = jnp.array([True, True, False, True, True, True, False, False, True])
  adv = losses.group_advantages(GROUPED_REWARDS, 3, valid=valid)
  # Group 0 members {1, 0}: mean .5, std .5. Group 2 has one member: no signal.
  expected = [0.5 / (0.5 + EPS), -0.5 / (0.5 + EPS), 0, 0, 0, 0, 0, 0, 0]
  np.testing.assert_allclose(adv, expected, rtol=1e-6, atol=1e-7)


def test_dynamic_sampling_takes_informative_groups_first_in_order():
  # Four groups of two: [1, 1] agrees, [0, 1] and [1, 0] disagree, [0, 0]
  # agrees; the last group's second row is invalid, so it agrees too.
  rewards = jnp.array([1., 1., 0., 1., 0., 0., 1., 0., 1., 0.])
  valid = jnp.array([True] * 8 + [True, False])
  groups, informative = losses.informative_groups_first(rewards, 2, 3,
                                                        valid=valid)
  np.testing.assert_array_equal(groups, [1, 3, 0])
  np.testing.assert_array_equal(informative, [True, True, False])
  # Fewer slots than informative groups: the first ones, in order.
  groups, informative = losses.informative_groups_first(rewards, 2, 1)
  np.testing.assert_array_equal(groups, [1])
  # Without the mask the last group disagrees.
  groups, informative = losses.informative_groups_first(rewards, 2, 5)
  np.testing.assert_array_equal(groups, [1, 3, 4, 0, 2])
  np.testing.assert_array_equal(informative, [True] * 3 + [False] * 2)
  with pytest.raises(ValueError, match=r"num_kept=6 must lie in \[1, 5\]"):
    losses.informative_groups_first(rewards, 2, 6)


def test_group_advantages_rejects_bad_layout():
  with pytest.raises(ValueError, match="group_size"):
    losses.group_advantages(jnp.zeros(7), 3)
  with pytest.raises(ValueError, match="valid"):
    losses.group_advantages(jnp.zeros(6), 3, valid=jnp.ones(4, bool))


# ----------------------------------------------------------------- KL, means

def test_kl_estimators():
  logp = jnp.array([-1.0, -2.0, -1.5])
  ref = jnp.array([-2.0, -1.0, -1.5])
  np.testing.assert_allclose(losses.kl_estimate(logp, ref, "k1"),
                             [1.0, -1.0, 0.0])
  np.testing.assert_allclose(losses.kl_estimate(logp, ref, "k2"),
                             [0.5, 0.5, 0.0])
  # k3 = exp(r) - r - 1 with r = ref - logp.
  np.testing.assert_allclose(losses.kl_estimate(logp, ref, "k3"),
                             [math.exp(-1.0), math.e - 2.0, 0.0], rtol=1e-6)
  with pytest.raises(ValueError, match="kl_estimator"):
    losses.kl_estimate(logp, ref, "k4")


def test_aggregate_ragged_mask():
  x = jnp.array([[1.0, 2.0, 3.0], [4.0, 5.0, jnp.nan], [7.0, 8.0, 9.0]])
  mask = jnp.array([[True, True, True], [True, False, False],
                    [False, False, False]])
  assert float(losses.aggregate(x, mask, "token")) == pytest.approx(2.5)
  # Sequence means 2 and 4; the empty sequence does not count.
  assert float(losses.aggregate(x, mask, "sequence")) == pytest.approx(3.0)
  empty = jnp.zeros_like(mask)
  assert float(losses.aggregate(x, empty, "token")) == 0.0
  assert float(losses.aggregate(x, empty, "sequence")) == 0.0
  with pytest.raises(ValueError, match="aggregation"):
    losses.aggregate(x, mask, "batch")


# --------------------------------------------------------------- GRPO value

# Sequence 0 (A = +1): ratios 1.5 (clipped at 1 + .3), .7 (below 1 - .2, but
# the unclipped term is the smaller one), 1.1. Sequence 1 (A = -1): ratios .5
# (clipped at 1 - .2), 1.4 (unclipped is smaller), third token masked.
RATIOS = np.array([[1.5, 0.7, 1.1], [0.5, 1.4, 0.9]], np.float32)
OLD_LOGP = jnp.full((2, 3), -1.0)
LOGP = OLD_LOGP + jnp.log(RATIOS)
MASK = jnp.array([[True, True, True], [True, True, False]])
ADV = jnp.array([1.0, -1.0])
PG = np.array([[-1.3, -0.7, -1.1], [0.8, 1.4, 0.0]])


def test_grpo_loss_clipping_low_and_high():
  cfg = _cfg(clip_low=0.2, clip_high=0.3, kl_coef=0.0)
  loss, metrics = jax.jit(lambda *a: losses.grpo_loss(*a, cfg))(
      LOGP, OLD_LOGP, LOGP, MASK, ADV)
  assert float(loss) == pytest.approx(-0.9 / 5, rel=1e-5)
  assert float(metrics["pg_loss"]) == pytest.approx(-0.9 / 5, rel=1e-5)
  assert float(metrics["clip_frac"]) == pytest.approx(2 / 5)
  assert float(metrics["ratio_mean"]) == pytest.approx(5.2 / 5, rel=1e-5)
  assert float(metrics["kl"]) == 0.0
  assert all(v.shape == () for v in metrics.values())

  cfg.aggregation = "sequence"
  loss, _ = jax.jit(lambda *a: losses.grpo_loss(*a, cfg))(
      LOGP, OLD_LOGP, LOGP, MASK, ADV)
  assert float(loss) == pytest.approx((-3.1 / 3 + 2.2 / 2) / 2, rel=1e-5)


def test_grpo_loss_kl_and_entropy_terms():
  cfg = _cfg(clip_low=0.2, clip_high=0.3, kl_coef=0.1, entropy_coef=0.01)
  ref = LOGP - jnp.array([[0.5, -0.5, 0.0], [1.0, 0.2, 3.0]])
  r = np.asarray(ref - LOGP)
  k3 = np.exp(r) - r - 1
  entropy = jnp.array([[1.0, 2.0, 3.0], [4.0, 5.0, 100.0]])
  loss, metrics = jax.jit(lambda *a: losses.grpo_loss(*a, cfg, entropy))(
      LOGP, OLD_LOGP, ref, MASK, ADV)
  mask = np.asarray(MASK)
  kl = k3[mask].sum() / 5
  assert float(metrics["kl"]) == pytest.approx(kl, rel=1e-5)
  assert float(metrics["entropy"]) == pytest.approx(15.0 / 5)
  assert float(loss) == pytest.approx(-0.9 / 5 + 0.1 * kl - 0.01 * 3.0,
                                      rel=1e-5)
  with pytest.raises(ValueError, match="entropy"):
    losses.grpo_loss(LOGP, OLD_LOGP, ref, MASK, ADV, cfg)


def test_grpo_pg_term_normalised_over_informative_rows_only():
  """pg_normalizer="informative": the policy-gradient term is averaged over
  the tokens of rows with a nonzero advantage; the KL term keeps every
  response token. Three rows: the two of PG above and one with A = 0."""
  logp = jnp.concatenate([LOGP, jnp.full((1, 3), -1.0)])
  old = jnp.concatenate([OLD_LOGP, jnp.full((1, 3), -1.5)])
  ref = logp - 0.5
  mask = jnp.concatenate([MASK, jnp.ones((1, 3), bool)])
  adv = jnp.array([1.0, -1.0, 0.0])
  k3 = np.exp(-0.5) + 0.5 - 1  # per token: r = ref - logp = -0.5
  for normalizer, pg_tokens in (("all", 8), ("informative", 5)):
    cfg = _cfg(clip_low=0.2, clip_high=0.3, kl_coef=0.1,
               pg_normalizer=normalizer)
    loss, metrics = jax.jit(lambda *a, c=cfg: losses.grpo_loss(*a, c))(
        logp, old, ref, mask, adv)
    assert float(metrics["pg_loss"]) == pytest.approx(-0.9 / pg_tokens,
                                                      rel=1e-5)
    assert float(metrics["kl"]) == pytest.approx(k3, rel=1e-5)
    assert float(loss) == pytest.approx(-0.9 / pg_tokens + 0.1 * k3,
                                        rel=1e-5)
  with pytest.raises(ValueError, match="pg_normalizer"):
    losses.grpo_loss(logp, old, ref, mask, adv, _cfg(pg_normalizer="rows"))


# ------------------------------------------------------------ GRPO gradient

VOCAB = 4
TOKENS = jnp.array([[0, 2, 1], [3, 3, 0], [1, 0, 2]])
GRAD_MASK = jnp.array([[True, True, True], [True, True, False],
                       [True, False, False]])
GRAD_ADV = jnp.array([1.5, -0.5, -1.0])


def _token_logp(theta):
  """Context-free categorical policy: log softmax(theta)[token]."""
  return jax.nn.log_softmax(theta)[TOKENS]


def _np_token_logp(theta):
  """_token_logp in numpy (float64), for the expected values."""
  theta = np.asarray(theta, np.float64)
  log_probs = theta - np.log(np.sum(np.exp(theta)))
  return log_probs[np.asarray(TOKENS)]


def _grad_logp(theta):
  """∇_θ log π(y) = onehot(y) - softmax(θ), as f64[N, T, V]."""
  theta = np.asarray(theta, np.float64)
  probs = np.exp(theta) / np.sum(np.exp(theta))
  return np.eye(VOCAB)[np.asarray(TOKENS)] - probs


def test_grpo_gradient_matches_policy_gradient_formula():
  theta = jnp.array([0.3, -0.2, 0.8, 0.0])
  theta_old = theta + jnp.array([0.05, -0.04, 0.03, -0.02])  # ratios near 1
  cfg = _cfg(kl_coef=0.0)
  old_logp = _token_logp(theta_old)

  def loss_fn(t):
    logp = _token_logp(t)
    return losses.grpo_loss(logp, old_logp, logp, GRAD_MASK, GRAD_ADV, cfg)[0]

  grad = jax.jit(jax.grad(loss_fn))(theta)
  ratio = np.exp(_np_token_logp(theta) - _np_token_logp(theta_old))
  assert np.max(np.abs(ratio - 1)) < 0.2  # nothing clipped
  weight = np.asarray(GRAD_ADV)[:, None] * ratio * np.asarray(GRAD_MASK)
  expected = -np.einsum("nt,ntv->v", weight, _grad_logp(theta)) / 6
  np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-7)

  # At old = current the ratio is 1: grad = -(1/#tokens) Σ A_i ∇logp_i.
  grad_on_policy = jax.jit(jax.grad(
      lambda t: losses.grpo_loss(_token_logp(t),
                                 jax.lax.stop_gradient(_token_logp(t)),
                                 _token_logp(t), GRAD_MASK, GRAD_ADV, cfg)[0]
  ))(theta)
  expected_on_policy = -np.einsum(
      "nt,ntv->v", np.asarray(GRAD_ADV)[:, None] * np.asarray(GRAD_MASK),
      _grad_logp(theta)) / 6
  np.testing.assert_allclose(grad_on_policy, expected_on_policy, rtol=1e-5,
                             atol=1e-7)


def test_grpo_gradient_with_clipping_and_k3_kl():
  theta = jnp.array([0.3, -0.2, 0.8, 0.0])
  theta_old = jnp.array([-0.5, 0.4, 0.2, 0.6])  # far: some tokens clip
  theta_ref = jnp.array([0.1, 0.1, -0.3, 0.2])
  cfg = _cfg(kl_coef=0.1, kl_estimator="k3", clip_low=0.2, clip_high=0.28)
  old_logp, ref_logp = _token_logp(theta_old), _token_logp(theta_ref)

  def loss_fn(t):
    return losses.grpo_loss(_token_logp(t), old_logp, ref_logp, GRAD_MASK,
                            GRAD_ADV, cfg)[0]

  grad = jax.jit(jax.grad(loss_fn))(theta)
  logp = _np_token_logp(theta)
  ratio = np.exp(logp - _np_token_logp(theta_old))
  adv = np.asarray(GRAD_ADV)[:, None]
  mask = np.asarray(GRAD_MASK)
  # The unclipped term carries the gradient unless the clipped one is smaller.
  clipped = np.clip(ratio, 0.8, 1.28) * adv < ratio * adv
  assert np.any(clipped & mask) and np.any(~clipped & mask)
  pg_weight = -np.where(clipped, 0.0, adv * ratio)
  # d/dlogp [exp(ref - logp) - (ref - logp) - 1] = 1 - exp(ref - logp).
  kl_weight = 0.1 * (1.0 - np.exp(_np_token_logp(theta_ref) - logp))
  weight = (pg_weight + kl_weight) * mask
  expected = np.einsum("nt,ntv->v", weight, _grad_logp(theta)) / 6
  np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-7)


def test_padding_values_do_not_reach_loss_or_gradient():
  theta = jnp.array([0.3, -0.2, 0.8, 0.0])
  old_logp = _token_logp(theta) - 0.1
  garbage = jnp.where(GRAD_MASK, 0.0, 200.0)  # exp(200) overflows float32
  cfg = _cfg(kl_coef=0.1)

  def loss_fn(t, pad):
    logp = _token_logp(t) + pad
    return (losses.grpo_loss(logp, old_logp - pad, old_logp - pad, GRAD_MASK,
                             GRAD_ADV, cfg)[0]
            + losses.rwr_loss(logp, old_logp - pad, GRAD_MASK,
                              jnp.array([0.5, 0.5, 0.0]), 0.1)[0])

  value_and_grad = jax.jit(jax.value_and_grad(loss_fn))
  clean_loss, clean_grad = value_and_grad(theta, jnp.zeros_like(garbage))
  loss, grad = value_and_grad(theta, garbage)
  assert np.isfinite(float(clean_loss))
  np.testing.assert_allclose(loss, clean_loss, rtol=1e-6)
  np.testing.assert_allclose(grad, clean_grad, rtol=1e-6)


# ---------------------------------------------------------------------- RWR

def test_rwr_loss_value():
  logp = jnp.array([[-1.0, -2.0, -3.0], [-0.5, -0.5, -0.25],
                    [-4.0, -4.0, -4.0]])
  mask = jnp.array([[True, True, False], [True, True, True],
                    [True, True, True]])
  ref = logp - jnp.array([[0.1, 0.3, 5.0], [0.2, -0.2, 0.4], [9.0, 9.0, 9.0]])
  weights = jnp.array([0.7, 0.3, 0.0])
  loss, metrics = jax.jit(lambda *a: losses.rwr_loss(*a, 0.5, "k1"))(
      logp, ref, mask, weights)
  nll = 0.7 * 3.0 + 0.3 * 1.25
  kl = (0.1 + 0.3 + 0.2 - 0.2 + 0.4) / 5  # third sequence dropped
  assert float(metrics["nll"]) == pytest.approx(nll, rel=1e-6)
  assert float(metrics["kl"]) == pytest.approx(kl, rel=1e-5)
  assert float(loss) == pytest.approx(nll + 0.5 * kl, rel=1e-6)
  assert float(metrics["num_kept"]) == 2.0
  assert float(metrics["weight_entropy"]) == pytest.approx(
      -(0.7 * math.log(0.7) + 0.3 * math.log(0.3)), rel=1e-5)


def test_rwr_gradient_matches_weighted_likelihood_formula():
  theta = jnp.array([0.3, -0.2, 0.8, 0.0])
  theta_init = jnp.array([0.0, 0.5, -0.1, 0.2])
  ref_logp = _token_logp(theta_init)
  weights = jnp.array([0.6, 0.4, 0.0])
  grad = jax.jit(jax.grad(lambda t: losses.rwr_loss(
      _token_logp(t), ref_logp, GRAD_MASK, weights, kl_coef=0.2)[0]))(theta)
  logp = _np_token_logp(theta)
  w = np.asarray(weights)
  nll_weight = -w[:, None] * np.asarray(GRAD_MASK)
  kept_mask = np.asarray(GRAD_MASK) & (w > 0)[:, None]   # 5 tokens
  kl_weight = (0.2 * (1.0 - np.exp(_np_token_logp(theta_init) - logp))
               * kept_mask / 5)
  expected = np.einsum("nt,ntv->v", nll_weight + kl_weight, _grad_logp(theta))
  np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-7)


# ------------------------------------------------------------------- KL cap

def test_kl_cap_scale():
  cap_fn = jax.jit(losses.kl_cap_scale)
  assert float(cap_fn(0.04, 0.01)) == pytest.approx(0.5)
  assert float(cap_fn(0.09, 0.01)) == pytest.approx(1 / 3)
  assert float(cap_fn(0.005, 0.01)) == 1.0
  assert float(cap_fn(0.04, 0.0)) == 1.0
  assert float(cap_fn(0.0, 0.01)) == 1.0
  assert float(cap_fn(-0.3, 0.01)) == 1.0


def test_scale_update_interpolates_and_keeps_dtype():
  old = {"a": jnp.array([0.0, 2.0]), "b": jnp.array([1.0], jnp.bfloat16)}
  new = {"a": jnp.array([4.0, 4.0]), "b": jnp.array([3.0], jnp.bfloat16)}
  out = losses.scale_update(old, new, jnp.float32(0.25))
  np.testing.assert_allclose(out["a"], [1.0, 2.5])
  assert out["b"].dtype == jnp.bfloat16
  np.testing.assert_allclose(out["b"].astype(jnp.float32), [1.5])


# ------------------------------------------------------------ env PG loss

def test_simulator_pg_loss_groups_by_seed_and_drops_invalid():
  # Seed 0: R_env (1, 0, .5), third generation invalid -> members {1, 0}.
  # Seed 1: R_env (.2, .2, .8) -> mean .4, std sqrt(.08).
  rewards = jnp.array([1.0, 0.0, 0.5, 0.2, 0.2, 0.8])
  valid = jnp.array([True, True, False, True, True, True])
  lengths = np.array([2, 1, 2, 1, 2, 2])
  mask = jnp.asarray(np.arange(2)[None, :] < lengths[:, None])
  logp = jnp.full((6, 2), -1.0)
  ref = logp.at[2].set(-9.0)      # large KL on the invalid generation only
  cfg = _simulator_pg_cfg(kl_coef=0.5)
  loss, metrics = jax.jit(lambda lp, ref_lp, m, r, v: losses.simulator_pg_loss(
      lp, lp, ref_lp, m, r, 2, 3, cfg, valid=v))(logp, ref, mask, rewards,
                                                  valid)
  a0 = 0.5 / (0.5 + EPS)
  s1 = math.sqrt(0.08) + EPS
  adv = [a0, -a0, 0.0, -0.2 / s1, -0.2 / s1, 0.4 / s1]
  token_sum = sum(a * n for a, n, v in zip(adv, lengths, valid) if v)
  assert float(loss) == pytest.approx(-token_sum / 8, rel=1e-5)
  assert float(metrics["kl"]) == 0.0
  with pytest.raises(ValueError, match="num_seeds"):
    losses.simulator_pg_loss(logp, logp, ref, mask, rewards, num_seeds=3,
                       variations=3, cfg=cfg)


def _pg_metrics(rewards, baseline):
  """(grad of the loss wrt logp, metrics) of simulator_pg_loss over 2 seeds x
  2 variations, every token at log-prob -1 (so the ratio is 1)."""
  logp = jnp.full((4, 3), -1.0)
  mask = jnp.ones((4, 3), bool)

  def loss(lp):
    return losses.simulator_pg_loss(lp, logp, logp, mask, rewards, 2, 2,
                                    _simulator_pg_cfg(), baseline=baseline)
  grads, metrics = jax.grad(loss, has_aux=True)(logp)
  return grads, metrics


def test_simulator_pg_batch_baseline_learns_from_per_seed_rewards():
  # Per-seed p̂: both variations of a seed share R_env (0.2 and 0.8).
  rewards = jnp.array([0.2, 0.2, 0.8, 0.8])
  grads, metrics = _pg_metrics(rewards, "batch")
  assert float(metrics["adv_abs_mean"]) == pytest.approx(1.0, rel=1e-4)
  # Advantages -1 for seed 0, +1 for seed 1: the loss pushes seed 1's tokens
  # up (negative gradient) and seed 0's down, 12 tokens in the token mean.
  np.testing.assert_allclose(grads[:2], 1 / 12, rtol=1e-4)
  np.testing.assert_allclose(grads[2:], -1 / 12, rtol=1e-4)
  # The same rewards under the seed baseline: no signal at all.
  grads, metrics = _pg_metrics(rewards, "seed")
  assert float(metrics["adv_abs_mean"]) == 0.0
  np.testing.assert_array_equal(grads, 0.0)


def test_simulator_pg_seed_baseline_learns_from_per_task_rewards():
  grads, metrics = _pg_metrics(jnp.array([0.2, 0.8, 0.5, 0.1]), "seed")
  assert float(metrics["adv_abs_mean"]) > 0.5
  assert float(grads[0, 0]) > 0 > float(grads[1, 0])


def test_pg_baseline_that_zeroes_every_advantage_is_refused():
  with pytest.raises(ValueError, match=r"pg_baseline='seed'.*per_seed=True"):
    losses.check_pg_baseline("seed", per_seed=True)
  with pytest.raises(ValueError, match=r"config\.simulator_update\.pg_baseline"):
    losses.check_pg_baseline("seeds", per_seed=False)
  losses.check_pg_baseline("seed", per_seed=False)
  losses.check_pg_baseline("batch", per_seed=True)
