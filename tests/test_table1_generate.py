"""`train.tools.evaluate {bamboogle,api_bank,travelplanner}`: each scorer against
hand-computed verdicts on the fixtures `--write_fixture` writes in the source's
format, malformed replies, and SmolLM2-135M-Instruct answering a few fixture
items of each benchmark end to end."""

from __future__ import annotations

import json

import pytest

from genenv_jax.scoring import InputError, apibank_levels, bamboogle
from train.tools import evaluate


def _write_predictions(path, results):
  path.write_text("".join(json.dumps({"id": i, "result": r}) + "\n"
                          for i, r in results.items()))


def _verdicts(predictions):
  return [json.loads(line) for line in
          open(str(predictions) + ".verdicts.jsonl", encoding="utf-8")]


def _summary(out: str) -> dict[str, str]:
  return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
  """{benchmark: its fixture directory}, written by --write_fixture."""
  root = tmp_path_factory.mktemp("table1_fixtures")
  dirs = {}
  for name in ("bamboogle", "api_bank"):
    dirs[name] = str(root / name)
    assert evaluate.main([name, "--write_fixture", dirs[name]]) == 0
  return dirs


# Bamboogle ---------------------------------------------------------------------

def test_bamboogle_fixture_is_the_sources_parquet(fixtures):
  import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel
  files = bamboogle.data_files(fixtures["bamboogle"])
  assert [f.endswith(".parquet") for f in files] == [True]
  assert pq.read_table(files[0]).column_names == ["Question", "Answer"]
  questions = bamboogle.load(fixtures["bamboogle"])
  assert [q.id for q in questions] == [0, 1, 2, 3]
  assert questions[0].answer == "Danube"


def test_bamboogle_scores_exact_match_and_f1(fixtures, tmp_path, capsys):
  predictions = tmp_path / "p.jsonl"
  _write_predictions(predictions, {
      0: "Budapest lies on it.\nAnswer: the Danube.",   # EM 1 (article, period)
      1: "Answer: in 1954 he won",                      # F1 2*(1/4*1)/(1/4+1) = 0.4
      2: "",                                            # invalid: no answer
      3: "**Answer:** Jomo Kenyatta"})                  # EM 1
  assert evaluate.main(["bamboogle", "--data_dir", fixtures["bamboogle"],
                        "--predictions", str(predictions)]) == 0
  out = capsys.readouterr().out
  summary = _summary(out)
  assert out.splitlines()[-1] == "accuracy=0.500000"
  assert summary["exact_match"] == "0.500000"
  assert float(summary["f1"]) == pytest.approx((1 + 0.4 + 0 + 1) / 4)
  rows = _verdicts(predictions)
  assert [r["correct"] for r in rows] == [True, False, False, True]
  assert rows[0]["answer"] == "the Danube"
  assert rows[1]["f1"] == pytest.approx(0.4)
  assert rows[2]["verdict"].startswith("invalid")


def test_bamboogle_bad_input_is_a_clear_error(tmp_path, capsys):
  import pyarrow as pa  # pylint: disable=import-outside-toplevel
  import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel
  pq.write_table(pa.table({"Question": ["Q?"], "Answer": [None]}),
                 str(tmp_path / "test.parquet"))
  with pytest.raises(InputError, match=r"test.parquet: row 0: column 'Answer'"):
    bamboogle.load(str(tmp_path))
  (tmp_path / "empty").mkdir()
  with pytest.raises(InputError, match="no \\*.parquet or \\*.csv"):
    bamboogle.load(str(tmp_path / "empty"))
  assert evaluate.main(["bamboogle", "--data_dir", str(tmp_path),
                        "--predictions", str(tmp_path / "p.jsonl")]) == 2
  assert "column 'Answer'" in capsys.readouterr().err
  assert bamboogle.score(bamboogle.Question(0, "Q", "A"), "x" * 70_000)[1].verdict.status \
      == "invalid"


# API-Bank ----------------------------------------------------------------------

_L1A = "level-1/ConvertCurrency-level-1-1.jsonl/0"
_L1B = "level-1/BookTable-ConvertCurrency-level-1-2.jsonl/0"
_L2A, _L2B = "level-2/BookTable-level-2-1.jsonl/0", "level-2/BookTable-level-2-1.jsonl/1"


def test_api_bank_fixture_is_the_sources_json(fixtures):
  data = apibank_levels.load(fixtures["api_bank"])
  assert [i.id for i in data.items] == [_L1A, _L1B, _L2A, _L2B] + [
      f"level-3/0/{k}" for k in range(4)]
  assert sorted(data.catalogue) == ["BookTable", "ConvertCurrency", "QueryParcel",
                                    "SendSms"]
  first = json.load(open(apibank_levels.level_path(fixtures["api_bank"], 1)))[0]
  assert set(first) == {"file", "id", "instruction", "input", "expected_output"}
  # Level 3 is prompted with the gold calls so far and their recorded results.
  last = data.items[-1]
  assert last.user.splitlines()[0].startswith("User: Track parcel 1Z999")
  assert "API-Request: [QueryParcel(tracking_number='1Z999')]->{'status': 'in transit'" \
      in last.user
  assert last.user.endswith("Generate API Request:\n")
  assert apibank_levels.search("book a table at a restaurant", data.catalogue) \
      == "BookTable"
  assert apibank_levels.search("weather", data.catalogue) is None


