"""Held-out evaluation of the agent by difficulty level (greedy decoding, and
optionally the sampled success rate), and the task-by-task comparison of two
agents on the held-out tasks. Episodic domains are played in their
environment (`genenv_jax.episodes`): a task is solved when its episode
succeeds."""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from genenv_jax import episodes
from genenv_jax import sharding
from genenv_jax.sampling import SamplingConfig, sample
from genenv_jax.domains.base import TaskDomain
from models.config import ModelConfig


# A level is on the agent's frontier when the step-0 agent's greedy accuracy
# there lies in this closed interval: it can still gain (and lose) there,
# unlike a level it always or never solves.
FRONTIER = (0.05, 0.8)


def sign_test_p(fixed: int, broken: int, alternative: str = "two-sided"
                ) -> float:
  """Exact sign test (scipy.stats.binomtest at ½) of fixed vs broken tasks:
  the chance, were two agents equally good, of a split at least this uneven
  ("two-sided"), or with at least this many fixed ("greater"). 1 when no
  task changed."""
  n = fixed + broken
  if not n:
    return 1.0
  return float(stats.binomtest(fixed, n, 0.5, alternative=alternative).pvalue)


def paired_counts(before: np.ndarray, now: np.ndarray) -> dict:
  """Two agents' answers to the same tasks, bool[t] each (right or wrong):
  fixed / broken, the tasks `now` answers right / wrong where `before` did
  not, and sign_test_p of that split."""
  fixed = int(np.sum(now & ~before))
  broken = int(np.sum(before & ~now))
  return {"fixed": fixed, "broken": broken,
          "sign_test_p": sign_test_p(fixed, broken)}


def paired_gain(before: np.ndarray, now: np.ndarray) -> dict:
  """The paired t-test of two agents' sampled success on the same t tasks
  (f32[t] each: the share of K sampled answers per task that are right).

  Returns gain (the mean of now - before over the tasks), gain_se (its
  standard error), gain_t (gain / gain_se), gain_p (two-sided p-value of t
  with t - 1 degrees of freedom) and gain_low / gain_high (the 95% interval
  gain ± t_{0.975, t-1} gain_se). With under two tasks or no variation the
  statistic is undefined: gain_t 0 and gain_p 1 (the interval collapses to
  the gain).
  """
  diff = np.asarray(now, np.float64) - np.asarray(before, np.float64)
  if diff.ndim != 1:
    raise ValueError(f"paired_gain takes f32[t] per agent; got {diff.shape}.")
  n = diff.size
  gain = float(diff.mean()) if n else 0.0
  se = float(diff.std(ddof=1) / np.sqrt(n)) if n > 1 else 0.0
  if se > 0:
    t = gain / se
    p = float(2 * stats.t.sf(abs(t), n - 1))
    half = float(stats.t.ppf(0.975, n - 1) * se)
  else:
    t, p, half = 0.0, 1.0, 0.0
  return {"gain": gain, "gain_se": se, "gain_t": float(t), "gain_p": p,
          "gain_low": gain - half, "gain_high": gain + half}


def on_frontier(accuracy: float) -> bool:
  """Whether a level whose step-0 greedy accuracy is `accuracy` lies on the
  frontier (FRONTIER, ends included)."""
  low, high = FRONTIER
  return low <= accuracy <= high


def frontier_levels(difficulty: np.ndarray, correct: np.ndarray
                    ) -> list[int]:
  """The levels whose greedy accuracy (of bool[n] answers to tasks of levels
  int[n]) is `on_frontier`: the levels an agent can measurably move on."""
  return [int(level) for level in np.unique(difficulty)
          if on_frontier(float(np.mean(correct[difficulty == level])))]


def _solved(domain: TaskDomain, agent_model: ModelConfig, params, rows,
            sampling: SamplingConfig, num_samples: int,
            success_threshold: float, key=None):
  """G = num_samples attempts at each of the n task rows int32[n, task_len],
  drawn from `key` (None: PRNGKey(0)): (bool[n·G] solved, int32[n·G]
  response tokens, or turns for episodes)."""
  parsed = domain.parse(rows, rows != domain.pad_id)
  key = jax.random.PRNGKey(0) if key is None else key
  valid = jnp.repeat(parsed.valid, num_samples)
  env = domain.environment
  if env is not None:
    played = episodes.rollout_episodes(
        agent_model, params, env, parsed.prompt, parsed.prompt_mask,
        env.reset(jnp.repeat(parsed.task, num_samples, axis=0)), key,
        sampling, num_samples)
    return played.success & valid, played.turns
  out = sample(agent_model, params, parsed.prompt, parsed.prompt_mask, key,
               sampling, num_samples)
  repeat = lambda x: jnp.repeat(x, num_samples, axis=0)
  reward = domain.verify(domain.canonical_stops(out.tokens, out.mask),
                         out.mask, repeat(parsed.reference),
                         repeat(parsed.reference_mask))
  return (reward >= success_threshold) & valid, out.lengths


