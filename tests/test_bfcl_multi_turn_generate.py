"""`train.tools.evaluate bfcl --generate` on the multi-turn categories: the agent
plays each entry's turns against the APIs, as BFCL's prompt-mode inference does."""

from __future__ import annotations

import json
import os

import jax
import pytest

from genenv_jax.domains.bfcl_multi_turn import env as env
from genenv_jax.scoring import bfcl_multi_turn as mt
from models import decoder, hf
from models.config import get_preset
from tests.bfcl_multi_turn_oracle import official_verdict
from tests.test_bfcl_multi_turn import DATA_DIR, _keyword_call, _render
from tests.test_text_domain import make_tokenizer
from train.tools import bfcl_generate, bfcl_multi_turn_generate, evaluate


def test_play_feeds_results_turns_and_held_out_docs_back(monkeypatch):
  """A scripted agent plays the ground truth (each turn's calls, then a step
  without calls); the chats it is shown are BFCL's, and the episode passes."""
  entry = mt.load_category(DATA_DIR, "multi_turn_miss_func")[0]
  script = []
  for turn in entry.ground_truth:
    if turn:
      script.append(_render([_keyword_call(entry, c) for c in turn]))
    script.append("Done.")
  shown = []

  def scripted(agent, prompts, max_new_tokens, batch_size, temperature,
               seed, width_multiple):
    del agent, max_new_tokens, batch_size, temperature, seed, width_multiple
    shown.append([dict(m) for m in prompts[0]])
    return [script[len(shown) - 1]]

  monkeypatch.setattr(bfcl_generate, "generate", scripted)
  steps, = bfcl_multi_turn_generate.play(None, [entry], 8, 1)
  assert steps == script
  system = bfcl_generate.bfcl_system_prompt(list(entry.functions))
  assert shown[0] == [{"role": "system", "content": system},
                      {"role": "user", "content": entry.turns[0][0]["content"]}]
  for index, chat in enumerate(shown[1:], start=1):
    assert chat[:len(shown[index - 1])] == shown[index - 1]
    assert chat[len(shown[index - 1])] == {"role": "assistant", "content": script[index - 1]}
    assert tuple(chat[len(shown[index - 1]) + 1:]) == env.transition(
        entry, script[:index]).messages
  (held_turn, docs), = entry.held_out.items()
  revealing = [c[-1]["content"] for c in shown if c[-1]["role"] == "user"]
  assert revealing[held_turn] == env.HELD_OUT_PROMPT.format(functions=list(docs))
  assert f'"name": "{docs[0]["name"]}"' not in system
  result = env.result_turns(entry, steps)
  assert mt.score(entry, result).verdict.correct


MATH_DOCS = [
    {"name": "add", "description": "Add two numbers.", "parameters": {
        "type": "dict", "properties": {"a": {"type": "float"}, "b": {"type": "float"}},
        "required": ["a", "b"]}},
    {"name": "mean", "description": "Mean of a list.", "parameters": {
        "type": "dict", "properties": {"numbers": {"type": "array",
                                                   "items": {"type": "float"}}},
        "required": ["numbers"]}}]


def _math_data_dir(root) -> str:
  """A data directory with two short MathAPI entries (the docs cut to two)."""
  (root / "possible_answer").mkdir(parents=True)
  (root / mt.FUNC_DOC_DIR).mkdir()
  (root / mt.FUNC_DOC_DIR / "math_api.json").write_text(
      "".join(json.dumps(d) + "\n" for d in MATH_DOCS))
  questions, answers = [], []
  for i in range(2):
    questions.append({"id": f"multi_turn_base_{i}", "involved_classes": ["MathAPI"],
                      "initial_config": {}, "question": [
                          [{"role": "user", "content": f"Add {i} and 2."}],
                          [{"role": "user", "content": "Mean of 1, 2, 3?"}]]})
    answers.append({"id": f"multi_turn_base_{i}", "ground_truth": [
        [f"add(a={i}, b=2)"], ["mean(numbers=[1, 2, 3])"]]})
  (root / "BFCL_v4_multi_turn_base.json").write_text(
      "".join(json.dumps(q) + "\n" for q in questions))
  (root / "possible_answer" / "BFCL_v4_multi_turn_base.json").write_text(
      "".join(json.dumps(a) + "\n" for a in answers))
  return str(root)


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
  root = tmp_path_factory.mktemp("bfcl_multi_turn_generate")
  tokenizer = make_tokenizer(root / "tokenizer")
  config = get_preset("tiny", vocab_size=len(tokenizer), dtype="float32")
  params = decoder.init_params(config, jax.random.PRNGKey(0))
  hf.save_hf_params(params, config, root / "model", "qwen2",
                    tokenizer_dir=root / "tokenizer")
  return str(root / "model")


def test_generate_plays_writes_and_scores_records(hf_dir, tmp_path, capsys):
  data_dir = _math_data_dir(tmp_path / "data")
  predictions = tmp_path / "predictions.jsonl"
  assert evaluate.main(["bfcl", "--generate", "--hf_dir", hf_dir, "--category",
                        "multi_turn_base", "--data_dir", data_dir, "--predictions",
                        str(predictions), "--max_new_tokens", "4", "--batch_size", "2",
                        "--limit", "2"]) == 0
  out = capsys.readouterr().out
  assert "generated=2" in out and "examples=2" in out and "accuracy=" in out
  assert "generation_seconds_per_entry=" in out
  records = [json.loads(line) for line in predictions.read_text().splitlines()]
  assert [r["id"] for r in records] == ["multi_turn_base_0", "multi_turn_base_1"]
  chosen = tmp_path / "chosen.jsonl"
  assert evaluate.main(["bfcl", "--generate", "--hf_dir", hf_dir, "--category",
                        "multi_turn_base", "--data_dir", data_dir, "--predictions",
                        str(chosen), "--max_new_tokens", "4", "--batch_size", "2",
                        "--ids", "multi_turn_base_1"]) == 0
  assert "examples=1" in capsys.readouterr().out
  assert json.loads(chosen.read_text())["result"] == records[1]["result"]
  assert evaluate.main(["bfcl", "--generate", "--hf_dir", hf_dir, "--category",
                        "multi_turn_base", "--data_dir", data_dir, "--predictions",
                        str(chosen), "--ids", "multi_turn_base_7"]) == 2
  assert "multi_turn_base_7" in capsys.readouterr().err
  verdicts = [json.loads(line) for line in
              (tmp_path / "predictions.jsonl.verdicts.jsonl").read_text().splitlines()]
  questions = [json.loads(line) for line in
               open(os.path.join(data_dir, "BFCL_v4_multi_turn_base.json"))]
  answers = [json.loads(line) for line in open(
      os.path.join(data_dir, "possible_answer", "BFCL_v4_multi_turn_base.json"))]
  for record, verdict, question, answer in zip(records, verdicts, questions, answers):
    assert all(isinstance(t, list) and t for t in record["result"])
    assert verdict["correct"] == official_verdict(question, answer["ground_truth"],
                                                  record["result"])
