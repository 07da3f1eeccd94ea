"""The driver: warm-start, co-evolution, evaluation, checkpoints and the report.

`train_and_evaluate(config, workdir)` runs a whole job. Re-running it on a
workdir that holds a checkpoint resumes from the latest one: everything the
step needs (both players, optimiser states, references, pools, rng, step) is
in the checkpoint, and metrics.jsonl is cut back to the restored step. Which
held-out tasks the step-0 agent answers right is kept beside the checkpoints
(`checkpointing.STEP0_ANSWERS`): every later evaluation compares the agent
with it task by task.

Checkpoints are verified on restore (`train.checkpoints.checkpointing`), the workdir is
locked and its config fixed (`train.checkpoints.workdir`), a run whose updates keep
going non-finite stops before its next checkpoint (`train.runtime.nonfinite`), and a
preemption notice (SIGTERM, Ctrl-C) stops it at a saved step
(`train.runtime.preemption`).
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any, NamedTuple

from clu import metric_writers
from clu import periodic_actions
import jax
import numpy as np

from genenv_jax import coevolve
from genenv_jax import sharding
from genenv_jax.domains import get_domain
from train import build
from train import config_validation
from train import heldout
from train import warmstart
from train.checkpoints import checkpointing
from train.checkpoints import init_from as init_from_lib
from train.checkpoints import state_checkpoint
from train.checkpoints import state_layout
from train.checkpoints import workdir as workdir_lib
from train.outputs import metrics_log
from train.outputs import progress
from train.outputs import run_report
from train.outputs import written_tasks
from train.runtime import dispatch
from train.runtime import multihost
from train.runtime import nonfinite
from train.runtime import preemption


# Newest generated tasks kept per logged step (train/outputs/written_tasks.py).
WRITTEN_TASKS_PER_LOG = 8


def train_and_evaluate(config, workdir: str) -> dict:
  """Runs (or resumes) a whole job in workdir. Returns the run summary.

  Refused before anything is computed: a workdir locked by another live
  process (workdir.WorkdirLock), and a config that differs from the
  workdir's config.json outside workdir.RESUMABLE_FIELDS.
  """
  config_validation.validate(config, jax.device_count())
  chief = jax.process_index() == 0  # the one process that writes files
  if chief:
    checkpointing.workdir_path(workdir).mkdir(parents=True, exist_ok=True)
  with (workdir_lib.WorkdirLock(workdir) if chief
        else contextlib.nullcontext()), preemption.Watch():
    workdir_lib.check_config(config, workdir)
    return _run(config, workdir, chief)


class _Run(NamedTuple):
  """What every stage of a run in its workdir uses."""
  config: Any
  workdir: str
  path: Any            # the workdir as an epath.Path
  chief: bool          # process 0, the one that writes files
  mesh: Any
  rules: Any
  domain: Any
  players: coevolve.Players
  train: dict          # the seed train split {"task", "difficulty"}
  base: np.ndarray     # int64[Nb] its rows in D_train's base data
  writer: Any          # clu MultiWriter (TensorBoard, and metrics.jsonl on chief)
  jsonl: metrics_log.JsonlWriter | None
  evaluate: heldout.HeldoutEval
  ckpt: checkpointing.Checkpoints
  target: coevolve.CoevolveState  # the state's shapes and layout, abstract
  shardings: coevolve.CoevolveState


def _run(config, workdir: str, chief: bool) -> dict:
  """train_and_evaluate once the workdir is this run's."""
  start_time = time.time()
  run = _prepare(config, workdir, chief)
  latest = run.ckpt.latest_step()
  if latest is None:
    state, step0_answers = _start(run)
  else:
    progress.say(f"Resuming from checkpoint at step {latest}.")
    state = state_checkpoint.restore(run.ckpt.manager, latest, run.target)
    step0_answers = checkpointing.load_step0_answers(workdir)
    if chief:
      run.jsonl.truncate_after(latest)
      written_tasks.truncate(workdir, latest)
  _coevolve(run, state, step0_answers, resumed_from=latest)
  if not chief:
    return {}
  summary = run_report.write_report(workdir, config)
  summary["wall_time_s_this_process"] = time.time() - start_time
  checkpointing.write_atomic(run.path / "report" / "summary.json",
                             json.dumps(summary, indent=2).encode())
  return summary


