"""`train.tools.evaluate {bamboogle,api_bank,travelplanner}`: each scorer against
hand-computed verdicts on the fixtures `--write_fixture` writes in the source's
format, malformed replies, and SmolLM2-135M-Instruct answering a few fixture
items of each benchmark end to end."""

from __future__ import annotations

import json

import pytest

from genenv_jax.scoring import InputError, bamboogle
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
  for name in ("bamboogle",):
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


# Generation with SmolLM2 -------------------------------------------------------

@pytest.mark.parametrize("name,flags", [
    ("bamboogle", ["--limit", "3", "--max_new_tokens", "24"]),
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
