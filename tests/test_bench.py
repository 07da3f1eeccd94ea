"""train.bench: FLOP accounting, record schema and ratios, alternation, table;
train.bench.step: the step benchmark's configuration, wide-answer domain and
the Tunix GRPO peer's setup.
No timing is asserted."""

from __future__ import annotations

import io
import json

import jax
import numpy as np
import pytest

from models.config import ModelConfig, get_preset
from train import build
from train.bench import common
from train.bench import compare
from train.bench import step as bench_step
from train.runtime import cpu_flags

# L=2 blocks, E=4, F=6, H=2 query heads of D=2, K=1 kv head, V=10, untied.
# Per block: q 4*2*2=16, k 4*1*2=8, v 8, o 2*2*4=16, MLP 3*4*6=72 -> 120
# weights; output projection 4*10=40; N = 2*120 + 40 = 280.
_HAND = ModelConfig(vocab_size=10, hidden_size=4, intermediate_size=6,
                    num_layers=2, num_heads=2, num_kv_heads=1, head_dim=2)


def test_forward_flops_count_matmul_weights_twice_plus_attention():
  # Attention: 4 * L * H * D = 4 * 2 * 2 * 2 = 32 FLOPs per attended position.
  assert common.forward_flops_per_token(_HAND, context=0) == 2 * 280
  assert common.forward_flops_per_token(_HAND, context=5) == 2 * 280 + 32 * 5
  assert common.train_flops_per_token(_HAND, 5) == 3 * (2 * 280 + 32 * 5)


def test_generation_flops_add_the_prompts_prefill():
  # P=2 prompt tokens through the blocks (2 * (280 - 40) each) attending 1
  # and 2 positions, the output projection (2 * 40) once; then N - 1 = 2
  # decode steps of the whole model attending 3 and 4 positions.
  want = 2 * 480 + 32 * (1 + 2) + 80 + 2 * 560 + 32 * (3 + 4)
  assert common.generation_flops(_HAND, prompt_length=2, new_tokens=3) == want
  # One new token is the prefill alone.
  assert common.generation_flops(_HAND, 2, 1) == 2 * 480 + 32 * 3 + 80


def test_small_preset_matches_the_issue_figures():
  small = get_preset("small")
  # 8 blocks of 512*512*2 + 2*512*256 + 3*512*1408 weights, tied 512*32000.
  assert small.num_matmul_params() == 8 * 2_949_120 + 16_384_000
  context = common.sampler_context(32, 32)
  assert context == 47.5
  flops = common.forward_flops_per_token(small, context)
  assert flops == 2 * 39_976_960 + 4 * 8 * 8 * 64 * 47.5
  # At 190 GFLOP/s: "small sampling near 2,400 tok/s, fwd+bwd near 790".
  assert 2300 < 190e9 / flops < 2400
  train = common.train_flops_per_token(small, common.causal_context(64))
  assert common.causal_context(64) == 32.5
  assert 780 < 190e9 / train < 800


def test_throughput_record_ratios_read_ours_over_peer():
  record = common.make_record("sampler", "tiny", "tokens_per_s", 300.0,
                             hf=100.0, tunix=150.0, limit=600.0, mode="sample")
  assert record["ratio_hf"] == 3.0 and record["ratio_tunix"] == 2.0
  assert record["frac_of_limit"] == 0.5
  assert record["mode"] == "sample"
  # Required keys in the issue's order first.
  assert list(record)[:10] == ["bench", "size", "metric", "ours", "hf",
                               "tunix", "ratio_hf", "ratio_tunix", "limit",
                               "frac_of_limit"]
  json.dumps(record)


def test_time_record_ratios_read_peer_over_ours_and_absent_peers_drop_keys():
  record = common.make_record("step", "small", "seconds", 2.0, tunix=5.0,
                             limit=0.5)
  assert record["ratio_tunix"] == 2.5
  assert record["frac_of_limit"] == 0.25
  for key in ("hf", "ratio_hf"):
    assert key not in record
  bare = common.make_record("peak", "2048", "gflops", 123.4)
  assert set(bare) == {"bench", "size", "metric", "ours"}


def test_unknown_metric_is_rejected_by_name():
  with pytest.raises(ValueError, match="metric='tokens'"):
    common.make_record("sampler", "tiny", "tokens", 1.0)