def test_api_bank_scores_the_calls(fixtures, tmp_path, capsys):
  predictions = tmp_path / "p.jsonl"
  _write_predictions(predictions, {
      _L1A: "API-Request: [ConvertCurrency(amount=250, from_currency='usd', "
            "to_currency='EUR')]",                               # correct (canonical)
      _L1B: "API-Request: [BookTable(restaurant='Luigis', time='2023-03-03 19:00:00', "
            "people=4)]",                                       # wrong restaurant
      _L2A: "API-Request: [ToolSearcher(keywords='book a table at a restaurant')]",
      _L2B: "I will call BookTable.",                           # invalid
      "level-3/0/0": "API-Request: [ToolSearcher(keywords='QueryParcel')]",
      "level-3/0/1": "API-Request: [QueryParcel(tracking_number='1Z999'",  # invalid
      "level-3/0/2": "API-Request: [ToolSearcher(keywords='weather')]",  # finds none
      "level-3/0/3": "Sending it.\nAPI-Request: [SendSms(phone='+1-555-0100', "
                     "message='Your parcel 1Z999 arrives on 2023-06-02.')]"})
  assert evaluate.main(["api_bank", "--data_dir", fixtures["api_bank"],
                        "--predictions", str(predictions)]) == 0
  out = capsys.readouterr().out
  summary = _summary(out)
  assert out.splitlines()[-1] == "accuracy=0.500000"
  assert summary["level1_accuracy"] == summary["level2_accuracy"] == "0.500000"
  assert summary["level3_accuracy"] == "0.500000"
  assert summary["level3_dialogue_accuracy"] == "0.000000"
  assert summary["invalid"] == "2"
  rows = _verdicts(predictions)
  assert [r["correct"] for r in rows] == [True, False, True, False, True, False, False,
                                          True]
  assert "'Luigis' != \"Luigi's\"" in rows[1]["verdict"]
  assert rows[6]["verdict"] == ("incorrect: keywords 'weather' retrieve None, "
                                "expected 'SendSms'")


def test_api_bank_bad_input_is_a_clear_error(fixtures, tmp_path):
  bad = tmp_path / "json_test_data"
  bad.mkdir()
  records = json.load(open(apibank_levels.level_path(fixtures["api_bank"], 1)))
  records[1]["expected_output"] = "API-Request: [BookTable(restaurant="
  (bad / "level-1-api.json").write_text(json.dumps(records))
  with pytest.raises(InputError, match=r"level-1-api.json: record 1 \(level-1/BookTable"
                                       r".*'expected_output' is not an API request"):
    apibank_levels.load(str(tmp_path), [1])
  with pytest.raises(InputError, match="no level-3.json"):
    apibank_levels.load(str(tmp_path), [3])
  (bad / "level-3.json").write_text(json.dumps([{"requirement": "x", "apis": [{}]}]))
  with pytest.raises(InputError, match=r"record 0, apis\[0\]: needs a string 'api_name'"):
    apibank_levels.load(str(tmp_path), [3])
  with pytest.raises(InputError, match="levels are 1, 2, 3"):
    apibank_levels.load(str(tmp_path), [4])
  item = apibank_levels.load(fixtures["api_bank"], [2]).items[0]
  catalogue = apibank_levels.load(fixtures["api_bank"]).catalogue
  for reply in ("", "[" * 5000, "API-Request: [ToolSearcher(keywords=3)]",
                "API-Request: [ToolSearcher(keywords='a'), ToolSearcher(keywords='b')]"):
    assert not apibank_levels.score(item, reply, catalogue).correct


# Generation with SmolLM2 -------------------------------------------------------

@pytest.mark.parametrize("name,flags", [
    ("bamboogle", ["--limit", "3", "--max_new_tokens", "24"]),
    ("api_bank", ["--limit", "1", "--max_new_tokens", "32"]),    # one item a level
])
def test_smollm2_answers_fixture_items(name, flags, fixtures, smollm2_dir, tmp_path,
                                       capsys):
  predictions = tmp_path / f"{name}.jsonl"
  assert evaluate.main([name, "--generate", "--hf_dir", smollm2_dir, "--data_dir",
                        fixtures[name], "--predictions", str(predictions),
                        "--batch_size", "4"] + flags) == 0
  out = capsys.readouterr().out
  summary = _summary(out)
  print(out)
  assert int(summary["generated"]) == int(summary["examples"]) > 0
  assert out.splitlines()[-1].startswith("accuracy=")
  lines = [json.loads(line) for line in predictions.read_text().splitlines()]
  assert len(lines) == int(summary["generated"])
  assert all(isinstance(line["result"], str) for line in lines)
  assert len(_verdicts(predictions)) == len(lines)
