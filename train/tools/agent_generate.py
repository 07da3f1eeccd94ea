"""An agent's chat completions with the project's sampler, for the benchmark
commands of `python -m train.tools.evaluate ... --generate`.

The agent is a training run's (`--run DIR`: the agent's parameters of the run's
latest checkpoint, or `--step N`, its architecture and tokenizer from the run's
config.json) or an HF directory's (`--hf_dir DIR`). A prompt is a list of chat
messages that goes through the tokenizer's chat template with the assistant's
turn opened. Completions are decoded greedily (or at a temperature) in
fixed-size batches at one prompt width, so the sampler compiles once per width;
a completion's text excludes its stop token.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from genenv_jax import sharding
from genenv_jax.domains import TextDomain, get_domain
from genenv_jax.sampling import SamplingConfig, sample
from genenv_jax.scoring import InputError
from models import hf
from models.config import ModelConfig
from train import build
from train.checkpoints import workdir as workdir_lib
from train.tools import run_checkpoints


@dataclasses.dataclass(frozen=True)
class Agent:
  """A model to decode with: architecture, parameters (on the mesh) and tokenizer."""

  model: ModelConfig
  params: Any
  tokenizer: Any


def batch_mesh(batch_size: int):
  """A mesh for decoding batches of `batch_size` rows: rows are split over its
  data axis, and one that does not divide the batch would have every device
  decode the whole batch, so it spans the devices that do."""
  devices = jax.devices()[:math.gcd(batch_size, jax.device_count())]
  return sharding.make_mesh(dict(data=-1, fsdp=1, tensor=1), devices)


def load_agent(run: str, hf_dir: str, step: int | None, dtype: str, mesh) -> Agent:
  """The agent of a run (`run`, checkpoint `step`, None: the latest) or of an HF
  directory, in `dtype` for computing, on `mesh` (replicated).

  Raises:
    InputError: neither or both of `run` and `hf_dir`, a run without a
      config.json, or a run whose task is not a text task.
  """
  if bool(run) == bool(hf_dir):
    raise InputError("give exactly one of --run and --hf_dir with --generate")
  if hf_dir:
    model = hf.config_from_hf(hf.read_hf_config(hf_dir)).replace(dtype=dtype)
    weights, model = hf.load_hf_params(hf_dir, model)
    params = jax.device_put(weights, sharding.replicated(mesh))
    return Agent(model, params, hf.load_tokenizer(hf_dir))
  try:
    config = workdir_lib.read_run_config(run)
  except FileNotFoundError as e:
    raise InputError(f"{e} --run needs one.") from e
  domain = get_domain(config.task)
  if not isinstance(domain, TextDomain):
    raise InputError(f"{run}: task {config.task.name!r} is not a text task; "
                     "benchmarks need a text agent")
  model = build.build_players(config, domain).agent_model.replace(dtype=dtype)
  params = run_checkpoints.agent_params(run, mesh, step)
  return Agent(model, params, domain.tokenizer)


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


def generate(agent: Agent, prompts: Sequence[list[dict[str, str]]], mesh,
             max_new_tokens: int, batch_size: int, temperature: float = 0.0,
             seed: int = 0, width_multiple: int = 1) -> list[str]:
  """The agent's completion text for each chat prompt (stop token excluded).

  Prompts are left-padded to the longest one's width, rounded up to a multiple of
  `width_multiple` (so that calls with prompts of similar widths share one
  compiled sampler), and decoded `batch_size` at a time (the last batch filled up
  with copies of the first prompt).

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
  decode = _decoder(agent.model, sampling, mesh)
  texts = []
  for start in range(0, len(ids), batch_size):
    chunk = np.arange(start, start + batch_size)
    chunk = np.where(chunk < len(ids), chunk, 0)
    out, out_mask = jax.device_get(decode(
        agent.params, jnp.asarray(tokens[chunk]), jnp.asarray(mask[chunk]),
        jax.random.fold_in(jax.random.PRNGKey(seed), start)))
    for row, row_mask in list(zip(out, out_mask))[:min(batch_size, len(ids) - start)]:
      kept = [int(t) for t, m in zip(row, row_mask) if m and int(t) not in stops]
      texts.append(tokenizer.decode(kept, skip_special_tokens=True))
  return texts


def generate_bucketed(agent: Agent, prompts: Sequence[list[dict[str, str]]], mesh,
                      max_new_tokens: int, batch_size: int, temperature: float = 0.0,
                      seed: int = 0, width_multiple: int = 512) -> list[str]:
  """`generate` over prompts grouped by their width rounded up to
  `width_multiple` (one compiled sampler per group), so that a few long prompts
  do not pad every short one; completions come back in the prompts' order."""
  widths = [-(-len(prompt_ids(agent.tokenizer, p)) // width_multiple) for p in prompts]
  texts: list[str] = [""] * len(prompts)
  for bucket in sorted(set(widths)):
    members = [i for i, w in enumerate(widths) if w == bucket]
    out = generate(agent, [prompts[i] for i in members], mesh, max_new_tokens,
                   batch_size, temperature, seed + bucket, width_multiple)
    for i, text in zip(members, out):
      texts[i] = text
  return texts


@functools.lru_cache(maxsize=8)
def _decoder(model: ModelConfig, sampling: SamplingConfig, mesh):
  """The jitted sampler of `model` under `sampling` on `mesh`: (params, prompt
  int32[B, P], prompt_mask bool[B, P], rng) -> (tokens int32[B, N], mask bool[B, N])."""

  @jax.jit
  @sharding.in_mesh(mesh, sharding.DEFAULT_RULES)
  def decode(params, prompt, prompt_mask, rng):
    out = sample(model, params, prompt, prompt_mask, rng, sampling)
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
