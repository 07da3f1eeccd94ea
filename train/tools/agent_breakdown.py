"""Where an agent's held-out answers go right and wrong, and how much of it
sampling could reach: per difficulty level, the greedy accuracy, the mean
success of sampled attempts and pass@k.

  python -m train.tools.agent_breakdown --config=configs/default.py --workdir=runs/default \
      [--step=0] [--attempts=32] [--baseline_step=N]

Reads the agent of checkpoint `--step` (0: the warm-started agent) and the
held-out test split of `--workdir`, answers every held-out task once greedily
and `--attempts` times at the config's agent temperature, and prints one JSON
line per level. For the arithmetic domain it also prints one line per operand
layout within a level (`"3+2"`: a three-digit plus a two-digit operand).
With `--baseline_step` (say 0, against a later `--step`) each line also
compares the two agents task by task on the same tasks: how many tasks the
later one fixes and breaks (greedy), the sign test's p-value of that split,
and the mean change in sampled success with its standard error. Paired like
this, a change shows far sooner than in two accuracies' own standard errors.

Reading it: GRPO can only reinforce correct answers the agent samples. Where
pass@k lies well above the sampled success, the attempts hold such answers;
where the sampled success is near 0, they hold none, and the update has nothing
to learn from.
"""

from __future__ import annotations

import json
import os

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
from ml_collections import config_flags
import numpy as np

from genenv_jax import sharding
from genenv_jax.domains import ArithmeticDomain, get_domain
from genenv_jax.domains.arithmetic import data as datasets
from genenv_jax.sampling import SamplingConfig, sample
from train import build
from train import heldout
from train.runtime import cpu_flags
from train.tools import run_checkpoints

PASS_AT = (4, 10)


def pass_at_k(correct: np.ndarray, k: int) -> np.ndarray:
  """Unbiased pass@k per task from n >= k attempts: the chance that k of the
  n attempts, drawn without replacement, hold at least one correct answer.

  Args:
    correct: bool[tasks, n].
    k: 1 <= k <= n.

  Returns:
    f64[tasks].
  """
  correct = np.asarray(correct, bool)
  n = correct.shape[1]
  if not 1 <= k <= n:
    raise ValueError(f"pass@{k} needs 1 <= k <= attempts ({n}).")
  wrong = n - correct.sum(axis=1)
  # 1 - C(wrong, k) / C(n, k) = 1 - prod_{i = wrong+1}^{n} (1 - k / i).
  out = np.ones(correct.shape[0])
  for row, w in enumerate(wrong):
    if w >= k:
      out[row] = 1.0 - np.prod(1.0 - k / np.arange(w + 1, n + 1))
  return out


def paired_change(base_greedy: np.ndarray, base_sampled: np.ndarray,
                  greedy: np.ndarray, sampled: np.ndarray) -> dict:
  """How a later agent differs from a baseline on the same t tasks.

  Args:
    base_greedy, greedy: bool[t] greedy answers correct.
    base_sampled, sampled: bool[t, n] sampled attempts correct.

  Returns:
    fixed / broken: tasks the later agent answers right / wrong (greedy)
    where the baseline did not; sign_test_p of that split; sampled_gain: the
    mean over tasks of the change in sampled success, with its standard
    error sampled_gain_se (over tasks; 0 for a single task).
  """
  counts = heldout.paired_counts(base_greedy, greedy)
  gain = sampled.mean(axis=1) - base_sampled.mean(axis=1)
  se = gain.std(ddof=1) / np.sqrt(gain.size) if gain.size > 1 else 0.0
  return dict(counts, sign_test_p=round(counts["sign_test_p"], 4),
              sampled_gain=round(float(gain.mean()), 4),
              sampled_gain_se=round(float(se), 4))


def _summary(greedy: np.ndarray, sampled: np.ndarray) -> dict:
  """greedy bool[t]; sampled bool[t, n] -> the figures of those t tasks."""
  n = sampled.shape[1]
  record = {"tasks": int(greedy.shape[0]),
            "greedy": round(float(greedy.mean()), 4),
            "sampled": round(float(sampled.mean()), 4)}
  for k in sorted({k for k in PASS_AT if k <= n} | {n}):
    record[f"pass@{k}"] = round(float(pass_at_k(sampled, k).mean()), 4)
  return record


