"""Compiles every program of a run for a Cloud TPU slice, on a CPU host.

  python -m train.bench.compile_check --config=configs/qwen_tpu.py:7b \\
      --topology=v4-64 --config.task.tokenizer_dir=DIR [--config.FIELD=VALUE ...]

Needs libtpu (requirements-tpu.txt); no TPU. The slice's devices come from
`jax.experimental.topologies.get_topology_desc`, the mesh from
`sharding.make_mesh` over them (`jax.make_mesh`: device order follows the
chip grid), and each program is lowered with abstract arguments
(ShapeDtypeStructs carrying the run's shardings) and compiled by libtpu's
compiler: nothing is allocated, and no weight is built.

Programs, as the run compiles them:
  warmstart_agent, warmstart_simulator: the stage-1 update of each player
    (train/warmstart.py), when its step count is > 0;
  coevolve_step: the co-evolution step as train/loop.py jits it, lowered a
    second time with its own output's layout (what step 2 is given) to check
    that it compiles once;
  heldout: greedy held-out decoding (train/heldout.py) of --heldout_rows rows
    (one pass of at most config.eval.rows_per_pass rows, when that is set);
  eval_generate: the benchmarks' greedy decoding (`python -m
    train.tools.evaluate ... --generate --run WORKDIR` on the run's mesh,
    train/tools/agent_generate.py's `decoder`) of one batch of
    --eval_batch_size prompts (rounded up to the mesh's data x fsdp devices)
    --eval_prompt_len tokens wide, --eval_new_tokens tokens each, with the
    agent's parameters sharded as the run's and its compute dtype.
Per program and device: argument, output, temporary and peak bytes against
the chip's HBM, how often it was traced (compiles), and its cost read from
the compiled HLO (train/bench/hlo_cost.py): FLOPs, HBM bytes and
collectives (kind, count, bytes sent), every loop counted as often as it
runs (decode steps, GRPO minibatches, scanned layers), remat's recomputed
forward included because it is in the program.

Phases, each compiled on its own (as train/bench/step.py does on a CPU):
simulator_sample, agent_sample, agent_reference (the GRPO reference's
log-probs), agent_update (every GRPO minibatch), simulator_reference and
simulator_update (RWR / PG with its KL-cap pass); the simulator's at
simulator_len tokens. Per program, phase and device:
  modeled_s = sum over operations of max(FLOPs / peak, HBM bytes / HBM
              bandwidth) + collective bytes / interconnect bandwidth
from its compiled program: each operation (a fusion, a matmul, a copy) at
its own roofline, one after another, collectives not overlapped; beside
  bound_s = max(model FLOPs / peak, ideal bytes / HBM bandwidth),
the model's FLOPs (train/bench/common.py) and the bytes the phase must move
at the least (a decode step: the weights and the KV cache's filled slots;
see `phases`). The peaks are vendor figures per chip (train/bench/slices.py).

The last line is `fits=true|false peak_gib=X hbm_gib=Y topology=NAME
step_s=S bound_s=B`: the largest peak of any program; the modeled seconds
of the whole step (coevolve_step's program, else the compiled phases'
sum, "-" when neither was compiled); the phases' summed bound. The exit
status is 3 when a program does not fit (libtpu's compiler refuses a
program over HBM), 1 when anything else stops the check before that verdict
(a bad config, a missing tokenizer). `--json` prints one JSON object per program and per
phase (`program` / `phase`, `peak_bytes`, `temp_bytes`, `flops`,
`hbm_bytes`, `collective_bytes`, `collectives`, `roofline_s`,
`collective_s`, `modeled_s`, `bound_s`, ...;
a phase not compiled, `--phases=false`, only its bound) before that line,
in place of the tables. `--top_sources=N` adds, per compiled program and
phase, the N source operations (their `op_name`) that move the most HBM
bytes, every loop's trips counted (`top_sources` in JSON): where the bytes
go. `--hlo_dir=DIR` writes each compiled program's HLO text to
DIR/NAME.hlo, which `python -m train.bench.hlo_cost DIR/NAME.hlo
--devices=N` reads again without compiling.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import sys
import time
from typing import Any, Callable

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
from ml_collections import config_flags
import numpy as np

from genenv_jax import coevolve
from genenv_jax import policy
from genenv_jax import scripted
from genenv_jax import sharding
from genenv_jax.domains import get_domain
from genenv_jax.sampling import SamplingConfig, sample
from models import lora
from train import build
from train import heldout
from train import warmstart
from train.bench import common
from train.bench import hlo_cost
from train.bench import slices
from train.checkpoints import state_layout
from train.tools import agent_generate

FLAGS = flags.FLAGS
GIB = 2**30
# The chips one TPU VM host holds (x, y, z), libtpu's default.
HOST_CHIPS = (2, 2, 1)
OOM = re.compile(r"RESOURCE_EXHAUSTED|Ran out of memory", re.I)


def topology_devices(tpu_slice: slices.Slice) -> list:
  """The slice's TPU devices for compiling on this host (one per chip)."""
  from jax.experimental import topologies  # pylint: disable=g-import-not-at-top
  # Compiling uses no TPU: several checks (or a test beside one) may load
  # libtpu at once, which its lockfile would otherwise refuse.
  os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
  # v4's chip config defaults to one device per TensorCore; TPU VMs run it
  # as one device per chip (megacore), as jax.make_mesh requires.
  extra = {"chip_config_name": "megacore"} if tpu_slice.chip.libtpu_name == "v4" else {}
  # A host holds a 2x2x1 block of chips; a smaller slice (v5litepod-1,
  # v6e-1) is one host of its own size.
  grid = tuple(tpu_slice.grid) + (1,) * (3 - len(tpu_slice.grid))
  if any(g < h for g, h in zip(grid, HOST_CHIPS)):
    extra["chips_per_host_bounds"] = [min(g, h) for g, h in zip(grid, HOST_CHIPS)]
  return topologies.get_topology_desc(
      platform="tpu", topology_name=tpu_slice.topology_name, **extra).devices


