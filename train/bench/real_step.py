"""A run config's co-evolution step, stage by stage, against this host's
matmul peak at the players' dtype.

  python -m train.bench.real_step --config=configs/chat.py \\
      [--repeats=3] [--trl_python=.venv-trl/bin/python]

It runs with the XLA flags and CPU devices `python -m train.main` sets
(train/runtime/cpu_flags.py: one device per core, the library fusions).

The state is the driver's at step 0 without its warm-start (`train.build`):
the config's domain and mesh, both players from their HF directories (or
presets), D_train's base rows from the seed train split. A warm-started
simulator writes more valid tasks than its base model; only host scoring
(a verifier run per valid task) and the pool's contents depend on that, no
array's shape.

Each stage is jitted on its own, as `coevolve.make_step` chains them:
  simulator_sampling  coevolve.write_tasks: seeds drawn, the simulator
                      samples its variations, the domain parses them;
  agent_sampling      coevolve.attempt_stage: the agent's G attempts of each
                      task, the verifier inside (a host domain scores each
                      reply or plays each episode through pure_callback);
  curriculum          coevolve.curriculum_signals: p̂, R_env, the RWR weights;
  reference_pass      coevolve.grpo_batch: advantages and the agent's
                      reference log-probs (no model pass at grpo.kl_coef 0);
  agent_update        coevolve.agent_update: GRPO epochs x minibatches;
  simulator_update    coevolve.simulator_batch (its reference log-probs) and
                      coevolve.simulator_update.
Then the whole step as training runs it (`coevolve.jit_step`, the state
donated), `--repeats` times after its first call.

Per stage: the median wall seconds of `--repeats` calls after a first, and
its FLOPs from the compiled program's HLO (train/bench/hlo_cost.py: 2 per
multiply-add of every dot, each loop body times its trip count) summed over
the devices; bound = FLOPs / peak. Peak: the best of PEAK_REPEATS matmuls
[PEAK_ROWS, hidden] @ [hidden, intermediate] in the agent's compute dtype,
measured in this process (the XLA flags it runs with, train/runtime/
cpu_flags.py). The last line is one JSON object: step_s, bound_s, ratio
(step_s / bound_s), peak_gflops, dtype, compiles, per-stage seconds and
FLOPs, each player's trainable parameters and state bytes (memory), and
trl_step_s: TRL's GRPOTrainer doing the agent's half of the step
on the same model, prompts, G, lengths and dtype
(train/bench/trl_side.py, run by --trl_python), null without it. The
simulator's half has no TRL counterpart.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
from typing import Any, Callable

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
from ml_collections import config_flags
import numpy as np

from genenv_jax import coevolve
from genenv_jax import sharding
from genenv_jax.domains import get_domain
from models import lora
from train import build
from train.bench import hlo_cost
from train.runtime import cpu_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "run config",
                                          lock_config=False)
_REPEATS = flags.DEFINE_integer("repeats", 3, "timed calls per stage")
_TRL_PYTHON = flags.DEFINE_string(
    "trl_python", "", "a Python with trl and torch (requirements-trl.txt) "
    "for TRL's side; empty: no TRL figure")

RULES = sharding.DEFAULT_RULES
PEAK_ROWS = 4096
PEAK_REPEATS = 10
STAGES = ("simulator_sampling", "agent_sampling", "curriculum",
          "reference_pass", "agent_update", "simulator_update")


def matmul_peak_gflops(hidden: int, intermediate: int, dtype) -> float:
  """Best GFLOP/s of PEAK_REPEATS jitted [PEAK_ROWS, hidden] @ [hidden,
  intermediate] matmuls in `dtype` (the players' MLP shape)."""
  rng = np.random.default_rng(0)
  a = jnp.asarray(rng.standard_normal((PEAK_ROWS, hidden)), dtype)
  b = jnp.asarray(rng.standard_normal((hidden, intermediate)), dtype)
  matmul = jax.jit(jnp.matmul)
  jax.block_until_ready(matmul(a, b))
  best = float("inf")
  for _ in range(PEAK_REPEATS):
    start = time.perf_counter()
    jax.block_until_ready(matmul(a, b))
    best = min(best, time.perf_counter() - start)
  return 2 * PEAK_ROWS * hidden * intermediate / best / 1e9


def initial_state(config):
  """(domain, players, state, shardings, mesh, level bank) of a run at step
  0 without its warm-start."""
  mesh = sharding.make_mesh(dict(config.mesh))
  domain = get_domain(config.task)
  players = build.build_players(config, domain)
  workdir = os.path.join("/tmp", "genenv_real_step")
  train, _ = build.seed_data(config, domain, workdir)
  base = build.base_row_indices(config, train["difficulty"])
  agent, simulator = build.init_both_players(config, players, mesh, RULES)
  state, shardings = build.create_state(
      config, domain, players, agent, simulator, train["task"][base],
      train["difficulty"][base], mesh)
  return (domain, players, state, shardings, mesh,
          build.scripted_level_bank(config, domain, train))


def stage_functions(config, domain, players, level_bank
                    ) -> dict[str, Callable[..., Any]]:
  """The step's stages as pure functions of their inputs (module doc)."""
  def simulator_sampling(state, seed_key, sample_key):
    return coevolve.write_tasks(config, domain, players, state, seed_key,
                                sample_key, level_bank)

  def agent_sampling(agent, tasks, key):
    return coevolve.attempt_stage(domain)(config, domain, players, agent,
                                          tasks, key)

  def curriculum(tasks, success):
    return coevolve.curriculum_signals(config, domain, tasks, success)

  def reference_pass(agent, attempts):
    return coevolve.grpo_batch(config, players, agent, attempts)

  def agent_update(agent, batch, key):
    return coevolve.agent_update(config, players, agent, batch, key)

  def simulator_update(simulator, generation, signals):
    batch = coevolve.simulator_batch(config, players, simulator, generation,
                                     signals)
    return coevolve.simulator_update(config, players, simulator, batch)

  return dict(simulator_sampling=simulator_sampling,
              agent_sampling=agent_sampling, curriculum=curriculum,
              reference_pass=reference_pass, agent_update=agent_update,
              simulator_update=simulator_update)


def _median_seconds(call: Callable[[], Any], repeats: int) -> float:
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(call())
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def _total_flops(jitted, *args) -> float:
  """FLOPs of one call of `jitted` on `args`, summed over the devices."""
  devices = jax.device_count()
  compiled = jitted.lower(*args).compile()
  return hlo_cost.analyse(compiled, devices).flops * devices


def measure_stages(config, domain, players, state, mesh, level_bank,
                   repeats: int) -> tuple[dict, list[str]]:
  """({stage: {"seconds", "flops"}} for STAGES, the attempted tasks' agent
  prompts as text), each stage run on the previous stages' outputs from
  `state`."""
  stages = stage_functions(config, domain, players, level_bank)
  jitted = {name: jax.jit(sharding.in_mesh(mesh, RULES)(fn))
            for name, fn in stages.items()}
  keys = coevolve.step_keys(config, state)
  generation = jitted["simulator_sampling"](state, keys.seed, keys.simulator)
  tasks = generation.tasks  # the fresh tasks, then the replayed ones
  if config.pool.replay_tasks:
    with_replayed = jax.jit(sharding.in_mesh(mesh, RULES)(
        lambda fresh, pool, key, level_success: coevolve._concat_parsed(  # pylint: disable=protected-access
            fresh, coevolve.replay_tasks(config, domain, pool, key,
                                         level_success)[1])))
    tasks = with_replayed(tasks, state.pool, keys.replay, state.level_success)
  attempts = jitted["agent_sampling"](state.agent, tasks, keys.agent)
  fresh_success = attempts.success[:generation.tasks.valid.shape[0]]
  signals = jitted["curriculum"](generation.tasks, fresh_success)
  batch = jitted["reference_pass"](state.agent, attempts)
  arguments = dict(
      simulator_sampling=(state, keys.seed, keys.simulator),
      agent_sampling=(state.agent, tasks, keys.agent),
      curriculum=(generation.tasks, fresh_success),
      reference_pass=(state.agent, attempts),
      agent_update=(state.agent, batch, keys.update),
      simulator_update=(state.simulator, generation, signals))
  record = {}
  for name in STAGES:
    call = lambda name=name: jitted[name](*arguments[name])
    jax.block_until_ready(call())
    record[name] = dict(seconds=_median_seconds(call, repeats),
                        flops=_total_flops(jitted[name], *arguments[name]))
  return record, prompt_texts(domain, tasks)


def measure(config, repeats: int) -> tuple[dict, Any, list[str]]:
  """(per-stage and whole-step seconds and FLOPs and the peak, as the module
  doc's JSON line; the run's task domain; the attempted tasks' agent prompts
  as text)."""
  domain, players, state, shardings, mesh, level_bank = initial_state(config)
  stages, prompts = measure_stages(config, domain, players, state, mesh,
                                   level_bank, repeats)
  jax.clear_caches()  # the stages' programs, before the whole step's
  record: dict[str, Any] = {"stages": stages,
                            "memory": player_memory(state)}
  step = coevolve.jit_step(coevolve.make_step(config, domain, players,
                                              level_bank),
                           shardings, mesh, RULES)
  step_flops = _total_flops(step.fn, state)
  holder = [step.fn(state)[0]]
  jax.block_until_ready(holder[0])

  def one_step():
    holder[0], metrics = step.fn(holder[0])
    return metrics

  record.update(step_s=_median_seconds(one_step, repeats),
                step_flops=step_flops, compiles=step.trace_count())
  model = players.agent_model
  dtype = jnp.dtype(model.dtype)
  record.update(dtype=dtype.name, peak_gflops=matmul_peak_gflops(
      model.hidden_size, model.intermediate_size, dtype))
  peak = record["peak_gflops"] * 1e9
  for stage in record["stages"].values():
    stage["bound_s"] = stage["flops"] / peak
  record["bound_s"] = step_flops / peak
  record["ratio"] = record["step_s"] / record["bound_s"]
  record["devices"] = jax.device_count()
  record["mesh"] = dict(mesh.shape)
  return record, domain, prompts


def player_memory(state) -> dict[str, dict[str, int]]:
  """Per player: its trainable parameter count (`lora.split`: every
  parameter, or the adapters alone) and the bytes its params, opt_state and
  ref_params hold (the reference is None for a player with adapters)."""
  def nbytes(tree):
    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree))
  record = {}
  for name in ("agent", "simulator"):
    player = getattr(state, name)
    trainable, _ = lora.split(player.params)
    record[name] = dict(
        trainable_params=sum(x.size for x in jax.tree.leaves(trainable)),
        params_bytes=nbytes(player.params),
        opt_state_bytes=nbytes(player.opt_state),
        ref_params_bytes=nbytes(player.ref_params))
  return record


