"""Benchmark scorers: BFCL AST rules and decoding, API-Bank, QA EM/F1, the CLI."""

from __future__ import annotations

import json

import pytest

from genenv_jax.scoring import InputError, apibank, bfcl, qa
from train.tools import evaluate

SCHEMA = {
    "name": "geo.area",
    "parameters": {
        "type": "dict",
        "required": ["base", "height"],
        "properties": {
            "base": {"type": "integer"},
            "height": {"type": "float"},
            "unit": {"type": "string"},
            "flag": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "sizes": {"type": "array", "items": {"type": "float"}},
            "pair": {"type": "tuple", "items": {"type": "integer"}},
            "opts": {"type": "dict"},
            "points": {"type": "array", "items": {"type": "dict"}},
            "not_in_answer": {"type": "integer"},
        },
    },
}
OTHER = {"name": "geo.volume",
         "parameters": {"type": "dict", "required": ["side"],
                        "properties": {"side": {"type": "integer"}}}}


def entry(ground_truth, functions=(SCHEMA, OTHER)):
  return bfcl.BfclEntry("t_0", {f["name"]: f for f in functions}, ground_truth)


def area(**acceptable):
  return {"geo.area": {"base": [10], "height": [5.0], **acceptable}}


def verdict(text, ground_truth=None, category="simple_python", **kwargs):
  return bfcl.score(entry(ground_truth or [area()]), text, category, **kwargs)


def ok(text, ground_truth=None, category="simple_python", **kwargs):
  return verdict(text, ground_truth, category, **kwargs).correct


# ------------------------------------------------------------------ BFCL: types


def test_int_is_accepted_for_float_but_not_the_reverse():
  assert ok("[geo.area(base=10, height=5)]")
  assert ok("[geo.area(base=10, height=5.0)]")
  assert not ok("[geo.area(base=10.0, height=5.0)]")
  assert not ok("[geo.area(base=10, height='5')]")


def test_booleans_are_not_integers():
  assert not ok("[geo.area(base=True, height=5.0)]", [area(base=[1])])
  assert not ok("[geo.area(base=10, height=5.0, flag=1)]", [area(flag=[True])])
  assert ok("[geo.area(base=10, height=5.0, flag=True)]", [area(flag=[True])])


def test_value_of_the_answers_type_is_compared_literally():
  # The answer names a variable: the value may be that name, compared exactly.
  answer = [area(base=["num_sides"])]
  assert ok("[geo.area(base=num_sides, height=5.0)]", answer)
  assert not ok("[geo.area(base='Num_Sides', height=5.0)]", answer)
  assert not ok("[geo.area(base=4, height=5.0)]", answer)


def test_array_items_must_have_the_item_type():
  answer = [area(tags=[["a", "b"]], sizes=[[1.5, 2.0]])]
  assert ok("[geo.area(base=10, height=5.0, tags=['a', 'b'], sizes=[1.5, 2.0])]",
            answer)
  assert not ok("[geo.area(base=10, height=5.0, tags=['a', 2], sizes=[1.5, 2.0])]",
                answer)
  # No int-for-float conversion inside arrays.
  assert not ok("[geo.area(base=10, height=5.0, tags=['a', 'b'], sizes=[1.5, 2])]",
                answer)


def test_array_items_may_have_the_type_of_the_answers_items():
  # The ground truth of a string array holds ints: int items pass the type check.
  assert ok("[geo.area(base=10, height=5.0, tags=[1, 2])]", [area(tags=[[1, 2]])])
  assert not ok("[geo.area(base=10, height=5.0, tags=[1.0, 2])]",
                [area(tags=[[1, 2]])])
  # An optional "" among the acceptable values passes the item type check.
  assert ok("[geo.area(base=10, height=5.0, tags=['a', 1])]",
            [area(tags=[["a", 1], ""])])
  assert not ok("[geo.area(base=10, height=5.0, tags=['a', 1])]",
                [area(tags=[["a", 1]])])


def test_tuple_parameter_accepts_a_tuple_and_a_list_but_array_needs_a_list():
  answer = [area(pair=[[1, 2]], tags=[["a"]])]
  assert ok("[geo.area(base=10, height=5.0, pair=(1, 2), tags=['a'])]", answer)
  assert ok("[geo.area(base=10, height=5.0, pair=[1, 2], tags=['a'])]", answer)
  assert not ok("[geo.area(base=10, height=5.0, pair=(1, 2), tags=('a',))]", answer)


