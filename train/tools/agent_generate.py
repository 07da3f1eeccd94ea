"""An agent's chat completions with the project's sampler, for the benchmark
commands of `python -m train.tools.evaluate ... --generate`.

The agent is a training run's (`--run DIR`: the agent's parameters of the run's
latest checkpoint, or `--step N`, its architecture and tokenizer from the run's
config.json) or an HF directory's (`--hf_dir DIR`). Its parameters are read
straight into their sharded layout on a mesh of every device of the job
(`load_agent`): the mesh is `--mesh` (e.g. `data=-1,fsdp=4,tensor=2`), else the
run's config.mesh, else data-only; each parameter is laid out by the training
rules (sharding.DEFAULT_RULES: embed over fsdp, heads / MLP / vocab over
tensor), a run's restored from its checkpoint, an HF directory's read slice by
slice from its safetensors (models/hf_sharded.py), so no device or process
holds more of the weights than its shards.

A prompt is a list of chat messages that goes through the tokenizer's chat
template with the assistant's turn opened. Completions are decoded greedily (or
at a temperature) in fixed-size batches at one prompt width, so the sampler
compiles once per width; a completion's text excludes its stop token. Decoding
runs under the mesh and the rules as the training step's sampler does
(coevolve.params_for_sampling: weights cast to the compute dtype, "gathered"
over fsdp once per call unless the run's coevolve.sampling_layout says
"training"); a batch's rows are split over the batch mesh axes (data x fsdp),
and its completions come back replicated to every process.

Several processes (one JAX job: train/tools/evaluate.py's job flags) do the same
host work in the same order (prompts, tokenisation, environment steps), so each
holds every batch whole and places only its own devices' rows
(sharding.from_host); every process gets every completion, and only process 0
(`chief`) writes files (`write_records`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Sequence

import jax
from jax.sharding import Mesh
import numpy as np

from genenv_jax import coevolve
from genenv_jax import sharding
from genenv_jax.domains import TextDomain, get_domain
from genenv_jax.sampling import SamplingConfig, sample
from genenv_jax.scoring import InputError, write_jsonl
from models import hf
from models.config import ModelConfig
from train import build
from train.checkpoints import state_checkpoint
from train.checkpoints import state_layout
from train.checkpoints import workdir as workdir_lib

RULES = sharding.DEFAULT_RULES
DATA_ONLY = dict(data=-1, fsdp=1, tensor=1)


@dataclasses.dataclass(frozen=True)
class Agent:
  """A model to decode with: architecture, parameters (sharded on `mesh` by
  RULES), tokenizer, and how its weights are laid out for decoding
  (coevolve.params_for_sampling's layout: "gathered" or "training")."""

  model: ModelConfig
  params: Any
  tokenizer: Any
  mesh: Mesh
  layout: str = "gathered"


def parse_mesh(text: str) -> dict[str, int]:
  """{axis: size} of a --mesh value such as `data=-1,fsdp=2,tensor=1` (axes
  left out are 1).

  Raises:
    InputError: an entry that is not `axis=int` or an axis that is not one of
      sharding.MESH_AXES.
  """
  shape = {}
  for entry in text.split(","):
    name, _, size = entry.strip().partition("=")
    if name not in sharding.MESH_AXES:
      raise InputError(f"--mesh={text!r}: {name!r} is not one of "
                       f"{', '.join(sharding.MESH_AXES)} (expected e.g. "
                       "data=-1,fsdp=2,tensor=1)")
    try:
      shape[name] = int(size)
    except ValueError as e:
      raise InputError(f"--mesh={text!r}: {entry.strip()!r} has no integer size "
                       "(expected e.g. data=-1,fsdp=2,tensor=1)") from e
  return shape


def _run_config(run: str):
  try:
    return workdir_lib.read_run_config(run)
  except FileNotFoundError as e:
    raise InputError(f"{e} --run needs one.") from e


def agent_mesh(run: str, mesh: str, batch_size: int = 0):
  """The mesh to decode on: `mesh` (a --mesh value) over every device of the
  job when given, else the run's config.mesh with `run`, else data-only. In
  one process the data-only mesh spans the devices that divide `batch_size`
  (gcd; all with 0), so that no device decodes padding rows alone; across
  processes it spans them all.

  Raises:
    InputError: a malformed --mesh, a run without a config.json, or a mesh
      that does not fit the devices (naming where it came from).
  """
  devices = jax.devices()
  if mesh:
    shape, where = parse_mesh(mesh), f"--mesh={mesh}"
  elif run:
    shape, where = dict(_run_config(run).mesh), f"{run}'s config.mesh"
    where += " (pass --mesh to evaluate on other devices)"
  else:
    shape, where = DATA_ONLY, "the data-only mesh"
    if jax.process_count() == 1 and batch_size:
      devices = devices[:math.gcd(batch_size, len(devices))]
  try:
    return sharding.make_mesh(shape, devices)
  except ValueError as e:
    raise InputError(f"{where}: {e}") from e


def load_agent(run: str, hf_dir: str, step: int | None, dtype: str,
               mesh: str = "", batch_size: int = 0) -> Agent:
  """The agent of a run (`run`, checkpoint `step`, None: the latest) or of an
  HF directory, computing in `dtype` ("": the run's agent's compute dtype;
  float32 for an HF directory), its parameters sharded by RULES on
  `agent_mesh(run, mesh, batch_size)`.

  Raises:
    InputError: neither or both of `run` and `hf_dir`, a run without a
      config.json or the checkpoint, a run whose task is not a text task, a
      bad mesh, or parameters that do not divide it (naming the parameter).
  """
  if bool(run) == bool(hf_dir):
    raise InputError("give exactly one of --run and --hf_dir with --generate")
  device_mesh = agent_mesh(run, mesh, batch_size)
  where = f"the mesh {dict(device_mesh.shape)}"
  if hf_dir:
    model = hf.config_from_hf(hf.read_hf_config(hf_dir)).replace(dtype=dtype or "float32")
    try:
      params = build.init_player_params(model, jax.random.PRNGKey(0), device_mesh,
                                        RULES, hf_dir)
    except ValueError as e:
      raise InputError(f"--hf_dir {hf_dir} on {where}: {e}") from e
    return Agent(model, params, hf.load_tokenizer(hf_dir), device_mesh)
  config = _run_config(run)
  domain = get_domain(config.task)
  if not isinstance(domain, TextDomain):
    raise InputError(f"{run}: task {config.task.name!r} is not a text task; "
                     "benchmarks need a text agent")
  model = build.build_players(config, domain).agent_model
  model = model.replace(dtype=dtype or model.dtype)
  try:
    target = state_layout.abstract_params(model, device_mesh, RULES)
    params = state_checkpoint.read_player_params_sharded(run, step, "agent",
                                                         target)
  except FileNotFoundError as e:
    raise InputError(str(e)) from e
  except ValueError as e:
    raise InputError(f"--run {run} on {where}: {e}") from e
  return Agent(model, params, domain.tokenizer, device_mesh,
               config.coevolve.get("sampling_layout", "gathered"))


def chief() -> bool:
  """Whether this process writes the job's files and summary (process 0)."""
  return jax.process_index() == 0


def write_records(path: str, records: Sequence[dict[str, Any]]) -> None:
  """Writes `records` to `path` as JSON lines, on process 0 only.

  Raises:
    InputError: the file cannot be written.
  """
  if chief():
    write_jsonl(path, records)


def prompt_ids(tokenizer, messages: list[dict[str, str]]) -> list[int]:
  """The token ids of chat `messages` through the chat template, the
  assistant's turn opened."""
  text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
  return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def stop_ids(tokenizer) -> tuple[int, ...]:
  """The tokenizer's end-of-sequence id and those of the common end-of-turn
  tokens it has."""
  ids = {tokenizer.eos_token_id}
  for token in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>"):
    token_id = tokenizer.convert_tokens_to_ids(token)
    if isinstance(token_id, int) and tokenizer.convert_ids_to_tokens(token_id) == token:
      ids.add(token_id)
  return tuple(sorted(i for i in ids if i is not None))


def batch_rows(batch_size: int, mesh) -> int:
  """The rows of one decoding call: `batch_size` rounded up to a multiple of
  the mesh's batch axes (RULES' "batch": data x fsdp), whose devices each
  decode their own rows."""
  axes = sharding.logical_to_spec(("batch",), RULES)[0]
  axes = () if axes is None else (axes,) if isinstance(axes, str) else axes
  parts = math.prod(mesh.shape[a] for a in axes)
  return -(-batch_size // parts) * parts


def generate(agent: Agent, prompts: Sequence[list[dict[str, str]]],
             max_new_tokens: int, batch_size: int, temperature: float = 0.0,
             seed: int = 0, width_multiple: int = 1) -> list[str]:
  """The agent's completion text for each chat prompt (stop token excluded).

  Prompts are left-padded to the longest one's width, rounded up to a multiple of
  `width_multiple` (so that calls with prompts of similar widths share one
  compiled sampler), and decoded `batch_rows(batch_size, agent.mesh)` at a time
  (the last batch filled up with copies of the first prompt).

  Raises:
    InputError: `batch_size` or `max_new_tokens` below 1.
  """
  if batch_size < 1 or max_new_tokens < 1:
    raise InputError(f"--batch_size={batch_size} and --max_new_tokens={max_new_tokens} "
                     "must be >= 1")
  if not prompts:
    return []
  tokenizer = agent.tokenizer
  ids = [prompt_ids(tokenizer, messages) for messages in prompts]
  width = -(-max(map(len, ids)) // width_multiple) * width_multiple
  pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
  tokens = np.full((len(ids), width), pad_id, np.int32)
  for row, prompt in zip(tokens, ids):
    row[width - len(prompt):] = prompt
  mask = np.arange(width)[None, :] >= (width - np.array([len(p) for p in ids]))[:, None]
  stops = stop_ids(tokenizer)
  sampling = SamplingConfig(max_new_tokens=max_new_tokens, temperature=temperature,
                            eos_ids=stops, pad_id=pad_id)
  decode = decoder(agent.model, sampling, agent.mesh, agent.layout)
  rows = batch_rows(batch_size, agent.mesh)
  rows_sharding = sharding.batch_sharding(agent.mesh, RULES, 2)
  texts = []
  for start in range(0, len(ids), rows):
    chunk = np.arange(start, start + rows)
    chunk = np.where(chunk < len(ids), chunk, 0)
    key = np.asarray(jax.random.fold_in(jax.random.PRNGKey(seed), start))
    out, out_mask = jax.device_get(decode(
        agent.params, sharding.from_host(tokens[chunk], rows_sharding),
        sharding.from_host(mask[chunk], rows_sharding),
        sharding.from_host(key, sharding.replicated(agent.mesh))))
    for row, row_mask in list(zip(out, out_mask))[:min(rows, len(ids) - start)]:
      kept = [int(t) for t, m in zip(row, row_mask) if m and int(t) not in stops]
      texts.append(tokenizer.decode(kept, skip_special_tokens=True))
  return texts


def generate_bucketed(agent: Agent, prompts: Sequence[list[dict[str, str]]],
                      max_new_tokens: int, batch_size: int, temperature: float = 0.0,
                      seed: int = 0, width_multiple: int = 512) -> list[str]:
  """`generate` over prompts grouped by their width rounded up to
  `width_multiple` (one compiled sampler per group), so that a few long prompts
  do not pad every short one; completions come back in the prompts' order."""
  widths = [-(-len(prompt_ids(agent.tokenizer, p)) // width_multiple) for p in prompts]
  texts: list[str] = [""] * len(prompts)
  for bucket in sorted(set(widths)):
    members = [i for i, w in enumerate(widths) if w == bucket]
    out = generate(agent, [prompts[i] for i in members], max_new_tokens,
                   batch_size, temperature, seed + bucket, width_multiple)
    for i, text in zip(members, out):
      texts[i] = text
  return texts


@functools.lru_cache(maxsize=8)
def decoder(model: ModelConfig, sampling: SamplingConfig, mesh, layout: str = "gathered"):
  """The jitted sampler of `model` under `sampling` on `mesh` with RULES:
  (params sharded by RULES, prompt int32[B, P] and prompt_mask bool[B, P] with
  B over the batch axes, rng uint32[2]) -> (tokens int32[B, N], mask bool[B, N]),
  replicated (every process reads them whole). The weights are laid out for
  decoding by coevolve.params_for_sampling(`layout`); train/bench/compile_check.py
  compiles this program for a TPU slice ("eval_generate")."""

  @functools.partial(jax.jit, out_shardings=sharding.replicated(mesh))
  @sharding.in_mesh(mesh, RULES)
  def decode(params, prompt, prompt_mask, rng):
    out = sample(model, coevolve.params_for_sampling(model, params, layout), prompt,
                 prompt_mask, rng, sampling)
    return out.tokens, out.mask

  return decode


def select(items: Sequence[Any], item_id, ids: Sequence[str], source: str) -> list:
  """The items whose `item_id(item)` is in `ids`, in their order; all when `ids`
  is empty.

  Raises:
    InputError: an id of `ids` names no item of `source`.
  """
  if not ids:
    return list(items)
  known = {item_id(item) for item in items}
  unknown = [i for i in ids if i not in known]
  if unknown:
    raise InputError(f"--ids: {', '.join(map(repr, unknown[:5]))} not in {source}")
  wanted = set(ids)
  return [item for item in items if item_id(item) in wanted]
