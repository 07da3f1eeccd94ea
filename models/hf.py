"""Hugging Face checkpoints <-> decoder parameters, and tokenizer loading.

Reads and writes HF `config.json` + safetensors directories of model_type
"qwen2" or "llama" with `safetensors.numpy` (no PyTorch needed), maps HF tensor
names onto the parameter tree of `models.decoder`, and keeps imported weights
in orbax checkpoints. The `verify` command checks the mapping by comparing our
logits with those of the PyTorch model in transformers.

HF Linear weights are [out, in]; ours are [in, *out] kernels. With
P = "model.layers.{i}." and p = "layers_{i}/":
  model.embed_tokens.weight [V, E]      -> embed/embedding [V, E]
  P self_attn.q_proj.weight [H*D, E]    -> p attn/q_proj/kernel [E, H, D]
  P self_attn.q_proj.bias [H*D]         -> p attn/q_proj/bias [H, D]
  (k_proj, v_proj likewise with K heads)
  P self_attn.o_proj.weight [E, H*D]    -> p attn/o_proj/kernel [H, D, E]
  P mlp.{gate,up}_proj.weight [F, E]    -> p mlp/{gate,up}_proj/kernel [E, F]
  P mlp.down_proj.weight [E, F]         -> p mlp/down_proj/kernel [F, E]
  P input_layernorm.weight [E]          -> p attn_norm/scale [E]
  P post_attention_layernorm.weight [E] -> p mlp_norm/scale [E]
  model.norm.weight [E]                 -> final_norm/scale [E]
  lm_head.weight [V, E]                 -> lm_head/kernel [E, V] (untied only)
With `scan_layers` the `layers_{i}` trees are stacked on a leading [L] axis
under `layers`, as `nn.scan` in the decoder lays them out.

`import` writes one orbax checkpoint directory (atomically: complete or
absent) holding `params/` and `model_config/model_config.json` (the
ModelConfig as JSON); `load_checkpoint` reads it back.

`stop_token_ids` gives a checkpoint's stop ids (generation_config.json's
eos_token_id, an int or a list).

Command line (`python -m models.hf VERB --help`):
  verify --hf_dir DIR             our logits vs transformers' on random tokens
  import --hf_dir DIR --out PATH  HF directory -> orbax checkpoint
  export --ckpt PATH --out DIR    orbax checkpoint -> HF directory
A training run's player goes to an HF directory with `python -m
train.tools.export_player`, and chat completions from an HF directory come
from `python -m train.tools.generate` (they need the driver and the sampler,
which sit above this package).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import shutil
import sys
from typing import Any, Callable, Mapping, NamedTuple

from etils import epath
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from safetensors import safe_open
from safetensors.numpy import save_file

from models import decoder
from models.config import ModelConfig, RopeScaling

SUPPORTED_MODEL_TYPES = ("qwen2", "llama")
_ARCHITECTURES = {"qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM"}
_DEFAULT_MAX_POSITIONS = {"qwen2": 32768, "llama": 2048}

CONFIG_FILE = "config.json"
SINGLE_WEIGHTS_FILE = "model.safetensors"
SHARDED_INDEX_FILE = "model.safetensors.index.json"
GENERATION_CONFIG_FILE = "generation_config.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json", "added_tokens.json",
                   "vocab.json", "merges.txt", "tokenizer.model",
                   "chat_template.jinja", "chat_template.json")

# Where a tied checkpoint's redundant lm_head.weight is read before the check
# that it equals the embedding.
_TIED_HEAD_PATH = ("tied_lm_head",)

# Buffers some HF checkpoints carry that hold no weights.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)

# ModelConfig fields that only choose how the model is computed, or add
# adapters an HF checkpoint does not hold (models/lora.py); the rest must
# agree with config.json when a config is passed to `load_hf_params`.
_COMPUTE_FIELDS = ("dtype", "param_dtype", "logits_dtype", "remat_policy",
                   "scan_layers", "max_position_embeddings", "lora_rank",
                   "lora_alpha", "lora_targets")

# Items of the orbax checkpoint written by `save_checkpoint`.
_PARAMS_ITEM = "params"
_CONFIG_ITEM = "model_config"
MODEL_CONFIG_FILE = "model_config.json"

# `verify` passes when the largest logit difference is at most this fraction of
# the largest |logit| (at least 1): float32 rounding grows with the logits' scale
# and the model's depth, so a fixed absolute bound fails deep real models.
VERIFY_RTOL = 1e-5


# ---------------------------------------------------------------- configs ---


def _required(hf_config: Mapping[str, Any], key: str) -> Any:
  if hf_config.get(key) is None:
    raise ValueError(f"HF config lacks required field {key!r}.")
  return hf_config[key]


def _rope_from_hf(hf_config: Mapping[str, Any],
                  max_positions: int) -> tuple[float, RopeScaling | None]:
  """(rope_theta, rope_scaling) from either HF layout.

  transformers >= 5 writes `rope_parameters: {rope_type, rope_theta, ...}`;
  older configs have a top-level `rope_theta` and optional `rope_scaling`
  (whose type key may be `type` instead of `rope_type`).
  """
  params = dict(hf_config.get("rope_parameters")
                or hf_config.get("rope_scaling") or {})
  nested = [k for k, v in params.items() if isinstance(v, Mapping)]
  if nested:
    raise ValueError(
        f"HF rope parameters nested per layer type {nested} are not "
        "supported; one RoPE for all layers is required.")
  theta = float(params.get("rope_theta", hf_config.get("rope_theta", 10000.0)))
  partial = params.get("partial_rotary_factor",
                       hf_config.get("partial_rotary_factor", 1.0))
  if partial != 1.0:
    raise ValueError(f"HF partial_rotary_factor={partial} is not supported "
                     "(RoPE must rotate the whole head).")
  rope_type = params.get("rope_type", params.get("type", "default"))
  if rope_type == "default":
    return theta, None
  if rope_type != "llama3":
    raise ValueError(f"HF rope_type {rope_type!r} is not supported; expected "
                     "'default' or 'llama3'.")
  for key in ("factor", "low_freq_factor", "high_freq_factor"):
    if key not in params:
      raise ValueError(f"HF llama3 rope parameters lack {key!r}.")
  scaling = RopeScaling(
      factor=float(params["factor"]),
      low_freq_factor=float(params["low_freq_factor"]),
      high_freq_factor=float(params["high_freq_factor"]),
      original_max_position_embeddings=int(params.get(
          "original_max_position_embeddings", max_positions)))
  return theta, scaling


def config_from_hf(hf_config: Mapping[str, Any]) -> ModelConfig:
  """ModelConfig for an HF `config.json` dict of model_type qwen2 or llama.

  Compute fields (dtype, param_dtype, remat, scan) keep their defaults.
  Raises ValueError naming the field for anything the decoder cannot express
  (other model types, activations, RoPE variants, sliding windows, llama's
  mlp_bias / attention_bias).
  """
  model_type = hf_config.get("model_type")
  if model_type not in SUPPORTED_MODEL_TYPES:
    raise ValueError(f"HF model_type {model_type!r} is not supported; "
                     f"expected one of {SUPPORTED_MODEL_TYPES}.")
  act = hf_config.get("hidden_act", "silu")
  if act != "silu":
    raise ValueError(f"HF hidden_act={act!r} is not supported (SwiGLU uses "
                     "'silu').")
  if model_type == "llama":
    for field in ("mlp_bias", "attention_bias"):
      if hf_config.get(field, False):
        raise ValueError(
            f"HF llama {field}=True is not supported (the decoder has "
            "biases on q/k/v only, as in qwen2; llama's attention_bias also "
            "adds one to o_proj).")
    qkv_bias = False
  else:
    if hf_config.get("use_sliding_window", False):
      raise ValueError("HF qwen2 use_sliding_window=True is not supported "
                       "(the decoder attends to the full context).")
    qkv_bias = True
  max_positions = int(hf_config.get("max_position_embeddings",
                                    _DEFAULT_MAX_POSITIONS[model_type]))
  rope_theta, rope_scaling = _rope_from_hf(hf_config, max_positions)
  num_heads = int(_required(hf_config, "num_attention_heads"))
  num_kv_heads = hf_config.get("num_key_value_heads") or num_heads
  head_dim = hf_config.get("head_dim")
  return ModelConfig(
      vocab_size=int(_required(hf_config, "vocab_size")),
      hidden_size=int(_required(hf_config, "hidden_size")),
      intermediate_size=int(_required(hf_config, "intermediate_size")),
      num_layers=int(_required(hf_config, "num_hidden_layers")),
      num_heads=num_heads,
      num_kv_heads=int(num_kv_heads),
      head_dim=None if head_dim is None else int(head_dim),
      rope_theta=rope_theta,
      rope_scaling=rope_scaling,
      rms_norm_eps=float(hf_config.get("rms_norm_eps", 1e-6)),
      qkv_bias=qkv_bias,
      tie_embeddings=bool(hf_config.get("tie_word_embeddings", False)),
      max_position_embeddings=max_positions)


def config_to_hf(config: ModelConfig, model_type: str) -> dict[str, Any]:
  """An HF `config.json` dict for `config`, readable by transformers 4 and 5.

  Raises ValueError for an unsupported model_type, for qwen2 without q/k/v
  bias (Qwen2 always has it) and for llama with it (Llama's attention_bias
  would add an o_proj bias the decoder lacks).
  """
  if model_type not in SUPPORTED_MODEL_TYPES:
    raise ValueError(f"model_type {model_type!r} is not supported; expected "
                     f"one of {SUPPORTED_MODEL_TYPES}.")
  if model_type == "qwen2" and not config.qkv_bias:
    raise ValueError("model_type 'qwen2' requires ModelConfig.qkv_bias=True; "
                     "export as 'llama' instead.")
  if model_type == "llama" and config.qkv_bias:
    raise ValueError("model_type 'llama' cannot hold ModelConfig.qkv_bias="
                     "True (its attention_bias also biases o_proj); export as "
                     "'qwen2' instead.")
  rope_scaling = None
  if config.rope_scaling is not None:
    rope_scaling = dict(rope_type="llama3",
                        **dataclasses.asdict(config.rope_scaling))
  rope_theta = float(config.rope_theta)
  hf = {
      "architectures": [_ARCHITECTURES[model_type]],
      "model_type": model_type,
      "vocab_size": config.vocab_size,
      "hidden_size": config.hidden_size,
      "intermediate_size": config.intermediate_size,
      "num_hidden_layers": config.num_layers,
      "num_attention_heads": config.num_heads,
      "num_key_value_heads": config.num_kv_heads,
      "head_dim": config.head_dim,
      "hidden_act": "silu",
      "max_position_embeddings": config.max_position_embeddings,
      "rms_norm_eps": config.rms_norm_eps,
      "rope_parameters": dict(rope_scaling or {"rope_type": "default"},
                              rope_theta=rope_theta),
      # The transformers < 5 spelling of the RoPE and dtype fields.
      "rope_theta": rope_theta,
      "rope_scaling": rope_scaling,
      "tie_word_embeddings": config.tie_embeddings,
      "attention_dropout": 0.0,
      "use_cache": True,
      "dtype": config.param_dtype,
      "torch_dtype": config.param_dtype,
  }
  if model_type == "llama":
    hf.update(attention_bias=config.qkv_bias, mlp_bias=False)
  else:
    hf.update(use_sliding_window=False, sliding_window=None,
              layer_types=["full_attention"] * config.num_layers)
  return hf


# -------------------------------------------------------- tensor mapping ---


class _TensorRule(NamedTuple):
  """How one HF tensor maps onto one leaf of the (unstacked) param tree."""
  hf_name: str
  path: tuple[str, ...]
  hf_shape: tuple[int, ...]
  to_ours: Callable[[np.ndarray], np.ndarray]
  to_hf: Callable[[np.ndarray], np.ndarray]


def _linear_rule(hf_name, path, in_shape, out_shape) -> _TensorRule:
  """HF Linear weight [prod(out), prod(in)] <-> kernel [*in, *out]."""
  n_in, n_out = int(np.prod(in_shape)), int(np.prod(out_shape))
  return _TensorRule(
      hf_name, path, (n_out, n_in),
      lambda w: w.T.reshape(in_shape + out_shape),
      lambda k: k.reshape(n_in, n_out).T)


def _reshape_rule(hf_name, path, hf_shape, our_shape) -> _TensorRule:
  return _TensorRule(hf_name, path, hf_shape,
                     lambda w: w.reshape(our_shape),
                     lambda p: p.reshape(hf_shape))


def _tensor_rules(config: ModelConfig) -> list[_TensorRule]:
  """Rules for every HF tensor of `config` (layers unstacked, lm_head only
  when untied)."""
  e, f, v = config.hidden_size, config.intermediate_size, config.vocab_size
  h, k, d = config.num_heads, config.num_kv_heads, config.head_dim
  rules = [_reshape_rule("model.embed_tokens.weight", ("embed", "embedding"),
                         (v, e), (v, e)),
           _reshape_rule("model.norm.weight", ("final_norm", "scale"), (e,),
                         (e,))]
  if not config.tie_embeddings:
    rules.append(_linear_rule("lm_head.weight", ("lm_head", "kernel"), (e,),
                              (v,)))
  for i in range(config.num_layers):
    hf, ours = f"model.layers.{i}.", f"layers_{i}"
    for proj, heads in (("q_proj", h), ("k_proj", k), ("v_proj", k)):
      rules.append(_linear_rule(f"{hf}self_attn.{proj}.weight",
                                (ours, "attn", proj, "kernel"), (e,),
                                (heads, d)))
      if config.qkv_bias:
        rules.append(_reshape_rule(f"{hf}self_attn.{proj}.bias",
                                   (ours, "attn", proj, "bias"),
                                   (heads * d,), (heads, d)))
    rules.append(_linear_rule(f"{hf}self_attn.o_proj.weight",
                              (ours, "attn", "o_proj", "kernel"), (h, d),
                              (e,)))
    for proj in ("gate_proj", "up_proj"):
      rules.append(_linear_rule(f"{hf}mlp.{proj}.weight",
                                (ours, "mlp", proj, "kernel"), (e,), (f,)))
    rules.append(_linear_rule(f"{hf}mlp.down_proj.weight",
                              (ours, "mlp", "down_proj", "kernel"), (f,),
                              (e,)))
    rules.append(_reshape_rule(f"{hf}input_layernorm.weight",
                               (ours, "attn_norm", "scale"), (e,), (e,)))
    rules.append(_reshape_rule(f"{hf}post_attention_layernorm.weight",
                               (ours, "mlp_norm", "scale"), (e,), (e,)))
  return rules


def _set_path(tree: dict, path: tuple[str, ...], value) -> None:
  for key in path[:-1]:
    tree = tree.setdefault(key, {})
  tree[path[-1]] = value


def _get_path(tree: Mapping, path: tuple[str, ...]):
  for key in path:
    tree = tree[key]
  return tree


def _layer_keys(config: ModelConfig) -> list[str]:
  return [f"layers_{i}" for i in range(config.num_layers)]


def _stack_layers(params: dict, config: ModelConfig) -> dict:
  """layers_{i} trees -> one `layers` tree with a leading [L] axis."""
  keys = _layer_keys(config)
  stacked = jax.tree.map(lambda *xs: np.stack(xs),
                         *[params[key] for key in keys])
  out = {k: v for k, v in params.items() if k not in keys}
  out["layers"] = stacked
  return out


def _unstack_layers(params: Mapping, config: ModelConfig) -> dict:
  """Inverse of `_stack_layers`."""
  out = {k: v for k, v in params.items() if k != "layers"}
  for i, key in enumerate(_layer_keys(config)):
    out[key] = jax.tree.map(lambda x, i=i: x[i], params["layers"])
  return out


# -------------------------------------------------------- HF directories ---


def read_hf_config(hf_dir: str | os.PathLike) -> dict[str, Any]:
  """config.json of an HF directory, local or gs://."""
  path = epath.Path(hf_dir) / CONFIG_FILE
  if not path.exists():
    raise FileNotFoundError(f"HF directory {hf_dir} has no {CONFIG_FILE}.")
  return json.loads(path.read_text())


