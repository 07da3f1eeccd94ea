"""`train.tools.evaluate {bamboogle,api_bank,travelplanner}`: each scorer against
hand-computed verdicts on the fixtures `--write_fixture` writes in the source's
format, malformed replies, and SmolLM2-135M-Instruct (its first 4 decoder
layers: its tokenizer, chat template, stop tokens and weights, at a size the
suite runs quickly) answering a few fixture items of each benchmark end to end;
the full model's scores are docs/benchmarks.md's."""

from __future__ import annotations

import json

import pytest

from genenv_jax.scoring import InputError, apibank_levels, bamboogle, travelplanner
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
  for name in ("bamboogle", "api_bank", "travelplanner"):
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


# TravelPlanner -----------------------------------------------------------------

_Q1_GOOD = """Day 1:
Current City: from Sarasota to Chattanooga
Transportation: Flight Number: F9000101, from Sarasota to Chattanooga, Departure Time: 07:30, Arrival Time: 09:40
Breakfast: -
Attraction: Rock Ridge Overlook, Chattanooga;
Lunch: Maple Hearth, Chattanooga
Dinner: Little Olive Trattoria, Chattanooga
Accommodation: Cozy Riverfront Loft, Chattanooga

Day 2:
Current City: Chattanooga
Transportation: -
Breakfast: Sunrise Biscuit Co., Chattanooga
Attraction: Riverside Glass Museum, Chattanooga;Lookout Incline Park, Chattanooga;
Lunch: Blue Heron Noodles, Chattanooga
Dinner: Porchlight BBQ, Chattanooga
Accommodation: Cozy Riverfront Loft, Chattanooga

Day 3:
Current City: from Chattanooga to Sarasota
Transportation: Flight Number: F9000102, from Chattanooga to Sarasota, Departure Time: 19:00, Arrival Time: 21:05
Breakfast: -
Attraction: -
Lunch: -
Dinner: -
Accommodation: -
"""
_Q1_BAD = (_Q1_GOOD.replace("Dinner: Porchlight BBQ", "Dinner: Maple Hearth")
          .replace("Accommodation: Cozy Riverfront Loft, Chattanooga\n\nDay 3",
                   "Accommodation: Shared Bunk Hideaway, Chattanooga\n\nDay 3")
          .replace("Flight Number: F9000102, from Chattanooga to Sarasota, Departure Time: 19:00, "
                   "Arrival Time: 21:05", "Self-driving, from Chattanooga to Sarasota, duration: 9 "
                   "hours, distance: 990 km, cost: 49"))
_Q3 = """**Day 1:**
Current City: from Reno to Eugene
Transportation: Flight Number: F9000301, from Reno to Eugene, Departure Time: 08:00, Arrival Time: 09:30
Breakfast: -
Attraction: Skinner Butte Trail, Eugene;
Lunch: Willamette Cantina, Eugene
Dinner: Cascade Diner, Eugene
Accommodation: Campus Guest Suite, Eugene

**Day 2:**
Current City: Eugene
Transportation: -
Breakfast: Fern Ridge Cafe, Eugene
Attraction: Duck Pond Arboretum, Eugene
Lunch: Hops & Greens, Eugene
Dinner: Riverbend Noodle Bar, Eugene
Accommodation: Campus Guest Suite, Eugene

**Day 3:**
Current City: from Eugene to Bend
Transportation: Taxi, from Eugene to Bend, duration: 2 hours, distance: 200 km, cost: 200
Breakfast: -
Attraction: Pilot Butte Summit, Bend;
Lunch: Lava Rock Grill, Bend
Dinner: High Desert Bakery, Bend
Accommodation: Juniper Cabin, Bend

**Day 4:**
Current City: Bend
Transportation: -
Breakfast: Sagebrush Cafe, Bend
Attraction: Deschutes River Walk, Bend;
Lunch: Tumalo Deli, Bend
Dinner: Obsidian Steakhouse, Bend
Accommodation: Juniper Cabin, Bend

**Day 5:**
Current City: from Bend to Reno
Transportation: Flight Number: F9000302, from Bend to Reno, Departure Time: 17:00, Arrival Time: 18:20
Breakfast: -
Attraction: -
Lunch: -
Dinner: -
Accommodation: -
"""

_Q2 = """Day 1:
Current City: from Boise to Spokane
Transportation: Self-driving, from Boise to Spokane, duration: 6 hours, distance: 620 km, cost: 31
Breakfast: -
Attraction: Falls Footbridge, Spokane;
Lunch: Tamarack Tacos, Spokane
Dinner: -
Accommodation: Garden Cottage, Spokane

Day 2:
Current City: Spokane
Transportation: -
Breakfast: Inland Pho House, Spokane
Attraction: Lilac Carousel, Spokane;
Lunch: Gondola Pizza Works, Spokane
Dinner: Huckleberry Table, Spokane
Accommodation: Garden Cottage, Spokane

Day 3:
Current City: from Spokane to Boise
Transportation: Self-driving, from Spokane to Boise, duration: 6 hours, distance: 620 km, cost: 31
Breakfast: -
Attraction: -
Lunch: -
Dinner: -
Accommodation: -
"""


