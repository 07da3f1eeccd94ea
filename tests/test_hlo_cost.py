"""train.bench.hlo_cost: a compiled program's FLOPs, HBM bytes and
collectives from its HLO, loops counted as often as they run."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
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


def test_a_windowed_einsum_loop_counts_the_trips_it_runs():
  """y = x @ w on a v4-16 (8 chips), rows of x and of w split over the
  chips, as an FSDP layer's input and weight: libtpu overlaps w's gather with
  the matmul in a windowed-einsum loop whose body it unrolls (2 shards a
  trip, the induction stepping by 2). Each chip computes its rows' product
  once, however the loop is unrolled."""
  devices = compile_check.topology_devices(slices.parse_slice("v4-16"))
  mesh = jax.make_mesh((8,), ("d",), devices=devices,
                       axis_types=(jax.sharding.AxisType.Auto,))
  b, t, e, f = 16, 2048, 4096, 16384
  x = jax.ShapeDtypeStruct((b, t, e), jnp.bfloat16,
                           sharding=NamedSharding(mesh, P("d")))
  w = jax.ShapeDtypeStruct((e, f), jnp.bfloat16,
                           sharding=NamedSharding(mesh, P("d", None)))
  compiled = jax.jit(lambda a, c: a @ c,
                     out_shardings=NamedSharding(mesh, P("d"))).lower(
                         x, w).compile()
  text = compiled.as_text()
  assert "windowed_dot_general" in text  # else this tests a plain gather
  cost = hlo_cost.analyse(compiled, 8)
  assert cost.unknown_loops == 0
  assert cost.flops == 2 * b * t * e * f / 8
  # w's shards pass from chip to chip: at least the 7 / 8 of w each chip
  # lacks, and not twice that.
  w_bytes = e * f * 2
  assert 7 / 8 * w_bytes <= cost.collective_bytes < 2 * 7 / 8 * w_bytes


_STEPPED_LOOP = """HloModule stepped

%cond (c: (s32[], f32[8])) -> pred[] {
  %c = (s32[], f32[8]) parameter(0)
  %i = s32[] get-tuple-element(%c), index=0
  %bound = s32[] constant(BOUND)
  ROOT %lt = pred[] compare(%i, %bound), direction=LT
}

%body (b: (s32[], f32[8])) -> (s32[], f32[8]) {
  %b = (s32[], f32[8]) parameter(0)
  %i = s32[] get-tuple-element(%b), index=0
  %step = s32[] constant(STEP)
  %next = s32[] add(%i, %step)
  %v = f32[8]{0} get-tuple-element(%b), index=1
  %w = f32[8]{0} negate(%v)
  ROOT %out = (s32[], f32[8]) tuple(%next, %w)
}

ENTRY %main (x: f32[8]) -> (s32[], f32[8]) {
  %x = f32[8]{0} parameter(0)
  %start = s32[] constant(START)
  %first = s32[] copy(%start)
  %state = (s32[], f32[8]) tuple(%first, %x)
  ROOT %loop = (s32[], f32[8]) while(%state), condition=%cond, body=%body
}
"""


def test_a_loop_without_a_known_trip_count_counts_from_start_bound_and_step():
  """A while loop with no `known_trip_count`: its trips are ceil((bound -
  start) / step) of the induction its condition compares, each one negate
  (32 bytes read, 32 written) and the induction's add (12 bytes); the
  start's copy moves 8."""
  for start, bound, step, trips in ((0, 8, 1, 8), (0, 8, 2, 4), (2, 9, 3, 3),
                                    (5, 4, 1, 0)):
    text = (_STEPPED_LOOP.replace("BOUND", str(bound))
            .replace("STEP", str(step)).replace("START", str(start)))
    cost = hlo_cost.Module(text).cost()
    assert cost.hbm_bytes == trips * (64 + 12) + 8, (start, bound, step, cost)


_PREFETCH = """HloModule prefetch

ENTRY %main (x: f32[256]) -> f32[256] {
  %x = f32[256]{0} parameter(0)
  %start = (f32[256]{0:S(1)}, f32[256]{0}, u32[]{:S(2)}) copy-start(%x)
  %done = f32[256]{0:S(1)} copy-done(%start)
  ROOT %y = f32[256]{0} negate(%done)
}
"""