def _weight_files(hf_dir: str | os.PathLike) -> dict[str, str]:
  """HF tensor name -> safetensors file that holds it."""
  index_path = os.path.join(hf_dir, SHARDED_INDEX_FILE)
  if os.path.isfile(index_path):
    with open(index_path) as f:
      weight_map = json.load(f)["weight_map"]
    return {name: os.path.join(hf_dir, file)
            for name, file in weight_map.items()}
  single = os.path.join(hf_dir, SINGLE_WEIGHTS_FILE)
  if not os.path.isfile(single):
    raise FileNotFoundError(
        f"HF directory {hf_dir} has neither {SINGLE_WEIGHTS_FILE} nor "
        f"{SHARDED_INDEX_FILE}.")
  with safe_open(single, framework="np") as f:
    return {name: single for name in f.keys()}


def _check_architecture(config: ModelConfig, expected: ModelConfig,
                        hf_dir) -> None:
  for field in dataclasses.fields(ModelConfig):
    if field.name in _COMPUTE_FIELDS:
      continue
    ours, theirs = getattr(config, field.name), getattr(expected,
                                                        field.name)
    if ours != theirs:
      raise ValueError(f"ModelConfig.{field.name}={ours!r} disagrees with "
                       f"{hf_dir}/{CONFIG_FILE}, which gives {theirs!r}.")