# ----------------------------------------------------------- BFCL: parameters


def test_missing_required_unexpected_and_unanswered_parameters():
  assert not ok("[geo.area(base=10)]")
  assert "missing required parameter 'height'" in verdict("[geo.area(base=10)]").reason
  assert not ok("[geo.area(base=10, height=5.0, color='red')]")
  # In the schema but not in the ground truth.
  assert not ok("[geo.area(base=10, height=5.0, not_in_answer=3)]")


def test_empty_string_marks_a_parameter_optional():
  assert ok("[geo.area(base=10, height=5.0)]", [area(unit=["cm", ""])])
  assert ok("[geo.area(base=10, height=5.0, unit='cm')]", [area(unit=["cm", ""])])
  assert not ok("[geo.area(base=10, height=5.0)]", [area(unit=["cm"])])
  # A required parameter is required even when the answer lists "".
  assert not ok("[geo.area(height=5.0)]", [area(base=[10, ""])])


def test_value_must_be_one_of_the_acceptable_values():
  answer = [area(unit=["cm", "centimeters", ""], base=[10, 20])]
  assert ok("[geo.area(base=20, height=5.0, unit='centimeters')]", answer)
  assert not ok("[geo.area(base=20, height=5.0, unit='mm')]", answer)
  # Non-string acceptable values of a string parameter are skipped.
  assert ok("[geo.area(base=10, height=5.0, unit='CM')]", [area(unit=["cm", 5])])
  assert not ok("[geo.area(base=30, height=5.0)]", answer)
  assert not ok("[geo.area(base=10, height=5.5)]", answer)


def test_strings_are_normalised_like_the_official_checker():
  answer = [area(unit=["New York, NY"])]
  for text in ("new york ny", "NEW-YORK NY.", "New_York/NY", "newyork,ny^*"):
    assert ok(f"[geo.area(base=10, height=5.0, unit={text!r})]", answer), text
  assert not ok("[geo.area(base=10, height=5.0, unit='New York NY!')]", answer)
  quoted = [area(unit=['say "hi"'])]
  assert ok("[geo.area(base=10, height=5.0, unit=\"say 'hi'\")]", quoted)
  assert bfcl.normalize_string("A-b_c d.E,f/g*h^I'") == 'abcdefghi"'


def test_list_values_normalise_string_items_and_keep_order():
  answer = [area(tags=[["Red Apple", "pear"], ""])]
  assert ok("[geo.area(base=10, height=5.0, tags=['red-apple', 'PEAR'])]", answer)
  assert not ok("[geo.area(base=10, height=5.0, tags=['pear', 'red apple'])]",
                answer)
  assert not ok("[geo.area(base=10, height=5.0, tags=['red apple'])]", answer)
  # "" stands for the empty list.
  assert ok("[geo.area(base=10, height=5.0, tags=[])]", answer)


def test_nested_dict_values_and_optional_keys():
  answer = [area(opts=[{"mode": ["Fast"], "depth": [2, 3], "note": ["", "x"]}])]
  assert ok("[geo.area(base=10, height=5.0, opts={'mode': 'fast', 'depth': 3})]",
            answer)
  assert ok("[geo.area(base=10, height=5.0, opts={'mode': 'FAST', 'depth': 2, "
            "'note': 'x'})]", answer)
  assert not ok("[geo.area(base=10, height=5.0, opts={'mode': 'fast'})]", answer)
  assert not ok("[geo.area(base=10, height=5.0, opts={'mode': 'fast', 'depth': 4})]",
                answer)
  assert not ok("[geo.area(base=10, height=5.0, opts={'mode': 'fast', 'depth': 2, "
                "'extra': 1})]", answer)


