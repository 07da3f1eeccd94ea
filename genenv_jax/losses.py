"""Policy losses of both players, over per-token log-probabilities.

The caller runs the model and gathers the log-probabilities of the taken tokens;
these functions only combine arrays. Shapes for a batch of N responses of
length T:

  logp        f32[N, T] current policy log π(y_t | ...) (differentiated),
  old_logp    f32[N, T] behaviour policy that sampled the batch (constant),
  ref_logp    f32[N, T] reference policy for the KL term (constant),
  mask        bool[N, T] True on response tokens,
  advantages  f32[N]    one advantage per sequence.

Agent: GRPO (`grpo_loss` with `group_advantages`). Simulator: reward-weighted
regression (`rwr_loss`) with a KL cap on each update (`kl_cap_scale`,
`scale_update`), or policy gradient over seed variations (`simulator_pg_loss`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

KL_ESTIMATORS = ("k1", "k2", "k3")
AGGREGATIONS = ("token", "sequence")
# What the GRPO policy-gradient term is averaged over (config.grpo.pg_normalizer).
PG_NORMALIZERS = ("all", "informative")
PG_BASELINES = ("seed", "batch")


def group_advantages(rewards: jax.Array, group_size: int,
                     normalize_std: bool = True, eps: float = 1e-6,
                     valid: jax.Array | None = None) -> jax.Array:
  """Group-relative advantages (r - mean_group) / (std_group + eps).

  Args:
    rewards: f32[N], N = M * group_size, laid out as M consecutive groups.
    group_size: G (static).
    normalize_std: divide by the group's standard deviation (population std,
      over the valid members) plus eps.
    eps: added to the std.
    valid: optional bool[M] (per group) or bool[N] (per row). Invalid rows get
      advantage 0 and do not enter the mean and std of their group.

  Returns:
    f32[N] advantages; 0 for every row of a group whose valid rewards are all
    equal (no learning signal, never NaN).
  """
  if rewards.ndim != 1 or rewards.shape[0] % group_size:
    raise ValueError(f"rewards must be f32[M * group_size] with group_size="
                     f"{group_size}; got shape {rewards.shape}.")
  num_groups = rewards.shape[0] // group_size
  grouped = rewards.reshape(num_groups, group_size).astype(jnp.float32)
  if valid is None:
    member = jnp.ones_like(grouped, dtype=bool)
  elif valid.shape == (num_groups,):
    member = jnp.broadcast_to(valid.astype(bool)[:, None], grouped.shape)
  elif valid.shape == rewards.shape:
    member = valid.astype(bool).reshape(grouped.shape)
  else:
    raise ValueError(f"valid must be bool[{num_groups}] (per group) or "
                     f"bool[{rewards.shape[0]}] (per row); got shape "
                     f"{valid.shape}.")
  count = jnp.maximum(jnp.sum(member, axis=1, keepdims=True), 1)
  mean = jnp.sum(jnp.where(member, grouped, 0.0), axis=1, keepdims=True) / count
  centered = grouped - mean
  highest = jnp.max(jnp.where(member, grouped, -jnp.inf), axis=1, keepdims=True)
  lowest = jnp.min(jnp.where(member, grouped, jnp.inf), axis=1, keepdims=True)
  informative = member & (highest > lowest)
  if normalize_std:
    var = jnp.sum(jnp.where(member, jnp.square(centered), 0.0), axis=1,
                  keepdims=True) / count
    centered = centered / (jnp.sqrt(var) + eps)
  return jnp.where(informative, centered, 0.0).reshape(rewards.shape)


def informative_groups_first(rewards: jax.Array, group_size: int,
                             num_kept: int,
                             valid: jax.Array | None = None
                             ) -> tuple[jax.Array, jax.Array]:
  """DAPO's dynamic sampling at fixed shapes (Yu et al. 2025, "DAPO", §3.2:
  groups whose attempts all get the same reward are dropped and the batch
  refilled with groups sampled anew). Here the step samples more groups than
  the update trains on; the update takes `num_kept` of them, those whose
  valid attempts disagree first (in their order), then the others, which the
  caller masks out. No resampling loop: the shapes never change.

  Args:
    rewards: f32[N], N = M * group_size, M consecutive groups.
    group_size: G (static).
    num_kept: K <= M (static), the groups the update trains on.
    valid: optional bool[N] per row; a group is informative when its valid
      rows' rewards are not all equal.

  Returns:
    (int32[K] group indices, bool[K] whether each is informative).
  """
  num_groups = rewards.shape[0] // group_size
  if not 0 < num_kept <= num_groups:
    raise ValueError(f"num_kept={num_kept} must lie in [1, {num_groups}] (the "
                     "groups sampled).")
  grouped = rewards.reshape(num_groups, group_size).astype(jnp.float32)
  member = (jnp.ones_like(grouped, dtype=bool) if valid is None
            else valid.astype(bool).reshape(grouped.shape))
  highest = jnp.max(jnp.where(member, grouped, -jnp.inf), axis=1)
  lowest = jnp.min(jnp.where(member, grouped, jnp.inf), axis=1)
  informative = member.any(axis=1) & (highest > lowest)
  order = jnp.argsort(~informative, stable=True)[:num_kept]
  return order.astype(jnp.int32), informative[order]


def kl_estimate(logp: jax.Array, ref_logp: jax.Array,
                estimator: str) -> jax.Array:
  """Per-token estimates of KL(π || π_ref) from samples of π.

  Args:
    logp: f32[...] log π of the sampled tokens.
    ref_logp: f32[...] log π_ref of the same tokens.
    estimator: "k1" log π - log π_ref (unbiased, can be negative);
      "k2" ½ (log π - log π_ref)²; "k3" exp(r) - r - 1 with
      r = log π_ref - log π (unbiased, non-negative, low variance).

  Returns:
    f32[...] per-token estimates.
  """
  log_ratio = logp - ref_logp
  if estimator == "k1":
    return log_ratio
  if estimator == "k2":
    return 0.5 * jnp.square(log_ratio)
  if estimator == "k3":
    return jnp.exp(-log_ratio) + log_ratio - 1.0
  raise ValueError(f"kl_estimator = {estimator!r} is not one of "
                   f"{KL_ESTIMATORS}.")


def aggregate(per_token: jax.Array, mask: jax.Array, mode: str) -> jax.Array:
  """Reduces f32[N, T] per-token values over the True entries of bool[N, T] mask.

  Modes:
    "token": Σ x·mask / Σ mask over the whole batch (every token weighs the
      same; the token-level loss of DAPO / verl's token-mean).
    "sequence": the mean, over sequences with at least one token, of each
      sequence's token mean (every sequence weighs the same).

  Returns a scalar; 0 when the mask is all False.
  """
  mask = mask.astype(bool)
  masked = jnp.where(mask, per_token, 0.0)
  if mode == "token":
    return jnp.sum(masked) / jnp.maximum(jnp.sum(mask), 1)
  if mode == "sequence":
    lengths = jnp.sum(mask, axis=-1)
    sequence_means = jnp.sum(masked, axis=-1) / jnp.maximum(lengths, 1)
    return jnp.sum(sequence_means) / jnp.maximum(jnp.sum(lengths > 0), 1)
  raise ValueError(f"aggregation = {mode!r} is not one of {AGGREGATIONS}.")


def _token_mean(x: jax.Array, mask: jax.Array) -> jax.Array:
  return aggregate(x.astype(jnp.float32), mask, "token")


def grpo_loss(logp: jax.Array, old_logp: jax.Array, ref_logp: jax.Array,
              mask: jax.Array, advantages: jax.Array, cfg: Any,
              entropy: jax.Array | None = None
              ) -> tuple[jax.Array, dict[str, jax.Array]]:
  """PPO-clip surrogate with separate low/high clipping, KL penalty and entropy.

  Per token: -min(ρ A, clip(ρ, 1 - clip_low, 1 + clip_high) A)
             + kl_coef · KL_est(π || π_ref) - entropy_coef · H,
  with ρ = exp(logp - old_logp), each term aggregated by cfg.aggregation
  over the response tokens; with cfg.pg_normalizer = "informative" the first
  term only over the tokens of rows whose advantage is nonzero.

  Args:
    logp, old_logp, ref_logp: f32[N, T] (old and ref are not differentiated).
    mask: bool[N, T] response tokens.
    advantages: f32[N] per-sequence advantages (not differentiated).
    cfg: the `config.grpo` block (configs/default.py).
    entropy: optional f32[N, T] per-token policy entropy; required when
      cfg.entropy_coef != 0.

  Returns:
    (loss, metrics): scalar loss and scalar metrics pg_loss, kl, entropy (when
    given) aggregated like the loss; clip_frac (fraction of tokens whose
    clipped term is the active one, i.e. whose gradient is cut) and ratio_mean
    as token means.
  """
  if logp.ndim != 2 or advantages.shape != logp.shape[:1]:
    raise ValueError(f"logp must be f32[N, T] and advantages f32[N]; got "
                     f"logp {logp.shape}, advantages {advantages.shape}.")
  for name, array in (("old_logp", old_logp), ("ref_logp", ref_logp),
                      ("mask", mask)):
    if array.shape != logp.shape:
      raise ValueError(f"{name} must have logp's shape {logp.shape}; got "
                       f"{array.shape}.")
  if cfg.entropy_coef and entropy is None:
    raise ValueError(f"cfg.entropy_coef = {cfg.entropy_coef} needs the "
                     "per-token entropy f32[N, T].")
  mask = mask.astype(bool)
  # Padding may hold any value; zeroing it keeps exp() finite there, so no
  # inf * 0 turns into a NaN gradient.
  logp = jnp.where(mask, logp, 0.0)
  old_logp = jnp.where(mask, jax.lax.stop_gradient(old_logp), 0.0)
  ref_logp = jnp.where(mask, jax.lax.stop_gradient(ref_logp), 0.0)
  adv = jax.lax.stop_gradient(advantages)[:, None]
  ratio = jnp.exp(logp - old_logp)
  clipped_ratio = jnp.clip(ratio, 1.0 - cfg.clip_low, 1.0 + cfg.clip_high)
  unclipped_objective = ratio * adv
  clipped_objective = clipped_ratio * adv
  pg = -jnp.minimum(unclipped_objective, clipped_objective)
  kl = kl_estimate(logp, ref_logp, cfg.kl_estimator)
  # The policy-gradient term's normaliser: every response token, or only
  # those of rows with a nonzero advantage (the rest add exactly 0 to it), so
  # that a batch where few groups disagree is not diluted by the others.
  pg_mask = mask
  if cfg.pg_normalizer == "informative":
    pg_mask = mask & (adv != 0.0)
  elif cfg.pg_normalizer != "all":
    raise ValueError(f"pg_normalizer = {cfg.pg_normalizer!r} is not one of "
                     f"{PG_NORMALIZERS}.")
  pg_term = aggregate(pg, pg_mask, cfg.aggregation)
  kl_term = aggregate(kl, mask, cfg.aggregation)
  metrics = {
      "pg_loss": pg_term,
      "kl": kl_term,
      "clip_frac": _token_mean(clipped_objective < unclipped_objective, mask),
      "ratio_mean": _token_mean(ratio, mask),
  }
  loss = pg_term + cfg.kl_coef * kl_term
  if entropy is not None:
    metrics["entropy"] = aggregate(entropy, mask, cfg.aggregation)
    loss = loss - cfg.entropy_coef * metrics["entropy"]
  return loss, metrics


def rwr_loss(logp: jax.Array, ref_logp: jax.Array, mask: jax.Array,
             weights: jax.Array, kl_coef: float, kl_estimator: str = "k3"
             ) -> tuple[jax.Array, dict[str, jax.Array]]:
  """Reward-weighted regression of the simulator on its own generations.

  loss = -Σ_i w_i Σ_t mask_it logp_it  +  kl_coef · KL_est(π || π_init),
  the KL being a token mean over the tokens of kept generations (w_i > 0).

  Args:
    logp: f32[N, T] log-probs of the generated tokens under the simulator.
    ref_logp: f32[N, T] log-probs under the initial simulator (constant).
    mask: bool[N, T] generated tokens.
    weights: f32[N] RWR weights (normalised; 0 for dropped generations).
    kl_coef: KL penalty weight.
    kl_estimator: one of KL_ESTIMATORS.

  Returns:
    (loss, metrics) with scalars nll (the weighted negative log-likelihood), kl,
    num_kept and weight_entropy (-Σ w log w over kept generations).
  """
  if logp.ndim != 2 or weights.shape != logp.shape[:1]:
    raise ValueError(f"logp must be f32[N, T] and weights f32[N]; got logp "
                     f"{logp.shape}, weights {weights.shape}.")
  for name, array in (("ref_logp", ref_logp), ("mask", mask)):
    if array.shape != logp.shape:
      raise ValueError(f"{name} must have logp's shape {logp.shape}; got "
                       f"{array.shape}.")
  mask = mask.astype(bool)
  weights = jax.lax.stop_gradient(weights)
  logp = jnp.where(mask, logp, 0.0)
  ref_logp = jnp.where(mask, jax.lax.stop_gradient(ref_logp), 0.0)
  sequence_logp = jnp.sum(logp, axis=1)
  nll = -jnp.sum(weights * sequence_logp)
  kept = weights > 0
  kl = _token_mean(kl_estimate(logp, ref_logp, kl_estimator),
                   mask & kept[:, None])
  safe_weights = jnp.where(kept, weights, 1.0)
  metrics = {
      "nll": nll,
      "kl": kl,
      "num_kept": jnp.sum(kept).astype(jnp.float32),
      "weight_entropy": -jnp.sum(jnp.where(kept,
                                           weights * jnp.log(safe_weights),
                                           0.0)),
  }
  return nll + kl_coef * kl, metrics


def kl_cap_scale(kl: jax.Array, cap: float) -> jax.Array:
  """Step-size factor s ∈ (0, 1] that keeps one update's KL within cap.

  Args:
    kl: scalar KL between the pre-update policy and the candidate post-update
      policy, measured on the batch.
    cap: largest KL one update may cause; cap <= 0 disables the cap.

  Returns:
    s = min(1, sqrt(cap / kl)), using KL(s) ≈ s² KL(1) for the update scaled
    by s (KL is quadratic in a small parameter step). 1 when kl <= cap.
  """
  kl = jnp.asarray(kl, jnp.float32)
  cap = jnp.asarray(cap, jnp.float32)
  over = (cap > 0) & (kl > cap)
  return jnp.where(over, jnp.sqrt(cap / jnp.where(over, kl, 1.0)), 1.0)


def scale_update(old_params: Any, new_params: Any, s: jax.Array) -> Any:
  """old + s (new - old), leaf by leaf, keeping each leaf's dtype."""
  return jax.tree.map(
      lambda old, new: (old + s * (new - old)).astype(old.dtype),
      old_params, new_params)


def check_pg_baseline(baseline: str, per_seed: bool) -> None:
  """Refuses a simulator PG set-up whose advantages are all zero.

  Args:
    baseline: config.simulator_update.pg_baseline, one of PG_BASELINES.
    per_seed: config.curriculum.per_seed. With it, every variation of a seed
      shares one p̂ and so one R_env; a "seed" baseline (the mean over that
      seed's variations) then equals every reward of its group.
  """
  if baseline not in PG_BASELINES:
    raise ValueError(f"config.simulator_update.pg_baseline={baseline!r}; "
                     f"expected one of {PG_BASELINES}.")
  if baseline == "seed" and per_seed:
    raise ValueError(
        "config.simulator_update.pg_baseline='seed' with "
        "config.curriculum.per_seed=True gives every variation of a seed the "
        "same R_env and its group's mean as baseline: every advantage is 0. "
        "Use pg_baseline='batch', or per_seed=False (R_env from each task's "
        "own p̂).")


def simulator_pg_loss(logp: jax.Array, old_logp: jax.Array, ref_logp: jax.Array,
                      mask: jax.Array, rewards: jax.Array, num_seeds: int,
                      variations: int, cfg: Any, valid: jax.Array | None = None,
                      baseline: str = "seed"
                      ) -> tuple[jax.Array, dict[str, jax.Array]]:
  """Policy gradient for the simulator: GRPO with R_env as the reward.

  Rows are laid out seed-major (seed s, variation v at row s * variations + v).
  baseline "seed": the variations of a seed form one group (advantage =
  R_env minus the seed's mean, over its std), which needs R_env to differ
  between variations (per-task p̂); "batch": all N generations form one group,
  which also learns from R_env that is shared by a seed's variations
  (per-seed p̂): it credits a seed's batch of tasks with how well it landed
  against the other seeds' (see `check_pg_baseline`).

  Args:
    logp, old_logp, ref_logp, mask: as in `grpo_loss`, over N = num_seeds *
      variations generations (ref_logp: the initial simulator).
    rewards: f32[N] R_env per generation.
    num_seeds, variations: static group layout.
    cfg: the `config.grpo` block with the simulator's KL settings.
    valid: optional bool[N]; invalid generations are left out of their
      group's mean and std and out of the loss (their tokens are masked).
    baseline: one of PG_BASELINES.

  Returns:
    (loss, metrics) of `grpo_loss`, metrics plus adv_abs_mean (mean |A| over
    valid generations: 0 means no policy-gradient signal).
  """
  num_rows = num_seeds * variations
  if rewards.shape != (num_rows,) or logp.shape[0] != num_rows:
    raise ValueError(f"rewards must be f32[{num_rows}] and logp f32[{num_rows},"
                     f" T] for num_seeds={num_seeds}, variations={variations};"
                     f" got rewards {rewards.shape}, logp {logp.shape}.")
  if valid is not None and valid.shape != (num_rows,):
    raise ValueError(f"valid must be bool[{num_rows}]; got shape "
                     f"{valid.shape}.")
  if baseline not in PG_BASELINES:
    raise ValueError(f"baseline={baseline!r}; expected one of "
                     f"{PG_BASELINES}.")
  group_size = variations if baseline == "seed" else num_rows
  advantages = group_advantages(rewards, group_size, cfg.normalize_std,
                                valid=valid)
  member = (jnp.ones((num_rows,), bool) if valid is None
            else valid.astype(bool))
  if valid is not None:
    mask = mask.astype(bool) & member[:, None]
  loss, metrics = grpo_loss(logp, old_logp, ref_logp, mask, advantages, cfg)
  metrics["adv_abs_mean"] = (jnp.sum(jnp.where(member, jnp.abs(advantages), 0.))
                             / jnp.maximum(jnp.sum(member), 1))
  return loss, metrics