def test_on_chip_memory_moves_no_hbm_bytes():
  """A prefetch into on-chip memory (S(1)) reads its 1 KiB source from HBM
  and writes nothing there; the negate then reads on chip and writes 1 KiB
  to HBM. Read as HBM (the same program without memory spaces) every array
  counts."""
  assert hlo_cost.Module(_PREFETCH).cost().hbm_bytes == 1024 + 1024
  in_hbm = _PREFETCH.replace(":S(1)", "")
  # copy-start: the source, and the destination written in HBM.
  assert hlo_cost.Module(in_hbm).cost().hbm_bytes == 2 * 1024 + 2 * 1024


_DOT_THEN_NEGATE = """HloModule roofline

ENTRY %main (a: f32[64,64]) -> f32[64,64] {
  %a = f32[64,64]{1,0} parameter(0)
  %b = f32[64,64]{1,0} dot(%a, %a), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %c = f32[64,64]{1,0} negate(%b)
}
"""


def test_the_roofline_bounds_each_operation_by_its_flops_or_its_bytes():
  """The dot: 2 x 64^3 FLOPs over 3 x 16 KiB; the negate: no FLOPs over
  32 KiB. At 5 FLOPs per byte the dot is compute-bound, at 100 both are
  memory-bound; the negate is memory-bound either way."""
  dot_flops = 2 * 64**3
  dot_bytes, negate_bytes = 3 * 64 * 64 * 4, 2 * 64 * 64 * 4
  for ridge, expected in ((5.0, dot_flops + 5.0 * negate_bytes),
                          (100.0, 100.0 * (dot_bytes + negate_bytes))):
    cost = hlo_cost.Module(_DOT_THEN_NEGATE, 1, ridge).cost()
    assert cost.flops == dot_flops
    assert cost.hbm_bytes == dot_bytes + negate_bytes
    assert cost.roofline_flops == expected, (ridge, cost)
  # In a loop, per trip.
  looped = _STEPPED_LOOP.replace("BOUND", "8").replace("STEP", "2").replace(
      "START", "0")
  cost = hlo_cost.Module(looped, 1, 10.0).cost()
  assert cost.roofline_flops == 10.0 * cost.hbm_bytes


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


def test_the_report_of_a_saved_program_lists_its_costliest_sources():
  """`python -m train.bench.hlo_cost FILE`'s report: the totals, then the
  sources in the order asked for (the dot has the FLOPs, the negate's bytes
  are fewer than the dot's); with a chip, modeled seconds (each operation at
  its roofline: both memory-bound on a v4 here) and the order by them; an
  unknown order, or time without a chip, is named."""
  lines = hlo_cost.report(_DOT_THEN_NEGATE, 1, top=2, sort="flops").splitlines()
  assert lines[0].startswith("total: 0.00 TFLOP, 0.0 GB HBM")
  assert lines[1].endswith("dot") and lines[2].endswith("negate")
  by_bytes = hlo_cost.report(_DOT_THEN_NEGATE, 1, top=1, sort="hbm")
  assert by_bytes.splitlines()[1].endswith("dot")
  chip = slices.parse_slice("v4-8").chip
  timed = hlo_cost.report(_DOT_THEN_NEGATE, 1, top=2, sort="time",
                          chip=chip).splitlines()
  dot_s, negate_s = (3 * 64 * 64 * 4 / (chip.hbm_gbps * 1e9),
                     2 * 64 * 64 * 4 / (chip.hbm_gbps * 1e9))
  assert f"modeled {dot_s + negate_s:.4g} s" in timed[0]
  assert timed[1].startswith(f"{dot_s:9.4g} s")
  assert timed[2].startswith(f"{negate_s:9.4g} s")
  assert timed[1].endswith("dot") and timed[2].endswith("negate")
  for sort in ("speed", "time"):
    with pytest.raises(ValueError, match=f"sort='{sort}'"):
      hlo_cost.report(_DOT_THEN_NEGATE, 1, sort=sort)
