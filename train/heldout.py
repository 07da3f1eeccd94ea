"""Held-out evaluation of the agent by difficulty level (greedy decoding, and
optionally the sampled success rate), and the task-by-task comparison of two
agents on the held-out tasks. Episodic domains are played in their
environment (`genenv_jax.episodes`): a task is solved when its episode
succeeds."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from genenv_jax import episodes
from genenv_jax import sharding
from genenv_jax.sampling import SamplingConfig, sample
from genenv_jax.tasks.base import TaskDomain
from models.config import ModelConfig


def sign_test_p(fixed: int, broken: int) -> float:
  """Two-sided exact sign test (scipy.stats.binomtest at ½): the chance, were
  two agents equally good, of a split of the fixed + broken tasks at least
  this uneven. 1 when no task changed."""
  n = fixed + broken
  if not n:
    return 1.0
  return float(stats.binomtest(fixed, n, 0.5).pvalue)


def paired_counts(before: np.ndarray, now: np.ndarray) -> dict:
  """Two agents' answers to the same tasks, bool[t] each (right or wrong):
  fixed / broken, the tasks `now` answers right / wrong where `before` did
  not, and sign_test_p of that split."""
  fixed = int(np.sum(now & ~before))
  broken = int(np.sum(before & ~now))
  return {"fixed": fixed, "broken": broken,
          "sign_test_p": sign_test_p(fixed, broken)}


def _solved(domain: TaskDomain, agent_model: ModelConfig, params, rows,
            sampling: SamplingConfig, num_samples: int,
            success_threshold: float):
  """G = num_samples attempts at each of the n task rows int32[n, task_len]:
  (bool[n·G] solved, int32[n·G] response tokens, or turns for episodes)."""
  parsed = domain.parse(rows, rows != domain.pad_id)
  key = jax.random.PRNGKey(0)
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
  """The jitted pass (params, rows int32[n, task_len]) -> f32[n]: the share
  of `samples` attempts (episodes) per task, sampled at `temperature`, that
  succeed; replicated on `mesh`."""

  @functools.partial(jax.jit, out_shardings=sharding.replicated(mesh))
  @sharding.in_mesh(mesh, rules)
  def sampled_success(params, rows):
    ok, _ = _solved(domain, agent_model, params, rows,
                    _sampling(domain, temperature), samples,
                    success_threshold)
    return ok.reshape(-1, samples).mean(axis=1)

  return sampled_success


class HeldoutEval:
  """Scores the agent on fixed held-out tasks: accuracy overall and per level.

  Args:
    domain: the task domain.
    agent_model: the agent's architecture.
    rows: int32[n, task_len] held-out written tasks; difficulty: int32[n].
    mesh, rules: the layout the evaluation runs in.
    success_threshold: an answer counts as correct when its reward reaches it
      (partial-credit rewards do not count as accuracy).
    samples: > 0: also the success rate of this many answers (episodes) per
      task sampled at `temperature` (eval/sampled_success*).
  """

  def __init__(self, domain: TaskDomain, agent_model: ModelConfig,
               rows: np.ndarray, difficulty: np.ndarray, mesh, rules,
               success_threshold: float = 1.0, samples: int = 0,
               temperature: float = 1.0):
    self._levels = sorted(int(d) for d in np.unique(difficulty))
    self._difficulty = np.asarray(difficulty)
    # Every process holds the rows and gets every answer back (a replicated
    # output is readable on each process, however many share the mesh).
    self._rows = sharding.from_host(np.asarray(rows, np.int32),
                                    sharding.replicated(mesh))
    # The jitted pass every evaluation runs (see `answer_pass`).
    self.answer = answer_pass(domain, agent_model, mesh, rules,
                              success_threshold)
    self._samples = samples
    self.sampled_success = (sampled_success_pass(
        domain, agent_model, mesh, rules, samples, temperature,
        success_threshold) if samples else None)

  def correct(self, params) -> np.ndarray:
    """bool[n]: which held-out tasks the agent answers right."""
    return np.asarray(jax.device_get(self.answer(params, self._rows)[0]))

  def __call__(self, params, baseline_correct: np.ndarray | None = None
               ) -> dict[str, float]:
    """The metrics of `metrics_and_answers`."""
    return self.metrics_and_answers(params, baseline_correct)[0]

  def metrics_and_answers(self, params,
                          baseline_correct: np.ndarray | None = None
                          ) -> tuple[dict[str, float], np.ndarray]:
    """(metrics, `correct`) from one pass over the held-out tasks.

    The metrics: eval/accuracy, eval/response_len and eval/accuracy_d<level>;
    with baseline_correct (bool[n], another agent's `correct`) also, per
    level, `paired_counts` against it as eval/fixed_d<level>,
    eval/broken_d<level> and eval/sign_test_p_d<level>."""
    correct, lengths = jax.device_get(self.answer(params, self._rows))
    correct = np.asarray(correct)
    metrics = {"eval/accuracy": float(np.mean(correct, dtype=np.float32)),
               "eval/response_len": float(np.mean(lengths, dtype=np.float32))}
    sampled = None
    if self._samples:
      sampled = np.asarray(jax.device_get(
          self.sampled_success(params, self._rows)))
      metrics["eval/sampled_success"] = float(np.mean(sampled))
    if baseline_correct is not None and baseline_correct.shape != correct.shape:
      raise ValueError(
          f"baseline_correct has shape {baseline_correct.shape}; the held-out "
          f"set has {correct.shape[0]} tasks.")
    for level in self._levels:
      at_level = self._difficulty == level
      metrics[f"eval/accuracy_d{level}"] = float(
          np.mean(correct[at_level], dtype=np.float32))
      if sampled is not None:
        metrics[f"eval/sampled_success_d{level}"] = float(
            np.mean(sampled[at_level]))
      if baseline_correct is not None:
        paired = paired_counts(baseline_correct[at_level], correct[at_level])
        for name, value in paired.items():
          metrics[f"eval/{name}_d{level}"] = float(value)
    return metrics, correct
