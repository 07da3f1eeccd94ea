"""The driver end to end on the live smoke run (configs/default.py:live, made
once per session: tests/live_run.py): stages, metrics, report, and resume.
Every comparison of runs first checks that the steps compared are live."""

import fractions
import json
import math
import os

from etils import epath
import jax
import numpy as np
import pytest

from configs import default
from genenv_jax import pool as pool_lib
from genenv_jax import sharding
from genenv_jax.domains import ArithmeticDomain, get_domain
from genenv_jax.domains.arithmetic import data as datasets
from train import build
from train import heldout
from train import loop
from train.checkpoints import checkpointing
from train.checkpoints import init_from
from train.checkpoints import state_checkpoint
from train.outputs import metrics_log
from train.tools import agent_breakdown
from train.tools import agent_probe
from train.tools import export_player
from train.tools import pool_breakdown
from train.tools import run_checkpoints

from tests import live_run as live

# Metrics that depend on wall-clock time, not on the computation.
_TIMING = ("perf/step_time_s", "steps_per_sec", "uptime")


def _computed(records):
  """Records without timing figures (records holding only timing dropped)."""
  out = []
  for r in records:
    kept = {k: v for k, v in r.items()
            if k not in _TIMING and not k.startswith("perf/")}
    if len(kept) > 1:
      out.append(kept)
  return out


def _read(workdir):
  return metrics_log.read_metrics(os.path.join(workdir, "metrics.jsonl"))


@pytest.fixture(scope="module")
def uninterrupted(live_run):
  """(config, workdir, summary) of the session's live run (read only)."""
  tfds_dir, workdir = live_run
  with open(os.path.join(workdir, "report", "summary.json")) as f:
    summary = json.load(f)
  return live.live_config(tfds_dir), workdir, summary


def _params(workdir, step):
  """{player: parameter leaves} of a run's checkpoint `step`."""
  _, parts = state_checkpoint.read_parts(
      workdir, step, ["agent.params", "simulator.params"])
  return {player: jax.tree.leaves(parts[f"{player}.params"])
          for player in ("agent", "simulator")}


def _assert_same_params(workdir, other, step):
  for player, leaves in _params(workdir, step).items():
    for a, b in zip(leaves, _params(other, step)[player]):
      np.testing.assert_array_equal(a, b, err_msg=player)


def test_run_writes_metrics_report_and_compiles_once(uninterrupted):
  config, workdir, summary = uninterrupted
  records = _read(workdir)
  live.assert_run_live(records, 1, config.coevolve.num_steps)
  names = set().union(*records)
  for name in ("env/success_rate", "env/in_band_frac", "env/valid_frac",
               "env/difficulty_mean", "env/reward_mean", "env/kl",
               "agent/reward_mean", "agent/kl", "agent/loss", "eval/accuracy",
               "eval/accuracy_d1", "eval/accuracy_d2", "perf/step_time_s",
               "perf/compiles", "warmstart/agent_loss", "warmstart/env_loss"):
    assert name in names, name
  assert summary["compiles"] == 1
  assert summary["last_step"] == config.coevolve.num_steps
  # Held-out evaluation at step 0 (warm-started agent) and at every eval step.
  eval_steps = sorted(r["step"] for r in records if "eval/accuracy" in r)
  assert eval_steps == [0, 2, 4]
  for name in ("success_rate.png", "difficulty.png", "heldout_accuracy.png",
               "training.png", "summary.json"):
    path = os.path.join(workdir, "report", name)
    assert os.path.getsize(path) > 1000 or name == "summary.json", name
  with open(os.path.join(workdir, "report", "summary.json")) as f:
    assert json.load(f)["compiles"] == 1