@dataclasses.dataclass
class Program:
  """One compiled program's figures per device (bytes, FLOPs), or its
  failure to compile (error)."""
  name: str
  compiles: int = 0
  seconds: float = 0.0
  argument: int = 0
  output: int = 0
  temp: int = 0
  peak: int = 0
  flops: float = 0.0
  bytes_accessed: float = 0.0
  cost: hlo_cost.Cost = dataclasses.field(default_factory=hlo_cost.Cost)
  # The cost split by source JAX operation, costliest bytes first
  # (hlo_cost.Module.by_source).
  sources: list = dataclasses.field(default_factory=list)
  error: str = ""

  @property
  def fits(self) -> bool:
    return not self.error


def _oom_bytes(message: str) -> int:
  """The bytes an over-HBM program needs, from libtpu's message."""
  # "Used 38.9G of 15.75G hbm" or "the total memory required for HLO
  # temporaries (38.85G) exceeds available HBM (15.75G)".
  found = (re.search(r"Used ([\d.]+)([KMGT])? of", message)
           or re.search(r"required [^(]*\(([\d.]+)([KMGT])?\)", message))
  if not found:
    return 0
  scale = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, None: 1}
  return int(float(found.group(1)) * scale[found.group(2)])


def compile_program(name: str, fn: Callable, *args,
                    traces: Callable[[], int] | None = None,
                    again: Callable[[Any], tuple] | None = None,
                    num_devices: int = 1,
                    hlo_dir: str | None = None,
                    flops_per_byte: float = 0.0) -> Program:
  """Lowers and compiles jitted `fn` at abstract `args` for `num_devices`
  devices.

  traces: how often fn has been traced so far (default: counted here);
  again: builds, from the compiled output's abstract values, the arguments of
  the next call (the step's next state), lowered again to count retraces;
  hlo_dir: where to write the compiled program's HLO text (`<name>.hlo`);
  flops_per_byte: the chip's peak FLOP/s over its HBM bytes/s, for the
  program's per-operation roofline (`hlo_cost.Cost.roofline_flops`).
  """
  count = [0]
  if traces is None:
    inner = fn

    def counted(*a):
      count[0] += 1
      return inner(*a)
    fn = jax.jit(counted)
    traces = lambda: count[0]
  program = Program(name)
  tick = time.perf_counter()
  try:
    lowered = fn.lower(*args)
    compiled = lowered.compile()
  except Exception as error:  # pylint: disable=broad-except
    if not OOM.search(str(error)):
      raise
    program.error = str(error).splitlines()[0][:400]
    program.peak = _oom_bytes(str(error))
    program.seconds = time.perf_counter() - tick
    program.compiles = traces()
    return program
  program.seconds = time.perf_counter() - tick
  if again is not None:
    fn.lower(*again(compiled.out_info))
  program.compiles = traces()
  memory = compiled.memory_analysis()
  program.argument = memory.argument_size_in_bytes
  program.output = memory.output_size_in_bytes
  program.temp = memory.temp_size_in_bytes
  program.peak = getattr(memory, "peak_memory_in_bytes", 0) or (
      memory.argument_size_in_bytes + memory.output_size_in_bytes
      - memory.alias_size_in_bytes + memory.temp_size_in_bytes)
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  program.flops = float(cost.get("flops", 0.0))
  program.bytes_accessed = float(cost.get("bytes accessed", 0.0))
  text = compiled.as_text()
  if hlo_dir:
    os.makedirs(hlo_dir, exist_ok=True)
    with open(os.path.join(hlo_dir, f"{name}.hlo"), "w") as f:
      f.write(text)
  module = hlo_cost.Module(text, num_devices, flops_per_byte)
  program.cost = module.cost()
  program.sources = module.by_source()
  return program