def load_hf_params(hf_dir: str | os.PathLike,
                   config: ModelConfig | None = None, *,
                   scan_layers: bool | None = None):
  """Reads an HF qwen2/llama directory into decoder parameters.

  Args:
    hf_dir: holds config.json and model.safetensors, or shards listed in
      model.safetensors.index.json.
    config: the ModelConfig to load into (its architecture must match
      config.json; its dtypes, remat and scan settings are used). Defaults to
      `config_from_hf` of config.json.
    scan_layers: overrides `config.scan_layers` when given.

  Returns:
    (params, config): params is a tree of host numpy arrays in
    `config.param_dtype`, with the structure `decoder.init_params(config)`
    produces.

  Raises:
    ValueError naming the HF tensor that is missing, unexpected or mis-shaped
    (with expected and actual shape), or the config field that disagrees.
  """
  expected = config_from_hf(read_hf_config(hf_dir))
  if config is None:
    config = expected
  else:
    _check_architecture(config, expected, hf_dir)
  if scan_layers is not None:
    config = config.replace(scan_layers=scan_layers)

  files = _weight_files(hf_dir)
  rules = _tensor_rules(config)
  # A tied checkpoint may still store lm_head.weight; it must equal the
  # embedding and is then dropped.
  tied_head = config.tie_embeddings and "lm_head.weight" in files
  if tied_head:
    rules.append(_reshape_rule("lm_head.weight", _TIED_HEAD_PATH,
                               (config.vocab_size, config.hidden_size),
                               (config.vocab_size, config.hidden_size)))
  wanted = {rule.hf_name for rule in rules}
  unexpected = sorted(name for name in files if name not in wanted
                      and not name.endswith(_IGNORED_SUFFIXES))
  if unexpected:
    raise ValueError(f"HF checkpoint {hf_dir} has unexpected tensors "
                     f"{unexpected} for {config}.")
  missing = [rule for rule in rules if rule.hf_name not in files]
  if missing:
    raise ValueError(
        f"HF checkpoint {hf_dir} lacks tensors " + ", ".join(
            f"{r.hf_name!r} (expected shape {r.hf_shape})" for r in missing)
        + ".")

  by_file: dict[str, list[_TensorRule]] = {}
  for rule in rules:
    by_file.setdefault(files[rule.hf_name], []).append(rule)
  for file, file_rules in by_file.items():
    with safe_open(file, framework="np") as f:
      for rule in file_rules:
        shape = tuple(f.get_slice(rule.hf_name).get_shape())
        if shape != rule.hf_shape:
          raise ValueError(f"HF tensor {rule.hf_name!r} has shape {shape}, "
                           f"expected {rule.hf_shape}.")

  dtype = jnp.dtype(config.param_dtype)
  params: dict = {}
  for file, file_rules in by_file.items():
    with safe_open(file, framework="np") as f:
      for rule in file_rules:
        tensor = rule.to_ours(f.get_tensor(rule.hf_name))
        _set_path(params, rule.path, np.ascontiguousarray(tensor, dtype))
  if tied_head and not np.array_equal(params.pop(_TIED_HEAD_PATH[0]),
                                      params["embed"]["embedding"]):
    raise ValueError(
        f"HF tensor 'lm_head.weight' differs from 'model.embed_tokens.weight' "
        f"but {hf_dir}/{CONFIG_FILE} has tie_word_embeddings=true.")
  if config.scan_layers:
    params = _stack_layers(params, config)
  return params, config