def test_list_of_dicts_matches_in_order():
  answer = [area(points=[[{"x": [1], "label": ["A"]}, {"x": [2], "label": ["B"]}]])]
  good = "[{'x': 1, 'label': 'a'}, {'x': 2, 'label': 'b'}]"
  swapped = "[{'x': 2, 'label': 'b'}, {'x': 1, 'label': 'a'}]"
  assert ok(f"[geo.area(base=10, height=5.0, points={good})]", answer)
  assert not ok(f"[geo.area(base=10, height=5.0, points={swapped})]", answer)
  assert not ok("[geo.area(base=10, height=5.0, points=[{'x': 1, 'label': 'a'}])]",
                answer)
  # "" stands for the empty list.
  assert not ok("[geo.area(base=10, height=5.0, points=[])]", answer)
  assert ok("[geo.area(base=10, height=5.0, points=[])]",
            [area(points=[[{"x": [1], "label": ["A"]}], ""])])


# ------------------------------------------------------------- BFCL: categories


def test_simple_needs_exactly_one_call_with_the_right_name():
  assert not ok("[geo.area(base=10, height=5.0), geo.area(base=10, height=5.0)]")
  assert not ok("[]")
  assert not ok("[geo.volume(side=10)]")
  assert "called 'geo.volume'" in verdict("[geo.volume(side=10)]").reason


def test_multiple_picks_the_right_function_among_several():
  answer = [{"geo.volume": {"side": [3]}}]
  assert ok("[geo.volume(side=3)]", answer, "multiple")
  assert not ok("[geo.area(base=10, height=5.0)]", answer, "multiple")


def test_parallel_matching_ignores_order_but_not_count():
  answer = [area(), {"geo.volume": {"side": [3]}}, area(base=[20])]
  calls = ["geo.area(base=10, height=5.0)", "geo.volume(side=3)",
           "geo.area(base=20, height=5.0)"]
  for order in ([0, 1, 2], [2, 1, 0], [1, 2, 0]):
    text = "[" + ", ".join(calls[i] for i in order) + "]"
    assert ok(text, answer, "parallel_multiple"), text
  assert not ok("[" + ", ".join(calls[:2]) + "]", answer, "parallel_multiple")
  assert not ok("[" + ", ".join(calls[:2] + calls[:1]) + "]", answer,
                "parallel_multiple")


def test_parallel_assigns_greedily_like_the_official_checker():
  # Expected call 0 accepts base 10 or 20 and takes the first call (base=10); call 1
  # (base=20) then cannot serve expected call 1 (base 10 only): not correct, although
  # the other assignment would fit.
  answer = [area(base=[10, 20]), area(base=[10])]
  assert not ok("[geo.area(base=10, height=5.0), geo.area(base=20, height=5.0)]",
                answer, "parallel")
  assert ok("[geo.area(base=20, height=5.0), geo.area(base=10, height=5.0)]",
            answer, "parallel")


def test_dots_as_underscores():
  assert ok("[geo_area(base=10, height=5.0)]", dots_as_underscores=True)
  assert not ok("[geo.area(base=10, height=5.0)]", dots_as_underscores=True)
  assert not ok("[geo_area(base=10, height=5.0)]")


def test_unsupported_category_is_an_input_error():
  with pytest.raises(InputError, match="simple_java"):
    verdict("[geo.area(base=10, height=5.0)]", category="simple_java")


# --------------------------------------------------------------- BFCL: decoding


@pytest.mark.parametrize("text", [
    "[geo.area(base=10, height=5.0",
    "Sure! Here is the call: geo.area(base=10, height=5.0)",
    "[1, 2]",
    "['geo.area(base=10)']",
    "[geo.area(base=10, height=lambda: 5)]",
    "[geo.area(base=10, height=x + 1)]",
    "[geo.area(base=10 ** 100000, height=5.0)]",
    "[geo.area(**kwargs)]",
    "<tool_call>{\"name\": \"geo.area\"",
    "[{\"name\": \"geo.area\", \"arguments\": [1]}]",
])
def test_undecodable_output_is_invalid_not_a_crash(text):
  result = verdict(text)
  assert result.status == "invalid" and result.reason
  assert str(result).startswith("invalid: ")


def test_python_values_decode_like_bfcl():
  calls = bfcl.decode_calls(
      "```\n[m.f(a=-2, b=2*3.5, c=x, d=g(1), e=g(k='v'), h=(1, [2]), i=arr[0], "
      "j={'k': None}, l=...), n()]\n```")
  assert calls == [
      bfcl.Call("m.f", {"a": -2, "b": 7.0, "c": "x", "d": "g(1)",
                        "e": {"g": {"k": "v"}}, "h": (1, [2]), "i": "arr[0]",
                        "j": {"k": None}, "l": "..."}),
      bfcl.Call("n", {})]
  assert bfcl.decode_calls("f(1, a=2)") == [bfcl.Call("f", {"a": 2})]