def _abstract(x, s):
  return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s)


class Setup:
  """The run's players, mesh, abstract parameters and state on the slice."""

  def __init__(self, config, tpu_slice: slices.Slice, devices,
               hlo_dir: str | None = None):
    self.config = config
    self.hlo_dir = hlo_dir
    self.flops_per_byte = (tpu_slice.chip.peak_tflops * 1e12
                           / (tpu_slice.chip.hbm_gbps * 1e9))
    self.slice = tpu_slice
    self.rules = sharding.DEFAULT_RULES
    self.mesh = sharding.make_mesh(dict(config.mesh), devices)
    self.domain = get_domain(config.task)
    self.players = build.build_players(config, self.domain)
    self.replicated = sharding.replicated(self.mesh)
    rows = np.zeros((config.pool.num_base, self.domain.task_len), np.int32)
    self.state, self.shardings = state_layout.abstract_state(
        config, self.domain, self.players, rows, np.ones(len(rows), np.int32),
        self.mesh, self.rules)
    self.params = {"agent": self.state.agent.params,
                   "simulator": self.state.simulator.params}

  def batch(self, shape, dtype, name: str):
    """An abstract batch array: leading axis over the batch mesh axes when
    it divides them, else replicated."""
    try:
      s = sharding.batch_sharding(self.mesh, self.rules, len(shape), shape,
                                  name)
    except ValueError:
      s = self.replicated
    return jax.ShapeDtypeStruct(shape, dtype, sharding=s)

  def key(self):
    return jax.ShapeDtypeStruct((2,), jnp.uint32, sharding=self.replicated)

  def jit(self, fn):
    return jax.jit(sharding.in_mesh(self.mesh, self.rules)(fn))

  def compile(self, name: str, fn: Callable, *args, **kwargs) -> Program:
    """`compile_program` over this slice's devices, writing the HLO into
    hlo_dir when set, with the chip's roofline."""
    return compile_program(name, fn, *args, num_devices=self.mesh.size,
                           hlo_dir=self.hlo_dir,
                           flops_per_byte=self.flops_per_byte, **kwargs)


PROGRAMS = ("warmstart_agent", "warmstart_simulator", "coevolve_step",
            "heldout", "eval_generate")
# eval_generate's (prompts per batch, prompt width, new tokens): a batch of
# the longest benchmark prompts (BFCL multi-turn, ALFWorld late in an episode)
# and TravelPlanner's --max_new_tokens.
EVAL_SHAPE = (32, 2048, 1024)


