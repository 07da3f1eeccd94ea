"""train.bench.hlo_cost: a compiled program's FLOPs, HBM bytes and
collectives from its HLO, loops counted as often as they run."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from models.config import get_preset
from models.decoder import forward, init_params
from train.bench import compile_check
from train.bench import hlo_cost
from train.bench import slices


def _xla(compiled) -> dict:
  cost = compiled.cost_analysis()
  return cost[0] if isinstance(cost, (list, tuple)) else cost


def _model_programs(scan_layers: bool):
  """A 4-layer tiny decoder's forward and gradient, compiled for the CPU."""
  config = get_preset("tiny", scan_layers=scan_layers, num_layers=4)
  params = jax.eval_shape(functools.partial(init_params, config),
                          jax.random.PRNGKey(0))
  tokens = jax.ShapeDtypeStruct((4, 64), jnp.int32)
  mask = jax.ShapeDtypeStruct((4, 64), jnp.bool_)

  def loss(p, t, m):
    return jnp.sum(forward(config, p, t, m).astype(jnp.float32))
  return [jax.jit(fn).lower(params, tokens, mask).compile()
          for fn in (loss, jax.grad(loss))]


def test_scanned_layers_count_every_layer():
  """Unscanned (no loop) the FLOPs agree with XLA's own count; scanned, XLA
  counts the layer loop's body once, while hlo_cost counts it per layer and
  finds the unscanned program's FLOPs."""
  for unscanned, scanned in zip(_model_programs(False), _model_programs(True)):
    flat = hlo_cost.analyse(unscanned, 1)
    looped = hlo_cost.analyse(scanned, 1)
    np.testing.assert_allclose(flat.flops, _xla(unscanned)["flops"], rtol=0.03)
    np.testing.assert_allclose(looped.flops, flat.flops, rtol=0.01)
    assert _xla(scanned)["flops"] < 0.5 * looped.flops
    np.testing.assert_allclose(flat.hbm_bytes,
                               _xla(unscanned)["bytes accessed"], rtol=0.1)
    assert looped.unknown_loops == flat.unknown_loops == 0


def test_a_loop_counts_its_trips_and_an_in_place_update_its_rows():
  """30 trips of a [64, 256] x [256, 256] matmul written into row block i of
  a [30 * 64, 256] buffer: 30x the FLOPs of one, and bytes that grow with the
  rows written, not the whole buffer per trip."""
  trips, rows, width = 30, 64, 256

  def fill(x, w):
    def body(i, buffer):
      # (x + i): the product changes per trip, so it is not hoisted.
      return jax.lax.dynamic_update_slice(buffer, jnp.tanh((x + i) @ w),
                                          (i * rows, 0))
    return jax.lax.fori_loop(0, trips, body,
                             jnp.zeros((trips * rows, width), jnp.float32))
  x = jax.ShapeDtypeStruct((rows, width), jnp.float32)
  compiled = jax.jit(fill).lower(x, x.update(shape=(width, width))).compile()
  cost = hlo_cost.analyse(compiled, 1)
  assert cost.flops == trips * 2 * rows * width * width
  buffer_bytes = trips * rows * width * 4
  x_bytes, w_bytes = rows * width * 4, width * width * 4
  # Each trip reads w once and moves a few row blocks of x's size (x + i,
  # the product, its tanh into the buffer's rows); rewriting the whole
  # buffer on every trip would add 2 x trips x buffer_bytes.
  assert trips * w_bytes <= cost.hbm_bytes, cost
  assert cost.hbm_bytes <= trips * (w_bytes + 8 * x_bytes) + 2 * buffer_bytes, cost
  assert cost.unknown_loops == 0
  # Split by source operation: the parts add up to the whole, each loop
  # trip counted, and the matmul (reading w on every trip) is among them.
  sources = hlo_cost.Module(compiled.as_text()).by_source()
  assert sum(c.hbm_bytes for _, c in sources) == cost.hbm_bytes
  assert sum(c.flops for _, c in sources) == cost.flops
  matmul = [c for name, c in sources if "dot_general" in name]
  assert sum(c.flops for c in matmul) == cost.flops
  assert sum(c.hbm_bytes for c in matmul) >= trips * w_bytes


