"""The co-evolution step benchmark (`python -m train.bench.compare step`).

Both players are a random `tiny` or `small` preset (their own vocabularies)
on the mesh `train.bench.common.mesh_shape` picks for a program that decodes (with
--layout auto: the batch split over every device for tiny, the weights split
over the devices for small). The agent batch matches the peers'
GRPO step: 16 tasks x 4 attempts x 32 new tokens (4 seeds x 4 variations
written by the simulator, no replayed tasks, arithmetic answers given 32
columns); one GRPO epoch in one minibatch; the simulator is updated by RWR.
Random weights seldom write valid tasks, which changes no shape and so no
amount of work.

Records (metric "seconds", ratios "> 1 = we are faster"):
  phase "step": the whole step jitted as in training (`coevolve.jit_step`,
    the state donated), with the number of compilations it took ("compiles");
    peer "tunix" (with TUNIX_PYTHON set, see `train.bench.compare`): one step of
    Tunix's GRPOLearner on a random Qwen2 of the agent's shapes at the same
    agent batch (16 prompts x 4 generations x 32 new tokens; prompts as long
    as the agent's, `agent_prompt_len` = 13 columns: Tunix's are 13 random
    ids, ours `BOS a + b =` left-padded to 13), a reference model and AdamW
    (the "grpo" bench of `train/bench/tunix_side.py`). It is only the agent's half
    of our step: the simulator's sampling and update have no counterpart
    there. The two are timed alternately;
  phases "write_tasks" (the simulator samples, the domain parses),
    "attempt" (the agent samples, the domain verifies), "curriculum",
    "agent_update" (the GRPO batch's reference pass and the update),
    "simulator_update" (likewise): the stage functions `coevolve.make_step`
    chains, each compiled on its own (replay, pools and metrics left out).
limit: the phase's FLOPs (`forward_flops_per_token` per token forward, 3x
that per token trained) at the measured peak.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Iterator

import jax
import ml_collections
import numpy as np

from configs import default
from genenv_jax import coevolve
from genenv_jax import sharding
from genenv_jax.domains.arithmetic.domain import ArithmeticDomain
from models.config import get_preset
from train import build
from train.bench import common

NUM_SEEDS, VARIATIONS, ATTEMPTS, ANSWER_TOKENS = 4, 4, 4, 32
RULES = common.RULES


@dataclasses.dataclass(frozen=True)
class WideAnswerDomain(ArithmeticDomain):
  """Arithmetic tasks whose answers get `answer_width` columns: the agent
  generates that many tokens per attempt (references are padded)."""
  answer_width: int = ANSWER_TOKENS

  @property
  def answer_len(self) -> int:
    return self.answer_width


def step_config(size: str, layout: str = "auto") -> ml_collections.ConfigDict:
  """The demo config with both players at preset `size`, the peers' batch
  and the mesh `train.bench.common.mesh_shape` gives `layout` for a program that
  decodes."""
  preset = get_preset(size)
  config = default.get_config()
  config.mesh = ml_collections.ConfigDict(
      common.mesh_shape(preset, layout, decoding=True))
  vocab = preset.vocab_size
  for player in (config.agent, config.simulator):
    player.model = size
    player.model_overrides = ml_collections.ConfigDict(dict(vocab_size=vocab))
  config.coevolve.update(num_seeds=NUM_SEEDS, variations=VARIATIONS,
                         attempts=ATTEMPTS, agent_epochs=1,
                         agent_minibatches=1)
  config.pool.update(capacity=1024, num_base=256, replay_tasks=0,
                     generation_capacity=256)
  return config


def tunix_grpo_setup(config, domain, players) -> dict:
  """The Tunix worker's "grpo" setup fields for our step's agent batch: one
  prompt per task, the agent's prompt length and answer columns."""
  cc = config.coevolve
  return dict(bench="grpo", model=common.model_shapes(players.agent_model),
              num_prompts=cc.num_seeds * cc.variations,
              generations=cc.attempts, prompt_length=domain.agent_prompt_len,
              new_tokens=domain.answer_len, seed=config.seed)


def _median_seconds(fn, repeats: int) -> float:
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def _phase_flops(config, domain, players) -> dict[str, float]:
  """FLOPs of each phase (see the module doc)."""
  agent, simulator = players.agent_model, players.simulator_model
  cc = config.coevolve
  tasks = cc.num_seeds * cc.variations
  attempts = tasks * cc.attempts
  pe, length = domain.simulator_prompt_len, domain.task_len
  p, r = domain.agent_prompt_len, domain.answer_len
  fwd, train = common.forward_flops_per_token, common.train_flops_per_token
  simulator_tokens = tasks * (pe + length)
  agent_tokens = attempts * (p + r)
  return {
      "write_tasks": (cc.num_seeds * pe * fwd(simulator, common.causal_context(pe))
                     + tasks * length
                     * fwd(simulator, common.sampler_context(pe, length))),
      "attempt": (tasks * p * fwd(agent, common.causal_context(p))
                       + attempts * r * fwd(agent, common.sampler_context(p, r))),
      # Reference log-probs, then one epoch of forward + backward.
      "agent_update": agent_tokens * (
          fwd(agent, common.causal_context(p + r))
          + cc.agent_epochs * train(agent, common.causal_context(p + r))),
      # Reference log-probs, forward + backward, the KL-cap forward.
      "simulator_update": simulator_tokens * (
          2 * fwd(simulator, common.causal_context(pe + length))
          + train(simulator, common.causal_context(pe + length))),
  }