def test_evaluations_compare_with_the_step0_agent_task_by_task(uninterrupted):
  config, workdir, summary = uninterrupted
  live.assert_run_live(_read(workdir), 1, config.coevolve.num_steps)
  records = [r for r in _read(workdir) if "eval/accuracy" in r]
  test = datasets.load_split(datasets.builder_config_from(config), "test",
                             config.data.tfds_dir)
  step0 = np.load(os.path.join(workdir, checkpointing.STEP0_ANSWERS))
  assert step0.dtype == bool and step0.shape == test["difficulty"].shape
  first = records[0]
  assert first["step"] == 0 and "eval/fixed_d1" not in first
  assert len(records) > 1
  for record in records[1:]:
    for level in (1, 2):
      tasks = int(np.sum(test["difficulty"] == level))
      fixed = record[f"eval/fixed_d{level}"]
      broken = record[f"eval/broken_d{level}"]
      change = (record[f"eval/accuracy_d{level}"]
                - first[f"eval/accuracy_d{level}"])
      assert fixed - broken == round(change * tasks)
      assert fixed + broken <= tasks
      assert record[f"eval/sign_test_p_d{level}"] == pytest.approx(
          heldout.sign_test_p(int(fixed), int(broken)))
  for level in (1, 2):
    for name in ("fixed", "broken", "sign_test_p"):
      key = f"eval/{name}_d{level}"
      assert summary[key] == records[-1][key]
  # Pooled over the frontier levels (step-0 accuracy in heldout.FRONTIER),
  # with the step-0 agent's sampled success kept beside its answers.
  step0_sampled = np.load(os.path.join(workdir, checkpointing.STEP0_SAMPLED))
  assert step0_sampled.shape == step0.shape
  np.testing.assert_allclose(
      [np.mean(step0_sampled[test["difficulty"] == level]) for level in (1, 2)],
      [first[f"eval/sampled_success_d{level}"] for level in (1, 2)], rtol=1e-5)
  frontier = heldout.frontier_levels(test["difficulty"], step0)
  assert summary["frontier_levels"] == frontier
  for record in records[1:]:
    for name in ("fixed", "broken"):
      assert record[f"eval/frontier_{name}"] == sum(
          record[f"eval/{name}_d{level}"] for level in frontier)
    assert record["eval/frontier_tasks"] == np.isin(test["difficulty"],
                                                    frontier).sum()
    assert record["eval/frontier_sign_test_p"] == pytest.approx(
        heldout.sign_test_p(int(record["eval/frontier_fixed"]),
                            int(record["eval/frontier_broken"]), "greater"))
    gain = record["eval/frontier_sampled_gain"]
    assert (record["eval/frontier_sampled_gain_low"] <= gain
            <= record["eval/frontier_sampled_gain_high"])
    assert 0 <= record["eval/frontier_sampled_gain_p"] <= 1


def test_stopped_and_resumed_run_gives_the_same_metrics(uninterrupted,
                                                        tmp_path):
  """Stage 2 stopped at its step-2 checkpoint and resumed: the run's metrics
  and final players. (Both parts start from the live run's step 0 through
  warmstart.init_from, so stage 1 is not repeated; a resumed stage 1 is
  tests/test_faults.py's kills test.)"""
  config, workdir, _ = uninterrupted
  stopped = live.live_config(config.data.tfds_dir)
  stopped.warmstart.init_from = workdir
  stopped.coevolve.num_steps = 2  # stops right after the step-2 checkpoint
  loop.train_and_evaluate(stopped, str(tmp_path))
  assert max(r["step"] for r in _read(str(tmp_path))) == 2
  live.assert_run_live(_read(str(tmp_path)), 1, 2)
  # A stale record past the checkpoint (as a crash after logging would leave)
  # is dropped on resume.
  with open(os.path.join(tmp_path, "metrics.jsonl"), "a") as f:
    f.write(json.dumps({"step": 3, "env/success_rate": -1.0}) + "\n")
  resumed = live.live_config(config.data.tfds_dir)
  resumed.warmstart.init_from = workdir
  loop.train_and_evaluate(resumed, str(tmp_path))
  live.assert_run_live(_read(str(tmp_path)), 3, config.coevolve.num_steps)
  assert _computed(_read(str(tmp_path))) == _computed(_read(workdir))
  _assert_same_params(str(tmp_path), workdir, config.coevolve.num_steps)