def hf_tensors(params, config: ModelConfig) -> dict[str, np.ndarray]:
  """Decoder parameters -> HF tensor name -> array (param dtype)."""
  if config.scan_layers:
    params = _unstack_layers(params, config)
  return {rule.hf_name: np.ascontiguousarray(
      rule.to_hf(np.asarray(_get_path(params, rule.path))))
          for rule in _tensor_rules(config)}


# The largest safetensors file `save_hf_params` writes (transformers' own
# default shard size).
MAX_SHARD_BYTES = 5 * 2**30


def _shards(tensors: Mapping[str, np.ndarray],
            max_shard_bytes: int) -> list[dict[str, np.ndarray]]:
  """Tensors in HF order split into files of at most max_shard_bytes (a
  larger tensor gets a file of its own)."""
  shards: list[dict[str, np.ndarray]] = [{}]
  size = 0
  for name, tensor in tensors.items():
    if shards[-1] and size + tensor.nbytes > max_shard_bytes:
      shards.append({})
      size = 0
    shards[-1][name] = tensor
    size += tensor.nbytes
  return shards


def _write_json(path, value) -> None:
  with open(path, "w") as f:
    json.dump(value, f, indent=2, sort_keys=True)
    f.write("\n")


def save_hf_params(params, config: ModelConfig, out_dir: str | os.PathLike,
                   model_type: str, *,
                   tokenizer_dir: str | os.PathLike | None = None,
                   dtype: str | None = None,
                   max_shard_bytes: int | None = None,
                   special_ids: Mapping[str, Any] | None = None) -> None:
  """Writes a directory transformers loads: config.json, the weights, and
  (with special_ids) generation_config.json.

  Args:
    dtype: the weights' dtype on disk ("bfloat16", "float32"); default the
      params' dtype (`config.param_dtype`).
    max_shard_bytes: None writes one model.safetensors; otherwise files of at
      most this size (model-0000i-of-0000n.safetensors) and
      model.safetensors.index.json mapping every tensor to its file.
    special_ids: {"bos_token_id", "eos_token_id" (an int or a list: the stop
      ids), "pad_token_id"}, written to config.json and generation_config.json.
    tokenizer_dir: tokenizer files found there are copied across.

  Tied models store no lm_head.weight.
  """
  hf_config = config_to_hf(config, model_type)
  tensors = hf_tensors(params, config)
  if dtype is not None:
    np_dtype = jnp.dtype(dtype)
    tensors = {k: v.astype(np_dtype) for k, v in tensors.items()}
    hf_config.update(dtype=dtype, torch_dtype=dtype)
  generation = None
  if special_ids is not None:
    special = {k: v for k, v in special_ids.items() if v is not None}
    hf_config.update(special)
    generation = dict(special, _from_model_config=True)
  os.makedirs(out_dir, exist_ok=True)
  if max_shard_bytes is None:
    save_file(tensors, os.path.join(out_dir, SINGLE_WEIGHTS_FILE),
              metadata={"format": "pt"})
  else:
    shards = _shards(tensors, max_shard_bytes)
    weight_map = {}
    for i, shard in enumerate(shards):
      name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
      save_file(shard, os.path.join(out_dir, name), metadata={"format": "pt"})
      weight_map.update(dict.fromkeys(shard, name))
    _write_json(os.path.join(out_dir, SHARDED_INDEX_FILE), {
        "metadata": {"total_size": sum(t.nbytes for t in tensors.values())},
        "weight_map": weight_map})
  _write_json(os.path.join(out_dir, CONFIG_FILE), hf_config)
  if generation is not None:
    _write_json(os.path.join(out_dir, GENERATION_CONFIG_FILE), generation)
  if tokenizer_dir is not None:
    copied = [name for name in TOKENIZER_FILES
              if os.path.isfile(os.path.join(tokenizer_dir, name))]
    if not copied:
      raise FileNotFoundError(f"tokenizer_dir {tokenizer_dir} holds none of "
                              f"{TOKENIZER_FILES}.")
    for name in copied:
      shutil.copyfile(os.path.join(tokenizer_dir, name),
                      os.path.join(out_dir, name))


