"""Mesh construction, rule-driven parameter placement and a sharded forward."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from genenv_jax.sharding import (DEFAULT_RULES, check_divisible, constrain,
                                 in_mesh, logical_names, logical_to_spec,
                                 make_mesh,
                                 shard_batch, sharded_init, without_mesh_axis)
from models.config import get_preset
from models.decoder import forward, init_boxed, init_params

TOL = 1e-5
CONFIG = get_preset("tiny")  # V=512, E=128, F=512, H=4, K=2, D=32.
BATCH, LENGTH = 8, 12


# ------------------------------------------------------------------ make_mesh


def test_make_mesh_infers_the_free_axis():
  mesh = make_mesh({"data": -1})
  assert dict(mesh.shape) == {"data": 8, "fsdp": 1, "tensor": 1}
  mesh = make_mesh({"fsdp": -1, "tensor": 2})
  assert dict(mesh.shape) == {"data": 1, "fsdp": 4, "tensor": 2}


def test_make_mesh_from_a_sequence():
  mesh = make_mesh((2, 2, 2))
  assert mesh.axis_names == ("data", "fsdp", "tensor")
  assert dict(mesh.shape) == {"data": 2, "fsdp": 2, "tensor": 2}
  assert sorted(d.id for d in mesh.devices.flat) == list(range(8))


@pytest.mark.parametrize("shape, message", [
    ((2, 2, 3), "needs 12 devices but 8 are available"),
    ({"data": 2, "tensor": 2}, "needs 4 devices but 8 are available"),
    ((-1, -1, 2), "at most one axis may be -1"),
    ({"data": 2, "model": 4}, r"unknown axes \['model'\]"),
    ({"data": -1, "tensor": 3}, "not divisible by the fixed axes' product 3"),
    ((8, 1), "must have 3 entries"),
    ((0, 8, 1), "positive or -1"),
])
def test_make_mesh_errors_name_the_problem(shape, message):
  with pytest.raises(ValueError, match=message):
    make_mesh(shape)


# --------------------------------------------------------- sharded forward


def _tokens_and_mask():
  """Tokens int32[8, 12] and a left-padded mask bool[8, 12]."""
  rng = np.random.RandomState(0)
  tokens = rng.randint(0, CONFIG.vocab_size, (BATCH, LENGTH)).astype(np.int32)
  lengths = rng.randint(1, LENGTH + 1, BATCH)
  mask = np.arange(LENGTH)[None, :] >= LENGTH - lengths[:, None]
  return tokens, mask


class ShardedRun:
  """Sharded params, a batch on the mesh, the jitted forward and its output."""

  def __init__(self, scan_layers: bool):
    self.config = CONFIG.replace(scan_layers=scan_layers)
    self.mesh = make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    self.params, self.shardings = sharded_init(
        functools.partial(init_boxed, self.config), self.mesh, DEFAULT_RULES,
        jax.random.key(0))
    tokens, mask = _tokens_and_mask()
    self.host_batch = {"tokens": tokens, "mask": mask}
    self.batch = shard_batch(self.host_batch, self.mesh, DEFAULT_RULES)
    self.forward = jax.jit(in_mesh(self.mesh, DEFAULT_RULES)(
        functools.partial(forward, self.config)))
    self.logits = self.forward(self.params, self.batch["tokens"],
                               self.batch["mask"])


@functools.lru_cache(maxsize=None)
def _sharded_run(scan_layers: bool) -> ShardedRun:
  return ShardedRun(scan_layers)


@pytest.fixture(params=[False, True], ids=["unrolled", "scan"])
def run(request):
  return _sharded_run(request.param)


def _unstacked(params, config):
  """Host copies of params in the unscanned layout (layers_0, layers_1, ...)."""
  params = jax.device_get(params)
  if not config.scan_layers:
    return params
  rest = {k: v for k, v in params.items() if k != "layers"}
  for i in range(config.num_layers):
    rest[f"layers_{i}"] = jax.tree_util.tree_map(lambda x, i=i: x[i],
                                                 params["layers"])
  return rest


_single_device_forward = jax.jit(functools.partial(forward, CONFIG))


def test_sharded_forward_matches_single_device(run):
  assert len(run.logits.sharding.device_set) == 8
  # The rules reach the activations: logits are (batch, length, vocab).
  assert run.logits.sharding.spec == P(("data", "fsdp"), None, "tensor")
  want = _single_device_forward(_unstacked(run.params, run.config),
                                run.host_batch["tokens"],
                                run.host_batch["mask"])
  assert len(want.sharding.device_set) == 1
  np.testing.assert_allclose(np.asarray(run.logits), np.asarray(want),
                             atol=TOL, rtol=TOL)


def test_sharded_init_gives_the_unsharded_values():
  run = _sharded_run(False)
  want = init_params(CONFIG, jax.random.key(0))
  for got, expected in zip(jax.tree_util.tree_leaves(run.params),
                           jax.tree_util.tree_leaves(want)):
    np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))


def _layer(params, scan_layers):
  return params["layers"] if scan_layers else params["layers_0"]


def test_parameters_are_placed_as_the_rules_say(run):
  scan = run.config.scan_layers
  lead = (None,) if scan else ()
  layer = _layer(run.params, scan)
  expected = {
      "q_proj": (layer["attn"]["q_proj"]["kernel"],
                 P(*lead, "fsdp", "tensor", None)),
      "k_proj bias": (layer["attn"]["k_proj"]["bias"],
                      P(*lead, "tensor", None)),
      "o_proj": (layer["attn"]["o_proj"]["kernel"],
                 P(*lead, "tensor", None, "fsdp")),
      "down_proj": (layer["mlp"]["down_proj"]["kernel"],
                    P(*lead, "tensor", "fsdp")),
      "gate_proj": (layer["mlp"]["gate_proj"]["kernel"],
                    P(*lead, "fsdp", "tensor")),
      "attn_norm": (layer["attn_norm"]["scale"], P(*lead, None)),
      "embedding": (run.params["embed"]["embedding"], P("tensor", "fsdp")),
      "final_norm": (run.params["final_norm"]["scale"], P(None)),
  }
  for name, (array, spec) in expected.items():
    assert array.sharding.spec == spec, name

  # Per-device shards are the expected fraction of the global shape.
  shard_shapes = {
      "q_proj": (64, 2, 32),     # [E/fsdp, H/tensor, D]
      "down_proj": (256, 64),    # [F/tensor, E/fsdp]
      "embedding": (256, 64),    # [V/tensor, E/fsdp]
      "attn_norm": (128,),       # replicated
      "final_norm": (128,),
  }
  for name, shape in shard_shapes.items():
    array = expected[name][0]
    if scan and name not in ("embedding", "final_norm"):
      shape = (CONFIG.num_layers,) + shape
    shards = array.addressable_shards
    assert len(shards) == 8, name
    assert all(s.data.shape == shape for s in shards), name
  # Each q_proj shard holds a distinct block on the (fsdp, tensor) grid and
  # is replicated over data: 4 distinct blocks, 2 copies each.
  q_shards = expected["q_proj"][0].addressable_shards
  assert len({str(s.index) for s in q_shards}) == 4


def test_shardings_returned_by_sharded_init_match_the_arrays(run):
  flat_params = jax.tree_util.tree_leaves(run.params)
  flat_shardings = jax.tree_util.tree_leaves(run.shardings)
  assert len(flat_params) == len(flat_shardings)
  for array, sharding in zip(flat_params, flat_shardings):
    assert array.sharding.is_equivalent_to(sharding, array.ndim)


def test_batch_is_split_over_data_and_fsdp(run):
  for name, array in run.batch.items():
    assert array.sharding.spec == P(("data", "fsdp"), None), name
    assert {s.data.shape for s in array.addressable_shards} == {(2, LENGTH)}
    np.testing.assert_array_equal(np.asarray(array), run.host_batch[name])


def test_compiled_forward_is_partitioned(run):
  compiled = run.forward.lower(run.params, run.batch["tokens"],
                               run.batch["mask"]).compile()
  hlo = compiled.as_text()
  assert "num_partitions=8" in hlo
  assert any(op in hlo for op in ("all-gather", "reduce-scatter",
                                  "all-reduce"))
  param_shardings, tokens_sharding, _ = compiled.input_shardings[0]
  assert tokens_sharding.spec == P(("data", "fsdp"), None)
  q_kernel = _layer(param_shardings, run.config.scan_layers)
  q_kernel = q_kernel["attn"]["q_proj"]["kernel"]
  assert not q_kernel.is_fully_replicated


# ------------------------------------------------------------ divisibility


@pytest.mark.parametrize("overrides, mesh_shape, path, dim", [
    ({"vocab_size": 510}, {"fsdp": 2, "tensor": 4}, "embed/embedding",
     "dimension 0"),
    ({"num_kv_heads": 1, "qkv_bias": False}, {"fsdp": 4, "tensor": 2},
     "layers_0/attn/k_proj/kernel", "dimension 1"),
])
def test_sharded_init_rejects_indivisible_dimensions(overrides, mesh_shape,
                                                     path, dim):
  config = CONFIG.replace(**overrides)
  mesh = make_mesh(mesh_shape)
  with pytest.raises(ValueError, match=path) as error:
    sharded_init(functools.partial(init_boxed, config), mesh, DEFAULT_RULES,
                 jax.random.key(0))
  assert dim in str(error.value)


def test_check_divisible_names_tensor_dim_and_axes():
  mesh = make_mesh({"fsdp": 2, "tensor": 4})
  check_divisible("ok", (512, 128), P("tensor", "fsdp"), mesh)
  with pytest.raises(ValueError) as error:
    check_divisible("lm_head/kernel", (128, 510), P("fsdp", "tensor"), mesh)
  message = str(error.value)
  for part in ("lm_head/kernel", "dimension 1", "510", "tensor"):
    assert part in message


def test_shard_batch_rejects_indivisible_batch():
  mesh = make_mesh({"data": 8})
  with pytest.raises(ValueError, match="tokens") as error:
    shard_batch({"tokens": np.zeros((6, 4), np.int32)}, mesh, DEFAULT_RULES)
  assert "size 6" in str(error.value)


def test_without_mesh_axis_drops_only_that_axis():
  rules = (("batch", ("data", "fsdp")), ("embed", "fsdp"), ("mlp", "tensor"),
           ("both", ("fsdp", "tensor", "data")), ("length", None))
  assert without_mesh_axis(rules, "fsdp") == (
      ("batch", "data"), ("embed", None), ("mlp", "tensor"),
      ("both", ("tensor", "data")), ("length", None))


def test_constrain_lays_weights_out_by_their_logical_names():
  config = get_preset("tiny", vocab_size=64, scan_layers=False)
  mesh = make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  params, _ = sharded_init(functools.partial(init_boxed, config), mesh,
                           DEFAULT_RULES, jax.random.PRNGKey(0))
  names = logical_names(functools.partial(init_boxed, config),
                        jax.random.PRNGKey(0))
  gathered = jax.jit(in_mesh(mesh, DEFAULT_RULES)(lambda p: constrain(
      p, names, without_mesh_axis(DEFAULT_RULES, "fsdp"))))(params)
  kernel = gathered["layers_0"]["attn"]["q_proj"]["kernel"]
  assert kernel.sharding.spec == P(None, "tensor")  # was P("fsdp", "tensor")
  np.testing.assert_array_equal(
      np.asarray(kernel), np.asarray(params["layers_0"]["attn"]["q_proj"]["kernel"]))


def test_no_mesh_axis_splits_two_dimensions_of_one_array():
  """batch and embed both name fsdp: the earlier rule (batch) takes it and
  embed replicates, as flax's nn.logical_to_mesh_axes lays them out; unknown
  names and None replicate; a name's own rule applies where nothing else
  claims its axes."""
  assert logical_to_spec(("batch", "length", "embed"), DEFAULT_RULES) == P(
      ("data", "fsdp"), None, None)
  assert logical_to_spec(("embed", "mlp"), DEFAULT_RULES) == P("fsdp", "tensor")
  assert logical_to_spec(("batch", None, "heads", "unknown"),
                         DEFAULT_RULES) == P(("data", "fsdp"), None, "tensor",
                                             None)
  assert logical_to_spec(("heads", "kv_heads"), DEFAULT_RULES) == P(
      "tensor", None)
  # Every spec the rules give is one jax accepts for an array on the mesh.
  mesh = make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  x = jax.device_put(np.zeros((8, 4, 16), np.float32), NamedSharding(
      mesh, logical_to_spec(("batch", "length", "embed"), DEFAULT_RULES)))
  assert x.sharding.shard_shape(x.shape) == (2, 4, 16)