def test_oracle_arm_from_the_shared_warm_start_resumes_its_level_estimate(
    uninterrupted, tmp_path):
  """The scripted oracle arm through the driver, from the live run's step 0:
  its level draws read the per-level success estimate, so a run stopped at
  step 2 and resumed matches an uninterrupted one only if the checkpoint
  kept that estimate."""
  config, workdir, _ = uninterrupted

  def oracle(num_steps):
    arm = live.live_config(config.data.tfds_dir, "live,oracle_learnability")
    arm.warmstart.init_from = workdir
    arm.coevolve.num_steps = num_steps
    return arm

  whole, parts = str(tmp_path / "whole"), str(tmp_path / "parts")
  loop.train_and_evaluate(oracle(4), whole)
  loop.train_and_evaluate(oracle(2), parts)
  loop.train_and_evaluate(oracle(4), parts)
  records = _read(whole)
  steps = [r for r in records if "agent/level_success_d1" in r]
  assert [r["step"] for r in steps] == [1, 2, 3, 4]
  assert all(r["perf/compiles"] == 1 for r in records if "perf/compiles" in r)
  assert all(r["env/valid_frac"] == 1.0 for r in steps)  # bank tasks
  assert _computed(_read(parts)) == _computed(records)
  _assert_same_params(parts, whole, 4)


def test_run_started_from_another_runs_warm_start_matches_it(
    uninterrupted, tmp_path, monkeypatch):
  config, workdir, _ = uninterrupted
  shared = live.live_config(config.data.tfds_dir)
  # Given relative to the working directory, as on a command line.
  monkeypatch.chdir(os.path.dirname(workdir))
  shared.warmstart.init_from = os.path.basename(workdir)
  loop.train_and_evaluate(shared, str(tmp_path))
  live.assert_run_live(_read(str(tmp_path)), 1, config.coevolve.num_steps)
  # The same step 0 (warm-start metrics included) and so the same run.
  assert _computed(_read(str(tmp_path))) == _computed(_read(workdir))
  _assert_same_params(str(tmp_path), workdir, config.coevolve.num_steps)
  assert os.path.isdir(tmp_path / "checkpoints" / "0")


def test_warm_start_from_a_run_with_other_step0_fields_is_refused(
    uninterrupted, tmp_path):
  config, workdir, _ = uninterrupted
  other = live.live_config(config.data.tfds_dir)
  other.warmstart.init_from = workdir
  other.curriculum.alpha = 0.3  # stage-2 fields may differ ...
  other.task.reward = "digits"  # (the agent's reward is one, though under task)
  assert not init_from.step0_conflicts(other, epath.Path(workdir))
  other.warmstart.agent_steps += 1  # ... step-0 fields may not
  other.seed = 5
  with pytest.raises(ValueError) as info:
    loop.train_and_evaluate(other, str(tmp_path))
  message = str(info.value)
  assert "config.warmstart.init_from" in message
  steps = config.warmstart.agent_steps
  assert f"warmstart.agent_steps: {steps} != {steps + 1}" in message
  assert "seed: 0 != 5" in message
  assert not (tmp_path / "checkpoints" / "0").exists()
  with pytest.raises(FileNotFoundError, match="not a run directory"):
    init_from.step0_conflicts(other, epath.Path(tmp_path / "nowhere"))


def test_source_config_without_a_later_added_field_reads_as_its_old_value(
    tmp_path):
  config = default.get_config("smoke")
  source = json.loads(config.to_json_best_effort())
  del source["task"]["pad_operands"]  # a run made before the field existed
  (tmp_path / "config.json").write_text(json.dumps(source))
  assert not init_from.step0_conflicts(config, epath.Path(tmp_path))
  config.task.pad_operands = True
  assert init_from.step0_conflicts(config, epath.Path(tmp_path)) == [
      "task.pad_operands: False != True"]