def _token_ids(value: Any, source: str) -> tuple[int, ...]:
  """An HF token-id field (an int, a list of ints, or null) as a tuple."""
  if value is None:
    return ()
  values = value if isinstance(value, (list, tuple)) else [value]
  if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
             for v in values):
    raise ValueError(f"{source}: eos_token_id={value!r} must be a "
                     "non-negative int or a list of them.")
  return tuple(values)


def stop_token_ids(hf_dir: str | os.PathLike) -> tuple[int, ...]:
  """The ids that end a generation for the checkpoint in `hf_dir`.

  `eos_token_id` of generation_config.json (an int or a list: Qwen2.5-Instruct
  lists both <|im_end|> and <|endoftext|>), else of config.json. Returns the
  ids in file order, without repeats. Raises ValueError when neither file
  names one.
  """
  for name in (GENERATION_CONFIG_FILE, CONFIG_FILE):
    path = os.path.join(hf_dir, name)
    if os.path.isfile(path):
      with open(path) as f:
        ids = _token_ids(json.load(f).get("eos_token_id"), path)
      if ids:
        return tuple(dict.fromkeys(ids))
  raise ValueError(f"HF directory {hf_dir}: neither {GENERATION_CONFIG_FILE} "
                   f"nor {CONFIG_FILE} gives an eos_token_id (the stop ids).")


