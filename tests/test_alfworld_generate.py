"""`train.tools.evaluate alfworld`: episodes scored by replaying their commands
in the games (ALFWorld-synthetic and the official file layout of the fixture
`--write_fixture` writes), malformed episode files, `--download` against a
stub server, and SmolLM2-135M-Instruct (its first 4 decoder layers) playing two
ALFWorld-synthetic games end to end."""

from __future__ import annotations

import io
import json
import zipfile

import pytest

from genenv_jax.domains.alfworld import game
from genenv_jax.scoring import InputError
from train.tools import alfworld_eval, evaluate


def _write_lines(path, records):
  path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n"
                          for r in records))


def _verdicts(predictions):
  return [json.loads(line) for line in
          open(str(predictions) + ".verdicts.jsonl", encoding="utf-8")]


def _summary(out: str) -> dict[str, str]:
  return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def _walkthrough(spec):
  return list(game.GamePool(1).walkthrough(spec, game.plan(spec)))


@pytest.fixture(scope="module")
def synthetic():
  """ALFWorld-synthetic's games (the held-out draw, about 8 s here)."""
  return alfworld_eval.synthetic_games(
      alfworld_eval.alfworld_config().data.test_per_task)


@pytest.fixture(scope="module")
def fixture_dir(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("alfworld_fixture"))
  assert evaluate.main(["alfworld", "--write_fixture", root]) == 0
  return root


def test_synthetic_games_are_the_held_out_specs_round_robin(synthetic):
  assert len(synthetic) == 6 * alfworld_eval.alfworld_config().data.test_per_task
  assert [g.task_type for g in synthetic[:6]] == list(game.TASK_TYPES)
  assert [g.id for g in synthetic[:7]][::6] == ["pick_and_place/0", "pick_and_place/1"]
  assert all(game.read_spec(g.spec.text()).layout in
             ("FloorPlan10", "FloorPlan20", "FloorPlan30", "FloorPlan210", "FloorPlan220",
              "FloorPlan230", "FloorPlan310", "FloorPlan320", "FloorPlan330",
              "FloorPlan410", "FloorPlan420", "FloorPlan430") for g in synthetic)


def test_replayed_plans_win_and_garbage_does_not(synthetic, tmp_path, capsys):
  won, lost = synthetic[0], synthetic[1]
  plan = _walkthrough(won.spec)
  predictions = tmp_path / "episodes.jsonl"
  _write_lines(predictions, [
      # The line's `won` is not read: the verdict comes from the game.
      {"id": won.id, "spec": won.spec.text(), "commands": ["look"] + plan, "won": False},
      {"id": lost.id, "commands": ["dance", "take the moon", "look"], "won": True},
  ])
  assert evaluate.main(["alfworld", "--predictions", str(predictions),
                        "--allow_missing"]) == 0
  out = capsys.readouterr().out
  summary = _summary(out)
  assert out.splitlines()[-1] == "accuracy=0.500000"
  assert summary["benchmark"] == "ALFWorld-synthetic"
  assert summary["games"] == "2"
  assert summary["success_by_task"] == "pick_and_place:1/1,look_at_obj_in_light:0/1"
  assert summary["mean_turns_when_won"] == f"{len(plan) + 1:.2f}"
  rows = _verdicts(predictions)
  assert [(r["id"], r["correct"], r["turns"]) for r in rows] == [
      (won.id, True, len(plan) + 1), (lost.id, False, 3)]
  assert rows[1]["verdict"] == "incorrect: not won in 3 command(s)"
  assert rows[1]["inadmissible"] == 2          # "look" is admitted
  # --max_turns cuts the replay short of the win.
  assert evaluate.main(["alfworld", "--predictions", str(predictions), "--allow_missing",
                        "--max_turns", str(len(plan))]) == 0
  assert capsys.readouterr().out.splitlines()[-1] == "accuracy=0.000000"


@pytest.mark.parametrize("line,message", [
    ("{not json", r"episodes.jsonl:2: not valid JSON"),
    ('["a list"]', r"episodes.jsonl:2: expected a JSON object"),
    ('{"id": "pick_and_place/0", "commands": "look"}',
     r"episodes.jsonl:2: id 'pick_and_place/0' has no 'commands' list of strings"),
    ('{"id": "pick_and_place/0", "commands": ["look", 3]}',
     r"episodes.jsonl:2: .* no 'commands' list of strings"),
    ('{"id": "no_such/0", "commands": []}',
     r"episodes.jsonl:2: id 'no_such/0' is not a game of ALFWorld-synthetic"),
    ('{"id": "look_at_obj_in_light/0", "commands": []}',
     r"episodes.jsonl:2: id 'look_at_obj_in_light/0' appears twice"),
    ('{"id": "pick_and_place/0", "spec": "layout: FloorPlan1", "commands": []}',
     r"episodes.jsonl:2: id 'pick_and_place/0' names spec 'layout: FloorPlan1'"),
])
def test_malformed_lines_are_errors_naming_the_line(synthetic, tmp_path, capsys, line,
                                                    message):
  del synthetic
  predictions = tmp_path / "episodes.jsonl"
  _write_lines(predictions, ['{"id": "look_at_obj_in_light/0", "commands": ["look"]}',
                             line])
  with pytest.raises(InputError, match=message):
    alfworld_eval.read_episodes(str(predictions), alfworld_eval.synthetic_games(
        alfworld_eval.alfworld_config().data.test_per_task), "ALFWorld-synthetic", True)
  assert evaluate.main(["alfworld", "--predictions", str(predictions)]) == 2
  assert "episodes.jsonl:2" in capsys.readouterr().err