def programs(setup: Setup, heldout_rows: int,
             only: tuple[str, ...] = PROGRAMS,
             eval_shape: tuple[int, int, int] = EVAL_SHAPE) -> list[Program]:
  """Compiles the run's programs (see the module doc), those named in `only`;
  held-out decoding of `heldout_rows` tasks; the evaluate tool's decoding of
  `eval_shape` (prompts, prompt width, new tokens)."""
  unknown = set(only) - set(PROGRAMS)
  if unknown:
    raise ValueError(f"--programs: unknown {sorted(unknown)}; expected some "
                     f"of {PROGRAMS}.")
  config, domain, players = setup.config, setup.domain, setup.players
  out = []
  ws = config.warmstart
  rows = jax.ShapeDtypeStruct((ws.batch_size, domain.task_len), jnp.int32)
  agent_target = jax.eval_shape(
      lambda r: domain.agent_target(domain.parse(r, r != domain.pad_id)), rows)
  widths = {
      "agent": (domain.agent_prompt_len, agent_target[0].shape[1]),
      "simulator": (domain.simulator_prompt_len, domain.task_len)}
  for player, steps, model in (
      ("agent", ws.agent_steps, players.agent_model),
      ("simulator", ws.simulator_steps, players.simulator_model)):
    if (steps <= 0 or config.warmstart.init_from
        or f"warmstart_{player}" not in only):
      continue
    opt = warmstart.supervised_optimizer(ws.learning_rate, steps)
    params = setup.params[player]
    trainable, _ = lora.split(params)
    opt_shapes = jax.eval_shape(opt.init, trainable)
    opt_state = jax.tree.map(_abstract, opt_shapes,
                             state_layout.opt_state_shardings(
                                 opt, opt_shapes,
                                 state_layout.param_shardings(
                                     trainable, setup.mesh, player),
                                 setup.mesh, player))
    p, r = widths[player]
    b = ws.batch_size
    batch = warmstart.SupervisedData(
        setup.batch((b, p), jnp.int32, "prompt"),
        setup.batch((b, p), jnp.bool_, "prompt_mask"),
        setup.batch((b, r), jnp.int32, "target"),
        setup.batch((b, r), jnp.bool_, "target_mask"))
    update = warmstart.supervised_update(model, opt, setup.mesh, setup.rules)
    out.append(setup.compile(f"warmstart_{player}", update, params,
                             opt_state, batch))

  if "coevolve_step" in only:
    # Scripted generation's bank: only its shape shapes the program.
    bank = (scripted.LevelBank(
        np.zeros((domain.max_difficulty, config.coevolve.scripted_bank_per_level,
                  domain.task_len), np.int32),
        np.ones((domain.max_difficulty,), np.int32))
            if config.coevolve.generation in scripted.SCRIPTED_GENERATIONS
            else None)
    step = coevolve.jit_step(coevolve.make_step(config, domain, players, bank),
                             setup.shardings, setup.mesh, setup.rules)
    out.append(setup.compile(
        "coevolve_step", step.fn, setup.state, traces=step.trace_count,
        again=lambda info: (jax.tree.map(
            lambda i: jax.ShapeDtypeStruct(i.shape, i.dtype,
                                           sharding=i.sharding), info[0]),)))
  if "heldout" in only:
    answer = heldout.answer_pass(domain, players.agent_model, setup.mesh,
                                 setup.rules,
                                 config.curriculum.success_threshold)
    # One pass: the run answers its held-out tasks config.eval.rows_per_pass
    # at a time when that is set (train/heldout.py).
    per_pass = config.eval.get("rows_per_pass", 0)
    held_rows = jax.ShapeDtypeStruct(
        (min(heldout_rows, per_pass) if per_pass else heldout_rows,
         domain.task_len), jnp.int32, sharding=setup.replicated)
    out.append(setup.compile("heldout", answer, setup.params["agent"],
                             held_rows))
  if "eval_generate" in only:
    prompts, width, new_tokens = eval_shape
    decode = agent_generate.decoder(
        players.agent_model,
        SamplingConfig(max_new_tokens=new_tokens, temperature=0.0,
                       eos_ids=domain.stop_ids, pad_id=domain.pad_id),
        setup.mesh, config.coevolve.sampling_layout)
    rows = agent_generate.batch_rows(prompts, setup.mesh)
    out.append(setup.compile(
        "eval_generate", decode, setup.params["agent"],
        setup.batch((rows, width), jnp.int32, "prompt"),
        setup.batch((rows, width), jnp.bool_, "prompt_mask"), setup.key()))
  return out


@dataclasses.dataclass
class Phase:
  """One phase of the step: its ideal cost per device and, when compiled,
  its program.

  model_flops: the model's FLOPs (train/bench/common.py); ideal_bytes: the
  HBM bytes it must move at the least (see `phases`)."""
  name: str
  model_flops: float
  ideal_bytes: float
  program: Program | None = None


def _param_bytes(params, dtype=None) -> float:
  """Bytes per device of a parameter tree (each leaf's shard), in `dtype`
  (default: as stored)."""
  total = 0.0
  for x in jax.tree.leaves(params):
    shard = x.sharding.shard_shape(x.shape)
    total += math.prod(shard) * jnp.dtype(dtype or x.dtype).itemsize
  return total


def live_cache_bytes(model, rows: int, prompt: int, new_tokens: int) -> float:
  """KV-cache bytes (all chips) that `new_tokens` decode steps over `rows`
  rows read when each reads only the slots filled so far: the prompt's P,
  then one more per step."""
  per_slot = (model.num_layers * 2 * model.num_kv_heads * model.head_dim
              * jnp.dtype(model.dtype).itemsize)
  slots = new_tokens * prompt + new_tokens * (new_tokens - 1) / 2
  return rows * slots * per_slot


# HBM passes over a player's stored weights by one optimizer step beyond the
# forward and backward reads and the gradient's write: AdamW reads the
# gradient, reads and writes the weights and both moments.
OPTIMIZER_PASSES = 7