def _phases(config, domain, players, mesh):
  """The step's stages (`genenv_jax.coevolve`), each jitted on its own."""
  def write_tasks(state: coevolve.CoevolveState, key):
    seed_key, sample_key = jax.random.split(key)
    return coevolve.write_tasks(config, domain, players, state, seed_key,
                                sample_key)

  def attempt(agent, tasks, key):
    return coevolve.attempt_stage(domain)(config, domain, players, agent,
                                          tasks, key)

  def curriculum_signals(tasks, rewards):
    return coevolve.curriculum_signals(config, domain, tasks, rewards)

  def agent_update(agent, attempts, key):
    batch = coevolve.grpo_batch(config, players, agent, attempts)
    return coevolve.agent_update(config, players, agent, batch, key)

  def simulator_update(simulator, generation, signals):
    batch = coevolve.simulator_batch(config, players, simulator, generation,
                                     signals)
    return coevolve.simulator_update(config, players, simulator, batch)

  jit = lambda fn: jax.jit(sharding.in_mesh(mesh, RULES)(fn))
  return (jit(write_tasks), jit(attempt), jit(curriculum_signals),
          jit(agent_update), jit(simulator_update))


def run(size: str, repeats: int, peak_gflops: float,
        tunix: common.TunixWorker | None = None,
        layout: str = "auto") -> Iterator[dict]:
  """Times the whole step and its phases at preset `size`; yields records.

  tunix: a worker for the step's peer figure (see the module doc), or None.
  layout: our side's device layout (`train.bench.common.mesh_shape`).
  """
  config = step_config(size, layout)
  domain = WideAnswerDomain(max_digits=config.task.max_digits)
  players = build.build_players(config, domain)
  mesh = sharding.make_mesh(dict(config.mesh))
  agent_key, simulator_key = jax.random.split(jax.random.PRNGKey(config.seed))
  init = lambda model, key: build.init_player_params(model, key, mesh, RULES)
  rows, difficulty = domain.random_tasks(np.random.default_rng(config.seed),
                                         config.pool.num_base)
  state, shardings = build.create_state(
      config, domain, players, init(players.agent_model, agent_key),
      init(players.simulator_model, simulator_key), rows, difficulty, mesh)
  flops = _phase_flops(config, domain, players)
  limit = lambda phase_flops: phase_flops / (peak_gflops * 1e9)
  details = dict(seeds=NUM_SEEDS, variations=VARIATIONS, attempts=ATTEMPTS,
                 new_tokens=ANSWER_TOKENS, simulator_new_tokens=domain.task_len,
                 repeats=repeats, devices=jax.device_count(),
                 mesh=common.describe_mesh(mesh), backend=jax.default_backend())

  # Phases first (the whole step donates the state it is given).
  write_tasks, attempt, curriculum_signals, agent_update, simulator_update = (
      _phases(config, domain, players, mesh))
  key = jax.random.PRNGKey(1)
  generation = write_tasks(state, key)
  attempts = attempt(state.agent, generation.tasks, key)
  signals = curriculum_signals(generation.tasks, attempts.success)
  calls = {
      "write_tasks": lambda: write_tasks(state, key),
      "attempt": lambda: attempt(state.agent, generation.tasks, key),
      "curriculum": lambda: curriculum_signals(generation.tasks,
                                               attempts.success),
      "agent_update": lambda: agent_update(state.agent, attempts, key),
      "simulator_update": lambda: simulator_update(state.simulator,
                                                   generation, signals),
  }
  for phase, call in calls.items():
    jax.block_until_ready(call())
    seconds = _median_seconds(call, repeats)
    yield common.make_record(
        "step", size, "seconds", seconds,
        limit=limit(flops[phase]) if phase in flops else None, phase=phase,
        **details)

  step = coevolve.jit_step(coevolve.make_step(config, domain, players),
                           shardings, mesh, RULES)
  holder = [step.fn(state)[0]]
  jax.block_until_ready(holder[0])

  def one_step(_):
    holder[0], metrics = step.fn(holder[0])
    return jax.block_until_ready(metrics)

  sides = {"ours": one_step}
  tunix_run = common.tunix_side(tunix, **tunix_grpo_setup(config, domain,
                                                          players))
  if tunix_run is not None:
    sides["tunix"] = tunix_run
  seconds = common.time_alternately(sides, repeats)
  yield common.make_record(
      "step", size, "seconds", seconds["ours"], tunix=seconds.get("tunix"),
      limit=limit(sum(flops.values())), phase="step",
      compiles=step.trace_count(), **details)
