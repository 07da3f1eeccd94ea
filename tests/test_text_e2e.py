"""The text path end to end on the 8-device CPU mesh: tiny random Qwen2 players
loaded from HF directories, a BPE tokenizer trained here, seed tasks from a JSONL
directory through the tfds builder, three co-evolution steps of one compilation;
and the seed readers (parquet, held-out fraction, BFCL lines)."""

from __future__ import annotations

import json
import os

import jax
import numpy as np
import pytest
import torch
import transformers

from configs import text as text_config
from genenv_jax import coevolve
from genenv_jax import step_metrics
from genenv_jax import sharding
from genenv_jax.domains import get_domain
from genenv_jax.domains.text import data as text_datasets
from genenv_jax.domains.text import verifiers as text_verifiers
from genenv_jax.domains.text.domain import TextDomain
from models import hf
from tests.test_text_domain import QA, make_tokenizer
from train import build
from train import loop

RULES = sharding.DEFAULT_RULES
MODEL_VOCAB = 512  # above the tokenizer's size, as real checkpoints pad theirs


# The players are bigram samplers of scripts. The simulator's: ':' is followed by
# ' Add' or ' 9' with equal odds, so a quarter of its generations are this valid task
# and the rest lack the answer delimiter or repeat it (or run out of tokens). The
# agent always answers 9, right for that task under the boxed verifier.
SCRIPT = "New Task: Add 4 and 5. New Answer: 9"
AGENT_SCRIPT = "\\boxed{9}"


def _save_player(directory, tokenizer, seed: int, script: str) -> str:
  """A tiny random Qwen2 checkpoint (with the tokenizer) in `directory`, made a
  bigram sampler of `script`: attention and MLP outputs are zeroed and the untied
  output head maps each token's normalised embedding to its successors in the
  script, which starts after the chat template's final newline and ends with EOS.
  """
  torch.manual_seed(seed)
  config = transformers.Qwen2Config(
      vocab_size=MODEL_VOCAB, hidden_size=32, intermediate_size=64,
      num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
      tie_word_embeddings=False, max_position_embeddings=512)
  model = transformers.AutoModelForCausalLM.from_config(config)
  ids = tokenizer(script, add_special_tokens=False)["input_ids"]
  newline = tokenizer("\n", add_special_tokens=False)["input_ids"]
  chain = newline + ids + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
  with torch.no_grad():
    for layer in model.model.layers:
      layer.self_attn.o_proj.weight.zero_()
      layer.mlp.down_proj.weight.zero_()
    embedding = model.model.embed_tokens.weight
    normed = embedding * torch.rsqrt(embedding.pow(2).mean(-1, keepdim=True)
                                     + config.rms_norm_eps)
    head = torch.zeros_like(model.lm_head.weight)
    for current, following in zip(chain[:-1], chain[1:]):
      head[following] += 20.0 * normed[current] / normed[current].pow(2).sum()
    model.lm_head.weight.copy_(head)
  model.save_pretrained(str(directory))
  tokenizer.save_pretrained(str(directory))
  return str(directory)


def _write_seeds(directory) -> tuple[int, int]:
  """train.jsonl and test.jsonl with fields `question` / `gold`; returns their sizes."""
  directory.mkdir()
  train = [{"question": q, "gold": a} for q, a in QA if "<tool_call>" not in a]
  train.append({"question": "What is the capital of France? " * 6, "gold": "Paris"})
  test = [{"question": "What is the capital of Spain?", "gold": ["Madrid", "madrid"]},
          {"question": "Add 1 and 2.", "gold": "3"}]
  _write_jsonl(directory / "train.jsonl", train)
  _write_jsonl(directory / "test.jsonl", test)
  return len(train), len(test)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  root = tmp_path_factory.mktemp("text_e2e")
  tokenizer = make_tokenizer(root / "tokenizer")
  num_train, num_test = _write_seeds(root / "seeds")
  config = text_config.get_config("cpu")
  config.agent.hf_dir = _save_player(root / "agent", tokenizer, 0, AGENT_SCRIPT)
  config.simulator.hf_dir = _save_player(root / "env", tokenizer, 1, SCRIPT)
  config.task.update(tokenizer_dir=config.agent.hf_dir, verifier="boxed")
  config.data.update(source_dir=str(root / "seeds"), prompt_field="question",
                     answer_field="gold")

  domain = get_domain(config.task)
  seeds = text_datasets.load_seed_rows(config, domain, str(root / "tfds"))
  players = build.build_players(config, domain)
  mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  agent_key, simulator_key = jax.random.split(jax.random.PRNGKey(config.seed))
  agent = build.init_player_params(players.agent_model, agent_key, mesh, RULES,
                                  config.agent.hf_dir)
  env = build.init_player_params(players.simulator_model, simulator_key, mesh, RULES,
                                config.simulator.hf_dir)
  loaded_q = agent["layers_0"]["attn"]["q_proj"]["kernel"]
  loaded_q = (np.asarray(loaded_q), loaded_q.sharding.spec)  # the step donates it
  train = seeds["train"]
  state, shardings = build.create_state(config, domain, players, agent, env,
                                       train.rows, train.difficulty, mesh)
  step = coevolve.jit_step(coevolve.make_step(config, domain, players), shardings,
                           mesh, RULES)
  history = []
  for _ in range(3):
    state, metrics = step.fn(state)
    history.append(step_metrics.metric_values(metrics))
  return dict(config=config, domain=domain, seeds=seeds, players=players,
              loaded_q=loaded_q, state=state, history=history, traces=step.trace_count(),
              sizes=(num_train, num_test))