def load_tokenizer(hf_dir: str | os.PathLike):
  """The HF tokenizer stored in `hf_dir` (`AutoTokenizer.from_pretrained`)."""
  if not any(os.path.isfile(os.path.join(hf_dir, name))
             for name in TOKENIZER_FILES):
    raise FileNotFoundError(f"{hf_dir} has no tokenizer files; expected one "
                            f"of {TOKENIZER_FILES}.")
  import transformers  # pylint: disable=import-outside-toplevel
  return transformers.AutoTokenizer.from_pretrained(hf_dir)


# ------------------------------------------------------ orbax checkpoints ---


def _checkpointer() -> ocp.Checkpointer:
  return ocp.Checkpointer(ocp.CompositeCheckpointHandler(**{
      _PARAMS_ITEM: ocp.StandardCheckpointHandler(),
      _CONFIG_ITEM: ocp.JsonCheckpointHandler(filename=MODEL_CONFIG_FILE)}))


def save_checkpoint(path: str | os.PathLike, params,
                    config: ModelConfig) -> str:
  """Writes params and the ModelConfig as one orbax checkpoint at `path`.

  The directory holds `params/` and `model_config/model_config.json`; orbax
  writes it atomically (complete or absent). Returns the absolute path.
  """
  path = os.path.abspath(path)
  _checkpointer().save(path, args=ocp.args.Composite(**{
      _PARAMS_ITEM: ocp.args.StandardSave(params),
      _CONFIG_ITEM: ocp.args.JsonSave(dataclasses.asdict(config))}))
  return path


