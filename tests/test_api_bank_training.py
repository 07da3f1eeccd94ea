"""Training on API-Bank: the text domain's `api_bank` seed format (training files
the train split, test files the held-out split), the `api_bank` verifier, and
two co-evolution steps of configs/text.py:api_bank_smoke on the seed fixture
(a tiny random simulator, a scripted tiny agent)."""

from __future__ import annotations

import json
import math

import pytest
import transformers

from configs import text as text_config
from genenv_jax.domains import get_domain
from genenv_jax.domains.text import data as text_datasets
from genenv_jax.domains.text import verifiers as text_verifiers
from genenv_jax.domains.text.domain import TextDomain
from genenv_jax.scoring import InputError, apibank, apibank_levels
from tests import step_runs
from train import build

REFUSAL = "I cannot help."

GOLD = ("API-Request: [BookTable(restaurant='Golden Wok', time='2023-05-12 20:00:00', "
        "people='2')]")
TRAIN_IDS = ["level-1-train/0", "level-1-train/1", "level-1-train/2", "level-1-train/3",
             "level-2-train/0", "level-2-train/1"]


def _spec(directory) -> text_datasets.TextTasksConfig:
  return text_datasets.TextTasksConfig(str(directory), format="api_bank")


def _train_file(directory, level: int):
  return directory / "training-data" / apibank_levels.TRAIN_FILES[level]


def test_training_files_are_the_train_split_and_test_files_the_held_out_one(tmp_path):
  paths = apibank_levels.write_seed_fixture(str(tmp_path))
  assert _spec(tmp_path).source_files() == paths
  splits = text_datasets.read_splits(_spec(tmp_path))
  train, test = splits["train"], splits["test"]
  assert [r.id for r in train] == TRAIN_IDS
  # The held-out split is exactly the Table 1 scorer's level-1/2 items.
  items = apibank_levels.load(str(tmp_path), [1, 2]).items
  assert [r.id for r in test] == [item.id for item in items]
  for record, item in zip(test, items):
    assert record.task == f"{item.system}\n{item.user.strip()}"
    assert apibank.single_call(record.answer) == item.gold
  assert not {r.task for r in train} & {r.task for r in test}
  # A training record: the instruction, a line break, the API descriptions and
  # the dialogue; the answer is the output as written.
  source = json.loads(_train_file(tmp_path, 1).read_text())[0]
  assert train[0].task == source["instruction"].strip() + "\n" + source["input"].strip()
  assert train[0].task.endswith("User: Convert 40 euros to Japanese yen, please.\n"
                                "Generate API Request:")
  assert train[0].answer == source["output"]


def test_a_training_record_with_a_held_out_task_is_dropped(tmp_path):
  apibank_levels.write_seed_fixture(str(tmp_path))
  held_out = json.loads((tmp_path / "test-data" / "level-2-api.json").read_text())[1]
  records = json.loads(_train_file(tmp_path, 2).read_text())
  records.append({"instruction": held_out["instruction"],
                  "input": "  " + held_out["input"].replace("\n", " \n"),
                  "output": held_out["expected_output"]})
  _train_file(tmp_path, 2).write_text(json.dumps(records))
  splits = text_datasets.read_splits(_spec(tmp_path))
  assert [r.id for r in splits["train"]] == TRAIN_IDS
  assert len(splits["test"]) == 4


def test_bad_files_are_errors_naming_the_file_record_and_field(tmp_path):
  with pytest.raises(InputError, match="holds none of API-Bank's files"):
    _spec(tmp_path).source_files()
  apibank_levels.write_seed_fixture(str(tmp_path))
  records = json.loads(_train_file(tmp_path, 1).read_text())
  del records[1]["output"]
  _train_file(tmp_path, 1).write_text(json.dumps(records))
  with pytest.raises(InputError,
                     match=r"lv1-api-train\.json: record 1: field 'output' is not a string"):
    text_datasets.read_splits(_spec(tmp_path))
  _train_file(tmp_path, 1).write_text(json.dumps({"instruction": "x"}))
  with pytest.raises(InputError, match=r"lv1-api-train\.json: expected a JSON list"):
    text_datasets.read_splits(_spec(tmp_path))
  for level in apibank_levels.SEED_LEVELS:
    _train_file(tmp_path, level).unlink()
  with pytest.raises(InputError, match="the train split is empty"):
    text_datasets.read_splits(_spec(tmp_path))
  with pytest.raises(InputError, match="not an API-Bank level-1/2 file"):
    apibank_levels.seed_examples(str(tmp_path / "test-data" / "level-3.json"))


