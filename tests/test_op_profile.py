"""train.bench.op_profile: HLO metadata parsing, trace aggregation, the CLI end to end."""

import json
import os
import subprocess
import sys

import pytest

from train.bench import op_profile

_HLO = """\
HloModule jit_run

%fused_computation.4 (param_0: f32[64,128]) -> f32[64,128] {
  %param_0 = f32[64,128]{1,0} parameter(0)
  ROOT %neg.1 = f32[64,128]{1,0} negate(%param_0), metadata={op_name="jit(run)/neg" stack_frame_id=3}
}

ENTRY %main (x: f32[64,128]) -> f32[64,128] {
  %x = f32[64,128]{1,0} parameter(0)
  %ynn_fusion.4 = f32[64,128]{1,0} fusion(%x), kind=kCustom, calls=%fused_computation.4, metadata={op_name="jit(run)/while/body/mlp/dot_general" stack_frame_id=58}
  ROOT %copy.2 = f32[64,128]{1,0} copy(%ynn_fusion.4)
}
"""


def test_hlo_sources_maps_instructions_to_their_jax_op():
  sources = op_profile.hlo_sources(_HLO)
  assert sources["ynn_fusion.4"] == "jit(run)/while/body/mlp/dot_general"
  assert sources["neg.1"] == "jit(run)/neg"
  assert sources["copy.2"] == ""  # no metadata
  assert "fused_computation.4" not in sources  # a computation, not an op


def test_op_table_aggregates_per_instruction_and_run():
  sources = {"a": "jit(f)/dot", "b": "jit(f)/exp"}
  events = [("a", 3e-3), ("a", 1e-3), ("b", 2e-3), ("a", 2e-3), ("b", 2e-3),
            ("ThunkExecutor::Execute", 1.0)]  # not an instruction: ignored
  rows = op_profile.op_table(events, sources, runs=2)
  assert [r["op"] for r in rows] == ["a", "b"]
  a, b = rows
  assert a["calls_per_run"] == 1.5 and b["calls_per_run"] == 1.0
  assert a["ms_per_run"] == pytest.approx(3.0)
  assert a["us_per_call"] == pytest.approx(2000.0)
  assert b["ms_per_run"] == pytest.approx(2.0)
  assert a["share"] == pytest.approx(0.6) and b["share"] == pytest.approx(0.4)
  assert a["source"] == "jit(f)/dot"
  with pytest.raises(ValueError, match="runs=0"):
    op_profile.op_table(events, sources, runs=0)


def test_event_durations_reads_a_serialised_xspace():
  from tensorflow.tsl.profiler.protobuf import xplane_pb2
  space = xplane_pb2.XSpace()
  plane = space.planes.add(name="/host:CPU")
  plane.event_metadata[7].name = "ynn_fusion.4"
  plane.event_metadata[9].name = "copy.2"
  line = plane.lines.add(name="tf_XLAEigen/1")
  line.events.add(metadata_id=7, duration_ps=2_000_000)
  line.events.add(metadata_id=9, duration_ps=500_000)
  line.events.add(metadata_id=7, duration_ps=1_000_000)
  events = list(op_profile.event_durations(space.SerializeToString()))
  assert events == [("ynn_fusion.4", pytest.approx(2e-6)),
                    ("copy.2", pytest.approx(5e-7)),
                    ("ynn_fusion.4", pytest.approx(1e-6))]


def test_cli_attributes_the_decode_loop_per_iteration(tmp_path):
  # A fresh process: the trace flag must be in XLA_FLAGS before JAX starts.
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  out = subprocess.run(
      [sys.executable, "-m", "train.bench.op_profile", "sampler", "--size", "tiny",
       "--repeats", "2", "--top", "0"],
      capture_output=True, text=True, env=env, timeout=600, check=True,
      cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  rows = [json.loads(line) for line in out.stdout.splitlines()]
  assert rows and all(r["program"] == "sampler" for r in rows)
  assert sum(r["share"] for r in rows) == pytest.approx(1.0, abs=1e-9)
  times = [r["ms_per_run"] for r in rows]
  assert times == sorted(times, reverse=True)
  # 32 new tokens: the first comes from the prefill, the loop runs 31 times.
  in_loop = [r for r in rows if "while/body/Decoder" in r["source"]]
  assert in_loop
  assert {r["calls_per_run"] for r in in_loop} == {31.0}
  # The prefill's ops run once per call.
  prefill = [r for r in rows if r["source"].startswith("jit(run)/Decoder/")]
  assert prefill and {r["calls_per_run"] for r in prefill} == {1.0}
