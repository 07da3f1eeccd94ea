"""The driver: warm-start, co-evolution, evaluation, checkpoints and the report.

`train_and_evaluate(config, workdir)` runs a whole job. Re-running it on a
workdir that holds a checkpoint resumes from the latest one: everything the
step needs (both players, optimiser states, references, pools, rng, step) is
in the checkpoint, and metrics.jsonl is cut back to the restored step. Which
held-out tasks the step-0 agent answers right is kept beside the checkpoints
(`STEP0_ANSWERS`): every later evaluation compares the agent with it task by
task.
"""

from __future__ import annotations

import functools
import io
import json
import time

from absl import logging
from clu import metric_writers
from clu import periodic_actions
from etils import epath
import flax.linen as nn
import jax
import numpy as np
import optax
import orbax.checkpoint as ocp
from orbax.checkpoint import checkpoint_managers

from genenv_jax import coevolve
from train import dispatch
from genenv_jax import pool as pool_lib
from genenv_jax import sharding
from genenv_jax.tasks import get_domain
from models import decoder
from models import hf
from models.config import get_preset
from train import datasets
from train import heldout
from train import init_from as init_from_lib
from train import metrics_log
from train import run_report
from train import text_datasets
from train import warmstart


def _optimizer(player_cfg) -> optax.GradientTransformation:
  return optax.chain(
      optax.clip_by_global_norm(player_cfg.grad_clip),
      optax.adamw(player_cfg.learning_rate, b1=player_cfg.b1,
                  b2=player_cfg.b2, weight_decay=player_cfg.weight_decay))


def build_players(config, domain) -> coevolve.Players:
  """Model configs and optimisers of both players.

  A player whose config names an `hf_dir` takes its architecture from that HF
  directory's config.json (model_overrides may only change how it computes:
  dtypes, remat, scan); otherwise it is the `model` preset with the domain's
  vocabulary.
  """
  def model(player_cfg):
    overrides = dict(player_cfg.model_overrides)
    hf_dir = player_cfg.get("hf_dir", "")
    if hf_dir:
      model_config = hf.config_from_hf(hf.read_hf_config(hf_dir)).replace(
          **overrides)
      if model_config.vocab_size < domain.vocab_size:
        raise ValueError(
            f"{hf_dir}: the model's vocab_size {model_config.vocab_size} is "
            f"smaller than the task domain's {domain.vocab_size}.")
      return model_config
    overrides.setdefault("vocab_size", domain.vocab_size)
    return get_preset(player_cfg.model, **overrides)
  return coevolve.Players(agent_model=model(config.agent),
                          simulator_model=model(config.simulator),
                          agent_opt=_optimizer(config.agent),
                          simulator_opt=_optimizer(config.simulator))


def init_player_params(model_config, key, mesh, rules, hf_dir: str = ""):
  """A player's parameters laid out per `rules`: random from `key`, or the
  weights of the HF directory `hf_dir` when given."""
  init = functools.partial(decoder.init_boxed, model_config)
  if not hf_dir:
    params, _ = sharding.sharded_init(init, mesh, rules, key)
    return params
  weights, _ = hf.load_hf_params(hf_dir, model_config)
  shardings = nn.unbox(sharding.shardings_from_boxed(
      jax.eval_shape(init, key), mesh, rules))
  return jax.tree.map(
      lambda w, s: jax.make_array_from_callback(w.shape, s, lambda i: w[i]),
      weights, shardings)


def create_state(config, domain, players, agent_params, simulator_params,
                 base_rows, base_difficulty, mesh):
  """Assembles a CoevolveState, placed on the mesh. Returns (state, shardings).

  The current parameters also become the references: the agent's GRPO
  reference and the simulator's initial model.
  """
  copy = lambda tree: jax.tree.map(lambda x: x.copy(), tree)
  state = coevolve.CoevolveState(
      agent=coevolve.PlayerState(
          params=agent_params,
          opt_state=jax.jit(players.agent_opt.init)(agent_params),
          ref_params=copy(agent_params)),
      simulator=coevolve.PlayerState(
          params=simulator_params,
          opt_state=jax.jit(players.simulator_opt.init)(simulator_params),
          ref_params=copy(simulator_params)),
      pool=pool_lib.create_task_pool(base_rows, base_difficulty,
                                     config.pool.capacity),
      generation_pool=pool_lib.create_generation_pool(
          config.pool.generation_capacity, domain.simulator_prompt_len,
          domain.simulator_len),
      rng=jax.random.PRNGKey(config.seed + 3),
      step=np.int32(0))
  replicated = sharding.replicated(mesh)

  def placement(x):
    s = getattr(x, "sharding", None)
    return s if isinstance(s, jax.sharding.NamedSharding) else replicated

  shardings = jax.tree.map(placement, state)
  return jax.device_put(state, shardings), shardings