def load_checkpoint(path: str | os.PathLike):
  """Reads a `save_checkpoint` directory -> (params as numpy, ModelConfig)."""
  path = os.path.abspath(path)
  checkpointer = _checkpointer()
  config_dict = checkpointer.restore(path, args=ocp.args.Composite(**{
      _CONFIG_ITEM: ocp.args.JsonRestore()}))[_CONFIG_ITEM]
  config = ModelConfig(**config_dict)
  abstract = jax.eval_shape(functools.partial(decoder.init_params, config),
                            jax.random.key(0))
  restored = checkpointer.restore(path, args=ocp.args.Composite(**{
      _PARAMS_ITEM: ocp.args.StandardRestore(abstract)}))[_PARAMS_ITEM]
  return jax.tree.map(np.asarray, restored), config


# -------------------------------------------------------------- verifying ---


def verification_batch(vocab_size: int, batch: int, length: int, seed: int):
  """Random tokens int32[B, T] and a left-padded mask bool[B, T].

  Row b has b * T // (2B) padding slots, so row 0 is unpadded."""
  rng = np.random.default_rng(seed)
  tokens = rng.integers(0, vocab_size, (batch, length), dtype=np.int32)
  pads = np.arange(batch) * length // (2 * batch)
  mask = np.arange(length)[None, :] >= pads[:, None]
  return tokens, mask


def hf_logits(model, tokens: np.ndarray, mask: np.ndarray) -> np.ndarray:
  """Logits f32[B, T, V] of a transformers causal LM, with the same RoPE
  positions as `decoder.positions_from_mask`."""
  import torch  # pylint: disable=import-outside-toplevel
  positions = np.asarray(decoder.positions_from_mask(mask))
  with torch.no_grad():
    out = model(input_ids=torch.from_numpy(tokens.astype(np.int64)),
                attention_mask=torch.from_numpy(mask.astype(np.int64)),
                position_ids=torch.from_numpy(positions.astype(np.int64)))
  return out.logits.float().numpy()