def _prepare(config, workdir: str, chief: bool) -> _Run:
  """The mesh, domain, players, seed data, writers, held-out evaluation,
  checkpoints and the state's abstract layout."""
  path = checkpointing.workdir_path(workdir)
  rules = sharding.DEFAULT_RULES
  mesh = sharding.make_mesh(dict(config.mesh))
  domain = get_domain(config.task)
  players = build.build_players(config, domain)
  if chief:
    workdir_lib.write_config(config, workdir)

  progress.say("Preparing the seed data.")
  train, test = multihost.chief_first(
      lambda: build.seed_data(config, domain, workdir), "seed data prepared")
  base = build.base_row_indices(config, train["difficulty"])

  jsonl = metrics_log.JsonlWriter(workdir) if chief else None
  writer = metric_writers.MultiWriter([
      metric_writers.create_default_writer(workdir, just_logging=not chief)]
      + ([jsonl] if chief else []))
  evaluate = heldout.HeldoutEval(
      domain, players.agent_model, test["task"], test["difficulty"], mesh,
      rules, config.curriculum.success_threshold,
      samples=config.eval.get("samples", 0),
      temperature=config.coevolve.agent_temperature, seed=config.seed,
      rows_per_pass=config.eval.get("rows_per_pass", 0))
  ckpt = checkpointing.Checkpoints(path / "checkpoints",
                                   config.max_checkpoints, (0,), chief)
  for step, why in ckpt.skipped:
    progress.say(f"Checkpoint step {step} skipped: {why}.")
  # The state's shapes and layout from jax.eval_shape alone: a resume (or a
  # start from another run's step 0) restores into it without initialising
  # or loading any weights.
  target, shardings = state_layout.abstract_state(
      config, domain, players, train["task"][base], train["difficulty"][base],
      mesh, rules)
  return _Run(config, workdir, path, chief, mesh, rules, domain, players,
              train, base, writer, jsonl, evaluate, ckpt, target, shardings)


def _start(run: _Run) -> tuple[coevolve.CoevolveState, heldout.Answers]:
  """Stage 1: both players warm-started here (or restored from
  config.warmstart.init_from's step 0), the warm-started agent evaluated,
  and checkpoint 0 saved. Returns (the step-0 state, its held-out
  answers)."""
  config, train, base = run.config, run.train, run.base
  init_from = config.warmstart.init_from
  if not init_from:
    progress.say("Stage 1: warm-starting both players.")
    agent_params, simulator_params = build.init_both_players(
        config, run.players, run.mesh, run.rules)
    agent_params, simulator_params, step0_metrics = warmstart.warmstart(
        config, run.domain, run.players.agent_model,
        run.players.simulator_model, agent_params, simulator_params,
        train["task"], train["difficulty"], run.mesh, run.rules, run.path,
        run.chief)
    state, _ = build.create_state(
        config, run.domain, run.players,
        jax.device_put(agent_params, run.shardings.agent.params),
        jax.device_put(simulator_params, run.shardings.simulator.params),
        train["task"][base], train["difficulty"][base], run.mesh)
  else:
    progress.say(f"Stage 1: the warm-started players of {init_from}.")
    source = checkpointing.workdir_path(init_from)
    state, step0_metrics = init_from_lib.restore_step0(config, run.target,
                                                       source)
    if init_from_lib.simulator_start_pending(config, source):
      state = jax.device_put(state.replace(
          simulator=warmstart.started_simulator_state(
              config, run.domain, run.players, state.simulator,
              train["task"], train["difficulty"], run.mesh, run.rules)),
          run.shardings)
  # This run's held-out evaluation of the agent it starts from (a source
  # run's may not have sampled).
  progress.say("Stage 1: held-out evaluation of the warm-started agent.")
  eval_metrics, step0_answers = run.evaluate.metrics_and_answers(
      state.agent.params)
  step0_metrics = dict(step0_metrics, **eval_metrics)
  if run.chief:  # what an attempt killed before checkpoint 0 committed left
    run.jsonl.truncate_after(-1)
    written_tasks.truncate(run.workdir, -1)
  run.writer.write_scalars(0, step0_metrics)
  if run.chief:
    checkpointing.save_step0_answers(run.workdir, step0_answers)
  run.writer.flush()
  run.ckpt.save(0, state_checkpoint.saved_form(state, 0))
  run.ckpt.finish()
  if run.chief:  # checkpoint 0 holds stage 1's result now
    warmstart.checkpoint_dir(run.path).rmtree(missing_ok=True)
  return state, step0_answers


