"""Stage 1: supervised warm-start of both players on seed tasks.

The agent learns to answer mostly easy tasks (levels weighted by
agent_level_weights); the simulator learns to write tasks of every difficulty when prompted with a seed
task. Both minimise the token negative log-likelihood of the target given the
prompt, with AdamW, on batches drawn from the seed data.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from absl import logging
from etils import epath
import jax
import jax.numpy as jnp
import numpy as np
import optax

from genenv_jax import coevolve_state
from genenv_jax import domains
from genenv_jax import policy
from genenv_jax import sharding
from genenv_jax.domains.base import TaskDomain
from models import lora
from models.config import ModelConfig
from train.checkpoints import checkpointing
from train.runtime import dispatch
from train.runtime import nonfinite
from train.runtime import preemption
from train.outputs import progress


class SupervisedData(NamedTuple):
  """prompt int32[n, P] (left-padded) + mask; target int32[n, R] + mask (its
  real tokens); loss_mask bool[n, R] the target tokens trained on (an
  episode's actions, not its observations), None: all of target_mask."""
  prompt: np.ndarray
  prompt_mask: np.ndarray
  target: np.ndarray
  target_mask: np.ndarray
  loss_mask: np.ndarray | None = None


def agent_data(domain: TaskDomain, rows: np.ndarray, difficulty: np.ndarray,
               level_weights, rng: np.random.Generator,
               size: int) -> SupervisedData:
  """Agent prompts and reference answers of seed tasks, drawn by level.

  level_weights[d - 1] is the relative share of level-d tasks (0 leaves a
  level out), so the agent can be taught mostly easy tasks and few hard ones.
  """
  weights = np.zeros(domain.max_difficulty)
  given = np.asarray(level_weights, float)[:domain.max_difficulty]
  weights[:len(given)] = given
  if weights.min() < 0 or weights.sum() <= 0:
    raise ValueError(f"config.warmstart.agent_level_weights={level_weights} "
                     "must be non-negative with a positive sum.")
  per_row = weights[difficulty - 1]
  chosen = rng.choice(len(rows), size, p=per_row / per_row.sum())
  rows = rows[chosen]
  parsed = jax.jit(domain.parse)(rows, rows != domain.pad_id)
  if not bool(np.all(parsed.valid)):
    raise ValueError("Seed data holds tasks the domain's parser rejects.")
  target, target_mask, loss_mask = domain.agent_demonstration(parsed)
  return SupervisedData(*jax.device_get(
      (parsed.prompt, parsed.prompt_mask, target, target_mask, loss_mask)))


def simulator_data(domain: TaskDomain, rows: np.ndarray, difficulty: np.ndarray,
             rng: np.random.Generator, size: int,
             difficulty_step: int, level_offset: int = 0,
             edit=None) -> SupervisedData:
  """(seed task -> new task) pairs: the simulator's writing lessons.

  Seeds are drawn from all of `rows`; each target is a task whose difficulty
  differs from its seed's by level_offset plus a uniform step in
  [-difficulty_step, difficulty_step] (clipped to the levels present), so the
  simulator learns to write variations near (level_offset above) its seed's
  level: another seed task of that level, or with `edit` (a function (seed
  rows, wanted levels int[n], rng) -> target rows, e.g.
  `genenv_jax.domains.maze.data.edited_variations`) the seed itself edited to it. A
  negative difficulty_step draws targets independently of the seed.
  """
  seeds = rng.integers(0, len(rows), size)
  if difficulty_step < 0:
    target = rows[rng.integers(0, len(rows), size)]
  else:
    levels = np.unique(difficulty)
    step = rng.integers(-difficulty_step, difficulty_step + 1, size)
    wanted = np.clip(difficulty[seeds] + level_offset + step, levels.min(),
                     levels.max())
    if edit is not None:
      target = edit(rows[seeds], wanted, rng)
    else:
      targets = np.empty(size, np.int64)
      for level in np.unique(wanted):
        at_level = np.flatnonzero(difficulty == level)
        if not len(at_level):
          raise ValueError(f"Seed data has no task of difficulty {level}.")
        chosen = wanted == level
        targets[chosen] = rng.choice(at_level, chosen.sum())
      target = rows[targets]
  prompt, prompt_mask = jax.jit(domain.simulator_prompt)(rows[seeds])
  return SupervisedData(np.asarray(prompt), np.asarray(prompt_mask),
                        target, target != domain.pad_id)


def supervised_optimizer(learning_rate: float, steps: int
                         ) -> optax.GradientTransformation:
  """AdamW with global-norm clipping over a warm-up + cosine schedule."""
  schedule = optax.warmup_cosine_decay_schedule(
      0.0, learning_rate, min(50, steps // 10 + 1), steps, 0.1 * learning_rate)
  return optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule))


def supervised_update(model_config: ModelConfig,
                      opt: optax.GradientTransformation, mesh, rules):
  """The jitted warm-start step `(params, opt_state, batch) -> (params,
  opt_state, loss, skipped)`; batch: a SupervisedData of int32/bool [B, P]
  and [B, R] arrays. Only what trains (`lora.split`: every parameter, or
  the adapters alone) is differentiated and has an optimiser state. A step
  whose loss, gradient or update is not finite leaves params and opt_state
  as they were (skipped = 1)."""
  def loss_fn(trainable, frozen, batch: SupervisedData):
    return policy.nll_loss(model_config, lora.join(trainable, frozen),
                           batch.prompt, batch.prompt_mask, batch.target,
                           batch.target_mask, loss_mask=batch.loss_mask)

  @jax.jit
  @sharding.in_mesh(mesh, rules)
  def update(params, opt_state, batch):
    trainable, frozen = lora.split(params)
    loss, grads = jax.value_and_grad(loss_fn)(trainable, frozen, batch)
    updates, new_opt_state = opt.update(grads, opt_state, trainable)
    finite = (jnp.isfinite(loss) & jnp.isfinite(optax.tree.norm(grads))
              & jnp.isfinite(optax.tree.norm(updates)))
    trainable, opt_state = jax.tree.map(
        lambda new, old: jnp.where(finite, new, old),
        (optax.apply_updates(trainable, updates), new_opt_state),
        (trainable, opt_state))
    return (lora.join(trainable, frozen), opt_state, loss,
            1.0 - finite.astype(jnp.float32))

  return update


def train_supervised(model_config: ModelConfig, params, data: SupervisedData,
                     *, steps: int, batch_size: int, learning_rate: float,
                     seed: int, mesh, rules, max_skipped_updates: int = 0,
                     checkpoints: checkpointing.Checkpoints | None = None,
                     checkpoint_every: int = 0, name: str = "warmstart",
                     label: str = "") -> tuple[object, list[float]]:
  """AdamW on the token NLL of data.target; returns (params, losses per step).

  A model with adapters trains its adapters only, and they are folded into
  its base at the end (`lora.restart`: B back at zero), so the warm-started
  model is the base, and the reference, of what follows.

  A step whose loss or gradient norm is not finite leaves params and the
  optimiser state as they were; once more than `max_skipped_updates` steps
  were skipped, NonFiniteUpdateError names the step and `name`. With
  `checkpoints`, the training state is saved every `checkpoint_every` steps
  and at the end, and training resumes from the latest one (the batches
  already drawn are drawn again and dropped, so a resumed run is the same).
  Each save is waited for before the next step. On a preemption notice
  (`train.runtime.preemption`) the step every process reached is saved and
  `Preempted` raised. With a `label`, prints
  progress lines (`train.outputs.progress`) under it.
  """
  if steps <= 0:
    return params, []
  opt = supervised_optimizer(learning_rate, steps)
  update = supervised_update(model_config, opt, mesh, rules)
  opt_state = jax.jit(opt.init)(lora.split(params)[0])
  # Leaves not laid out over the mesh (the step counter) are replicated over
  # it, so a restored state has one layout with the parameters.
  opt_state = jax.device_put(opt_state, jax.tree.map(
      lambda x: (x.sharding
                 if isinstance(x.sharding, jax.sharding.NamedSharding)
                 else sharding.replicated(mesh)), opt_state))
  loss_history = []
  first = checkpoints.latest_step() if checkpoints else None
  if first is not None:
    restored = checkpoints.restore(first, dict(
        params=params, opt_state=opt_state,
        losses=np.zeros(steps, np.float32)))
    params, opt_state = restored["params"], restored["opt_state"]
    loss_history = list(np.asarray(restored["losses"])[:first])
    logging.info("%s: resuming from its checkpoint at step %d of %d.", name,
                 first, steps)
  first = first or 0
  rng = np.random.default_rng(seed)
  n = len(data.prompt)
  for _ in range(first):  # the batches of the restored steps
    rng.integers(0, n, batch_size)
  skipped = nonfinite.SkippedUpdates(max_skipped_updates,
                                     names=(f"{name}/skipped_updates",))
  window = dispatch.DispatchWindow()
  reporter = progress.Progress(label, steps) if label else None
  for step in range(first + 1, steps + 1):
    idx = rng.integers(0, n, batch_size)
    batch = sharding.shard_batch(
        jax.tree.map(lambda x: x[idx], data), mesh, rules)
    params, opt_state, loss, skip = update(params, opt_state, batch)
    skipped.add(step, {f"{name}/skipped_updates": skip})
    loss_history.append(loss)
    window.push(loss)
    # On a preemption notice, every process saves the same step and stops.
    preempted = checkpoints is not None and step < steps and (
        preemption.reached())
    if checkpoints and (preempted or step == steps or (
        checkpoint_every and step % checkpoint_every == 0)):
      skipped.check()  # never save a diverged state
      losses = np.zeros(steps, np.float32)
      losses[:step] = jax.device_get(loss_history)
      checkpoints.save(step, dict(params=params, opt_state=opt_state,
                                  losses=losses))
      # Waited for: its error raised here, its checksums recorded now (a kill
      # later leaves it intact).
      checkpoints.finish()
    if preempted:
      raise preemption.Preempted(f"stage 1's {name} step {step} in "
                                 f"{checkpoints.directory}")
    if reporter:
      reporter.update(step)
  skipped.check()
  return (lora.restart(params, model_config),
          [float(x) for x in jax.device_get(loss_history)])

CHECKPOINT_DIR = "warmstart_checkpoints"


def checkpoint_dir(workdir: epath.Path) -> epath.Path:
  """Where stage 1 keeps its checkpoints (one folder per player) until the
  run's step-0 checkpoint holds its result."""
  return workdir / CHECKPOINT_DIR


def warmstart(config, domain: TaskDomain, agent_model: ModelConfig,
              simulator_model: ModelConfig, agent_params, simulator_params,
              rows: np.ndarray, difficulty: np.ndarray, mesh, rules,
              workdir: epath.Path | None = None, chief: bool = True):
  """Runs stage 1 for both players. Returns (agent params, simulator params,
  metrics). With `workdir`, each player's training is checkpointed every
  config.warmstart.checkpoint_every steps under checkpoint_dir(workdir) and
  resumed from there."""
  ws = config.warmstart
  shared = dict(batch_size=ws.batch_size, learning_rate=ws.learning_rate,
                mesh=mesh, rules=rules,
                max_skipped_updates=config.max_skipped_updates,
                checkpoint_every=ws.checkpoint_every)

  def checkpoints(player):
    if workdir is None:
      return None
    return checkpointing.Checkpoints(checkpoint_dir(workdir) / player,
                                     max_to_keep=1, keep_steps=(),
                                     chief=chief)
  rng = np.random.default_rng(config.seed + 1)
  num_examples = max(max(ws.agent_steps, ws.simulator_steps) * ws.batch_size, 1)
  agent_losses = simulator_losses = []
  if ws.agent_steps > 0:
    agent_params, agent_losses = train_supervised(
        agent_model, agent_params,
        agent_data(domain, rows, difficulty, ws.agent_level_weights, rng,
                   num_examples),
        steps=ws.agent_steps, seed=config.seed, name="warmstart/agent",
        label="stage 1: agent",
        checkpoints=checkpoints("agent"), **shared)
  if ws.simulator_steps > 0:
    simulator_params, simulator_losses = train_supervised(
        simulator_model, simulator_params,
        simulator_data(domain, rows, difficulty, rng, num_examples,
                       ws.simulator_difficulty_step,
                       edit=lesson_edit(config, domain)),
        steps=ws.simulator_steps, seed=config.seed + 2,
        name="warmstart/simulator", label="stage 1: simulator",
        checkpoints=checkpoints("simulator"),
        **shared)
  simulator_params = start_simulator(config, domain, simulator_model,
                                     simulator_params, rows, difficulty, mesh,
                                     rules)
  metrics = {}
  if agent_losses:
    metrics["warmstart/agent_loss"] = float(np.mean(agent_losses[-20:]))
  if simulator_losses:
    metrics["warmstart/env_loss"] = float(np.mean(simulator_losses[-20:]))
  return agent_params, simulator_params, metrics


SIMULATOR_STARTS = ("matched", "hard", "easy")
SIMULATOR_LESSONS = ("drawn", "edited")


def lesson_edit(config, domain: TaskDomain):
  """The `edit` of `simulator_data` that config.warmstart.simulator_lessons
  names: None for "drawn" (targets drawn from the seed data), the domain's
  registered `edit_variations` for "edited"."""
  lessons = config.warmstart.simulator_lessons
  if lessons == "drawn":
    return None
  edit = domains.registered(config.task.name).edit_variations
  if lessons == "edited" and edit is not None:
    return functools.partial(edit, domain)
  raise ValueError(
      f"config.warmstart.simulator_lessons={lessons!r} with "
      f"config.task.name={config.task.name!r}: expected one of "
      f"{SIMULATOR_LESSONS}, and 'edited' needs a domain that edits seeds.")


def start_simulator(config, domain: TaskDomain, simulator_model: ModelConfig,
                    simulator_params, rows: np.ndarray, difficulty: np.ndarray,
                    mesh, rules):
  """The warm-started simulator moved to config.warmstart.simulator_start.

  "matched": unchanged. "hard" / "easy": simulator_start_steps more lessons
  (same batch size and learning rate) whose targets sit
  simulator_start_offsets[name] levels from their seed's, so co-evolution
  starts from a simulator that writes tasks above / below the agent's level.
  Its own random stream (config.seed + 4) makes the result the same whether
  it follows the warm-start here or a shared warm-start (init_from).
  """
  ws = config.warmstart
  if ws.simulator_start not in SIMULATOR_STARTS:
    raise ValueError(f"config.warmstart.simulator_start="
                     f"{ws.simulator_start!r}; expected one of "
                     f"{SIMULATOR_STARTS}.")
  if ws.simulator_start == "matched" or ws.simulator_start_steps <= 0:
    return simulator_params
  offset = int(ws.simulator_start_offsets[ws.simulator_start])
  rng = np.random.default_rng(config.seed + 4)
  data = simulator_data(domain, rows, difficulty, rng,
                        ws.simulator_start_steps * ws.batch_size,
                        ws.simulator_difficulty_step, offset,
                        edit=lesson_edit(config, domain))
  params, _ = train_supervised(
      simulator_model, simulator_params, data,
      steps=ws.simulator_start_steps, batch_size=ws.batch_size,
      learning_rate=ws.learning_rate, seed=config.seed + 4, mesh=mesh,
      rules=rules)
  return params


def started_simulator_state(config, domain: TaskDomain, players,
                            simulator, rows: np.ndarray,
                            difficulty: np.ndarray, mesh, rules):
  """A restored step-0 simulator PlayerState moved by `start_simulator`: the
  moved weights, a fresh optimiser state and the moved weights as the KL
  reference (the initial simulator of co-evolution)."""
  params = start_simulator(config, domain, players.simulator_model,
                           simulator.params, rows, difficulty, mesh, rules)
  return jax.jit(functools.partial(coevolve_state.new_player_state,
                                   optimizer=players.simulator_opt))(params)