def test_official_layout_loads_as_alfworld_does_and_scores(fixture_dir, tmp_path, capsys):
  games, skipped = alfworld_eval.official_games(fixture_dir, "valid_unseen")
  assert [g.task_type for g in games] == ["look_at_obj_in_light", "pick_heat_then_place"]
  assert skipped == {"movable_or_sliced": 1, "not_solvable": 1}
  assert games[1].id.startswith("pick_heat_then_place_in_recep-Apple-None-CounterTop-1/")
  # The files play in ALFWorld's TextWorld environment: the walkthrough each
  # game file records wins it, and its opening states the task.
  player = alfworld_eval.Player()
  assert "Your task is to: look at alarmclock under the desklamp." in player.opening(games[0])
  episodes = []
  for g in games:
    with open(g.game_file, encoding="utf-8") as f:
      walkthrough = json.load(f)["walkthrough"]
    episodes.append({"id": g.id, "game_file": g.game_file_id,
                     "commands": walkthrough if g is games[0] else walkthrough[:-1]})
  predictions = tmp_path / "official.jsonl"
  _write_lines(predictions, episodes)
  assert evaluate.main(["alfworld", "--data_dir", fixture_dir, "--predictions",
                        str(predictions)]) == 0
  out = capsys.readouterr().out
  assert _summary(out)["benchmark"] == "ALFWorld valid_unseen"
  assert out.splitlines()[-1] == "accuracy=0.500000"
  assert [r["correct"] for r in _verdicts(predictions)] == [True, False]
  with pytest.raises(InputError, match="no directory named 'valid_seen'"):
    alfworld_eval.official_games(fixture_dir, "valid_seen")


def test_download_extracts_the_split_from_the_release_zips(fixture_dir, tmp_path,
                                                           monkeypatch, capsys):
  import pathlib  # pylint: disable=import-outside-toplevel
  import urllib.error  # pylint: disable=import-outside-toplevel
  from train.tools import bench_download  # pylint: disable=import-outside-toplevel
  monkeypatch.setenv("GENENV_CACHE", str(tmp_path / "cache"))
  root = pathlib.Path(fixture_dir)
  zips = {}
  for name, kept in (("json_2.1.1_json.zip", "traj_data.json"),
                     ("json_2.1.2_tw-pddl.zip", "game.tw-pddl")):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
      for path in root.rglob(kept):
        archive.write(path, str(path.relative_to(root)))
      archive.writestr("json_2.1.1/train/x/trial_1/traj_data.json", "{}")  # not extracted
    zips[alfworld_eval.FILES[name]] = buffer.getvalue()

  def urlopen(url, timeout):
    del timeout
    if url not in zips:
      raise urllib.error.URLError("Name or service not known")
    return io.BytesIO(zips[url])

  monkeypatch.setattr(bench_download.urllib.request, "urlopen", urlopen)
  extracted = alfworld_eval.download("valid_unseen")
  assert not (pathlib.Path(extracted) / "json_2.1.1" / "train").exists()
  games, _ = alfworld_eval.official_games(extracted, "valid_unseen")
  assert len(games) == 2
  monkeypatch.setenv("GENENV_CACHE", str(tmp_path / "offline"))
  zips.clear()
  assert evaluate.main(["alfworld", "--download", "--predictions",
                        str(tmp_path / "p.jsonl")]) == 2
  assert "cannot download https://github.com/alfworld/alfworld/releases" in \
      capsys.readouterr().err


def test_smollm2_plays_two_synthetic_games(synthetic, smollm2_first4_dir, tmp_path, capsys):
  predictions = tmp_path / "alfworld.jsonl"
  assert evaluate.main(["alfworld", "--generate", "--hf_dir", smollm2_first4_dir,
                        "--predictions", str(predictions), "--limit", "2",
                        "--max_turns", "2", "--max_new_tokens", "12",
                        "--batch_size", "2"]) == 0
  out = capsys.readouterr().out
  print(out)
  summary = _summary(out)
  assert summary["generated"] == summary["games"] == "2"
  assert float(summary["generation_seconds_per_item"]) > 0
  assert out.splitlines()[-1].startswith("accuracy=")
  lines = [json.loads(line) for line in predictions.read_text().splitlines()]
  assert [line["id"] for line in lines] == [g.id for g in synthetic[:2]]
  for line, g in zip(lines, synthetic):
    assert line["spec"] == g.spec.text()
    assert 1 <= line["turns"] == len(line["commands"]) == len(line["observations"]) <= 2
    assert line["end"] in ("won", "max_turns")
    assert all(isinstance(reply, str) for reply in line["replies"])
  rows = _verdicts(predictions)
  assert [r["correct"] for r in rows] == [line["won"] for line in lines]