def workdir_path(workdir: str) -> epath.Path:
  """The workdir as a path: local (made absolute) or a cloud URI such as
  gs://bucket/run, which every host of a multi-host job can reach."""
  path = epath.Path(workdir)
  return path if "://" in workdir else path.absolute()


def _checkpoint_manager(workdir, config):
  """Keeps the latest `config.max_checkpoints` steps, and step 0 (the
  warm-started players) for good: stage 2 can be rerun from it with other
  settings, and `train.tools.agent_probe` trains the agent alone from it."""
  keep = checkpoint_managers.AnyPreservationPolicy([
      checkpoint_managers.LatestN(config.max_checkpoints),
      checkpoint_managers.CustomSteps([0])])
  return ocp.CheckpointManager(
      workdir_path(workdir) / "checkpoints",
      options=ocp.CheckpointManagerOptions(preservation_policy=keep,
                                           create=True))


STEP0_ANSWERS = "heldout_step0.npy"


def _save_step0_answers(workdir: str, correct: np.ndarray) -> None:
  """bool[n] held-out tasks the step-0 agent answers right, written whole to a
  temporary file and then renamed into place."""
  path = workdir_path(workdir) / STEP0_ANSWERS
  partial = path.parent / (path.name + ".partial")
  buffer = io.BytesIO()
  np.save(buffer, correct)
  partial.write_bytes(buffer.getvalue())
  partial.rename(path)


def _load_step0_answers(workdir: str) -> np.ndarray | None:
  path = workdir_path(workdir) / STEP0_ANSWERS
  if not path.exists():
    logging.warning("%s is missing (a run from before it was kept): "
                    "evaluations will not compare with the step-0 agent.", path)
    return None
  return np.load(io.BytesIO(path.read_bytes()))


def _seed_data(config, domain, workdir: str) -> tuple[dict, dict]:
  """The seed data's train and test splits as {"task": int32[n, task_len]
  written-task rows, "difficulty": int32[n]}, through the domain's
  tensorflow-datasets builder (in config.data.tfds_dir, else <workdir>/tfds)."""
  data_dir = config.data.tfds_dir or str(workdir_path(workdir) / "tfds")
  if config.task.name == "text":
    splits = text_datasets.load_seed_rows(config, domain, data_dir)
    for name, split in splits.items():
      if not len(split.rows):
        raise ValueError(
            f"config.data.source_dir={config.data.source_dir!r}: no {name} "
            f"record fits the text domain's widths ({split.num_dropped} "
            "dropped).")
      if split.num_dropped:
        logging.warning("Seed data: %d %s records dropped (too long for the "
                        "domain's widths or not parseable).",
                        split.num_dropped, name)
    return tuple({"task": splits[name].rows,
                  "difficulty": splits[name].difficulty}
                 for name in ("train", "test"))
  builder_config = datasets.builder_config_from(config)
  return (datasets.load_split(builder_config, "train", data_dir),
          datasets.load_split(builder_config, "test", data_dir))


def base_row_indices(config, train_difficulty: np.ndarray) -> np.ndarray:
  """int64[Nb]: the seed train split's rows that become D_train's base data
  (up to config.pool.num_base of those at levels up to
  config.pool.base_max_difficulty), in their order in the pool.

  Args:
    train_difficulty: int[n] the train split's difficulty per row.
  """
  easy = np.flatnonzero(train_difficulty <= config.pool.base_max_difficulty)
  return np.random.default_rng(config.data.seed).permutation(easy)[
      :config.pool.num_base]