def test_checkpoint_reader_reads_only_the_named_parts(uninterrupted):
  config, workdir, _ = uninterrupted
  step, parts = state_checkpoint.read_parts(
      workdir, None, ["simulator.params", "pool.success"])
  assert step == config.coevolve.num_steps
  assert set(parts) == {"simulator.params", "pool.success"}
  assert parts["pool.success"].shape == (config.pool.capacity,)
  assert all(isinstance(x, np.ndarray)
             for x in jax.tree.leaves(parts["simulator.params"]))
  with pytest.raises(KeyError, match="no 'agent.momentum'"):
    state_checkpoint.read_parts(workdir, None, ["agent.momentum"])
  with pytest.raises(FileNotFoundError, match="no step-7 checkpoint.*holds "
                     rf"steps \[0, .*{config.coevolve.num_steps}\]"):
    state_checkpoint.read_parts(workdir, 7, ["pool"])


def test_warm_start_checkpoint_is_kept_beside_the_latest(uninterrupted):
  config, workdir, _ = uninterrupted
  steps = sorted(int(s) for s in os.listdir(os.path.join(workdir,
                                                         "checkpoints")))
  assert steps[0] == 0
  assert steps[-1] == config.coevolve.num_steps
  assert len(steps) == config.max_checkpoints + 1


@pytest.mark.parametrize("method", ["grpo", "sft"])
def test_agent_probe_starts_from_the_warm_started_agent(uninterrupted, method):
  config, workdir, _ = uninterrupted
  probe_config = live.live_config(config.data.tfds_dir)
  records = agent_probe.run(probe_config, workdir, method, [1, 2], steps=2,
                            learning_rate=None, tasks_per_step=8,
                            eval_every=1)
  warm = next(r for r in _read(workdir) if r["step"] == 0)
  assert records[0]["step"] == 0
  assert records[0]["eval/accuracy"] == pytest.approx(warm["eval/accuracy"],
                                                      abs=1e-4)
  assert [r["step"] for r in records] == ([0, 1, 2] if method == "grpo"
                                          else [0, 2])
  key = "train_reward" if method == "grpo" else "loss"
  assert all(0.0 <= r[key] < 1e3 for r in records[1:])


def test_agent_probe_fixed_tasks_repeat_one_draw_and_fresh_ones_do_not():
  rows = np.arange(100)[:, None] * np.ones((1, 3), np.int32)
  fixed = list(agent_probe.training_batches(rows, np.random.default_rng(0), 8,
                                            4, fixed=True))
  fresh = list(agent_probe.training_batches(rows, np.random.default_rng(0), 8,
                                            4, fixed=False))
  assert len(fixed) == len(fresh) == 4
  assert all(np.array_equal(b, fixed[0]) for b in fixed)
  np.testing.assert_array_equal(fresh[0], fixed[0])  # the same first draw
  assert not any(np.array_equal(b, fresh[0]) for b in fresh[1:])
  with pytest.raises(ValueError, match="--fixed_tasks applies to --method=grpo"):
    agent_probe.run(default.get_config("smoke"), "/nonexistent", "sft", [1],
                    steps=1, learning_rate=None, tasks_per_step=8,
                    eval_every=1, fixed_tasks=True)


def test_pass_at_k_matches_counting_the_subsets():
  rng = np.random.default_rng(3)
  correct = rng.random((6, 7)) < np.linspace(0, 1, 6)[:, None]
  for k in (1, 3, 7):
    expected = [1 - math.comb(int(7 - c), k) / math.comb(7, k)
                for c in correct.sum(axis=1)]
    np.testing.assert_allclose(agent_breakdown.pass_at_k(correct, k),
                               expected, rtol=1e-12)
  with pytest.raises(ValueError, match="pass@8 needs 1 <= k <= attempts"):
    agent_breakdown.pass_at_k(correct, 8)