def test_sides_are_timed_alternately_and_a_failing_side_is_dropped(capsys):
  calls = []

  def side(name, fail_at=None):
    def run(repeat):
      if repeat == fail_at:
        raise RuntimeError("worker gone")
      calls.append((name, repeat))
    return run

  seconds = common.time_alternately(
      {"ours": side("ours"), "hf": side("hf"), "tunix": side("tunix", 2)}, 3)
  assert calls == [("ours", 1), ("hf", 1), ("tunix", 1), ("ours", 2),
                   ("hf", 2), ("ours", 3), ("hf", 3)]
  assert set(seconds) == {"ours", "hf"}
  assert "tunix failed" in capsys.readouterr().err


def test_markdown_table_has_a_row_per_record_and_dashes_for_absent_peers(
    tmp_path, capsys):
  records = [common.make_record("sampler", "tiny", "tokens_per_s", 300.0,
                               hf=100.0, limit=600.0, mode="greedy"),
             common.make_record("step", "tiny", "seconds", 2.0, phase="step")]
  table = common.markdown_table(records).splitlines()
  assert len(table) == 2 + len(records)
  assert table[2].split(" | ")[1:9] == ["tiny", "greedy", "tokens_per_s",
                                        "300", "100", "–", "3.00×", "–"]
  assert table[2].endswith("| 50% |")
  assert table[3].split(" | ")[2] == "step"
  saved = tmp_path / "results.jsonl"
  saved.write_text("".join(json.dumps(r) + "\n" for r in records))
  compare.main(["table", str(saved)])
  assert capsys.readouterr().out.strip().splitlines() == table


def test_sizes_flag_rejects_unknown_presets():
  with pytest.raises(SystemExit):
    compare._parser().parse_args(["sampler", "--sizes", "tiny,huge"])


def test_step_benchmark_uses_the_peers_agent_batch():
  config = bench_step.step_config("small")
  cc = config.coevolve
  assert cc.num_seeds * cc.variations == 16 and cc.attempts == 4
  assert config.pool.replay_tasks == 0
  assert config.agent.model == config.simulator.model == "small"
  assert config.agent.model_overrides.vocab_size == 32000


def test_tunix_grpo_setup_is_the_steps_agent_batch():
  config = bench_step.step_config("tiny")
  domain = bench_step.WideAnswerDomain(max_digits=config.task.max_digits)
  players = build.build_players(config, domain)
  setup = bench_step.tunix_grpo_setup(config, domain, players)
  assert setup["bench"] == "grpo"
  assert (setup["num_prompts"], setup["generations"], setup["new_tokens"]) == (
      16, 4, 32)
  # `BOS a + b =` with operands of up to 5 digits: 13 columns.
  assert setup["prompt_length"] == domain.agent_prompt_len == 13
  assert setup["model"] == common.model_shapes(players.agent_model)
  assert setup["model"]["vocab_size"] == get_preset("tiny").vocab_size
  json.dumps(setup)


def test_wide_answer_domain_pads_references_and_still_verifies():
  domain = bench_step.WideAnswerDomain(max_digits=3)
  assert domain.answer_len == bench_step.ANSWER_TOKENS
  rows, _ = domain.random_tasks(np.random.default_rng(0), 4)

  @jax.jit
  def parse_and_verify(rows):
    parsed = domain.parse(rows, rows != domain.pad_id)
    # Exact answers, and answers whose first token is replaced by pad.
    wrong = parsed.reference.at[:, 0].set(domain.pad_id)
    return parsed, [domain.verify(response, parsed.reference_mask,
                                  parsed.reference, parsed.reference_mask)
                    for response in (parsed.reference, wrong)]

  parsed, (exact, wrong) = parse_and_verify(rows)
  assert parsed.reference.shape == (4, bench_step.ANSWER_TOKENS)
  assert np.all(np.asarray(parsed.valid))
  np.testing.assert_array_equal(exact, np.ones(4))
  np.testing.assert_array_equal(wrong, np.zeros(4))


def test_matmul_gflops_times_both_libraries():
  rates = compare.matmul_gflops(64, 32, 48, repeats=2)
  assert set(rates) == {"ours", "hf"}
  assert all(0 < rate < 1e5 for rate in rates.values())