def phases(setup: Setup, only: tuple[str, ...] = (),
           compile_them: bool = True) -> list[Phase]:
  """Each phase of the step (see the module doc), or only those named in
  `only` (when not empty), compiled on its own unless not compile_them.

  Ideal bytes per device: a decode step reads the sampling copy of the
  weights once (of an untied input embedding only its tokens' rows, left
  out) and the KV cache's filled slots (`live_cache_bytes`), a prefill the
  weights once; a forward pass reads the weights once per row
  pass; an update step reads them twice (forward, backward), writes the
  gradient and runs AdamW (OPTIMIZER_PASSES) over what trains (with low-rank
  adapters only they do, models/lora.py).
  """
  config, domain, players = setup.config, setup.domain, setup.players
  cc = config.coevolve
  chunk = cc.get("logprob_chunk_size", policy.DEFAULT_CHUNK_SIZE)
  sim_sampling, agent_sampling = coevolve.sampling_configs(config, domain)
  seeds, m, g = cc.num_seeds, cc.variations, cc.attempts
  tasks = seeds * m + config.pool.replay_tasks
  n, gen = tasks * g, seeds * m
  # The simulator writes (and is trained on) simulator_len tokens.
  pe, ls = domain.simulator_prompt_len, domain.simulator_len
  p, r = domain.agent_prompt_len, domain.answer_len
  agent, sim = players.agent_model, players.simulator_model
  fwd, train = common.forward_flops_per_token, common.train_flops_per_token
  devices = setup.mesh.size
  state = setup.state
  b = setup.batch

  def sampled(model, params, prompt, mask, key, sampling, num):
    return sample(model, coevolve.params_for_sampling(
        model, params, cc.sampling_layout), prompt, mask, key, sampling, num)

  def logprobs(model, temperature, row_chunks=1):
    return lambda params, prompt, pmask, resp, rmask: (
        policy.response_logprobs_by_rows(model, params, prompt, pmask, resp,
                                         rmask, temperature, chunk,
                                         row_chunks).logp)

  def sampling_bytes(model, params, rows, prompt, new_tokens):
    # Prefill and each decode step read the sampling copy of the weights (in
    # the compute dtype; "gathered": whole over fsdp), each step the cache;
    # of an untied input embedding only the tokens' rows.
    gathered = cc.sampling_layout == "gathered"
    read = ({k: v for k, v in params.items() if k != "embed"}
            if not model.tie_embeddings else params)
    weights = _param_bytes(read, model.dtype) * (
        setup.mesh.shape["fsdp"] if gathered else 1)
    return ((1 + new_tokens) * weights
            + live_cache_bytes(model, rows, prompt, new_tokens) / devices)

  def update_bytes(params, steps, forward_reads=2):
    # The passes read every stored weight; the gradient and AdamW cover what
    # trains (with low-rank adapters, the adapters alone: lora.split).
    trainable, _ = lora.split(params)
    return steps * (forward_reads * _param_bytes(params)
                    + (1 + OPTIMIZER_PASSES) * _param_bytes(trainable))

  agent_batch = coevolve.AgentBatch(
      b((n, p), jnp.int32, "prompt"), b((n, p), jnp.bool_, "prompt_mask"),
      b((n, r), jnp.int32, "response"), b((n, r), jnp.bool_, "mask"),
      b((n, r), jnp.float32, "old_logp"), b((n, r), jnp.float32, "ref_logp"),
      b((n,), jnp.float32, "advantages"))
  f32 = lambda shape, name: b(shape, jnp.float32, name)
  specs = [
      ("simulator_sample",
       lambda prm, pr, pm, k: sampled(sim, prm, pr, pm, k, sim_sampling, m),
       (state.simulator.params, b((seeds, pe), jnp.int32, "prompt"),
        b((seeds, pe), jnp.bool_, "mask"), setup.key()),
       seeds * pe * fwd(sim, common.causal_context(pe))
       + gen * ls * fwd(sim, common.sampler_context(pe, ls)),
       sampling_bytes(sim, state.simulator.params, gen, pe, ls)),
      ("agent_sample",
       lambda prm, pr, pm, k: sampled(agent, prm, pr, pm, k, agent_sampling, g),
       (state.agent.params, b((tasks, p), jnp.int32, "prompt"),
        b((tasks, p), jnp.bool_, "mask"), setup.key()),
       tasks * p * fwd(agent, common.causal_context(p))
       + n * r * fwd(agent, common.sampler_context(p, r)),
       sampling_bytes(agent, state.agent.params, n, p, r)),
      ("agent_reference", logprobs(agent, cc.agent_temperature,
                                   cc.agent_minibatches),
       (state.agent.reference(),) + tuple(agent_batch[:4]),
       n * (p + r) * fwd(agent, common.causal_context(p + r)),
       cc.agent_minibatches * _param_bytes(state.agent.reference())),
      ("agent_update",
       lambda st, batch, k: coevolve.agent_update(config, players, st, batch, k),
       (state.agent, agent_batch, setup.key()),
       cc.agent_epochs * n * (p + r) * train(agent, common.causal_context(p + r)),
       update_bytes(state.agent.params,
                    cc.agent_epochs * cc.agent_minibatches)),
      ("simulator_reference", logprobs(sim, cc.simulator_temperature),
       (state.simulator.reference(), b((gen, pe), jnp.int32, "prompt"),
        b((gen, pe), jnp.bool_, "prompt_mask"), b((gen, ls), jnp.int32, "task"),
        b((gen, ls), jnp.bool_, "task_mask")),
       gen * (pe + ls) * fwd(sim, common.causal_context(pe + ls)),
       _param_bytes(state.simulator.reference())),
  ]
  if config.simulator_update.method != "none":
    specs.append((
        "simulator_update",
        lambda st, batch: coevolve.simulator_update(config, players, st,
                                                    batch),
        (state.simulator, coevolve.SimulatorBatch(
            b((gen, pe), jnp.int32, "prompt"),
            b((gen, pe), jnp.bool_, "prompt_mask"),
            b((gen, ls), jnp.int32, "task"), b((gen, ls), jnp.bool_, "task_mask"),
            f32((gen, ls), "old_logp"), f32((gen, ls), "ref_logp"),
            b((gen,), jnp.bool_, "valid"), f32((gen,), "reward"),
            f32((gen,), "weights"))),
        # Forward + backward, then the KL-cap forward.
        gen * (pe + ls) * (train(sim, common.causal_context(pe + ls))
                           + fwd(sim, common.causal_context(pe + ls))),
        update_bytes(state.simulator.params, 1, forward_reads=3)))
  unknown = set(only) - {spec[0] for spec in specs}
  if unknown:
    raise ValueError(f"--phase_names: unknown {sorted(unknown)}; expected "
                     f"some of {[spec[0] for spec in specs]}.")
  out = []
  for name, fn, args, flops, ideal_bytes in specs:
    if only and name not in only:
      continue
    program = (setup.compile(name, setup.jit(fn), *args)
               if compile_them else None)
    out.append(Phase(name, flops / devices, ideal_bytes, program))
  return out