def test_collectives_on_a_tpu_slice_are_counted_with_their_bytes():
  """y = x @ w on a v4-8 (4 chips) with w's rows split over the chips and
  y replicated: libtpu gathers w (or reduces partial products); either way
  each chip sends (n - 1) / n of the array it needs, timed at ICI speed."""
  devices = compile_check.topology_devices(slices.parse_slice("v4-8"))
  mesh = jax.make_mesh((4,), ("d",), devices=devices,
                       axis_types=(jax.sharding.AxisType.Auto,))
  x = jax.ShapeDtypeStruct((128, 1024), jnp.float32,
                           sharding=NamedSharding(mesh, P()))
  w = jax.ShapeDtypeStruct((1024, 4096), jnp.float32,
                           sharding=NamedSharding(mesh, P("d", None)))
  compiled = jax.jit(lambda a, b: a @ b,
                     out_shardings=NamedSharding(mesh, P())).lower(
                         x, w).compile()
  cost = hlo_cost.analyse(compiled, 4)
  assert cost.collectives, compiled.as_text()[:3000]
  kinds = set(cost.collectives)
  gathered = 1024 * 4096 * 4 * 3 / 4     # w's other three quarters
  reduced = 2 * 128 * 4096 * 4 * 3 / 4   # an all-reduce of y's partials
  assert kinds <= {"all-gather", "all-reduce", "reduce-scatter"}, kinds
  expected = gathered if "all-gather" in kinds else reduced
  np.testing.assert_allclose(cost.collective_bytes, expected, rtol=0.05)
  # Per chip: a quarter of the product's FLOPs, or all of them after a
  # gather of w.
  assert cost.flops in (2 * 128 * 1024 * 4096 / 4, 2 * 128 * 1024 * 4096)


# A fusion whose operand %x (f32[4, 8, 128]: a stacked array) reaches a
# nested fusion that only slices one [8, 128] layer out of it, as a scanned
# layer reads its KV cache from the stacked one on a TPU.
_NESTED_SLICE = """HloModule nested

%slice_layer (p0: f32[4,8,128], p1: s32[]) -> f32[8,128] {
  %p0 = f32[4,8,128]{2,1,0} parameter(0)
  %p1 = s32[] parameter(1)
  %zero = s32[] constant(0)
  %layer = f32[1,8,128]{2,1,0} dynamic-slice(%p0, %p1, %zero, %zero), dynamic_slice_sizes={1,8,128}
  ROOT %flat = f32[8,128]{1,0} bitcast(%layer)
}

%attend (q0: f32[4,8,128], q1: s32[], q2: f32[8,128]) -> f32[8,128] {
  %q0 = f32[4,8,128]{2,1,0} parameter(0)
  %q1 = s32[] parameter(1)
  %q2 = f32[8,128]{1,0} parameter(2)
  %sliced = f32[8,128]{1,0} fusion(%q0, %q1), kind=kLoop, calls=%slice_layer
  ROOT %sum = f32[8,128]{1,0} add(%sliced, %q2)
}

ENTRY %main (x: f32[4,8,128], i: s32[], y: f32[8,128]) -> f32[8,128] {
  %x = f32[4,8,128]{2,1,0} parameter(0)
  %i = s32[] parameter(1)
  %y = f32[8,128]{1,0} parameter(2)
  ROOT %out = f32[8,128]{1,0} fusion(%x, %i, %y), kind=kOutput, calls=%attend
}
"""


def test_an_operand_a_nested_fusion_only_slices_counts_the_slice():
  """%out reads one layer of %x (4 KiB of its 16 KiB), %y and %i, and
  writes its result; an operand read whole would count all of %x."""
  layer = 8 * 128 * 4
  cost = hlo_cost.Module(_NESTED_SLICE).cost()
  assert cost.hbm_bytes == layer + 4 + layer + layer
  whole = _NESTED_SLICE.replace(
      "ROOT %sum = f32[8,128]{1,0} add(%sliced, %q2)",
      "%first = f32[1,8,128]{2,1,0} slice(%q0), slice={[0:1], [0:8], [0:128]}\n"
      "  %row = f32[8,128]{1,0} bitcast(%first)\n"
      "  %both = f32[8,128]{1,0} add(%sliced, %row)\n"
      "  %all = f32[4,8,128]{2,1,0} negate(%q0)\n"
      "  ROOT %sum = f32[8,128]{1,0} add(%both, %q2)")
  assert hlo_cost.Module(whole).cost().hbm_bytes == 4 * layer + 4 + 2 * layer