def run(config, workdir: str, step: int, attempts: int,
        baseline_step: int | None = None) -> list[dict]:
  """Prints and returns one record per level (layout "all") and, for the
  arithmetic domain, per operand layout within each level. With a
  baseline_step, each record also compares the agent with that checkpoint's
  on the same tasks (`paired_change`; baseline_greedy, baseline_sampled)."""
  if attempts < 1:
    raise ValueError(f"--attempts={attempts} must be at least 1.")
  mesh = sharding.make_mesh(dict(config.mesh))
  rules = sharding.DEFAULT_RULES
  domain = get_domain(config.task)
  players = build.build_players(config, domain)
  data_dir = config.data.tfds_dir or os.path.join(workdir, "tfds")
  test = datasets.load_split(datasets.builder_config_from(config), "test",
                             data_dir)
  agents = {"": run_checkpoints.agent_params(workdir, mesh, step)}
  if baseline_step is not None:
    agents["baseline_"] = run_checkpoints.agent_params(workdir, mesh,
                                                       baseline_step)
  threshold = config.curriculum.success_threshold
  greedy_eval = heldout.HeldoutEval(domain, players.agent_model, test["task"],
                                    test["difficulty"], mesh, rules, threshold)
  sampling = SamplingConfig(
      max_new_tokens=domain.response_len, eos_ids=(domain.eos_id,),
      pad_id=domain.pad_id, temperature=config.coevolve.agent_temperature)

  @jax.jit
  @sharding.in_mesh(mesh, rules)
  def sampled_correct(params, rows, key):
    """bool[len(rows), attempts]: which sampled attempts are right."""
    tasks = domain.parse(rows, rows != domain.pad_id)
    out = sample(players.agent_model, params, tasks.prompt, tasks.prompt_mask,
                 key, sampling, attempts)
    repeat = lambda x: jnp.repeat(x, attempts, axis=0)
    reward = domain.verify(out.tokens, out.mask, repeat(tasks.reference),
                           repeat(tasks.reference_mask))
    ok = (reward >= threshold) & repeat(tasks.valid)
    return ok.reshape(-1, attempts)

  key = jax.random.PRNGKey(config.seed)
  greedy_all = {prefix: greedy_eval.correct(params)
                for prefix, params in agents.items()}
  records = []
  for level in sorted(int(d) for d in np.unique(test["difficulty"])):
    at_level = test["difficulty"] == level
    tasks = test["task"][at_level]
    greedy = {prefix: answers[at_level]
              for prefix, answers in greedy_all.items()}
    sampled = {prefix: np.asarray(sampled_correct(params, jnp.asarray(tasks),
                                                  key))
               for prefix, params in agents.items()}
    groups = [("all", np.ones(len(tasks), bool))]
    if isinstance(domain, ArithmeticDomain):
      layout = np.array([f"{a}+{b}" for a, b in domain.operand_digits(tasks)])
      groups += [(name, layout == name) for name in sorted(set(layout))]
    for name, chosen in groups:
      record = dict(step=step, level=level, layout=name,
                    **_summary(greedy[""][chosen], sampled[""][chosen]))
      if baseline_step is not None:
        base_greedy = greedy["baseline_"][chosen]
        base_sampled = sampled["baseline_"][chosen]
        record.update(
            baseline_step=baseline_step,
            baseline_greedy=round(float(base_greedy.mean()), 4),
            baseline_sampled=round(float(base_sampled.mean()), 4),
            **paired_change(base_greedy, base_sampled, greedy[""][chosen],
                            sampled[""][chosen]))
      print(json.dumps(record), flush=True)
      records.append(record)
  return records


def main() -> None:
  """The command line; its flags exist only when this module runs as one."""
  config = config_flags.DEFINE_config_file("config", None, "The run's config.")
  workdir = flags.DEFINE_string("workdir", None, "A run's workdir with its "
                                "checkpoints and seed data.")
  step = flags.DEFINE_integer("step", 0, "Checkpoint step whose agent is read "
                              "(0: the warm-started agent).")
  attempts = flags.DEFINE_integer("attempts", 32,
                                  "Sampled attempts per task.")
  baseline = flags.DEFINE_integer(
      "baseline_step", None, "Also compare with this checkpoint's agent on "
      "the same tasks, e.g. 0 for the warm-started one.")
  flags.mark_flags_as_required(["config", "workdir"])

  def run_from_flags(argv):
    del argv
    cpu_flags.use_library_fusions()  # before JAX initialises a backend
    run(config.value, workdir.value, step.value, attempts.value,
        baseline.value)

  app.run(run_from_flags)


if __name__ == "__main__":
  main()
