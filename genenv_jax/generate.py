"""Chat generation from a Hugging Face checkpoint with our decoder and sampler.

`python -m train.tools.generate --hf_dir DIR --prompts FILE.jsonl
--max_new_tokens N [--temperature T]` runs `generate_jsonl`: each input line
is {"prompt": "..."} (one user turn) or {"messages": [{"role", "content"},
...]}; the tokenizer's chat template renders it with the assistant's turn
opened; the prompts are left-padded into one batch and decoded by
`sampling.sample` (greedy unless a temperature is given), stopping at the
checkpoint's stop ids (`hf.stop_token_ids`). One JSON line per prompt comes
out: `completion` (text), `tokens` (the generated ids, the stop token
excluded) and `stopped` (whether a stop token ended it, rather than the
token budget).
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from genenv_jax import sampling
from models import hf
from models.config import ModelConfig


def prompt_ids(tokenizer, record: Mapping[str, Any],
               where: str = "record") -> list[int]:
  """Token ids of one prompt record with the chat template applied.

  Args:
    record: {"prompt": str} or {"messages": [{"role": ..., "content": ...}]}.
    where: names the record in errors (e.g. "prompts.jsonl line 3").
  """
  if ("prompt" in record) == ("messages" in record):
    raise ValueError(f"{where}: expected exactly one of 'prompt' (a string) "
                     f"or 'messages' (a list of chat turns), got keys "
                     f"{sorted(record)}.")
  if "prompt" in record:
    if not isinstance(record["prompt"], str):
      raise ValueError(f"{where}: 'prompt' must be a string.")
    messages = [{"role": "user", "content": record["prompt"]}]
  else:
    messages = record["messages"]
    if not (isinstance(messages, list) and messages and all(
        isinstance(m, Mapping) and {"role", "content"} <= set(m)
        for m in messages)):
      raise ValueError(f"{where}: 'messages' must be a non-empty list of "
                       "{'role': ..., 'content': ...} turns.")
  if not getattr(tokenizer, "chat_template", None):
    raise ValueError(f"{where}: the tokenizer has no chat template.")
  ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                      tokenize=True)
  if isinstance(ids, Mapping):  # a BatchEncoding
    ids = ids["input_ids"]
  return [int(i) for i in ids]


def left_pad(rows: Sequence[Sequence[int]], pad_id: int
             ) -> tuple[np.ndarray, np.ndarray]:
  """Token rows -> (tokens int32[B, P], mask bool[B, P]), each row's ids at
  the end (the sampler's left padding), P the longest row."""
  if not rows or min(len(r) for r in rows) < 1:
    raise ValueError("left_pad: every prompt needs at least one token.")
  width = max(len(r) for r in rows)
  tokens = np.full((len(rows), width), pad_id, np.int32)
  mask = np.zeros((len(rows), width), bool)
  for b, row in enumerate(rows):
    tokens[b, width - len(row):] = row
    mask[b, width - len(row):] = True
  return tokens, mask


def completions(out: sampling.SampleOutput, stop_ids: Iterable[int]
                ) -> list[tuple[list[int], bool]]:
  """Per row of a SampleOutput: (generated ids without the stop token,
  whether a stop token ended the row). A stop id equal to the pad id is told
  apart by the mask: the row's last generated token is the stop."""
  stop = set(int(i) for i in stop_ids)
  tokens, lengths = np.asarray(out.tokens), np.asarray(out.lengths)
  rows = []
  for row, length in zip(tokens, lengths):
    ids = [int(t) for t in row[:length]]
    stopped = bool(ids) and ids[-1] in stop
    rows.append((ids[:-1] if stopped else ids, stopped))
  return rows


def generate(model_config: ModelConfig, params, tokenizer,
             records: Sequence[Mapping[str, Any]], max_new_tokens: int,
             stop_ids: Sequence[int], temperature: float = 0.0,
             seed: int = 0) -> list[dict[str, Any]]:
  """Generates one completion per record in one batch (see module doc).

  Returns a list of {"completion": str, "tokens": list[int],
  "stopped": bool}, in the records' order.
  """
  if not stop_ids:
    raise ValueError("generate: stop_ids is empty; a row could never end.")
  pad_id = tokenizer.pad_token_id
  if pad_id is None:
    pad_id = stop_ids[0]
  rows = [prompt_ids(tokenizer, r, f"record {i}")
          for i, r in enumerate(records)]
  tokens, mask = left_pad(rows, pad_id)
  config = sampling.SamplingConfig(max_new_tokens=max_new_tokens,
                                   temperature=temperature,
                                   eos_ids=tuple(stop_ids), pad_id=pad_id)
  run = jax.jit(lambda p, t, m, k: sampling.sample(model_config, p, t, m, k,
                                                   config))
  out = run(params, jnp.asarray(tokens), jnp.asarray(mask),
            jax.random.key(seed))
  return [{"completion": tokenizer.decode(ids, skip_special_tokens=True),
           "tokens": ids, "stopped": stopped}
          for ids, stopped in completions(out, stop_ids)]


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
  """The JSON object of every non-blank line of `path`."""
  records = []
  with open(path) as f:
    for number, line in enumerate(f, 1):
      if not line.strip():
        continue
      try:
        record = json.loads(line)
      except json.JSONDecodeError as error:
        raise ValueError(f"{path} line {number}: not JSON ({error}).") from None
      if not isinstance(record, dict):
        raise ValueError(f"{path} line {number}: expected a JSON object.")
      records.append(record)
  if not records:
    raise ValueError(f"{path} holds no prompt.")
  return records


def generate_jsonl(hf_dir: str, prompts_path: str, max_new_tokens: int,
                   temperature: float = 0.0, seed: int = 0,
                   dtype: str = "float32") -> list[dict[str, Any]]:
  """`generate` for the checkpoint in `hf_dir` and the prompts file, its
  layers scanned (one block compiled, not one per layer)."""
  records = read_jsonl(prompts_path)
  for i, record in enumerate(records):  # fail before loading the weights
    if ("prompt" in record) == ("messages" in record):
      raise ValueError(f"{prompts_path} record {i + 1}: expected exactly one "
                       f"of 'prompt' or 'messages', got keys {sorted(record)}.")
  config = hf.config_from_hf(hf.read_hf_config(hf_dir)).replace(dtype=dtype)
  params, config = hf.load_hf_params(hf_dir, config, scan_layers=True)
  return generate(config, params, hf.load_tokenizer(hf_dir), records,
                  max_new_tokens, hf.stop_token_ids(hf_dir), temperature,
                  seed)
