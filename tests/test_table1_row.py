"""Table 1's row (`python -m train.tools.evaluate table1`,
train/tools/table1_row.py): where each benchmark's data is found, the
benchmark commands it runs, and the row it prints beside the paper's. The
benchmark commands are stubbed here (each is tested on its own in
tests/test_table1_generate.py, tests/test_alfworld_generate.py and
tests/test_bfcl_generate.py)."""

from __future__ import annotations

import json
import types

import pytest

from genenv_jax.scoring import InputError, apibank_levels, bamboogle
from genenv_jax.scoring import travelplanner
from train.tools import evaluate
from train.tools import table1_row


def test_wilson_interval():
  assert table1_row.wilson(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
  low, high = table1_row.wilson(0, 10)
  assert low == 0.0 and high == pytest.approx(0.2775, abs=1e-4)
  assert table1_row.wilson(0, 0) == (0.0, 1.0)


def _root(tmp_path):
  """A data root holding Bamboogle, API-Bank and TravelPlanner fixtures and
  an ALFWorld split directory; no BFCL directory (the wheel's is used)."""
  root = tmp_path / "root"
  bamboogle.write_fixture(str(root / "bamboogle"))
  apibank_levels.write_fixture(str(root / "api_bank"))
  travelplanner.write_fixture(str(root / "travelplanner"))
  (root / "alfworld" / "json_2.1.1" / "valid_unseen").mkdir(parents=True)
  return root


def _stub_parse(calls, scores):
  """A parser whose commands record their argv and print each benchmark's
  summary (examples, correct), as the real commands do."""
  real = evaluate._parser()

  def parse(argv):
    args = real.parse_args(argv)  # the real flags, so a bad one fails here

    def run(_):
      calls.append(argv)
      examples, correct = scores[argv[0]]
      print(f"generated={examples}\nexamples={examples}\ncorrect={correct}\n"
            f"accuracy={correct / examples:.6f}")
    return types.SimpleNamespace(**{**vars(args), "run": run})
  return parse


def test_the_row_runs_each_present_benchmark_and_prints_beside_the_paper(
    tmp_path, capsys):
  root = _root(tmp_path)
  out = tmp_path / "out"
  args = evaluate._parser().parse_args([
      "table1", "--run", "/runs/w", "--data_root", str(root), "--out", str(out),
      "--bfcl_categories", "simple_python,multi_turn_base", "--limit", "2",
      "--batch_size", "4"])
  assert args.run is evaluate._run_table1_row and args.generate
  calls = []
  scores = {"alfworld": (4, 1), "bfcl": (2, 1), "api_bank": (8, 2),
            "bamboogle": (4, 0), "travelplanner": (3, 3)}
  row = table1_row.run(args, _stub_parse(calls, scores), lambda: True)
  # One command per benchmark, BFCL's two categories each its own.
  assert [c[0] for c in calls] == ["alfworld", "bfcl", "bfcl", "api_bank",
                                   "bamboogle", "travelplanner"]
  for argv in calls:
    assert argv[1] == "--generate" and argv[argv.index("--run") + 1] == "/runs/w"
    assert argv[argv.index("--limit") + 1] == "2"
    assert argv[argv.index("--predictions") + 1].startswith(str(out))
  assert calls[0][calls[0].index("--split") + 1] == "valid_unseen"
  assert [c[c.index("--category") + 1] for c in calls[1:3]] == [
      "simple_python", "multi_turn_base"]
  assert calls[-1][calls[-1].index("--data_dir") + 1] == str(root / "travelplanner")
  by_name = {s.name: s for s in row}
  assert (by_name["bfcl"].items, by_name["bfcl"].correct) == (4, 2)  # pooled
  assert by_name["travelplanner"].score == 1.0
  printed = capsys.readouterr().out.splitlines()
  assert json.loads(printed[-1].removeprefix("table1=")) == {
      "alfworld": 0.25, "bfcl": 0.5, "api_bank": 0.25, "bamboogle": 0.0,
      "travelplanner": 1.0}
  line = next(l for l in printed if l.startswith("| API-Bank |"))
  cells = [c.strip() for c in line.split("|")[1:-1]]
  assert cells[:6] == ["API-Bank", "8", "2", "25.0", "7.1-59.1", "79.1"]
  assert "(--limit 2: not Table 1)" in printed[printed.index(
      "| benchmark | items | correct | score % | 95% interval % | paper % | data |") - 2]
  saved = json.loads((out / "table1.json").read_text())
  assert [s["benchmark"] for s in saved] == list(table1_row.BENCHMARKS)
  assert saved[0]["paper"] == 0.545 and saved[0]["ci95"][0] > 0
  assert (out / "table1.md").read_text().startswith("Table 1, --run /runs/w")


def test_a_benchmark_without_data_is_a_row_naming_what_is_missing(tmp_path,
                                                                  capsys):
  args = evaluate._parser().parse_args([
      "table1", "--hf_dir", "/m", "--data_root", str(tmp_path / "empty"),
      "--out", str(tmp_path / "out"), "--benchmarks", "travelplanner,alfworld"])
  calls = []
  row = table1_row.run(args, _stub_parse(calls, {}), lambda: True)
  assert not calls and all(s.items == 0 for s in row)
  text = capsys.readouterr().out
  assert (f"| TravelPlanner | 0 | - | - | - | 16.6 | not present: "
          f"{tmp_path}/empty/travelplanner/") in text
  assert json.loads(text.splitlines()[-1].removeprefix("table1=")) == {
      "travelplanner": None, "alfworld": None}


def test_only_process_0_scores_and_writes(tmp_path, capsys):
  root = _root(tmp_path)
  args = evaluate._parser().parse_args([
      "table1", "--hf_dir", "/m", "--data_root", str(root), "--out",
      str(tmp_path / "out"), "--benchmarks", "bamboogle"])
  calls = []
  table1_row.run(args, _stub_parse(calls, {"bamboogle": (4, 1)}), lambda: False)
  assert len(calls) == 1  # it decodes its rows
  assert "table1=" not in capsys.readouterr().out
  assert not (tmp_path / "out" / "table1.json").exists()


@pytest.mark.parametrize("flags, message", [
    (["--benchmarks", "mmlu"], "--benchmarks='mmlu': expected some of"),
    (["--bfcl_categories", "java"], r"--bfcl_categories: \['java'\] not among"),
])
def test_bad_flags_are_named(tmp_path, flags, message):
  args = evaluate._parser().parse_args([
      "table1", "--hf_dir", "/m", "--out", str(tmp_path), *flags])
  with pytest.raises(InputError, match=message):
    table1_row.run(args, evaluate._parser().parse_args, lambda: True)
  args = evaluate._parser().parse_args(["table1", "--out", str(tmp_path)])
  with pytest.raises(InputError, match="exactly one of --run and --hf_dir"):
    table1_row.run(args, evaluate._parser().parse_args, lambda: True)