def test_sign_test_and_paired_change_by_hand():
  assert heldout.sign_test_p(8, 0) == pytest.approx(2 / 2**8)
  assert heldout.sign_test_p(0, 8) == pytest.approx(2 / 2**8)
  # 6 of 8 one way: 2 * (C(8,6) + C(8,7) + C(8,8)) / 2**8 = 74 / 256.
  assert heldout.sign_test_p(6, 2) == pytest.approx(74 / 256)
  assert heldout.sign_test_p(3, 3) == 1.0
  assert heldout.sign_test_p(0, 0) == 1.0


@pytest.mark.parametrize("fixed, broken", [(540, 484), (530, 600),
                                           (6000, 5400), (700, 700)])
def test_sign_test_of_sums_over_a_thousand_tasks(fixed, broken):
  # fixed + broken >= 1024 (sums over a sweep's seeds): 2.0**n overflows a
  # float there; the exact tail in integers, as a Fraction, does not.
  n = fixed + broken
  tail = sum(math.comb(n, i) for i in range(max(fixed, broken), n + 1))
  exact = min(1, fractions.Fraction(2 * tail, 2**n))
  assert heldout.sign_test_p(fixed, broken) == pytest.approx(float(exact),
                                                             rel=1e-9)
  base_greedy = np.array([False, False, True, True])
  greedy = np.array([True, False, False, True])
  base_sampled = np.array([[0, 0], [0, 1], [1, 1], [1, 0]], bool)
  sampled = np.array([[1, 1], [0, 1], [0, 1], [1, 1]], bool)
  change = agent_breakdown.paired_change(base_greedy, base_sampled, greedy,
                                         sampled)
  gains = np.array([1.0, 0.0, -0.5, 0.5])
  assert change["fixed"] == 1 and change["broken"] == 1
  assert change["sign_test_p"] == 1.0
  assert change["sampled_gain"] == pytest.approx(gains.mean())
  assert change["sampled_gain_se"] == pytest.approx(
      gains.std(ddof=1) / 2, abs=1e-4)


def test_pool_breakdown_by_hand():
  domain = ArithmeticDomain(max_digits=3)
  # Levels 3, 3, 3, 2 with layouts 3+1, 3+1, 1+3, 2+2; the last row was never
  # attempted.
  tasks = domain.encode_tasks(np.array([123, 456, 7, 12]),
                              np.array([4, 5, 890, 34]))
  rows = {"task": tasks, "difficulty": np.array([3, 3, 3, 2]),
          "success": np.array([0.5, 1.0, 0.0, pool_lib.UNKNOWN_SUCCESS],
                              np.float32)}
  got = {(r["level"], r["layout"]): r
         for r in pool_breakdown.breakdown(domain, rows)}
  assert set(got) == {("all", "all"), (2, "all"), (2, "2+2"), (3, "all"),
                      (3, "1+3"), (3, "3+1")}
  assert got["all", "all"] == dict(level="all", layout="all", tasks=4,
                                   share=1.0, success=0.5,
                                   mixed=round(1 / 3, 4))
  assert got[3, "all"] == dict(level=3, layout="all", tasks=3, share=0.75,
                               success=0.5, mixed=round(1 / 3, 4))
  assert got[3, "3+1"] == dict(level=3, layout="3+1", tasks=2, share=0.5,
                               success=0.75, mixed=0.5)
  assert got[3, "1+3"]["success"] == 0.0 and got[3, "1+3"]["mixed"] == 0.0
  assert got[2, "2+2"] == dict(level=2, layout="2+2", tasks=1, share=0.25,
                               success=None, mixed=None)
  with pytest.raises(ValueError, match="no generated task"):
    pool_breakdown.breakdown(domain, {k: v[:0] for k, v in rows.items()})