def _flags(evaluation, box):
  return {k: v for k, (v, _) in getattr(evaluation, box).items()}


def test_travelplanner_fixture_is_the_sources_csv_and_ref_info(fixtures):
  import csv  # pylint: disable=import-outside-toplevel
  queries = travelplanner.load(fixtures["travelplanner"], "validation")
  assert [(q.id, q.level, q.days) for q in queries] == [(1, "easy", 3), (2, "medium", 3),
                                                         (3, "hard", 5)]
  with open(f"{fixtures['travelplanner']}/validation.csv", newline="") as f:
    row = next(csv.DictReader(f))
  assert row["org"] == "Sarasota" and row["reference_information"].startswith(
      "[{'Description': 'Attractions in Chattanooga', 'Content': ")
  assert queries[2].reference.cities == {"Eugene", "Bend"}
  assert queries[2].reference.ground[("taxi", "Bend", "Reno")] is None
  assert queries[2].local_constraint["cuisine"] == ["Mexican", "Thai"]
  prompt = travelplanner.messages(queries[0])[0]["content"]
  assert prompt.endswith("with a budget of $1,500.\nTravel Plan:")
  assert "Given information: [{'Description': 'Attractions in Chattanooga'" in prompt


def test_travelplanner_constraints_by_hand(fixtures):
  q1, q2, q3 = travelplanner.load(fixtures["travelplanner"], "validation")
  good = travelplanner.parse_plan(_Q1_GOOD)
  assert len(good) == 3 and good[1]["attraction"].startswith("Riverside Glass Museum")
  # 210 + 190 flights, 20 + 45 + 15 + 35 + 30 meals, 2 nights at 180.
  assert travelplanner.total_cost(q1, good) == 905
  evaluation, verdict = travelplanner.score(q1, _Q1_GOOD)
  assert verdict.correct and all(_flags(evaluation, "commonsense").values())
  assert _flags(evaluation, "hard") == {"budget": True, "room_rule": None, "cuisine": None,
                                        "room_type": None, "transportation": None}
  evaluation, verdict = travelplanner.score(q1, _Q1_BAD)
  failed = [k for k, v in _flags(evaluation, "commonsense").items() if v is False]
  assert failed == ["diverse_restaurants", "minimum_nights",
                    "non_conflicting_transportation"]
  assert str(verdict).startswith("incorrect: diverse_restaurants: day 2 dinner")
  # Driving both ways (31 each), meals x 2 people, 2 nights at 150 for up to 4.
  assert travelplanner.total_cost(q2, travelplanner.parse_plan(_Q2)) == 62 + 2 * 93 + 300
  evaluation, verdict = travelplanner.score(q2, _Q2)
  assert all(_flags(evaluation, "commonsense").values())
  assert _flags(evaluation, "hard") == {"budget": True, "room_rule": False, "cuisine": None,
                                        "room_type": True, "transportation": None}
  assert str(verdict) == "incorrect: room_rule: 'Garden Cottage, Spokane' says 'No pets'"
  evaluation, verdict = travelplanner.score(q3, _Q3)   # "**Day N:**" headers
  assert all(_flags(evaluation, "commonsense").values())
  assert _flags(evaluation, "hard") == {"budget": True, "room_rule": None, "cuisine": False,
                                        "room_type": None, "transportation": False}
  assert str(verdict) == "incorrect: cuisine: no Thai meal"
  # A 5-day plan cut to 3 days, a route that does not return, and JSON plans.
  short = _Q3.split("**Day 4:**")[0]
  flags = _flags(travelplanner.score(q3, short)[0], "commonsense")
  assert flags["complete_information"] is False and flags["reasonable_city_route"] is False
  as_json = json.dumps([{"days": i + 1, **day} for i, day in enumerate(good)])
  assert travelplanner.score(q1, "Here it is: " + as_json)[1].correct


def test_travelplanner_rates(fixtures, tmp_path, capsys):
  predictions = tmp_path / "p.jsonl"
  _write_predictions(predictions, {1: _Q1_GOOD, 2: "I cannot plan this trip.", 3: _Q3})
  assert evaluate.main(["travelplanner", "--data_dir", fixtures["travelplanner"],
                        "--predictions", str(predictions)]) == 0
  out = capsys.readouterr().out
  summary = _summary(out)
  assert summary["delivery_rate"] == "0.666667"
  assert summary["commonsense_micro_pass_rate"] == "0.666667"   # (8 + 0 + 8) / 24
  assert summary["commonsense_macro_pass_rate"] == "0.666667"
  # Passed: the two budgets; of 3 budgets + q2's house rule and room type + q3's
  # cuisine and transportation.
  assert summary["hard_micro_pass_rate"] == f"{2 / 7:.6f}"
  assert summary["hard_macro_pass_rate"] == summary["final_pass_rate"] == "0.333333"
  assert out.splitlines()[-1] == "accuracy=0.333333"
  rows = _verdicts(predictions)
  assert [r["verdict"].split(":")[0] for r in rows] == ["correct", "invalid", "incorrect"]
  assert rows[1]["delivered"] is False and rows[1]["commonsense"] is None