def prompt_texts(domain, tasks) -> list[str]:
  """The agent's prompts of the attempted tasks as text (pad dropped,
  special tokens kept), for TRL's side; empty for a domain without an HF
  tokenizer (its TRL figure is not comparable)."""
  tokenizer = getattr(domain, "tokenizer", None)
  if tokenizer is None:
    return []
  prompt, mask = np.asarray(tasks.prompt), np.asarray(tasks.prompt_mask)
  return [tokenizer.decode(row[keep].tolist(), skip_special_tokens=False)
          for row, keep in zip(prompt, mask)]


def trl_step_seconds(python: str, config, domain, prompts: list[str],
                     repeats: int) -> float:
  """TRL's GRPOTrainer on the agent's half of the step (train/bench/
  trl_side.py in `python`) on `prompts`: its median step seconds."""
  cc = config.coevolve
  if not config.agent.get("hf_dir", "") or not any(prompts):
    raise ValueError("--trl_python: TRL's side needs an agent with an HF "
                     "directory (config.agent.hf_dir) and a text domain.")
  # An invalid written task has no prompt (our step still samples its row):
  # TRL gets the first real prompt in its place, as many rows as ours.
  prompts = [p or next(q for q in prompts if q) for p in prompts]
  setup = dict(hf_dir=config.agent.hf_dir, prompts=prompts,
               generations=cc.attempts,
               # An episodic domain's agent writes one action a turn (the
               # chat domain's episodes are one turn).
               new_tokens=(domain.response_len if domain.environment is None
                           else domain.environment.action_len),
               temperature=cc.agent_temperature,
               learning_rate=config.agent.learning_rate,
               minibatches=cc.agent_minibatches,
               dtype=config.agent.model_overrides.get("dtype", "float32"),
               repeats=repeats, seed=config.seed)
  script = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "trl_side.py")
  result = subprocess.run([python, script, json.dumps(setup)], check=False,
                          capture_output=True, text=True)
  if result.returncode:
    raise RuntimeError(f"{script} failed (exit {result.returncode}):\n"
                       f"{result.stderr[-3000:]}")
  return json.loads(result.stdout.strip().splitlines()[-1])["step_s"]