def test_json_and_tool_call_formats_decode_to_the_same_calls():
  expected = [bfcl.Call("geo.area", {"base": 10, "height": 5.0}),
              bfcl.Call("geo.volume", {"side": 3})]
  as_json = json.dumps([{"name": c.name, "arguments": c.args} for c in expected])
  tool_calls = "".join(
      f"<tool_call>{json.dumps({'name': c.name, 'arguments': json.dumps(c.args)})}"
      "</tool_call>\n" for c in expected)
  for text in (as_json, f"```json\n{as_json}\n```", tool_calls,
               "[geo.area(base=10, height=5.0), geo.volume(side=3)]"):
    assert bfcl.decode_calls(text) == expected, text
  one = json.dumps({"name": "geo.volume", "parameters": {"side": 3}})
  assert bfcl.decode_calls(one) == expected[1:]


# ----------------------------------------------------------------- BFCL: data


def write_bfcl_dir(root, category="simple_python", answers=None):
  (root / "possible_answer").mkdir(parents=True, exist_ok=True)
  questions = [{"id": f"{category}_{i}", "question": [], "function": [SCHEMA]}
               for i in range(3)]
  answers = answers or [area(base=[i]) for i in range(3)]
  (root / f"BFCL_v4_{category}.json").write_text(
      "\n".join(json.dumps(q) for q in questions))
  (root / "possible_answer" / f"BFCL_v4_{category}.json").write_text(
      "\n".join(json.dumps({"id": q["id"], "ground_truth": [a]})
                for q, a in zip(questions, answers)))


def test_load_category_reads_the_bfcl_layout(tmp_path):
  write_bfcl_dir(tmp_path)
  write_bfcl_dir(tmp_path, "live_simple")
  entries = bfcl.load_category(str(tmp_path), "simple_python")
  assert [e.id for e in entries] == [f"simple_python_{i}" for i in range(3)]
  assert entries[2].ground_truth == [area(base=[2])]
  assert list(entries[0].functions) == ["geo.area"]


def test_load_category_errors_name_the_problem(tmp_path):
  with pytest.raises(InputError, match="BFCL_v<N>_simple_python.json"):
    bfcl.load_category(str(tmp_path), "simple_python")
  write_bfcl_dir(tmp_path, answers=[area(), {"nope": {}}, area()])
  with pytest.raises(InputError, match="simple_python_1.*'nope'"):
    bfcl.load_category(str(tmp_path), "simple_python")
  (tmp_path / "possible_answer" / "BFCL_v4_simple_python.json").unlink()
  with pytest.raises(InputError, match="no possible-answer file"):
    bfcl.load_category(str(tmp_path), "simple_python")


# ------------------------------------------------------------------- API-Bank


GOLD = apibank.ApiCall("QueryMeeting",
                       {"user_name": "John Smith", "day": "2023-03-31", "count": 3,
                        "urgent": True})


@pytest.mark.parametrize("text", [
    "API-Request: [QueryMeeting(user_name='John Smith', day='2023-03-31', "
    "count='3', urgent='True')]",
    "Thought: check.\nAPI-Request: [QueryMeeting(user_name='  john   SMITH ', "
    "day='2023-03-31', count=3.0, urgent=True)]\nDone.",
    "API-Request:\n[QueryMeeting(user_name='John Smith', day='2023-03-31', "
    "count=3, urgent='true')]",
    json.dumps({"name": "QueryMeeting", "parameters": {
        "user_name": "John Smith", "day": "2023-03-31", "count": 3,
        "urgent": "true"}}),
])
def test_apibank_matches_after_normalisation(text):
  assert apibank.score(GOLD, text).correct