@pytest.mark.parametrize("response, score", [
    (GOLD, 1.0),
    # Canonical comparison: case, surrounding whitespace, numbers as strings.
    ("[BookTable(restaurant='golden wok ', time='2023-05-12 20:00:00', people=2)]", 1.0),
    ('{"name": "BookTable", "arguments": {"restaurant": "Golden Wok", '
     '"time": "2023-05-12 20:00:00", "people": "2"}}', 1.0),
    # A wrong argument, a missing one, an extra one, another API, two calls.
    (GOLD.replace("'2'", "'3'"), 0.0),
    ("[BookTable(restaurant='Golden Wok', time='2023-05-12 20:00:00')]", 0.0),
    (GOLD.replace(")]", ", note='x')]"), 0.0),
    (GOLD.replace("BookTable", "BookTables"), 0.0),
    (GOLD.replace(")]", "), ToolSearcher(keywords='x')]"), 0.0),
    # Malformed text.
    ("API-Request: [BookTable(restaurant=", 0.0),
    ("", 0.0),
    ("[" * 5000, 0.0),
    ("I cannot help with that.", 0.0),
])
def test_the_verifier_scores_against_hand_computed_verdicts(response, score):
  verifier = text_verifiers.HOST_SCORERS["api_bank"]
  assert verifier.score(response, GOLD) == score
  assert verifier.reference_ok(GOLD)


@pytest.mark.parametrize("reference", [
    "API-Request: [BookTable(restaurant=Chez Anna, people=3)]",  # unquoted, as some
    "API-Request: [BookTable(restaurant='x'), ToolSearcher(keywords='y')]",  # sources
    "the table is booked", "", "[" * 5000])
def test_an_unreadable_reference_is_not_checkable_and_scores_zero(reference):
  verifier = text_verifiers.HOST_SCORERS["api_bank"]
  assert not verifier.reference_ok(reference)
  assert verifier.score(GOLD, reference) == 0.0


def test_the_answer_is_the_last_call_list_of_a_response():
  extract = text_verifiers.answer_extractor("last_tool_call", "", "api_bank")
  response = ("The user wants [a table]. I call BookTable.\n"
              "API-Request: [BookTable(restaurant='Golden Wok', "
              "time='2023-05-12 20:00:00', people='2')]")
  assert text_verifiers.api_bank_score(extract(response), GOLD) == 1.0


def test_the_domain_drops_seeds_whose_gold_call_is_unreadable(tmp_path, qwen_tokenizer_dir):
  apibank_levels.write_seed_fixture(str(tmp_path))
  splits = text_datasets.read_splits(_spec(tmp_path))
  config = text_config.get_config("api_bank_smoke")
  tokenizer = transformers.AutoTokenizer.from_pretrained(qwen_tokenizer_dir)
  task = config.task
  domain = TextDomain(tokenizer, verifier="api_bank", max_task_tokens=task.max_task_tokens,
                      max_answer_tokens=task.max_answer_tokens,
                      max_written_tokens=task.max_written_tokens,
                      eos_token=task.eos_token, pad_token=task.pad_token)
  train = text_datasets.seed_rows(domain, splits["train"])
  test = text_datasets.seed_rows(domain, splits["test"])
  # The fixture's one unquoted gold call (level-1-train/3) is not a task.
  assert train.num_dropped == 1 and len(train.rows) == len(TRAIN_IDS) - 1
  assert test.num_dropped == 0 and len(test.rows) == 4


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, qwen_tokenizer_dir):
  """Two steps of the smoke preset from one seed (level-1-train/1): the random
  simulator writes no task; the agent is a bigram sampler that writes the seed's
  gold call or a refusal with equal odds, scored by the api_bank verifier inside
  the step."""
  root = tmp_path_factory.mktemp("api_bank_smoke")
  apibank_levels.write_seed_fixture(str(root / "seeds"))
  config = text_config.get_config("api_bank_smoke")
  config.task.tokenizer_dir = qwen_tokenizer_dir
  config.data.source_dir = str(root / "seeds")
  domain = get_domain(config.task)
  seed = text_datasets.read_splits(text_datasets.config_from(config))["train"][1]
  rows = text_datasets.seed_rows(domain, [seed])
  config.agent.hf_dir = step_runs.bigram_player(
      root / "agent", domain.tokenizer, build.build_players(config, domain).agent_model,
      [seed.answer, REFUSAL])
  config.agent.model_overrides = {"dtype": "float32"}  # the rest from its HF directory
  players, state, shardings, mesh = step_runs.start(config, domain, rows.rows,
                                                    rows.difficulty)
  state, history, traces = step_runs.run_steps(config, domain, players, state,
                                               shardings, mesh, 2)
  return dict(config=config, seed=seed, state=state, history=history, traces=traces)


def test_the_smoke_preset_coevolves_with_one_compile(smoke):
  config, history = smoke["config"], smoke["history"]
  assert smoke["seed"].answer == "API-Request: [QueryParcel(tracking_number='7Q12')]"
  assert smoke["traces"] == 1 and int(smoke["state"].step) == 2
  generated = config.coevolve.num_seeds * config.coevolve.variations
  for metrics in history:
    for name, value in metrics.items():
      assert math.isfinite(value), name
    assert metrics["env/valid_frac"] == 0.0
    assert metrics["env/invalid_count"] == generated
  # The verifier scored the gold call 1 and the refusal 0: GRPO had a signal.
  rewards = [m["agent/reward_mean"] for m in history]
  assert 0.0 < max(rewards) < 1.0, rewards
  assert history[0]["agent/grad_norm"] > 0.0
