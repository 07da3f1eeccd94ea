"""Hugging Face safetensors read straight into a mesh's sharding.

`load_sharded(hf_dir, config, shardings)` builds each parameter with
`jax.make_array_from_callback`: for every shard a process's devices hold, the
callback reads from the safetensors files only the rows of the HF tensor that
cover that shard (byte ranges, through etils.epath: a local directory or
gs://), converts them to the decoder's layout (`models.hf`'s tensor rules:
transposes, head reshapes, stacked layers) and casts them to
`config.param_dtype`. No process reads a tensor its devices do not hold, and
none builds the whole model in memory: a process's peak is its own shards
plus one tensor's covering rows at a time.

The names, shapes and dtypes are checked from the files' headers before any
data is read, with `models.hf.load_hf_params`'s errors (a missing, unexpected
or mis-shaped tensor, a config field that disagrees with config.json).

Safetensors layout: an 8-byte little-endian header length, the JSON header
({name: {"dtype", "shape", "data_offsets": [begin, end]}}, offsets from the
end of the header), then the row-major data.
"""

from __future__ import annotations

import json
import struct
from typing import Any, Mapping, NamedTuple

from etils import epath
import jax
import ml_dtypes
import numpy as np

from models import hf
from models.config import ModelConfig

_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16,
           "BF16": ml_dtypes.bfloat16}
# Rows of the tied lm_head compared with the embedding at a time.
_TIED_CHECK_ROWS = 4096


class _Entry(NamedTuple):
  """Where one tensor's data lies: file, dtype, shape, first byte."""
  path: epath.Path
  dtype: np.dtype
  shape: tuple[int, ...]
  start: int


def read_header(path: epath.Path) -> dict[str, _Entry]:
  """{tensor name: _Entry} of one safetensors file, from its header alone."""
  with path.open("rb") as f:
    (length,) = struct.unpack("<Q", f.read(8))
    header = json.loads(f.read(length))
  out = {}
  for name, info in header.items():
    if name == "__metadata__":
      continue
    if info["dtype"] not in _DTYPES:
      raise ValueError(f"{path}: tensor {name!r} has dtype {info['dtype']}; "
                       f"supported: {sorted(_DTYPES)}.")
    out[name] = _Entry(path, np.dtype(_DTYPES[info["dtype"]]),
                       tuple(info["shape"]), 8 + length + info["data_offsets"][0])
  return out


def tensor_index(hf_dir: str) -> dict[str, _Entry]:
  """{tensor name: _Entry} of an HF directory's safetensors (one file, or the
  shards its index names), local or gs://."""
  root = epath.Path(hf_dir)
  index = root / hf.SHARDED_INDEX_FILE
  if index.exists():
    files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
  elif (root / hf.SINGLE_WEIGHTS_FILE).exists():
    files = [hf.SINGLE_WEIGHTS_FILE]
  else:
    raise FileNotFoundError(
        f"HF directory {hf_dir} has neither {hf.SINGLE_WEIGHTS_FILE} nor "
        f"{hf.SHARDED_INDEX_FILE}.")
  out = {}
  for file in files:
    out.update(read_header(root / file))
  return out


def read_rows(entry: _Entry, start: int, stop: int) -> np.ndarray:
  """Rows [start, stop) of the tensor's first axis (the whole of a 0-d or
  1-d tensor's elements in that range), read as their bytes alone."""
  row_elems = int(np.prod(entry.shape[1:], dtype=np.int64))
  itemsize = entry.dtype.itemsize
  with entry.path.open("rb") as f:
    f.seek(entry.start + start * row_elems * itemsize)
    data = f.read((stop - start) * row_elems * itemsize)
  return np.frombuffer(data, entry.dtype).reshape(
      (stop - start,) + entry.shape[1:])


def _flat_ids(shape: tuple[int, ...], index: tuple[slice, ...]) -> np.ndarray:
  """Row-major flat indices into `shape` of the block `index` selects, in
  the block's own row-major order."""
  ranges = [np.arange(n)[s] for n, s in zip(shape, index)]
  if not ranges:
    return np.zeros((1,), np.int64)
  grids = np.meshgrid(*ranges, indexing="ij")
  return np.ravel_multi_index([g.ravel() for g in grids], shape)


def _read_block(entry: _Entry, rule: hf._TensorRule, our_shape, index,
                linear: bool) -> np.ndarray:
  """The block `index` (slices over our_shape) of one layer's leaf, read
  from the HF tensor's covering rows."""
  index = tuple(index) + (slice(None),) * (len(our_shape) - len(index))
  block_shape = tuple(len(range(*s.indices(n))) for n, s in zip(our_shape,
                                                                  index))
  if linear:
    # ours = w.T.reshape(in + out): HF rows are the out dims, columns the in.
    n_out, n_in = rule.hf_shape
    num_in = _num_in_dims(our_shape, n_in)
    in_shape, out_shape = our_shape[:num_in], our_shape[num_in:]
    rows = _flat_ids(out_shape, index[num_in:])
    cols = _flat_ids(in_shape, index[:num_in])
    start, stop = int(rows.min()), int(rows.max()) + 1
    covering = read_rows(entry, start, stop)
    block = covering[np.ix_(rows - start, cols)].T
    return block.reshape(block_shape)
  # ours = w.reshape(our_shape): the same row-major flat order.
  flat = _flat_ids(our_shape, index)
  row_elems = int(np.prod(rule.hf_shape[1:], dtype=np.int64))
  start, stop = int(flat.min()) // row_elems, int(flat.max()) // row_elems + 1
  covering = read_rows(entry, start, stop).reshape(-1)
  return covering[flat - start * row_elems].reshape(block_shape)