def test_seed_directory_fills_base_data_and_held_out_set(run):
  num_train, num_test = run["sizes"]
  seeds, domain = run["seeds"], run["domain"]
  # The one task too long for max_task_tokens is dropped.
  assert seeds["train"].num_dropped == 1
  assert len(seeds["train"].rows) == num_train - 1
  assert len(seeds["test"].rows) == num_test and seeds["test"].num_dropped == 0
  assert domain.decode(seeds["test"].rows[0])[0] == (
      "New Task: What is the capital of Spain?\nNew Answer: Madrid<|im_end|>")
  assert set(seeds["train"].difficulty.tolist()) <= {1, 2}


def test_players_load_from_hf_directories(run):
  config, players = run["config"], run["players"]
  assert players.agent_model.vocab_size == MODEL_VOCAB
  assert players.agent_model.qkv_bias and not players.agent_model.tie_embeddings
  weights, _ = hf.load_hf_params(config.agent.hf_dir, players.agent_model)
  q, spec = run["loaded_q"]
  assert spec == jax.sharding.PartitionSpec("fsdp", "tensor", None)
  np.testing.assert_array_equal(q, weights["layers_0"]["attn"]["q_proj"]["kernel"])


def test_three_steps_compile_once_and_count_parses(run):
  history, state, config = run["history"], run["state"], run["config"]
  assert run["traces"] == 1
  assert int(state.step) == 3
  for metrics in history:
    for name, value in metrics.items():
      assert np.isfinite(value), name
  generated = config.coevolve.num_seeds * config.coevolve.variations
  valid = [round(m["env/valid_frac"] * generated) for m in history]
  for m, v in zip(history, valid):
    assert m["env/invalid_count"] == generated - v
  # Exactly the valid generations entered the pool, after the base data.
  assert int(state.pool.total_added) == sum(valid)
  assert int(state.pool.size) == len(run["seeds"]["train"].rows) + sum(valid)
  assert 0 < sum(valid) < 3 * generated
  # The host verifier scored the agent's answers inside the step: every valid
  # generated task (9) was solved, every attempt at it.
  for m, v in zip(history, valid):
    if v:
      assert m["agent/fresh_reward_mean"] == 1.0 and m["env/success_rate"] == 1.0
      # So no generated task's attempts disagree: none gives GRPO a signal.
      assert m["env/informative_frac"] == 0.0
  # Replayed seed tasks with other answers were not.
  assert min(m["agent/reward_mean"] for m in history) < 1.0
  # The pool records the agent's success on each task it attempted: every added
  # task was solved every time.
  added_success = np.asarray(state.pool.success)[
      state.pool.base_size:int(state.pool.size)]
  np.testing.assert_array_equal(added_success, 1.0)
  added = np.asarray(state.pool.tasks)[state.pool.base_size:int(state.pool.size)]
  domain = run["domain"]
  assert domain.decode(added) == [SCRIPT + "<|im_end|>"] * sum(valid)


def test_driver_runs_the_edited_text_config(run, tmp_path):
  """`python -m train.main --config=configs/text.py:cpu` with the paths a user
  fills in: seed data, HF players, held-out evaluation, checkpoints, report."""
  config = run["config"].copy_and_resolve_references()
  config.mesh.update(data=2, fsdp=2, tensor=2)
  config.coevolve.num_steps = 2
  config.data.tfds_dir = str(tmp_path / "tfds")
  summary = loop.train_and_evaluate(config, str(tmp_path))
  assert summary["compiles"] == 1 and summary["last_step"] == 2
  records = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
  evals = [r for r in records if "eval/accuracy" in r]
  assert [r["step"] for r in evals] == [0, 2]
  # The agent always answers \boxed{9}; no held-out answer is 9.
  assert all(r["eval/accuracy"] == 0.0 for r in evals)
  assert sorted(os.listdir(tmp_path / "checkpoints")) == ["0", "2"]