@dataclasses.dataclass(frozen=True)
class Rates:
  """One device's peak rates: FLOP/s, HBM and interconnect bytes/s."""
  flops: float
  hbm: float
  ici: float

  def modeled_s(self, cost: hlo_cost.Cost) -> float:
    """Seconds of a compiled program: each operation's compute or its HBM
    traffic, whichever is longer, one operation after another, then the
    collectives (none overlapped)."""
    return (cost.roofline_flops / self.flops
            + cost.collective_bytes / self.ici)

  def bound_s(self, flops: float, hbm_bytes: float) -> float:
    return max(flops / self.flops, hbm_bytes / self.hbm)


def _gib(x: float) -> str:
  return f"{x / GIB:.3f}"


def _top_sources(prog: Program, count: int) -> list[dict]:
  """The `count` source operations that move the most HBM bytes."""
  return [{"source": source, "hbm_bytes": cost.hbm_bytes, "flops": cost.flops,
           "collective_bytes": cost.collective_bytes}
          for source, cost in prog.sources[:count]]


def _record(kind: str, name: str, prog: Program, rates: Rates,
            bound_s: float | None, top_sources: int = 0, **extra) -> dict:
  cost = prog.cost
  if top_sources:
    extra["top_sources"] = _top_sources(prog, top_sources)
  return {kind: name, "fits": prog.fits, "compiles": prog.compiles,
          "peak_bytes": prog.peak, "temp_bytes": prog.temp,
          "argument_bytes": prog.argument, "flops": cost.flops,
          "hbm_bytes": cost.hbm_bytes,
          "collective_bytes": cost.collective_bytes,
          "collectives": hlo_cost.collectives_json(cost),
          "unknown_loops": cost.unknown_loops,
          # modeled_s = roofline_s + collective_s
          "roofline_s": cost.roofline_flops / rates.flops,
          "collective_s": cost.collective_bytes / rates.ici,
          "modeled_s": rates.modeled_s(cost) if prog.fits else None,
          "bound_s": bound_s, **extra}


def _source_lines(prog: Program, count: int) -> list[str]:
  return [f"  {prog.name} top source: {r['hbm_bytes'] / 1e9:.1f} GB HBM, "
          f"{r['flops'] / 1e12:.2f} TFLOP, "
          f"{r['collective_bytes'] / 1e9:.1f} GB sent: {r['source']}"
          for r in _top_sources(prog, count)]