@pytest.mark.parametrize("text, reason", [
    ("API-Request: [QueryMeetings(user_name='John Smith', day='2023-03-31', "
     "count=3, urgent=True)]", "called 'QueryMeetings'"),
    ("API-Request: [QueryMeeting(user_name='John Smith', day='2023-03-31', "
     "count=3)]", "missing 'urgent'"),
    ("API-Request: [QueryMeeting(user_name='John Smith', day='2023-03-31', "
     "count=3, urgent=True, room='A')]", "unexpected 'room'"),
    ("API-Request: [QueryMeeting(user_name='John Smith', day='2023-04-01', "
     "count=3, urgent=True)]", "'day'"),
    ("API-Request: [QueryMeeting(user_name='John Smith', day='2023-03-31', "
     "count=3, urgent=1)]", "'urgent'"),
    ("API-Request: [A(x=1), B(y=2)]", "expected one API call, got 2"),
])
def test_apibank_mismatches_are_incorrect_with_a_reason(text, reason):
  result = apibank.score(GOLD, text)
  assert result.status == "incorrect" and reason in result.reason


def test_apibank_unreadable_prediction_is_invalid():
  assert apibank.score(GOLD, "API-Request: [QueryMeeting(user_name=John Smith)]"
                       ).status == "invalid"
  assert apibank.score(GOLD, "I cannot help with that.").status == "invalid"


def test_apibank_reads_quoted_values_holding_quotes_as_api_bank_writes_them():
  # As 41 gold calls of API-Bank's level-1/2 test files are written.
  gold = apibank.single_call(
      "API-Request: [RecordHealthData(user_id='12345', health_data='[{'name': "
      "'blood_pressure', 'value': '120/80'}]', note='it's fine')]")
  assert gold == apibank.ApiCall("RecordHealthData", {
      "user_id": "12345",
      "health_data": [{"name": "blood_pressure", "value": "120/80"}],
      "note": "it's fine"})
  assert apibank.score(gold, "API-Request: [RecordHealthData(user_id='12345', "
                       "health_data=[{'name': 'blood_pressure', 'value': '120/80'}], "
                       "note=\"it's fine\")]").correct
  wrong = apibank.score(gold, "API-Request: [RecordHealthData(user_id='12345', "
                        "health_data='[{'name': 'blood_pressure', 'value': '90/60'}]', "
                        "note='it's fine')]")
  assert wrong.status == "incorrect" and "'health_data'" in wrong.reason
  for unreadable in ("API-Request: [RecordHealthData(user_id=12 345)]",
                     "API-Request: [RecordHealthData('12345', x='a'b')]",
                     "API-Request: RecordHealthData(user_id='a'b')"):
    assert apibank.score(gold, unreadable).status == "invalid", unreadable
  assert not apibank.score(gold, "API-Request: [RecordHealthData(user_id='12345'), "
                           "Other(x='a'b')]").correct


def test_apibank_canonical_values():
  assert apibank.canonical(" 3 ") == apibank.canonical(3) == apibank.canonical(3.0)
  assert apibank.canonical("TRUE") == apibank.canonical(True)
  assert apibank.canonical(True) != apibank.canonical(1)
  assert apibank.canonical({"a": ["X  Y"]}) == {"a": ["x y"]}
  assert apibank.canonical("9" * 5000) == float("inf")


# ------------------------------------------------------------------------- QA


def test_qa_normalisation():
  assert qa.normalize_answer("  The Eiffel-Tower, in PARIS! ") == "eiffeltower in paris"
  assert qa.normalize_answer("an apple a day") == "apple day"


def test_qa_exact_match_is_the_best_over_answers():
  assert qa.exact_match("the Paris.", ["London", "paris"]) == 1.0
  assert qa.exact_match("Paris, France", ["paris"]) == 0.0


def test_qa_token_f1():
  # tokens [cat, sat] vs [cat, sat, down]: precision 1, recall 2/3.
  assert qa.token_f1("the cat sat", ["a cat sat down"]) == pytest.approx(0.8)
  assert qa.token_f1("cat cat", ["cat"]) == pytest.approx(2 / 3)
  assert qa.token_f1("dog", ["cat", "a dog"]) == 1.0
  assert qa.token_f1("dog", ["cat"]) == 0.0
  assert qa.token_f1("the", ["an"]) == 1.0  # both empty after normalisation
  assert qa.token_f1("", ["cat"]) == 0.0


def test_qa_score_verdict():
  result = qa.score(["Barack Obama"], "obama")
  assert not result.verdict.correct and result.exact_match == 0.0
  assert result.f1 == pytest.approx(2 / 3)
  assert qa.score(["Barack Obama"], "barack  obama").verdict.correct


# ------------------------------------------------------------------------ CLI