def _write_jsonl(path, records):
  with open(path, "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in records)


def test_parquet_files_and_test_prefix_make_the_splits(tmp_path):
  pq = pytest.importorskip("pyarrow.parquet")
  pa = pytest.importorskip("pyarrow")
  pq.write_table(pa.Table.from_pylist(
      [{"prompt": f"Add {i} and 1.", "answer": str(i + 1)} for i in range(5)]),
      tmp_path / "train-00000.parquet")
  _write_jsonl(tmp_path / "test.jsonl", [{"prompt": "Add 7 and 1.", "answer": ["8"]}])
  splits = text_datasets.read_splits(text_datasets.TextTasksConfig(str(tmp_path)))
  assert [(r.task, r.answer) for r in splits["train"]] == [
      (f"Add {i} and 1.", str(i + 1)) for i in range(5)]
  assert [(r.task, r.answer) for r in splits["test"]] == [("Add 7 and 1.", "8")]


def test_held_out_fraction_without_test_files(tmp_path):
  _write_jsonl(tmp_path / "tasks.jsonl",
               [{"q": f"Task {i}", "a": {"value": i}} for i in range(20)])
  spec = text_datasets.TextTasksConfig(str(tmp_path), prompt_field="q", answer_field="a",
                                       test_fraction=0.25, seed=3)
  splits = text_datasets.read_splits(spec)
  assert len(splits["train"]) == 15 and len(splits["test"]) == 5
  assert {r.task for r in splits["train"]}.isdisjoint({r.task for r in splits["test"]})
  assert splits["test"][0].answer == json.dumps({"value": int(splits["test"][0].task[5:])})
  assert text_datasets.read_splits(spec) == splits  # seeded
  (tmp_path / "tasks.jsonl").write_text('{"q": "Task 0", "a": 1}\n\n{"q": "Task 1"}\n')
  with pytest.raises(text_datasets.InputError,
                     match=r"tasks\.jsonl:line 3 has no 'a' field"):
    text_datasets.read_splits(spec)


def test_empty_files_and_splits_are_errors_naming_the_file(tmp_path):
  _write_jsonl(tmp_path / "tasks.jsonl",
               [{"prompt": f"Task {i}", "answer": "x"} for i in range(4)])
  spec = text_datasets.TextTasksConfig(str(tmp_path))
  (tmp_path / "test.jsonl").write_text("\n")
  with pytest.raises(text_datasets.InputError, match=r"test\.jsonl holds no records"):
    text_datasets.read_splits(spec)
  (tmp_path / "test.jsonl").unlink()
  # 10% of 4 records rounds to none held out.
  with pytest.raises(text_datasets.InputError,
                     match=r"no test\* file and config\.data\.test_fraction=0\.1 "
                     "holds out none of its 4 records"):
    text_datasets.read_splits(spec)
  (tmp_path / "tasks.jsonl").rename(tmp_path / "test.jsonl")
  with pytest.raises(text_datasets.InputError, match="the train split is empty"):
    text_datasets.read_splits(spec)


def test_bfcl_lines_become_checkable_tasks(tmp_path):
  schema = {"name": "add", "description": "Adds.", "parameters": {
      "type": "dict", "required": ["a", "b"],
      "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}
  (tmp_path / "possible_answer").mkdir()
  _write_jsonl(tmp_path / "BFCL_v3_simple.json", [
      {"id": "simple_0", "question": [[{"role": "user", "content": "Add 4 and 5."}]],
       "function": [schema]},
      {"id": "simple_1", "question": "Add 1 and 2.", "function": [schema],
       "ground_truth": [{"add": {"a": [1], "b": [2]}}]}])
  _write_jsonl(tmp_path / "possible_answer" / "BFCL_v3_simple.json",
               [{"id": "simple_0", "ground_truth": [{"add": {"a": [4], "b": [5]}}]}])
  spec = text_datasets.TextTasksConfig(str(tmp_path), format="bfcl")
  records = text_datasets.read_source_file(spec, str(tmp_path / "BFCL_v3_simple.json"))
  assert [r.id for r in records] == ["simple_0", "simple_1"]
  assert records[0].task.startswith("Add 4 and 5.\n\nAvailable functions")
  assert text_verifiers.bfcl_score("[add(a=4, b=5)]", records[0].answer) == 1.0
  assert text_verifiers.bfcl_score("[add(a=5, b=4)]", records[0].answer) == 0.0
  tokenizer = make_tokenizer(tmp_path / "tokenizer")
  domain = TextDomain(tokenizer, verifier="bfcl", max_task_tokens=384,
                      max_answer_tokens=384, max_written_tokens=800)
  rows = text_datasets.seed_rows(domain, records)
  assert len(rows.rows) == 2 and rows.num_dropped == 0
  assert "Adds." not in records[0].answer  # schemas stay in the task only
  broken = records[0]._replace(answer='{"types": {}, "ground_truth": []}')
  assert text_datasets.seed_rows(domain, [broken]).num_dropped == 1
