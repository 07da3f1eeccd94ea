"""train.bench.compile_check: compiling the run's programs for a TPU slice on
this CPU host (needs libtpu, requirements-tpu.txt)."""

import importlib.util
import os
import subprocess
import sys

import pytest

from configs import default
from train.bench import compile_check
from train.bench import slices

HAVE_LIBTPU = (importlib.util.find_spec("libtpu") is not None
               or os.path.isfile(os.environ.get("TPU_LIBRARY_PATH", "")))
needs_libtpu = pytest.mark.skipif(
    not HAVE_LIBTPU, reason="libtpu is not installed (pip install -r "
    "requirements-tpu.txt): compiling for a TPU slice needs its compiler")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_slice_names_map_to_chip_grids():
  assert slices.parse_slice("v4-64").topology_name == "v4:2x4x4"
  assert slices.parse_slice("v4-8").num_chips == 4
  assert slices.parse_slice("v5p-64").topology_name == "v5p:2x4x4"
  assert slices.parse_slice("v5litepod-32").topology_name == "v5e:4x8"
  assert slices.parse_slice("v6e-8").num_chips == 8
  with pytest.raises(ValueError, match="v4 slices come in sizes"):
    slices.parse_slice("v4-12")
  with pytest.raises(ValueError, match="--topology='tpu-8'"):
    slices.parse_slice("tpu-8")


def _last_line(report: str) -> dict:
  last = report.strip().splitlines()[-1]
  return dict(word.split("=") for word in last.split())


@needs_libtpu
def test_smoke_config_fits_a_v4_8_and_compiles_each_program_once():
  report, fits = compile_check.run(default.get_config("smoke"), "v4-8",
                                   heldout_rows=40, with_phases=False)
  assert fits, report
  assert _last_line(report) == dict(
      fits="true", peak_gib=_last_line(report)["peak_gib"], hbm_gib="32.00",
      topology="v4-8")
  rows = {line.split(" | ")[0]: line.split(" | ")
          for line in report.splitlines() if " | " in line}
  for name in compile_check.PROGRAMS:
    assert rows[name][1] == "1", (name, report)  # compiles
    assert rows[name][8] == "yes", (name, report)
    assert float(rows[name][6]) > 0  # peak GiB
  assert "mesh data=4,fsdp=1,tensor=1" in report


@needs_libtpu
def test_too_big_a_player_does_not_fit_a_v5litepod_8():
  """A 1-layer player 8192 wide with a 65536-wide MLP (1.6 B float32
  weights, 6.4 GB) replicated on every chip: the held-out decoding fits in
  16 GiB, warm-starting it (weights, AdamW's two moments, gradients) does
  not."""
  wide = ("--config.agent.model_overrides.hidden_size=8192",
          "--config.agent.model_overrides.intermediate_size=65536",
          "--config.agent.model_overrides.num_heads=64",
          "--config.agent.model_overrides.num_kv_heads=8")
  result = subprocess.run(
      [sys.executable, "-m", "train.bench.compile_check",
       "--config=configs/default.py:smoke", "--topology=v5litepod-8",
       "--programs=warmstart_agent,heldout", "--phases=false", *wide],
      cwd=ROOT, capture_output=True, text=True, timeout=600,
      env=dict(os.environ, PYTHONPATH=ROOT))
  assert result.returncode == 1, result.stdout + result.stderr[-3000:]
  last = _last_line(result.stdout)
  assert last["fits"] == "false" and last["topology"] == "v5litepod-8"
  assert float(last["peak_gib"]) > float(last["hbm_gib"]) == 16.0
  rows = {line.split(" | ")[0]: line.split(" | ")
          for line in result.stdout.splitlines() if " | " in line}
  assert rows["heldout"][8] == "yes" and rows["warmstart_agent"][8] == "NO"