def report(tpu_slice: slices.Slice, setup: Setup, progs: list[Program],
           phase_list: list[Phase], devices_per_chip: int = 1,
           json_lines: bool = False,
           top_sources: int = 0) -> tuple[str, bool]:
  """The printed report (a table, or with json_lines one JSON object per
  program and per compiled phase) and whether every program fits; with
  top_sources, each compiled program's and phase's costliest source
  operations by HBM bytes."""
  chip = tpu_slice.chip
  hbm = chip.hbm_gib * GIB / devices_per_chip
  rates = Rates(chip.peak_tflops * 1e12 / devices_per_chip,
                chip.hbm_gbps * 1e9 / devices_per_chip,
                chip.ici_gbps * 1e9 / devices_per_chip)
  compiled_phases = [ph for ph in phase_list if ph.program is not None]
  bound = sum(rates.bound_s(ph.model_flops, ph.ideal_bytes)
              for ph in phase_list)
  everything = progs + [ph.program for ph in compiled_phases]
  fits = all(p.fits and p.peak <= hbm for p in everything)
  peak = max((p.peak for p in everything), default=0)
  step = [p for p in progs if p.name == "coevolve_step" and p.fits]
  if step:
    step_s = f"{rates.modeled_s(step[0].cost):.3f}"
  elif compiled_phases and all(ph.program.fits for ph in compiled_phases):
    step_s = f"{sum(rates.modeled_s(ph.program.cost) for ph in compiled_phases):.3f}"
  else:
    step_s = "-"
  last = (f"fits={'true' if fits else 'false'} peak_gib={peak / GIB:.2f} "
          f"hbm_gib={hbm / GIB:.2f} topology={tpu_slice.name} "
          f"step_s={step_s} bound_s={bound:.3f}")
  if json_lines:
    lines = [hlo_cost.dumps(_record(
        "program", prog.name, prog, rates,
        bound if prog.name == "coevolve_step" and phase_list else None,
        top_sources)) for prog in progs]
    for ph in phase_list:
      ideal = dict(model_flops=ph.model_flops, ideal_bytes=ph.ideal_bytes)
      bound_s = rates.bound_s(ph.model_flops, ph.ideal_bytes)
      lines.append(hlo_cost.dumps(
          _record("phase", ph.name, ph.program, rates, bound_s, top_sources,
                  **ideal)
          if ph.program is not None else
          {"phase": ph.name, "compiled": False, "bound_s": bound_s, **ideal}))
    return "\n".join(lines + [last]), fits
  lines = [
      f"slice {tpu_slice.name}: topology {tpu_slice.topology_name}, "
      f"{setup.mesh.size} devices (one per chip), mesh "
      f"{common.describe_mesh(setup.mesh)}; per device {chip.hbm_gib:g} GiB "
      f"HBM, {chip.peak_tflops:g} TFLOP/s bf16, {chip.hbm_gbps:g} GB/s HBM, "
      f"{chip.ici_gbps:g} GB/s ICI",
      "program | compiles | compile_s | argument_gib | output_gib | temp_gib | "
      "peak_gib | hbm_gib | fits | tflops | hbm_gb | collective_gb | "
      "modeled_s"]
  for prog in everything:
    lines.append(" | ".join([
        prog.name, str(prog.compiles), f"{prog.seconds:.1f}",
        _gib(prog.argument), _gib(prog.output), _gib(prog.temp),
        _gib(prog.peak), _gib(hbm), "yes" if prog.fits else "NO",
        f"{prog.cost.flops / 1e12:.2f}", f"{prog.cost.hbm_bytes / 1e9:.1f}",
        f"{prog.cost.collective_bytes / 1e9:.1f}",
        f"{rates.modeled_s(prog.cost):.3f}" if prog.fits else "-"]))
    if prog.error:
      lines.append(f"  {prog.name}: {prog.error}")
    lines += _source_lines(prog, top_sources)
  if phase_list:
    lines.append("phase | model_tflops | ideal_hbm_gb | bound_s | tflops | "
                 "hbm_gb | collective_gb | modeled_s | modeled/bound")
    for ph in phase_list:
      bound_s = rates.bound_s(ph.model_flops, ph.ideal_bytes)
      row = [ph.name, f"{ph.model_flops / 1e12:.2f}",
             f"{ph.ideal_bytes / 1e9:.1f}", f"{bound_s:.3f}"]
      if ph.program is not None and ph.program.fits:
        cost, modeled = ph.program.cost, rates.modeled_s(ph.program.cost)
        row += [f"{cost.flops / 1e12:.2f}", f"{cost.hbm_bytes / 1e9:.1f}",
                f"{cost.collective_bytes / 1e9:.1f}", f"{modeled:.3f}",
                f"{modeled / bound_s:.2f}" if bound_s else "-"]
      else:
        row += ["-"] * 5
      lines.append(" | ".join(row))
      if ph.program is not None:
        lines += _source_lines(ph.program, top_sources)
  lines.append(last)
  return "\n".join(lines), fits