@pytest.mark.parametrize("layout, mesh", [
    ("data", "data=8,fsdp=1,tensor=1"),
    # tiny's 2 kv heads bound the tensor axis.
    ("tensor", "data=4,fsdp=1,tensor=2"),
])
def test_sampler_and_train_benchmarks_run_on_every_device_in_each_layout(
    layout, mesh):
  """The sampler still generates every token (the benchmark checks), and the
  sharded loss equals HF's (the benchmark raises otherwise)."""
  args = compare._parser().parse_args(
      ["sampler", "--sizes", "tiny", "--repeats", "1", "--batch", "8",
       "--prompt_length", "4", "--new_tokens", "3", "--layout", layout])
  records = list(compare._sampler_records(args, 100.0, None, "tiny"))
  assert [r["mode"] for r in records] == ["sample", "greedy"]
  for record in records:
    assert record["devices"] == 8 and record["mesh"] == mesh
    assert record["ours"] > 0 and record["hf"] > 0
    # Our FLOP rate is the generation's FLOPs per generated token times our
    # tokens/s, rounded as every figure (`common.round_figure`).
    per_token = common.generation_flops(get_preset("tiny"), 4, 3) / 3
    gflops = per_token * record["ours"] / 1e9
    assert record["ours_gflops"] == pytest.approx(
        gflops, rel=1e-3, abs=0.05 if gflops >= 10 else 5e-5)
  train = compare._train_record(args, 100.0, None, "tiny")
  assert train["mesh"] == mesh and train["ours"] > 0 and train["hf"] > 0


def test_auto_layout_splits_weights_only_to_decode_a_model_outside_cache():
  tiny, small = get_preset("tiny"), get_preset("small")
  assert 4 * tiny.num_matmul_params() < common.CACHE_RESIDENT_BYTES
  assert 4 * small.num_matmul_params() > common.CACHE_RESIDENT_BYTES
  data = {"data": -1}
  tensor = {"data": -1, "tensor": common.tensor_devices(small, 8)}
  assert common.mesh_shape(tiny, "auto", decoding=True) == data
  assert common.mesh_shape(small, "auto", decoding=True) == tensor
  assert common.mesh_shape(small, "auto", decoding=False) == data
  assert common.mesh_shape(tiny, "tensor", decoding=False)["tensor"] == 2
  with pytest.raises(ValueError, match="layout='fsdp'"):
    common.mesh_shape(tiny, "fsdp", decoding=True)


def test_tensor_devices_is_the_largest_divisor_every_split_dimension_takes():
  small = get_preset("small")  # 8 heads, 4 kv heads, MLP 1408, vocab 32000
  assert [common.tensor_devices(small, n) for n in (1, 2, 3, 4, 6, 8)] == [
      1, 2, 1, 4, 2, 4]


def test_sampler_benchmark_names_a_batch_the_devices_do_not_divide():
  args = compare._parser().parse_args(
      ["sampler", "--sizes", "tiny", "--repeats", "1", "--batch", "6"])
  with pytest.raises(ValueError,
                     match=r"prompt.*dimension 0 of shape \(6, 32\)"):
    list(compare._sampler_records(args, 100.0, None, "tiny"))


def test_tunix_worker_runs_on_the_requested_devices_with_our_other_flags(
    monkeypatch):
  started = {}

  class FakeProcess:
    def __init__(self, command, **kwargs):
      started.update(kwargs, command=command)
      self.stdin = io.StringIO()

    def wait(self):
      return 0

  monkeypatch.setattr(common.subprocess, "Popen", FakeProcess)
  monkeypatch.setenv(common.TUNIX_PYTHON_ENV, "/opt/tunix/bin/python")
  with common.tunix_worker(2) as worker:
    assert worker is not None
  assert started["command"][0] == "/opt/tunix/bin/python"
  flags = started["env"]["XLA_FLAGS"].split()
  counts = [f for f in flags if f.startswith(cpu_flags.DEVICE_COUNT_FLAG)]
  assert counts == [f"{cpu_flags.DEVICE_COUNT_FLAG}=2"]  # this suite has 8
  assert any(f.startswith(cpu_flags.YNN_FLAG) for f in flags)
  monkeypatch.delenv(common.TUNIX_PYTHON_ENV)
  with common.tunix_worker() as worker:
    assert worker is None


def test_tunix_devices_must_be_positive():
  with pytest.raises(SystemExit, match="--tunix_devices=0"):
    compare.main(["sampler", "--tunix_devices", "0"])


def test_prompt_sharing_bench_reports_both_samplers(capsys):
  """train.bench.prompt_sharing: one JSON line per number of samples, the
  shared sampler's temporaries below the copied one's by at least half of
  what the copies of the prompt's keys and values take (XLA's buffer
  assignment reuses some of the copies' space), and both timed when asked."""
  from train.bench import prompt_sharing  # pylint: disable=import-outside-toplevel
  assert prompt_sharing.main([
      "--preset=tiny", "--prompts=2", "--prompt_len=64", "--new_tokens=4",
      "--samples=8", "--time_repeats=1"]) == 0
  record = json.loads(capsys.readouterr().out.strip())
  assert record["samples"] == 8 and record["shared_s"] > 0
  assert record["copied_s"] > 0
  saved = record["copied_temp_gib"] - record["shared_temp_gib"]
  assert saved >= 0.5 * record["kv_cache_copies_gib"] > 0, record
