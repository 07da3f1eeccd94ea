"""train.bench.compile_check: compiling the run's programs for a TPU slice on
this CPU host (libtpu's compiler: requirements-test.txt installs it)."""

import json
import os
import subprocess
import sys

import pytest

from configs import default
from train.bench import compile_check
from train.bench import slices

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


def test_smoke_config_fits_a_v4_8_and_compiles_each_program_once():
  """Every program and phase of the smoke preset compiles for a v4-8, once,
  and --json reports each with its compiled cost, its costliest source
  operations and (phases) its bound; the last line sums them."""
  report, fits = compile_check.run(default.get_config("smoke"), "v4-8",
                                   heldout_rows=40, json_lines=True,
                                   top_sources=3, eval_shape=(6, 40, 16))
  assert fits, report
  last = _last_line(report)
  assert {k: last[k] for k in ("fits", "hbm_gib", "topology")} == dict(
      fits="true", hbm_gib="32.00", topology="v4-8")
  records = [json.loads(line) for line in report.strip().splitlines()[:-1]]
  progs = {r["program"]: r for r in records if "program" in r}
  phase = {r["phase"]: r for r in records if "phase" in r}
  assert set(progs) == set(compile_check.PROGRAMS)
  for record in list(progs.values()) + list(phase.values()):
    assert record["compiles"] == 1 and record["fits"], record
    assert record["peak_bytes"] > 0 and record["flops"] > 0, record
    assert record["hbm_bytes"] > 0 and record["modeled_s"] > 0, record
    # --top_sources: the 3 source operations moving the most bytes, in order.
    top = [r["hbm_bytes"] for r in record["top_sources"]]
    assert len(top) == 3 and top == sorted(top, reverse=True), record
    assert 0 < sum(top) <= record["hbm_bytes"] * (1 + 1e-9), record
  assert set(phase) == {"simulator_sample", "agent_sample", "agent_reference",
                        "agent_update", "simulator_reference",
                        "simulator_update"}
  # The GRPO update runs its minibatches in a loop: its compiled FLOPs hold
  # every minibatch's forward and backward (the model's count, plus what the
  # model leaves out: the loss, the optimizer).
  update = phase["agent_update"]
  assert update["flops"] >= 0.9 * update["model_flops"], update
  assert float(last["step_s"]) == round(progs["coevolve_step"]["modeled_s"], 3)
  assert float(last["bound_s"]) == pytest.approx(
      sum(r["bound_s"] for r in phase.values()), abs=1e-3)
  assert progs["coevolve_step"]["bound_s"] == pytest.approx(
      sum(r["bound_s"] for r in phase.values()))


def test_too_big_a_player_does_not_fit_a_v5litepod_8():
  """A 1-layer player 8192 wide with a 65536-wide MLP (1.6 B float32
  weights, 6.4 GB) replicated on every chip: warm-starting it (weights,
  AdamW's two moments, gradients) does not fit in 16 GiB; libtpu's refusal
  is reported with the bytes it names and exit status 3 (DOES_NOT_FIT)."""
  wide = ("--config.agent.model_overrides.hidden_size=8192",
          "--config.agent.model_overrides.intermediate_size=65536",
          "--config.agent.model_overrides.num_heads=64",
          "--config.agent.model_overrides.num_kv_heads=8")
  result = subprocess.run(
      [sys.executable, "-m", "train.bench.compile_check",
       "--config=configs/default.py:smoke", "--topology=v5litepod-8",
       "--programs=warmstart_agent", "--phases=false", *wide],
      cwd=ROOT, capture_output=True, text=True, timeout=600,
      env=dict(os.environ, PYTHONPATH=ROOT))
  assert result.returncode == 3, result.stdout + result.stderr[-3000:]
  last = _last_line(result.stdout)
  assert last["fits"] == "false" and last["topology"] == "v5litepod-8"
  assert float(last["peak_gib"]) > float(last["hbm_gib"]) == 16.0
  rows = {line.split(" | ")[0]: line.split(" | ")
          for line in result.stdout.splitlines() if " | " in line}
  assert rows["warmstart_agent"][8] == "NO"


@pytest.mark.parametrize("topology", ["v5p-8", "v5litepod-1", "v6e-1"])
def test_held_out_decoding_compiles_on_each_generation(topology):
  """The program that placed its rows on the devices (which a compile-only
  client refuses) now compiles from abstract arguments, on the smallest
  slice of each generation besides v4's (a one-chip slice is a host of its
  own size)."""
  report, fits = compile_check.run(default.get_config("smoke"), topology,
                                   heldout_rows=8, with_phases=False,
                                   only=("heldout",))
  assert fits, report
  assert _last_line(report)["topology"] == topology
  rows = {line.split(" | ")[0]: line.split(" | ")
          for line in report.splitlines() if " | " in line}
  assert rows["heldout"][1] == "1" and rows["heldout"][8] == "yes", report


def test_evaluate_tools_7b_decoding_is_sharded_and_fits_a_v4_64(qwen_tokenizer_dir):
  """eval_generate, the decoding of `train.tools.evaluate --generate --run`
  on the 7b preset's mesh (fsdp x tensor): each chip holds 1/32 of the
  agent's float32 weights (0.89 GiB of 28 GiB), never the whole model."""
  from configs import qwen_tpu  # pylint: disable=g-import-not-at-top
  config = qwen_tpu.get_config("7b")
  config.task.tokenizer_dir = qwen_tokenizer_dir
  report, fits = compile_check.run(config, "v4-64", with_phases=False,
                                   only=("eval_generate",), json_lines=True)
  assert fits, report
  record = json.loads(report.strip().splitlines()[0])
  assert record["program"] == "eval_generate" and record["compiles"] == 1
  weights = 4 * 7.6e9  # Qwen2.5-7B's parameters in float32
  assert weights / 40 < record["argument_bytes"] < weights / 24, record
  assert record["peak_bytes"] < 8 * 2**30, record


def test_a_lora_update_is_bounded_by_its_trainable_bytes():
  """The agent update's ideal bytes (no compile): the forward and backward
  passes read every weight, the gradient and AdamW only the adapters: below a
  full update's 10 passes over the weights (counting AdamW over the whole
  tree, as before, it would be above), above its 2 forward and backward ones."""

  def update_bytes(rank):
    config = default.get_config("smoke")
    config.agent.lora.rank = rank
    text, _ = compile_check.run(config, "v4-8", with_phases=False, only=(),
                                json_lines=True)
    lines = [json.loads(l) for l in text.splitlines() if l.startswith("{")]
    return next(l["ideal_bytes"] for l in lines if l.get("phase") == "agent_update")

  full, adapted = update_bytes(0), update_bytes(4)
  assert 0.2 < adapted / full < 1.0