def test_pool_breakdown_reads_the_runs_generated_rows(uninterrupted):
  config, workdir, _ = uninterrupted
  tool_config = live.live_config(config.data.tfds_dir)
  step, pool = run_checkpoints.task_pool(workdir)
  assert step == config.coevolve.num_steps
  domain = get_domain(tool_config.task)
  rows = pool_breakdown.generated_rows(tool_config, domain, workdir, pool)
  # What precedes them is the base data, row for row.
  train = datasets.load_split(datasets.builder_config_from(config), "train",
                              config.data.tfds_dir)
  base = build.base_row_indices(config, train["difficulty"])
  np.testing.assert_array_equal(pool["tasks"][:base.size],
                                train["task"][base])
  # And they are every valid generation (the pool has room for all).
  generated = config.coevolve.num_seeds * config.coevolve.variations
  valid = sum(round(r["env/valid_frac"] * generated) for r in _read(workdir)
              if "env/valid_frac" in r)
  assert valid > 0
  assert len(rows["task"]) == valid == int(pool["size"]) - base.size
  records = pool_breakdown.run(tool_config, workdir, step=None)
  whole = next(r for r in records if (r["level"], r["layout"]) == ("all",
                                                                   "all"))
  assert whole["step"] == step and whole["tasks"] == valid
  assert sum(r["tasks"] for r in records
             if r["level"] != "all" and r["layout"] == "all") == valid


def test_agent_breakdown_greedy_accuracy_is_the_runs_heldout_accuracy(
    uninterrupted):
  config, workdir, _ = uninterrupted
  breakdown_config = live.live_config(config.data.tfds_dir)
  last = config.coevolve.num_steps
  records = agent_breakdown.run(breakdown_config, workdir, step=last,
                                attempts=4, baseline_step=0)
  evaluated = next(r for r in _read(workdir)
                   if r["step"] == last and "eval/accuracy" in r)
  warm = next(r for r in _read(workdir)
              if r["step"] == 0 and "eval/accuracy" in r)
  levels = sorted({r["level"] for r in records})
  assert levels == [1, 2]
  for level in levels:
    at_level = [r for r in records if r["level"] == level]
    whole = next(r for r in at_level if r["layout"] == "all")
    assert whole["greedy"] == pytest.approx(
        evaluated[f"eval/accuracy_d{level}"], abs=1e-4)
    layouts = [r for r in at_level if r["layout"] != "all"]
    assert sum(r["tasks"] for r in layouts) == whole["tasks"]
    assert all(max(map(int, r["layout"].split("+"))) == level
               for r in layouts)
    for r in at_level:
      assert 0.0 <= r["sampled"] <= r["pass@4"] <= 1.0
    # The baseline is the warm-started agent: its greedy accuracy is the
    # run's step-0 evaluation, and the flips account for the difference.
    assert whole["baseline_greedy"] == pytest.approx(
        warm[f"eval/accuracy_d{level}"], abs=1e-4)
    assert whole["fixed"] - whole["broken"] == round(
        (whole["greedy"] - whole["baseline_greedy"]) * whole["tasks"])
  with pytest.raises(FileNotFoundError, match="no step-3 checkpoint"):
    agent_breakdown.run(breakdown_config, workdir, step=3, attempts=4)