def _num_in_dims(our_shape: tuple[int, ...], n_in: int) -> int:
  """How many leading dims of a linear leaf are its input dims."""
  size = 1
  for i, n in enumerate(our_shape):
    size *= n
    if size == n_in:
      return i + 1
  raise ValueError(f"no leading dims of {our_shape} hold {n_in} inputs")


class _Leaf(NamedTuple):
  """One leaf of the parameter tree: its shape and, per layer (one entry
  unless layers are stacked), the rule that fills it."""
  shape: tuple[int, ...]
  rules: tuple[hf._TensorRule, ...]
  stacked: bool


def _leaves(config: ModelConfig) -> dict[tuple[str, ...], _Leaf]:
  """{path in the decoder's param tree: _Leaf}."""
  rules = hf._tensor_rules(config)  # pylint: disable=protected-access
  per_path: dict[tuple[str, ...], list] = {}
  for rule in rules:
    path = rule.path
    if config.scan_layers and path[0].startswith("layers_"):
      path = ("layers",) + path[1:]
    per_path.setdefault(path, []).append(rule)
  out = {}
  for path, path_rules in per_path.items():
    shape = _our_shape(path_rules[0])
    stacked = path[0] == "layers"
    out[path] = _Leaf(((len(path_rules),) if stacked else ()) + shape,
                      tuple(path_rules), stacked)
  return out


def _our_shape(rule: hf._TensorRule) -> tuple[int, ...]:
  """The shape a rule gives the HF tensor in the decoder's layout (traced
  abstractly: nothing allocated)."""
  return tuple(jax.eval_shape(
      rule.to_ours, jax.ShapeDtypeStruct(rule.hf_shape, np.float32)).shape)


def _is_linear(rule: hf._TensorRule) -> bool:
  return rule.path[-1] == "kernel"


def load_sharded(hf_dir: str, config: ModelConfig, shardings) -> Any:
  """The decoder's parameters from the HF directory `hf_dir` (local or
  gs://), each a jax.Array with its sharding from `shardings` (a tree of
  jax.sharding.Sharding with the structure `decoder.init_params(config)`
  produces), read shard by shard.

  Raises ValueError naming a missing, unexpected or mis-shaped tensor, or a
  config field config.json disagrees with.
  """
  expected = hf.config_from_hf(hf.read_hf_config(hf_dir))
  hf._check_architecture(config, expected, hf_dir)  # pylint: disable=protected-access
  entries = tensor_index(hf_dir)
  leaves = _leaves(config)
  wanted = {r.hf_name: r for leaf in leaves.values() for r in leaf.rules}
  tied_head = config.tie_embeddings and "lm_head.weight" in entries
  unexpected = sorted(
      name for name in entries if name not in wanted
      and not name.endswith(hf._IGNORED_SUFFIXES)  # pylint: disable=protected-access
      and not (tied_head and name == "lm_head.weight"))
  if unexpected:
    raise ValueError(f"HF checkpoint {hf_dir} has unexpected tensors "
                     f"{unexpected} for {config}.")
  missing = [r for r in wanted.values() if r.hf_name not in entries]
  if missing:
    raise ValueError(
        f"HF checkpoint {hf_dir} lacks tensors " + ", ".join(
            f"{r.hf_name!r} (expected shape {r.hf_shape})" for r in missing)
        + ".")
  for rule in wanted.values():
    if entries[rule.hf_name].shape != rule.hf_shape:
      raise ValueError(f"HF tensor {rule.hf_name!r} has shape "
                       f"{entries[rule.hf_name].shape}, expected "
                       f"{rule.hf_shape}.")
  if tied_head:
    _check_tied_head(entries, hf_dir)
  dtype = np.dtype(config.param_dtype)

  def build(path, sharding):
    leaf = leaves[path]
    linear = _is_linear(leaf.rules[0])
    layer_shape = leaf.shape[1:] if leaf.stacked else leaf.shape

    def callback(index):
      index = tuple(index)
      if not leaf.stacked:
        return _read_block(entries[leaf.rules[0].hf_name], leaf.rules[0],
                           layer_shape, index, linear).astype(dtype)
      layers = range(*index[0].indices(leaf.shape[0])) if index else range(
          leaf.shape[0])
      return np.stack([
          _read_block(entries[leaf.rules[i].hf_name], leaf.rules[i],
                      layer_shape, index[1:], linear).astype(dtype)
          for i in layers])

    return jax.make_array_from_callback(leaf.shape, sharding, callback)

  flat, treedef = jax.tree_util.tree_flatten_with_path(shardings)
  params = [build(tuple(k.key for k in path), sharding)
            for path, sharding in flat]
  return jax.tree_util.tree_unflatten(treedef, params)


def _check_tied_head(entries: Mapping[str, _Entry], hf_dir: str) -> None:
  """A tied checkpoint that stores lm_head.weight must store the embedding
  there; compared in blocks of rows."""
  head, embed = entries["lm_head.weight"], entries["model.embed_tokens.weight"]
  if head.shape != embed.shape:
    raise ValueError(f"HF tensor 'lm_head.weight' has shape {head.shape}, "
                     f"expected {embed.shape}.")
  for start in range(0, embed.shape[0], _TIED_CHECK_ROWS):
    stop = min(start + _TIED_CHECK_ROWS, embed.shape[0])
    if not np.array_equal(read_rows(head, start, stop),
                          read_rows(embed, start, stop)):
      raise ValueError(
          "HF tensor 'lm_head.weight' differs from 'model.embed_tokens.weight' "
          f"but {hf_dir}/{hf.CONFIG_FILE} has tie_word_embeddings=true.")