# The exit status of a run whose programs do not all fit the slice's HBM
# (launch/tpu_pod.sh tells it from an error's 1).
DOES_NOT_FIT = 3


def run(config, topology: str, heldout_rows: int = 512,
        with_phases: bool = True,
        only: tuple[str, ...] = PROGRAMS,
        phase_names: tuple[str, ...] = (),
        json_lines: bool = False,
        top_sources: int = 0,
        hlo_dir: str | None = None,
        eval_shape: tuple[int, int, int] = EVAL_SHAPE) -> tuple[str, bool]:
  """Compiles the programs `only` names (and with_phases, the phases) for
  slice `topology`, writing each one's HLO text into hlo_dir when given;
  eval_generate at `eval_shape` (prompts, prompt width, new tokens);
  returns (report, fits)."""
  tpu_slice = slices.parse_slice(topology)
  setup = Setup(config, tpu_slice, topology_devices(tpu_slice), hlo_dir)
  progs = programs(setup, heldout_rows, only, eval_shape)
  phase_list = phases(setup, phase_names, compile_them=with_phases)
  return report(tpu_slice, setup, progs, phase_list, json_lines=json_lines,
                top_sources=top_sources)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  if not FLAGS.topology:
    raise app.UsageError("--topology is required, e.g. --topology=v4-64.")
  text, fits = run(FLAGS.config, FLAGS.topology, FLAGS.heldout_rows,
                    FLAGS.phases,
                    tuple(p for p in FLAGS.programs if p != "none")
                    if FLAGS.programs else PROGRAMS,
                    tuple(FLAGS.phase_names), FLAGS.json, FLAGS.top_sources,
                    FLAGS.hlo_dir, (FLAGS.eval_batch_size, FLAGS.eval_prompt_len,
                                    FLAGS.eval_new_tokens))
  print(text, flush=True)
  sys.exit(0 if fits else DOES_NOT_FIT)


def define_flags() -> None:
  """The command line's flags (defined when run as a program, so that
  importing this module beside train.main defines no flag twice)."""
  config_flags.DEFINE_config_file(
      "config", "configs/qwen_tpu.py", "Path to an ml_collections config file.",
      lock_config=True)
  flags.DEFINE_string("topology", None, "Slice by its gcloud accelerator type: "
                      "v4-8 .. v4-4096, v5p-8 .., v5litepod-4 .. v5litepod-256, "
                      "v6e-4 ..")
  flags.DEFINE_integer("heldout_rows", 512, "Held-out tasks the run evaluates "
                       "(its test split's size).")
  flags.DEFINE_integer("eval_batch_size", EVAL_SHAPE[0], "eval_generate: "
                       "prompts per decoding call (evaluate's --batch_size).")
  flags.DEFINE_integer("eval_prompt_len", EVAL_SHAPE[1], "eval_generate: the "
                       "prompts' width in tokens.")
  flags.DEFINE_integer("eval_new_tokens", EVAL_SHAPE[2], "eval_generate: "
                       "tokens decoded per prompt (evaluate's --max_new_tokens).")
  flags.DEFINE_list("programs", [], "Compile only these programs (default: "
                    "all of warmstart_agent, warmstart_simulator, coevolve_step, "
                    "heldout, eval_generate; 'none' compiles none of them).")
  flags.DEFINE_list("phase_names", [], "With --phases, compile only these "
                    "phases (default: all; names as in the module doc).")
  flags.DEFINE_bool("json", False, "Print one JSON object per program and "
                    "per phase instead of the tables (the last line stays).")
  flags.DEFINE_integer("top_sources", 0, "Per compiled program and phase, "
                       "list this many source operations (op_name) that move "
                       "the most HBM bytes, loops' trips counted.")
  flags.DEFINE_string("hlo_dir", None, "Write each compiled program's and "
                      "phase's optimized HLO text to DIR/NAME.hlo (for "
                      "python -m train.bench.hlo_cost DIR/NAME.hlo).")
  flags.DEFINE_bool("phases", True, "Also compile each phase of the step on its "
                    "own for the roofline (takes about as long again).")


if __name__ == "__main__":
  define_flags()
  app.run(main)