class Verification(NamedTuple):
  """What `verify` measured: the largest |logit difference| over real tokens,
  and the largest |logit| of transformers' model there."""
  max_abs_diff: float
  max_abs_logit: float

  @property
  def tolerance(self) -> float:
    return VERIFY_RTOL * max(1.0, self.max_abs_logit)

  @property
  def passed(self) -> bool:
    return self.max_abs_diff <= self.tolerance


def verify(hf_dir: str | os.PathLike, batch: int = 2, length: int = 16,
           seed: int = 0, log: Callable[[str], None] = print) -> Verification:
  """Compares transformers (fp32, eval) and `decoder.forward` on the same random
  left-padded batch."""
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  params, config = load_hf_params(hf_dir)
  log(f"config: {config}")
  log(f"params: {len(jax.tree.leaves(params))} arrays, "
      f"{sum(x.size for x in jax.tree.leaves(params))} values")
  model = transformers.AutoModelForCausalLM.from_pretrained(
      hf_dir, dtype=torch.float32)
  model.eval()
  tokens, mask = verification_batch(config.vocab_size, batch, length, seed)
  log(f"batch: tokens {tokens.shape}, padding per row "
      f"{(~mask).sum(axis=1).tolist()}")
  theirs = hf_logits(model, tokens, mask)
  ours = np.asarray(jax.jit(decoder.forward, static_argnums=0)(
      config, params, tokens, mask))
  diff = np.where(mask[..., None], np.abs(ours - theirs), 0.0)
  for b in range(batch):
    log(f"row {b}: max_abs_logit_diff={float(diff[b].max()):.3e}")
  return Verification(
      max_abs_diff=float(diff.max()),
      max_abs_logit=float(np.where(mask[..., None], np.abs(theirs), 0.0).max()))


# -------------------------------------------------------------------- CLI ---


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(prog="python -m models.hf",
                                   description=__doc__.split("\n")[0])
  verbs = parser.add_subparsers(dest="verb", required=True)
  p = verbs.add_parser("verify", help="compare logits with transformers")
  p.add_argument("--hf_dir", required=True)
  p.add_argument("--batch", type=int, default=2)
  p.add_argument("--length", type=int, default=16)
  p.add_argument("--seed", type=int, default=0)
  p = verbs.add_parser("import", help="HF directory -> orbax checkpoint")
  p.add_argument("--hf_dir", required=True)
  p.add_argument("--out", required=True, help="checkpoint directory to create")
  p.add_argument("--scan_layers", action="store_true",
                 help="stack the layers for nn.scan")
  p.add_argument("--param_dtype", default="float32")
  p = verbs.add_parser("export", help="orbax checkpoint -> HF directory")
  p.add_argument("--ckpt", required=True,
                 help="a checkpoint written by `import`")
  p.add_argument("--out", required=True, help="HF directory to write")
  p.add_argument("--dtype", choices=("bfloat16", "float32"), default=None,
                 help="weights on disk (default: the checkpoint's)")
  p.add_argument("--model_type", choices=SUPPORTED_MODEL_TYPES, default=None,
                 help="default: qwen2 if the model has q/k/v bias, else llama "
                 "(the only valid choice for biased models)")
  p.add_argument("--tokenizer_dir", default=None,
                 help="copy tokenizer files from here")
  return parser


def main(argv: list[str] | None = None) -> int:
  args = _parser().parse_args(argv)
  if args.verb == "verify":
    result = verify(args.hf_dir, args.batch, args.length, args.seed)
    print(f"max_abs_logit={result.max_abs_logit} tolerance={result.tolerance}")
    print(f"max_abs_logit_diff={result.max_abs_diff}")
    return 0 if result.passed else 1
  if args.verb == "import":
    config = config_from_hf(read_hf_config(args.hf_dir)).replace(
        param_dtype=args.param_dtype)
    params, config = load_hf_params(args.hf_dir, config,
                                    scan_layers=args.scan_layers)
    path = save_checkpoint(args.out, params, config)
    print(f"wrote {path}")
    return 0
  params, config = load_checkpoint(args.ckpt)
  model_type = args.model_type or ("qwen2" if config.qkv_bias else "llama")
  save_hf_params(params, config, args.out, model_type,
                 tokenizer_dir=args.tokenizer_dir, dtype=args.dtype)
  print(f"wrote {os.path.abspath(args.out)} ({model_type})")
  return 0


if __name__ == "__main__":
  sys.exit(main())
