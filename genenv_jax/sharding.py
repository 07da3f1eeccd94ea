"""Device mesh, logical-axis rules, sharded initialisation and batch placement.

Parameters and activations are annotated with logical axis names (see
`models.decoder`); a rules table maps each logical name to mesh axes
(`data`, `fsdp`, `tensor`) or to None (replicated). Jitted functions enter the
mesh and the rules *inside* their trace with `in_mesh`, so constraints apply
wherever the function is compiled.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
from typing import Any, Callable, Mapping, Sequence

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

MESH_AXES = ("data", "fsdp", "tensor")

Rules = Sequence[tuple[str, Any]]

# Training layout: batch over data x fsdp, weights' embed dim over fsdp,
# heads / MLP / vocab over tensor.
DEFAULT_RULES: tuple[tuple[str, Any], ...] = (
    ("batch", ("data", "fsdp")),
    ("embed", "fsdp"),
    ("vocab", "tensor"),
    ("mlp", "tensor"),
    ("heads", "tensor"),
    ("kv_heads", "tensor"),
    ("head_dim", None),
    ("length", None),
    ("cache_length", None),
    ("layers", None),
    ("norm", None),
    ("lora", None),
)


def make_mesh(mesh_shape: Mapping[str, int] | Sequence[int],
              devices: Sequence[jax.Device] | None = None) -> Mesh:
  """Builds a (data, fsdp, tensor) mesh; one entry may be -1 (inferred).

  Args:
    mesh_shape: {"data": d, "fsdp": f, "tensor": t} or (d, f, t).
    devices: defaults to all of `jax.devices()`; on a TPU one per chip.

  Raises:
    ValueError naming the mesh shape and device count when they do not fit.
  """
  devices = list(jax.devices() if devices is None else devices)
  dims = mesh_dims(mesh_shape, len(devices))
  # jax.make_mesh orders TPU devices along the chip grid (neighbours on an
  # axis are neighbours on the interconnect); other devices keep their order.
  return jax.make_mesh(dims, MESH_AXES,
                       axis_types=(jax.sharding.AxisType.Auto,) * len(dims),
                       devices=devices)


def mesh_dims(mesh_shape: Mapping[str, int] | Sequence[int],
              num_devices: int) -> tuple[int, int, int]:
  """The (data, fsdp, tensor) sizes of `mesh_shape` on `num_devices` devices,
  with its -1 entry (at most one) resolved.

  Raises:
    ValueError naming the mesh shape and device count when they do not fit.
  """
  if isinstance(mesh_shape, Mapping):
    unknown = set(mesh_shape) - set(MESH_AXES)
    if unknown:
      raise ValueError(f"mesh_shape has unknown axes {sorted(unknown)}; "
                       f"expected {MESH_AXES}.")
    dims = [int(mesh_shape.get(a, 1)) for a in MESH_AXES]
  else:
    dims = [int(d) for d in mesh_shape]
    if len(dims) != len(MESH_AXES):
      raise ValueError(f"mesh_shape {tuple(dims)} must have {len(MESH_AXES)} "
                       f"entries {MESH_AXES}.")
  n = num_devices
  if dims.count(-1) > 1:
    raise ValueError(f"mesh_shape {dict(zip(MESH_AXES, dims))}: at most one "
                     "axis may be -1.")
  if any(d == 0 or d < -1 for d in dims):
    raise ValueError(f"mesh_shape {dict(zip(MESH_AXES, dims))}: sizes must be "
                     "positive or -1.")
  known = math.prod(d for d in dims if d != -1)
  if -1 in dims:
    if n % known:
      raise ValueError(
          f"mesh_shape {dict(zip(MESH_AXES, dims))}: {n} devices are not "
          f"divisible by the fixed axes' product {known}.")
    dims[dims.index(-1)] = n // known
  if math.prod(dims) != n:
    raise ValueError(
        f"mesh_shape {dict(zip(MESH_AXES, dims))} needs {math.prod(dims)} "
        f"devices but {n} are available.")
  return tuple(dims)


def without_mesh_axis(rules: Rules, axis: str) -> tuple[tuple[str, Any], ...]:
  """`rules` with mesh axis `axis` taken out of every entry.

  Weights laid out by these rules are whole along the dimensions the original
  rules split over `axis`: for sampling, weights sharded over "fsdp" for
  training are gathered once, so a decode loop does not re-gather them at
  every token.
  """
  def drop(axes):
    if axes == axis:
      return None
    if isinstance(axes, (tuple, list)):
      kept = tuple(a for a in axes if a != axis)
      return kept if len(kept) > 1 else (kept[0] if kept else None)
    return axes
  return tuple((name, drop(axes)) for name, axes in rules)


def logical_names(init_boxed: Callable[..., Any], *args):
  """The logical axis names of each parameter `init_boxed(*args)` creates:
  a tree of PartitionSpecs of names, shaped like the unboxed parameters
  (nothing is computed)."""
  return nn.get_partition_spec(jax.eval_shape(init_boxed, *args))


def constrain(tree, names, rules: Rules):
  """Lays out each array of `tree` per its logical `names` (from
  `logical_names`) under `rules`, inside a function traced in a mesh context
  (`in_mesh`)."""
  return jax.tree.map(
      lambda x, n: jax.lax.with_sharding_constraint(
          x, logical_to_spec(tuple(n), rules)),
      tree, names, is_leaf=lambda x: isinstance(x, PartitionSpec))


def logical_to_spec(logical_axes: Sequence[str | None],
                    rules: Rules) -> PartitionSpec:
  """Maps a tuple of logical names to a PartitionSpec as flax's
  `nn.logical_to_mesh_axes` does: the rules in order, each giving its mesh
  axes to its logical name unless one of them is already taken by another
  dimension of the array (then that dimension replicates, so no mesh axis
  splits two dimensions); unknown names replicate.

  For (batch, length, embed) under DEFAULT_RULES: P(('data', 'fsdp'), None,
  None), batch taking fsdp before embed.
  """
  return nn.logical_to_mesh_axes(tuple(logical_axes), tuple(rules))


def _mesh_axis_size(mesh: Mesh, axes) -> int:
  if axes is None:
    return 1
  if isinstance(axes, str):
    axes = (axes,)
  return math.prod(mesh.shape[a] for a in axes)


def check_divisible(name: str, shape: Sequence[int], spec: PartitionSpec,
                    mesh: Mesh) -> None:
  """Raises ValueError naming `name` if a dim does not divide its mesh axes."""
  for dim, (size, axes) in enumerate(zip(shape, tuple(spec))):
    parts = _mesh_axis_size(mesh, axes)
    if size % parts:
      raise ValueError(
          f"{name}: dimension {dim} of shape {tuple(shape)} has size {size}, "
          f"not divisible by mesh axes {axes} of total size {parts} "
          f"(mesh {dict(mesh.shape)}). Change the mesh or the sharding rules.")


def _path_name(path) -> str:
  return "/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)


def shardings_from_boxed(boxed_tree, mesh: Mesh, rules: Rules):
  """NamedShardings for a tree of `nn.Partitioned` (or plain) leaves.

  Every partitioned leaf is checked for divisibility; plain leaves replicate.
  """
  def one(path, leaf):
    if isinstance(leaf, nn.Partitioned):
      spec = logical_to_spec(leaf.names, rules)
      check_divisible(_path_name(path), leaf.value.shape, spec, mesh)
      return NamedSharding(mesh, spec)
    return NamedSharding(mesh, PartitionSpec())
  return jax.tree_util.tree_map_with_path(
      one, boxed_tree, is_leaf=lambda x: isinstance(x, nn.Partitioned))


# The mesh of the innermost `mesh_rules` context (for `rows_per_device`).
_MESH: contextvars.ContextVar[Mesh | None] = contextvars.ContextVar(
    "genenv_mesh", default=None)


@contextlib.contextmanager
def mesh_rules(mesh: Mesh, rules: Rules):
  """Context in which `nn.with_logical_constraint` applies `rules` on `mesh`."""
  token = _MESH.set(mesh)
  try:
    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh), \
        nn.logical_axis_rules(tuple(rules)):
      yield
  finally:
    _MESH.reset(token)


def rows_per_device(fn: Callable[..., jax.Array], *arrays: jax.Array
                    ) -> jax.Array:
  """fn(*arrays) computed by each device on its own rows.

  Inside a `mesh_rules` context the arrays' leading axis (all of one length
  M) is split over the mesh axes the rules give "batch" (padded with zero
  rows to a multiple of their size) and fn runs on each device's share, so a
  host callback in fn runs on every process for the rows its devices hold,
  rather than on one device for the whole batch. Outside such a context
  fn(*arrays) runs as it is.

  Args:
    fn: maps arrays [m, ...] to one array [m, ...] row by row.
    arrays: [M, ...] each.

  Returns:
    fn's result for all M rows.
  """
  mesh = _MESH.get()
  if mesh is None:
    return fn(*arrays)
  axes = dict(nn.get_logical_axis_rules()).get("batch")
  parts = _mesh_axis_size(mesh, axes)
  rows = arrays[0].shape[0]
  pad = -rows % parts
  padded = [jax.numpy.pad(a, [(0, pad)] + [(0, 0)] * (a.ndim - 1))
            for a in arrays]
  spec = PartitionSpec(axes)
  out = jax.shard_map(fn, mesh=mesh, in_specs=(spec,) * len(arrays),
                      out_specs=spec, check_vma=False)(*padded)
  return out[:rows]


def rows_on_their_devices(fn: Callable[..., Any], shared, *arrays: jax.Array):
  """fn(shared, *arrays), each device computing it for its own rows.

  Inside a `mesh_rules` context whose batch mesh axes divide the arrays'
  leading axis (all of one length M), fn runs per device on its share of
  the rows (a shard_map over the batch axes only: the other mesh axes, such
  as tensor, stay with the compiler) and `shared` (a tree, e.g. weights)
  enters whole over the batch axes: gathered once, and under
  differentiation its gradient summed over those axes once, after fn,
  where a loop inside fn over weights split on a batch axis would gather
  them, and reduce their gradient, on every trip. Elsewhere fn(shared,
  *arrays) runs as it is.

  Args:
    fn: (shared, arrays [m, ...] ...) -> a tree of arrays [m, ...], row by
      row.
    shared: a tree of arrays every row needs.
    arrays: [M, ...] each.
  """
  mesh = _MESH.get()
  axes = dict(nn.get_logical_axis_rules()).get("batch")
  if mesh is None or axes is None:
    return fn(shared, *arrays)
  names = (axes,) if isinstance(axes, str) else tuple(axes)
  if arrays[0].shape[0] % _mesh_axis_size(mesh, names):
    return fn(shared, *arrays)
  rows = PartitionSpec(axes)
  whole = jax.tree.map(lambda _: PartitionSpec(), shared)
  # Inside, logical constraints name only the mesh axes left to the compiler.
  local_rules = nn.get_logical_axis_rules()
  for name in names:
    local_rules = without_mesh_axis(local_rules, name)

  def local(*args):
    with nn.logical_axis_rules(local_rules):
      return fn(*args)
  return jax.shard_map(local, mesh=mesh,
                       in_specs=(whole,) + (rows,) * len(arrays),
                       out_specs=rows, axis_names=set(names),
                       check_vma=False)(shared, *arrays)


def in_mesh(mesh: Mesh, rules: Rules) -> Callable[[Callable], Callable]:
  """Decorator: run the function (typically while being traced) in `mesh_rules`."""
  def wrap(fn):
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
      with mesh_rules(mesh, rules):
        return fn(*args, **kwargs)
    return wrapped
  return wrap


def sharded_init(init_fn: Callable[..., Any], mesh: Mesh, rules: Rules,
                 *args) -> tuple[Any, Any]:
  """Initialises parameters directly in their sharded layout.

  Args:
    init_fn: returns a tree of boxed (`nn.Partitioned`) parameters from `args`.
    mesh, rules: the layout.
    *args: passed to `init_fn` (e.g. an rng key).

  Returns:
    (unboxed params placed per the rules, their NamedShardings).
  """
  boxed_shapes = jax.eval_shape(init_fn, *args)
  shardings = nn.unbox(shardings_from_boxed(boxed_shapes, mesh, rules))
  init = jax.jit(in_mesh(mesh, rules)(lambda *a: nn.unbox(init_fn(*a))),
                 out_shardings=shardings)
  return init(*args), shardings


def batch_sharding(mesh: Mesh, rules: Rules, ndim: int,
                   shape: Sequence[int] | None = None,
                   name: str = "batch") -> NamedSharding:
  """Sharding for an array whose leading axis is the batch (rest replicated)."""
  spec = logical_to_spec(("batch",) + (None,) * (ndim - 1), rules)
  if shape is not None:
    check_divisible(name, shape, spec, mesh)
  return NamedSharding(mesh, spec)


def shard_batch(batch, mesh: Mesh, rules: Rules):
  """Places every array of a batch pytree with its leading axis on `batch`.

  Raises ValueError naming the leaf when the batch does not divide the mesh.
  """
  def place(path, x):
    sharding = batch_sharding(mesh, rules, np.ndim(x), np.shape(x),
                              _path_name(path) or "batch")
    if isinstance(x, jax.Array) and isinstance(x.sharding, NamedSharding):
      return jax.device_put(x, sharding)
    return from_host(x, sharding)
  return jax.tree_util.tree_map_with_path(place, batch)


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, PartitionSpec())


def from_host(x, sharding: NamedSharding) -> jax.Array:
  """A global array laid out per `sharding` from `x`, which every process
  holds whole: each process places only the slices of its own devices (so
  no process assumes it can reach another's devices)."""
  x = np.asarray(x)
  return jax.make_array_from_callback(x.shape, sharding, lambda i: x[i])