def _sampling(domain: TaskDomain, temperature: float) -> SamplingConfig:
  return SamplingConfig(max_new_tokens=domain.response_len,
                        temperature=temperature, eos_ids=domain.stop_ids,
                        pad_id=domain.pad_id)


def answer_pass(domain: TaskDomain, agent_model: ModelConfig, mesh, rules,
                success_threshold: float = 1.0):
  """The jitted held-out pass (params, rows int32[n, task_len]) -> (correct
  bool[n], response lengths int32[n], turns for episodic domains): greedy
  decoding (or a greedy episode) of each task; the outputs replicated on
  `mesh`. Building it places nothing on a device
  (train/bench/compile_check.py compiles it with abstract arguments)."""

  @functools.partial(jax.jit, out_shardings=sharding.replicated(mesh))
  @sharding.in_mesh(mesh, rules)
  def answer(params, rows):
    return _solved(domain, agent_model, params, rows, _sampling(domain, 0.0),
                   1, success_threshold)

  return answer


def sampled_success_pass(domain: TaskDomain, agent_model: ModelConfig, mesh,
                         rules, samples: int, temperature: float,
                         success_threshold: float = 1.0):
  """The jitted pass (params, rows int32[n, task_len], key) -> f32[n]: the
  share of `samples` attempts (episodes) per task, sampled at `temperature`
  from `key`, that succeed; replicated on `mesh`. Two agents' passes with one
  key pair their samples (common random numbers)."""

  @functools.partial(jax.jit, out_shardings=sharding.replicated(mesh))
  @sharding.in_mesh(mesh, rules)
  def sampled_success(params, rows, key):
    ok, _ = _solved(domain, agent_model, params, rows,
                    _sampling(domain, temperature), samples,
                    success_threshold, key)
    return ok.reshape(-1, samples).mean(axis=1)

  return sampled_success


def _chunks(rows: np.ndarray, size: int) -> list[np.ndarray]:
  """int32[n, L] rows as consecutive blocks of `size` (0: one block of all),
  the last padded with repeats of its first row."""
  if size <= 0 or len(rows) <= size:
    return [rows]
  blocks = [rows[i:i + size] for i in range(0, len(rows), size)]
  last = blocks[-1]
  blocks[-1] = np.concatenate([last, np.repeat(last[:1], size - len(last), axis=0)])
  return blocks


class Answers(NamedTuple):
  """An agent's answers to the held-out tasks: correct bool[n] (greedy) and
  sampled f32[n] (the share of its sampled answers per task that are right;
  None when the evaluation samples none)."""
  correct: np.ndarray
  sampled: np.ndarray | None = None