def write_jsonl(path, records):
  path.write_text("".join(json.dumps(r) + "\n" for r in records))
  return str(path)


def run_cli(capsys, *argv):
  status = evaluate.main(list(argv))
  out, err = capsys.readouterr()
  return status, out.strip().splitlines(), err


def test_cli_bfcl_prints_accuracy_last_and_writes_verdicts(tmp_path, capsys):
  write_bfcl_dir(tmp_path)
  predictions = write_jsonl(tmp_path / "pred.jsonl", [
      {"id": "simple_python_0", "result": "[geo.area(base=0, height=5)]"},
      {"id": "simple_python_1", "result": "[geo.area(base=7, height=5.0)]"},
      {"id": "simple_python_2", "result": "not a call ("}])
  status, lines, _ = run_cli(capsys, "bfcl", "--category", "simple_python",
                             "--data_dir", str(tmp_path), "--predictions", predictions)
  assert status == 0
  assert lines[-1] == f"accuracy={1 / 3:.6f}"
  rows = [json.loads(l) for l in open(predictions + ".verdicts.jsonl")]
  assert [r["id"] for r in rows] == [f"simple_python_{i}" for i in range(3)]
  assert [r["correct"] for r in rows] == [True, False, False]
  assert rows[1]["verdict"].startswith("incorrect: ") and "'base'" in rows[1]["verdict"]
  assert rows[2]["verdict"].startswith("invalid: ")


def test_cli_input_errors_name_the_id_file_or_category(tmp_path, capsys):
  write_bfcl_dir(tmp_path)
  partial = write_jsonl(tmp_path / "partial.jsonl", [
      {"id": "simple_python_0", "result": "[geo.area(base=0, height=5)]"}])
  args = ["bfcl", "--category", "simple_python", "--data_dir", str(tmp_path)]
  status, _, err = run_cli(capsys, *args, "--predictions", partial)
  assert status == 2 and "simple_python_1" in err and "partial.jsonl" in err
  status, lines, _ = run_cli(capsys, *args, "--predictions", partial,
                             "--allow_missing")
  assert status == 0 and lines[-1] == "accuracy=1.000000"
  stranger = write_jsonl(tmp_path / "stranger.jsonl",
                         [{"id": "simple_python_9", "result": "[]"}])
  status, _, err = run_cli(capsys, *args, "--predictions", stranger)
  assert status == 2 and "simple_python_9" in err
  status, _, err = run_cli(capsys, "bfcl", "--category", "simple_java", "--data_dir",
                           str(tmp_path), "--predictions", partial)
  assert status == 2 and "simple_java" in err
  status, _, err = run_cli(capsys, "qa", "--data", str(tmp_path / "absent.jsonl"),
                           "--predictions", partial)
  assert status == 2 and "absent.jsonl" in err


def test_cli_apibank_and_qa(tmp_path, capsys):
  gold = write_jsonl(tmp_path / "api.jsonl", [
      {"id": 1, "api_name": "ToolSearcher", "param_dict": {"keywords": "weather"}},
      {"id": 2, "api_name": "GetToday", "param_dict": {}}])
  predictions = write_jsonl(tmp_path / "api_pred.jsonl", [
      {"id": 1, "result": "API-Request: [ToolSearcher(keywords='Weather')]"},
      {"id": 2, "result": "API-Request: [GetTomorrow()]"}])
  status, lines, _ = run_cli(capsys, "apibank", "--data", gold,
                             "--predictions", predictions)
  assert status == 0 and lines[-1] == "accuracy=0.500000"
  answers = write_jsonl(tmp_path / "qa.jsonl", [
      {"id": "a", "answers": ["Paris"]}, {"id": "b", "answers": ["a cat sat down"]}])
  predictions = write_jsonl(tmp_path / "qa_pred.jsonl", [
      {"id": "a", "result": "paris"}, {"id": "b", "result": "the cat sat"}])
  status, lines, _ = run_cli(capsys, "qa", "--data", answers,
                             "--predictions", predictions)
  assert status == 0 and lines[-1] == "accuracy=0.500000"
  assert "f1=0.900000" in lines
  rows = [json.loads(l) for l in open(predictions + ".verdicts.jsonl")]
  assert rows[1]["f1"] == pytest.approx(0.8) and rows[1]["exact_match"] == 0.0