def test_travelplanner_bad_input_is_a_clear_error(fixtures, tmp_path):
  import shutil  # pylint: disable=import-outside-toplevel
  with pytest.raises(InputError, match="validation_ref_info.jsonl: no such file"):
    shutil.copy(f"{fixtures['travelplanner']}/validation.csv", tmp_path)
    travelplanner.load(str(tmp_path), "validation")
  lines = open(f"{fixtures['travelplanner']}/validation_ref_info.jsonl").readlines()
  (tmp_path / "validation_ref_info.jsonl").write_text("".join(lines[:2]))
  with pytest.raises(InputError, match="has 2 lines but .* has 3 rows"):
    travelplanner.load(str(tmp_path), "validation")
  (tmp_path / "validation_ref_info.jsonl").write_text("".join(lines))
  text = (tmp_path / "validation.csv").read_text()
  (tmp_path / "validation.csv").write_text(text.replace("\"{'house rule': 'pets'", "\"{'house rule': pets", 1))
  with pytest.raises(InputError, match=r"row 2: column 'local_constraint': not a Python dict"):
    travelplanner.load(str(tmp_path), "validation")
  with pytest.raises(InputError, match="splits are train, validation, test"):
    travelplanner.load(str(tmp_path), "dev")
  q1 = travelplanner.load(fixtures["travelplanner"], "validation")[0]
  for reply in ("", "Day 1:", "Day 1:\nCurrent City: from nowhere", "[" * 10_000,
                "Day 1:\n" + "Lunch: x, y\n" * 20_000, '[{"current_city": null}]'):
    evaluation, verdict = travelplanner.score(q1, reply)
    assert not verdict.correct


# --download ----------------------------------------------------------------------

def test_download_records_and_checks_checksums(monkeypatch, tmp_path, capsys):
  import io  # pylint: disable=import-outside-toplevel
  import urllib.error  # pylint: disable=import-outside-toplevel
  from train.tools import bench_download  # pylint: disable=import-outside-toplevel
  monkeypatch.setenv("GENENV_CACHE", str(tmp_path / "cache"))
  served = {"body": b"Question,Answer\nWhich river flows through Budapest?,Danube\n"}

  def urlopen(url, timeout):
    del timeout
    if "offline" in url:
      raise urllib.error.URLError("Name or service not known")
    return io.BytesIO(served["body"])

  monkeypatch.setattr(bench_download.urllib.request, "urlopen", urlopen)
  files = {"data/test.csv": "https://example.org/test.csv"}
  root = bench_download.fetch("demo", files)
  recorded = json.loads((root / "checksums.json").read_text())
  assert recorded["data/test.csv"]["sha256"] == bench_download.sha256(root / "data/test.csv")
  assert bamboogle.load(str(root))[0].answer == "Danube"
  assert bench_download.fetch("demo", files) == root        # present: not fetched again
  (root / "data/test.csv").write_bytes(b"changed")
  with pytest.raises(InputError, match="differs from .* recorded"):
    bench_download.fetch("demo", files)
  with pytest.raises(InputError, match="cannot download https://offline.example/x.csv"):
    bench_download.fetch("other", {"x.csv": "https://offline.example/x.csv"})
  assert not list((tmp_path / "cache" / "benchmarks" / "other").glob("x.csv*"))
  monkeypatch.setattr(bench_download.urllib.request, "urlopen",
                      lambda url, timeout: urlopen("https://offline", timeout))
  assert evaluate.main(["bamboogle", "--download", "--predictions",
                        str(tmp_path / "p.jsonl")]) == 2
  assert "cannot download https://huggingface.co/datasets/chiayewken/bamboogle" in \
      capsys.readouterr().err


# Generation with SmolLM2 -------------------------------------------------------

@pytest.mark.parametrize("name,flags", [
    ("bamboogle", ["--limit", "3", "--max_new_tokens", "24"]),
    ("api_bank", ["--limit", "1", "--max_new_tokens", "32"]),    # one item a level
    ("travelplanner", ["--limit", "2", "--max_new_tokens", "48"]),
])
def test_smollm2_answers_fixture_items(name, flags, fixtures, smollm2_first4_dir, tmp_path,
                                       capsys):
  predictions = tmp_path / f"{name}.jsonl"
  assert evaluate.main([name, "--generate", "--hf_dir", smollm2_first4_dir, "--data_dir",
                        fixtures[name], "--predictions", str(predictions),
                        "--batch_size", "2"] + flags) == 0
  out = capsys.readouterr().out
  summary = _summary(out)
  print(out)
  assert int(summary["generated"]) == int(summary["examples"]) > 0
  assert out.splitlines()[-1].startswith("accuracy=")
  lines = [json.loads(line) for line in predictions.read_text().splitlines()]
  assert len(lines) == int(summary["generated"])
  assert all(isinstance(line["result"], str) for line in lines)
  assert len(_verdicts(predictions)) == len(lines)
