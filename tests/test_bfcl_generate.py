"""`train.tools.evaluate bfcl --generate`: an HF directory's agent answers BFCL
questions through BFCL's prompt-mode system prompt with the project's sampler,
and the predictions are scored."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from genenv_jax import sharding
from genenv_jax.sampling import SamplingConfig, sample
from models import decoder, hf
from models.config import get_preset
from tests.test_text_domain import make_tokenizer
from train.tools import bfcl_generate, evaluate

pytest.importorskip("bfcl_eval")

ADD = {"name": "add", "description": "Adds two integers.", "parameters": {
    "type": "dict", "required": ["a", "b"],
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}


def _write_jsonl(path, records):
  path.write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
  root = tmp_path_factory.mktemp("bfcl_generate")
  tokenizer = make_tokenizer(root / "tokenizer")
  config = get_preset("tiny", vocab_size=len(tokenizer), dtype="float32")
  params = decoder.init_params(config, jax.random.PRNGKey(0))
  hf.save_hf_params(params, config, root / "model", "qwen2",
                    tokenizer_dir=root / "tokenizer")
  return str(root / "model")


def test_prompt_is_bfcls_system_prompt_then_the_question():
  system = bfcl_generate.bfcl_system_prompt([ADD])
  assert '"name": "add"' in system and "Adds two integers." in system
  messages = bfcl_generate.question_messages(
      {"id": "x", "function": [ADD],
       "question": [[{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": "Add 4 and 5."}]]})
  assert [m["role"] for m in messages] == ["system", "user"]
  assert messages[0]["content"] == system + "\n\nBe brief."
  plain = bfcl_generate.question_messages({"id": "y", "function": [ADD],
                                           "question": "Add 1 and 2."})
  assert plain == [{"role": "system", "content": system},
                   {"role": "user", "content": "Add 1 and 2."}]


def test_generate_writes_and_scores_predictions(hf_dir, tmp_path, capsys):
  (tmp_path / "possible_answer").mkdir()
  questions = [{"id": f"simple_python_{i}", "function": [ADD],
                "question": [[{"role": "user", "content": f"Add {i} and 5."}]]}
               for i in range(3)]
  _write_jsonl(tmp_path / "BFCL_v4_simple_python.json", questions)
  _write_jsonl(tmp_path / "possible_answer" / "BFCL_v4_simple_python.json",
               [{"id": q["id"], "ground_truth": [{"add": {"a": [i], "b": [5]}}]}
                for i, q in enumerate(questions)])
  predictions = tmp_path / "predictions.jsonl"
  assert evaluate.main(["bfcl", "--generate", "--hf_dir", hf_dir, "--category",
                        "simple_python", "--data_dir", str(tmp_path), "--predictions",
                        str(predictions), "--max_new_tokens", "6", "--batch_size", "2",
                        "--limit", "3"]) == 0
  out = capsys.readouterr().out
  assert "generated=3" in out and "examples=3" in out and "accuracy=" in out
  lines = [json.loads(line) for line in predictions.read_text().splitlines()]
  assert [line["id"] for line in lines] == [q["id"] for q in questions]
  verdicts = (tmp_path / "predictions.jsonl.verdicts.jsonl").read_text().splitlines()
  assert len(verdicts) == 3

  # The prediction is the sampler's greedy completion of BFCL's prompt, in a batch
  # of its own: batching and padding do not change it.
  agent = bfcl_generate.load_agent("", hf_dir, None, "float32")
  ids = bfcl_generate._prompt_ids(agent.tokenizer,
                                  bfcl_generate.question_messages(questions[2]))
  stops = bfcl_generate._stop_ids(agent.tokenizer)
  greedy = SamplingConfig(max_new_tokens=6, temperature=0.0, eos_ids=stops,
                          pad_id=agent.tokenizer.pad_token_id)
  decode = jax.jit(sharding.in_mesh(agent.mesh, sharding.DEFAULT_RULES)(
      lambda params, tokens, mask: sample(agent.model, params, tokens, mask,
                                          jax.random.PRNGKey(0), greedy)))
  alone = decode(agent.params, np.array([ids], np.int32), np.ones((1, len(ids)), bool))
  kept = [int(t) for t, m in zip(alone.tokens[0], alone.mask[0]) if m and int(t) not in stops]
  assert lines[2]["result"] == agent.tokenizer.decode(kept, skip_special_tokens=True)
  with pytest.raises(SystemExit):
    evaluate.main(["bfcl", "--generate", "--category", "simple_python"])
  assert evaluate.main(["bfcl", "--generate", "--category", "simple_python",
                        "--data_dir", str(tmp_path), "--predictions",
                        str(predictions)]) == 2