def test_exported_player_loads_in_transformers_with_our_logits(uninterrupted,
                                                               tmp_path):
  """`python -m train.tools.export_player` writes the agent of the run's latest checkpoint
  as a sharded HF directory: its weights are the checkpoint's, transformers
  loads it, its logits match our decoder's and it generates; the default
  export writes bfloat16."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  from models import decoder  # pylint: disable=g-import-not-at-top
  from models import hf  # pylint: disable=g-import-not-at-top
  from safetensors import safe_open  # pylint: disable=g-import-not-at-top
  config, workdir, _ = uninterrupted
  out = tmp_path / "agent"
  assert export_player.main(["--run", workdir, "--player", "agent", "--out",
                             str(out), "--dtype", "float32",
                             "--max_shard_bytes", "4096"]) == 0
  index = json.loads((out / hf.SHARDED_INDEX_FILE).read_text())
  assert len(set(index["weight_map"].values())) > 1
  domain = get_domain(config.task)
  for name in (hf.CONFIG_FILE, hf.GENERATION_CONFIG_FILE):
    written = json.loads((out / name).read_text())
    assert (written["bos_token_id"], written["eos_token_id"],
            written["pad_token_id"]) == (domain.bos_id, domain.eos_id,
                                         domain.pad_id), name
  step, parts = state_checkpoint.read_parts(workdir, None, ["agent.params"])
  assert step == config.coevolve.num_steps
  want = parts["agent.params"]
  params, model_config = hf.load_hf_params(out)
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(want)):
    np.testing.assert_array_equal(a, b)

  model = transformers.AutoModelForCausalLM.from_pretrained(
      str(out), dtype=torch.float32).eval()
  tokens, mask = hf.verification_batch(model_config.vocab_size, 2, 12, 0)
  ours = np.asarray(decoder.forward(model_config, params, tokens, mask))
  theirs = hf.hf_logits(model, tokens, mask)
  assert np.abs(ours - theirs)[mask].max() < 1e-4
  # (3 tokens however early the trained agent would write its EOS.)
  generated = model.generate(input_ids=torch.from_numpy(tokens[:1].astype(
      np.int64)), max_new_tokens=3, min_new_tokens=3, do_sample=False)
  assert generated.shape == (1, 15)

  bf16 = tmp_path / "simulator"
  assert export_player.main(["--run", workdir, "--player", "simulator",
                             "--step", "0", "--out", str(bf16)]) == 0
  shard = next(iter(json.loads(
      (bf16 / hf.SHARDED_INDEX_FILE).read_text())["weight_map"].values()))
  with safe_open(str(bf16 / shard), framework="np") as f:
    assert all(f.get_slice(k).get_dtype() == "BF16" for k in f.keys())
  assert json.loads((bf16 / hf.CONFIG_FILE).read_text())["dtype"] == "bfloat16"


def test_heldout_answered_in_passes_of_a_few_rows_is_the_runs_evaluation(
    uninterrupted):
  """The step-0 agent answering the held-out set 7 tasks a pass (the last pass
  padded) answers each task as the run's one-pass evaluation did, and its
  sampled success is drawn from the same keys at every evaluation."""
  config, workdir, _ = uninterrupted
  test = datasets.load_split(datasets.builder_config_from(config), "test",
                             config.data.tfds_dir)
  assert len(test["task"]) % 7  # a padded last pass
  domain = get_domain(config.task)
  players = build.build_players(config, domain)
  mesh = sharding.make_mesh(dict(config.mesh))
  params = run_checkpoints.agent_params(workdir, mesh, 0)
  evaluate = heldout.HeldoutEval(
      domain, players.agent_model, test["task"], test["difficulty"], mesh,
      sharding.DEFAULT_RULES, config.curriculum.success_threshold, samples=2,
      temperature=config.coevolve.agent_temperature, seed=config.seed,
      rows_per_pass=7)
  step0 = np.load(os.path.join(workdir, checkpointing.STEP0_ANSWERS))
  np.testing.assert_array_equal(evaluate.correct(params), step0)
  metrics, answers = evaluate.metrics_and_answers(params)
  np.testing.assert_array_equal(answers.correct, step0)
  assert answers.sampled.shape == step0.shape
  assert set(np.unique(answers.sampled)) <= {0.0, 0.5, 1.0}
  np.testing.assert_array_equal(evaluate.metrics_and_answers(params)[1].sampled,
                                answers.sampled)
  assert metrics["eval/accuracy"] == pytest.approx(np.mean(step0))