class HeldoutEval:
  """Scores the agent on fixed held-out tasks: accuracy overall and per level,
  and task by task against a baseline agent (the step-0 agent in a run).

  Args:
    domain: the task domain.
    agent_model: the agent's architecture.
    rows: int32[n, task_len] held-out written tasks; difficulty: int32[n].
    mesh, rules: the layout the evaluation runs in.
    success_threshold: an answer counts as correct when its reward reaches it
      (partial-credit rewards do not count as accuracy).
    samples: > 0: also the success rate of this many answers (episodes) per
      task sampled at `temperature` (eval/sampled_success*), drawn from the
      same keys at every evaluation: PRNGKey(seed) for the first pass, its
      fold_in with i for pass i.
    rows_per_pass: > 0: the tasks are answered this many at a time (the last
      pass padded with repeats of its first task), so that one compiled pass
      of bounded memory serves a held-out set of any size; 0: all in one pass.
  """

  def __init__(self, domain: TaskDomain, agent_model: ModelConfig,
               rows: np.ndarray, difficulty: np.ndarray, mesh, rules,
               success_threshold: float = 1.0, samples: int = 0,
               temperature: float = 1.0, seed: int = 0, rows_per_pass: int = 0):
    self._levels = sorted(int(d) for d in np.unique(difficulty))
    self._difficulty = np.asarray(difficulty)
    rows = np.asarray(rows, np.int32)
    self._count = len(rows)
    # Every process holds the rows and gets every answer back (a replicated
    # output is readable on each process, however many share the mesh).
    self._passes = [sharding.from_host(chunk, sharding.replicated(mesh))
                    for chunk in _chunks(rows, rows_per_pass)]
    key = jax.random.PRNGKey(seed)
    self._keys = [key if i == 0 else jax.random.fold_in(key, i)
                  for i in range(len(self._passes))]
    # The jitted pass every evaluation runs (see `answer_pass`).
    self.answer = answer_pass(domain, agent_model, mesh, rules,
                              success_threshold)
    self._samples = samples
    self.sampled_success = (sampled_success_pass(
        domain, agent_model, mesh, rules, samples, temperature,
        success_threshold) if samples else None)

  def _answers(self, params) -> tuple[np.ndarray, np.ndarray]:
    """(correct bool[n], response lengths int32[n]) over every pass."""
    out = jax.device_get([self.answer(params, rows)[:2] for rows in self._passes])
    return tuple(np.concatenate([np.asarray(o[i]) for o in out])[:self._count]
                 for i in range(2))

  def _sampled(self, params) -> np.ndarray:
    """f32[n]: the sampled success rate of each task over every pass."""
    out = jax.device_get([self.sampled_success(params, rows, key)
                          for rows, key in zip(self._passes, self._keys)])
    return np.concatenate([np.asarray(o) for o in out])[:self._count]

  def correct(self, params) -> np.ndarray:
    """bool[n]: which held-out tasks the agent answers right."""
    return self._answers(params)[0]

  def __call__(self, params, baseline: Answers | None = None
               ) -> dict[str, float]:
    """The metrics of `metrics_and_answers`."""
    return self.metrics_and_answers(params, baseline)[0]

  def metrics_and_answers(self, params, baseline: Answers | None = None
                          ) -> tuple[dict[str, float], Answers]:
    """(metrics, `Answers`) from one pass over the held-out tasks.

    The metrics: eval/accuracy, eval/response_len and eval/accuracy_d<level>
    (with sampling, eval/sampled_success and eval/sampled_success_d<level>).
    With a baseline (another agent's Answers on these tasks) also, per level,
    `paired_counts` as eval/fixed_d<level>, eval/broken_d<level> and
    eval/sign_test_p_d<level>, and with sampling `paired_gain` as
    eval/sampled_gain{,_se,_t,_p}_d<level>; and pooled over the baseline's
    frontier levels (`frontier_levels`): eval/frontier_tasks,
    eval/frontier_fixed, eval/frontier_broken, eval/frontier_sign_test_p
    (one-sided: more fixed than broken) and eval/frontier_sampled_gain
    {,_se,_t,_p,_low,_high}."""
    correct, lengths = self._answers(params)
    metrics = {"eval/accuracy": float(np.mean(correct, dtype=np.float32)),
               "eval/response_len": float(np.mean(lengths, dtype=np.float32))}
    sampled = None
    if self._samples:
      sampled = self._sampled(params)
      metrics["eval/sampled_success"] = float(np.mean(sampled))
    if baseline is not None and baseline.correct.shape != correct.shape:
      raise ValueError(
          f"the baseline answers have shape {baseline.correct.shape}; the "
          f"held-out set has {correct.shape[0]} tasks.")
    paired_sampled = (baseline is not None and baseline.sampled is not None
                      and sampled is not None)
    for level in self._levels:
      at_level = self._difficulty == level
      metrics[f"eval/accuracy_d{level}"] = float(
          np.mean(correct[at_level], dtype=np.float32))
      if sampled is not None:
        metrics[f"eval/sampled_success_d{level}"] = float(
            np.mean(sampled[at_level]))
      if baseline is not None:
        paired = paired_counts(baseline.correct[at_level], correct[at_level])
        for name, value in paired.items():
          metrics[f"eval/{name}_d{level}"] = float(value)
      if paired_sampled:
        gain = paired_gain(baseline.sampled[at_level], sampled[at_level])
        for name in ("gain", "gain_se", "gain_t", "gain_p"):
          metrics[f"eval/sampled_{name}_d{level}"] = gain[name]
    if baseline is not None:
      metrics.update(self._frontier_metrics(baseline, correct, sampled))
    return metrics, Answers(correct, sampled)

  def _frontier_metrics(self, baseline: Answers, correct: np.ndarray,
                        sampled: np.ndarray | None) -> dict[str, float]:
    """The task-by-task comparison pooled over the baseline's frontier
    levels (see metrics_and_answers)."""
    on = np.isin(self._difficulty,
                 frontier_levels(self._difficulty, baseline.correct))
    counts = paired_counts(baseline.correct[on], correct[on])
    metrics = {
        "eval/frontier_tasks": float(on.sum()),
        "eval/frontier_fixed": float(counts["fixed"]),
        "eval/frontier_broken": float(counts["broken"]),
        "eval/frontier_sign_test_p": sign_test_p(
            counts["fixed"], counts["broken"], "greater")}
    if baseline.sampled is not None and sampled is not None:
      for name, value in paired_gain(baseline.sampled[on],
                                     sampled[on]).items():
        metrics[f"eval/frontier_sampled_{name}"] = value
    return metrics
