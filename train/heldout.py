"""Held-out evaluation of the agent by difficulty level (greedy decoding), and
the task-by-task comparison of two agents on the held-out tasks."""

from __future__ import annotations

import functools
import math

import jax
import numpy as np

from genenv_jax import sharding
from genenv_jax.sampling import SamplingConfig, sample
from genenv_jax.tasks.base import TaskDomain
from models.config import ModelConfig


def sign_test_p(fixed: int, broken: int) -> float:
  """Two-sided exact sign test: the chance, were two agents equally good, of a
  split of the fixed + broken tasks at least this uneven."""
  n = fixed + broken
  tail = sum(math.comb(n, i) for i in range(max(fixed, broken), n + 1))
  return min(1.0, 2.0 * tail / 2.0**n)


def paired_counts(before: np.ndarray, now: np.ndarray) -> dict:
  """Two agents' answers to the same tasks, bool[t] each (right or wrong):
  fixed / broken, the tasks `now` answers right / wrong where `before` did
  not, and sign_test_p of that split."""
  fixed = int(np.sum(now & ~before))
  broken = int(np.sum(before & ~now))
  return {"fixed": fixed, "broken": broken,
          "sign_test_p": sign_test_p(fixed, broken)}


def answer_pass(domain: TaskDomain, agent_model: ModelConfig, mesh, rules,
                success_threshold: float = 1.0):
  """The jitted held-out pass (params, rows int32[n, task_len]) -> (correct
  bool[n], response lengths int32[n]): greedy decoding of each task, scored
  by the domain's verifier; the outputs replicated on `mesh`. Building it
  places nothing on a device (train/bench/compile_check.py compiles it with
  abstract arguments)."""
  replicated = sharding.replicated(mesh)
  greedy = SamplingConfig(max_new_tokens=domain.response_len, temperature=0.0,
                          eos_ids=domain.stop_ids, pad_id=domain.pad_id)

  @functools.partial(jax.jit, out_shardings=replicated)
  @sharding.in_mesh(mesh, rules)
  def answer(params, rows):
    parsed = domain.parse(rows, rows != domain.pad_id)
    out = sample(agent_model, params, parsed.prompt, parsed.prompt_mask,
                 jax.random.PRNGKey(0), greedy)
    reward = domain.verify(domain.canonical_stops(out.tokens, out.mask),
                           out.mask, parsed.reference, parsed.reference_mask)
    return (reward >= success_threshold) & parsed.valid, out.lengths

  return answer


class HeldoutEval:
  """Scores the agent on fixed held-out tasks: accuracy overall and per level.

  Args:
    domain: the task domain.
    agent_model: the agent's architecture.
    rows: int32[n, task_len] held-out written tasks; difficulty: int32[n].
    mesh, rules: the layout the evaluation runs in.
    success_threshold: an answer counts as correct when its reward reaches it
      (partial-credit rewards do not count as accuracy).
  """

  def __init__(self, domain: TaskDomain, agent_model: ModelConfig,
               rows: np.ndarray, difficulty: np.ndarray, mesh, rules,
               success_threshold: float = 1.0):
    self._levels = sorted(int(d) for d in np.unique(difficulty))
    self._difficulty = np.asarray(difficulty)
    # Every process holds the rows and gets every answer back (a replicated
    # output is readable on each process, however many share the mesh).
    self._rows = sharding.from_host(np.asarray(rows, np.int32),
                                    sharding.replicated(mesh))
    # The jitted pass every evaluation runs (see `answer_pass`).
    self.answer = answer_pass(domain, agent_model, mesh, rules,
                              success_threshold)

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
    if baseline_correct is not None and baseline_correct.shape != correct.shape:
      raise ValueError(
          f"baseline_correct has shape {baseline_correct.shape}; the held-out "
          f"set has {correct.shape[0]} tasks.")
    for level in self._levels:
      at_level = self._difficulty == level
      metrics[f"eval/accuracy_d{level}"] = float(
          np.mean(correct[at_level], dtype=np.float32))
      if baseline_correct is not None:
        paired = paired_counts(baseline_correct[at_level], correct[at_level])
        for name, value in paired.items():
          metrics[f"eval/{name}_d{level}"] = float(value)
    return metrics, correct