def table(record: dict) -> str:
  """The per-stage markdown table of a `measure` record."""
  lines = ["| stage | seconds | GFLOP | bound (s) | seconds / bound |",
           "|---|---:|---:|---:|---:|"]
  rows = list(record["stages"].items()) + [("whole step", dict(
      seconds=record["step_s"], flops=record["step_flops"],
      bound_s=record["bound_s"]))]
  for name, stage in rows:
    ratio = (stage["seconds"] / stage["bound_s"] if stage["bound_s"]
             else float("nan"))
    lines.append(f"| {name} | {stage['seconds']:.3f} | "
                 f"{stage['flops'] / 1e9:.1f} | {stage['bound_s']:.3f} | "
                 f"{ratio:.2f} |")
  return "\n".join(lines)


def main(argv):
  del argv
  config = _CONFIG.value
  # The run's XLA flags, before JAX's backend.
  cpu_flags.use_project_settings(devices=config.cpu_devices)
  record, domain, prompts = measure(config, _REPEATS.value)
  print(table(record))
  print(f"peak {record['peak_gflops']:.0f} GFLOP/s ({record['dtype']} "
        f"matmul), {record['devices']} devices, mesh {record['mesh']}, "
        f"compiles {record['compiles']}", flush=True)
  for name, memory in record["memory"].items():
    print(f"{name}: {memory['trainable_params'] / 1e6:.2f}M trainable "
          f"parameters; params {memory['params_bytes'] / 2**20:.0f} MiB, "
          f"opt_state {memory['opt_state_bytes'] / 2**20:.0f} MiB, "
          f"reference {memory['ref_params_bytes'] / 2**20:.0f} MiB",
          flush=True)
  record["trl_step_s"] = (
      trl_step_seconds(_TRL_PYTHON.value, config, domain, prompts,
                       _REPEATS.value)
      if _TRL_PYTHON.value else None)
  print(json.dumps(record))


if __name__ == "__main__":
  flags.mark_flag_as_required("config")
  app.run(main)