def train_and_evaluate(config, workdir: str) -> dict:
  """Runs (or resumes) a whole job in workdir. Returns the run summary."""
  if config.log_every < 1 or config.checkpoint_every % config.log_every:
    # A logged value is the mean over the steps since the last log; a resumed
    # run must start at a window's start to log the same values.
    raise ValueError(
        f"config.checkpoint_every={config.checkpoint_every} must be a multiple "
        f"of config.log_every={config.log_every} (>= 1): logged metrics are "
        "means over log_every steps, and a run resumes from a checkpoint.")
  chief = jax.process_index() == 0  # the one process that writes files
  if chief:
    workdir_path(workdir).mkdir(parents=True, exist_ok=True)
  start_time = time.time()
  rules = sharding.DEFAULT_RULES
  mesh = sharding.make_mesh(dict(config.mesh))
  domain = get_domain(config.task)
  players = build_players(config, domain)
  if chief:
    (workdir_path(workdir) / "config.json").write_text(
        config.to_json_best_effort(indent=2))

  train, test = _seed_data(config, domain, workdir)
  base = base_row_indices(config, train["difficulty"])

  jsonl = metrics_log.JsonlWriter(workdir) if chief else None
  writer = metric_writers.MultiWriter([
      metric_writers.create_default_writer(workdir, just_logging=not chief)]
      + ([jsonl] if chief else []))
  evaluate = heldout.HeldoutEval(
      domain, players.agent_model, test["task"], test["difficulty"], mesh,
      rules, config.curriculum.success_threshold)
  ckpt = _checkpoint_manager(workdir, config)

  agent_key, simulator_key = jax.random.split(jax.random.PRNGKey(config.seed))
  agent_params = init_player_params(players.agent_model, agent_key, mesh,
                                    rules, config.agent.get("hf_dir", ""))
  simulator_params = init_player_params(players.simulator_model, simulator_key, mesh, rules,
                                  config.simulator.get("hf_dir", ""))
  latest = ckpt.latest_step()
  init_from = config.warmstart.init_from
  if latest is None and not init_from:
    logging.info("Stage 1: warm-starting both players.")
    agent_params, simulator_params, ws_metrics = warmstart.warmstart(
        config, domain, players.agent_model, players.simulator_model, agent_params,
        simulator_params, train["task"], train["difficulty"], mesh, rules)
  state, shardings = create_state(config, domain, players, agent_params,
                                  simulator_params, train["task"][base],
                                  train["difficulty"][base], mesh)
  target = jax.tree.map(
      lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
      state, shardings)
  if latest is None:
    if init_from:
      logging.info("Stage 1: the warm-started players of %s.", init_from)
      state, step0_metrics = init_from_lib.restore_step0(
          config, target, workdir_path(init_from))
      step0_answers = evaluate.correct(state.agent.params)
    else:
      eval_metrics, step0_answers = evaluate.metrics_and_answers(
          state.agent.params)
      step0_metrics = dict(ws_metrics, **eval_metrics)
    writer.write_scalars(0, step0_metrics)
    if chief:
      _save_step0_answers(workdir, step0_answers)
    ckpt.save(0, args=ocp.args.StandardSave(state))
    ckpt.wait_until_finished()
  else:
    logging.info("Resuming from checkpoint at step %d.", latest)
    state = ckpt.restore(latest, args=ocp.args.StandardRestore(target))
    step0_answers = _load_step0_answers(workdir)
    if chief:
      jsonl.truncate_after(latest)

  step_fn = coevolve.jit_step(coevolve.make_step(config, domain, players),
                              shardings, mesh, rules)
  num_steps = config.coevolve.num_steps
  first = int(jax.device_get(state.step))
  report_progress = periodic_actions.ReportProgress(
      num_train_steps=num_steps, writer=writer, every_steps=config.log_every)
  hooks = [report_progress]
  if config.profile_first_step and jax.process_index() == 0:
    hooks.append(periodic_actions.Profile(
        num_profile_steps=3, logdir=workdir,
        first_profile=config.profile_first_step, every_secs=None))
  logging.info("Stage 2: co-evolution, steps %d..%d.", first + 1, num_steps)
  window = dispatch.DispatchWindow()
  step_metrics = metrics_log.StepMetricsWindow()
  for step in range(first + 1, num_steps + 1):
    log_now = step % config.log_every == 0 or step == num_steps
    if log_now:  # time this step alone, not the steps still queued before it
      jax.block_until_ready(state)
    with jax.profiler.StepTraceAnnotation("coevolve", step_num=step):
      tick = time.perf_counter()
      state, metrics = step_fn.fn(state)
      window.push(metrics)
      step_metrics.add(metrics)
      if log_now:
        metrics = step_metrics.mean()
        metrics["perf/step_time_s"] = time.perf_counter() - tick
        metrics["perf/compiles"] = step_fn.trace_count()
        writer.write_scalars(step, metrics)
        print(f"step {step}/{num_steps}  success {metrics['env/success_rate']:.2f}"
              f"  difficulty {metrics['env/difficulty_mean']:.2f}"
              f"  valid {metrics['env/valid_frac']:.2f}"
              f"  agent reward {metrics['agent/reward_mean']:.2f}", flush=True)
    for hook in hooks:
      hook(step)
    if step % config.eval.every_steps == 0 or step == num_steps:
      eval_metrics = evaluate(state.agent.params, step0_answers)
      writer.write_scalars(step, eval_metrics)
      print(f"step {step}: held-out accuracy {eval_metrics['eval/accuracy']:.3f}"
            , flush=True)
    if step % config.checkpoint_every == 0 or step == num_steps:
      ckpt.save(step, args=ocp.args.StandardSave(state))
  ckpt.wait_until_finished()
  writer.flush()
  if not chief:
    return {}
  summary = run_report.write_report(workdir, config)
  summary["wall_time_s_this_process"] = time.time() - start_time
  (workdir_path(workdir) / "report" / "summary.json").write_text(
      json.dumps(summary, indent=2))
  return summary