def _coevolve(run: _Run, state: coevolve.CoevolveState,
              step0_answers: heldout.Answers,
              resumed_from: int | None = None) -> None:
  """Stage 2: the compiled co-evolution step from the state's step to
  config.coevolve.num_steps, logging, evaluating and checkpointing as the
  config says. On a preemption notice the step in flight finishes, is saved
  (with the log window's partial totals), and preemption.Preempted is
  raised; `resumed_from` (the checkpoint step a resumed run restored)
  brings such a window back."""
  config, writer, ckpt = run.config, run.writer, run.ckpt
  step_fn = coevolve.jit_step(
      coevolve.make_step(config, run.domain, run.players,
                         build.scripted_level_bank(config, run.domain,
                                                   run.train)),
      run.shardings, run.mesh, run.rules)
  num_steps = config.coevolve.num_steps
  first = int(jax.device_get(state.step))
  report_progress = periodic_actions.ReportProgress(
      num_train_steps=num_steps, writer=writer, every_steps=config.log_every)
  hooks = [report_progress]
  if config.profile_first_step and jax.process_index() == 0:
    hooks.append(periodic_actions.Profile(
        num_profile_steps=3, logdir=run.workdir,
        first_profile=config.profile_first_step, every_secs=None))
  progress.say(f"Stage 2: co-evolution, steps {first + 1}..{num_steps}.")
  window = dispatch.DispatchWindow()
  step_metrics = metrics_log.StepMetricsWindow()
  if run.chief and resumed_from is not None:
    step_metrics.resume(run.workdir, resumed_from)
  reporter = progress.Progress("stage 2:", num_steps)
  # Seconds the first call of this process's step took to return: tracing,
  # compiling (or reading the persistent compilation cache) and dispatch;
  # logged with the first logged step.
  first_call_s = None
  skipped = nonfinite.SkippedUpdates(config.max_skipped_updates)
  for step in range(first + 1, num_steps + 1):
    ckpt.poll()  # a failed background save stops the run here
    log_now = step % config.log_every == 0 or step == num_steps
    if log_now:  # time this step alone, not the steps still queued before it
      jax.block_until_ready(state)
    with jax.profiler.StepTraceAnnotation("coevolve", step_num=step):
      tick = time.perf_counter()
      state, metrics = step_fn.fn(state)
      if step == first + 1:
        first_call_s = time.perf_counter() - tick
      window.push(metrics)
      step_metrics.add(metrics)
      skipped.add(step, metrics)
      if log_now:
        metrics = step_metrics.mean()
        metrics["perf/step_time_s"] = time.perf_counter() - tick
        metrics["perf/compiles"] = step_fn.trace_count()
        if first_call_s is not None:
          metrics["perf/step_compile_s"], first_call_s = first_call_s, None
        writer.write_scalars(step, metrics)
        if run.chief and jax.process_count() == 1:  # D_train on this host
          written_tasks.append(run.workdir, step, written_tasks.sample(
              run.domain, state.pool, WRITTEN_TASKS_PER_LOG))
        summary_line = (f"success {metrics['env/success_rate']:.2f}  "
                        f"difficulty {metrics['env/difficulty_mean']:.2f}  "
                        f"valid {metrics['env/valid_frac']:.2f}  "
                        f"agent reward {metrics['agent/reward_mean']:.2f}")
        skipped.check()
    reporter.update(step, summary_line if log_now else "")
    for hook in hooks:
      hook(step)
    if step % config.eval.every_steps == 0 or step == num_steps:
      eval_metrics = run.evaluate(state.agent.params, step0_answers)
      writer.write_scalars(step, eval_metrics)
      progress.say(f"stage 2: step {step}  held-out accuracy "
                   f"{eval_metrics['eval/accuracy']:.3f}")
    saved = step % config.checkpoint_every == 0 or step == num_steps
    # On a preemption notice every process stops at the same step (the
    # notice's step agreed by JAX's preemption service), saved at once.
    preempted = step < num_steps and preemption.reached()
    if saved or preempted:
      skipped.check()  # never save a diverged state
      writer.flush()  # metrics.jsonl holds every record up to the checkpoint
      ckpt.save(step, state_checkpoint.saved_form(state, step))
      if run.chief and preempted:
        step_metrics.save(run.workdir, step)
    if preempted:
      ckpt.close()
      writer.flush()
      raise preemption.Preempted(f"step {step} in {run.path / 'checkpoints'}")
  ckpt.close()
  writer.flush()
  if run.chief:
    metrics_log.drop_windows(run.workdir)
