"""HotpotQA's training questions as prompt/answer seeds (train/tools/
hotpotqa_seeds.py), fetched by `train.tools.bench_download hotpotqa` with
urllib stubbed by a file in HotpotQA's own format."""

from __future__ import annotations

import io
import json
import pathlib

import pytest

from configs import qwen_tpu
from genenv_jax.domains import seed_data
from genenv_jax.domains.text import data as text_data
from genenv_jax.scoring import InputError
from train.tools import bench_download
from train.tools import hotpotqa_seeds
from train.tools import seed_data as seed_data_tool


def _entry(i, question, answer, kind="bridge", level="medium"):
  """One question as hotpot_train_v1.1.json holds it."""
  return {"_id": f"5a8b57f25542995d1e6f13{i:02d}", "question": question,
          "answer": answer, "type": kind, "level": level,
          "supporting_facts": [["Title A", 0], ["Title B", 1]],
          "context": [["Title A", ["A sentence.", "Another."]],
                      ["Title B", ["More.", "And more."]]]}


ENTRIES = [
    _entry(0, "Which magazine was started first, Arthur's Magazine or First "
              "for Women?", "Arthur's Magazine", "comparison"),
    _entry(1, "Were Scott Derrickson and Ed Wood of the same nationality?",
           "yes", "comparison", "hard"),
    _entry(2, "What government position was held by the woman who portrayed "
              "Corliss Archer in the film Kiss and Tell?",
           "Chief of Protocol", "bridge", "hard"),
    _entry(3, "Is the Lapis Lazuli a gemstone or a mineral family?  ", " No "),
    _entry(4, "The director of the romantic comedy \"Big Stone Gap\" is based "
              "in what New York city?", "Greenwich Village, New York City",
           "bridge", "easy"),
]


def _write(tmp_path, entries) -> pathlib.Path:
  path = tmp_path / hotpotqa_seeds.TRAIN_FILE
  path.write_text(json.dumps(entries), encoding="utf-8")
  return path


def test_questions_become_prompt_answer_records_without_yes_no_ones(tmp_path):
  out = hotpotqa_seeds.write_seeds(_write(tmp_path, ENTRIES), tmp_path / "seeds")
  lines = (out / hotpotqa_seeds.SEEDS_FILE).read_text(encoding="utf-8").splitlines()
  records = [json.loads(line) for line in lines]
  assert [r["answer"] for r in records] == [
      "Arthur's Magazine", "Chief of Protocol", "Greenwich Village, New York City"]
  assert records[1] == {
      "id": ENTRIES[2]["_id"], "prompt": ENTRIES[2]["question"],
      "answer": "Chief of Protocol", "type": "bridge", "level": "hard"}
  # Closed-book: no context paragraph or supporting fact reaches the prompt.
  assert all("sentence" not in r["prompt"] for r in records)
  _, yes_no = hotpotqa_seeds.seed_records(tmp_path / hotpotqa_seeds.TRAIN_FILE)
  assert yes_no == 2
  # No partial file is left beside the written one.
  assert sorted(p.name for p in out.iterdir()) == [hotpotqa_seeds.SEEDS_FILE]


@pytest.mark.parametrize("entries, message", [
    ({"data": []}, "expected HotpotQA's JSON list of questions, got a JSON dict"),
    ([ENTRIES[0], ["not", "an", "object"]], "entry 1 is a JSON list"),
    ([ENTRIES[0], dict(ENTRIES[2], answer=None)], "entry 1 has no string 'answer'"),
    ([dict(ENTRIES[0], question="  ")], "entry 0 has no string 'question'"),
    ([ENTRIES[1], ENTRIES[3]], "no question left \\(2 yes/no ones left out\\)"),
])
def test_a_bad_file_names_the_entry_and_field_and_writes_nothing(
    tmp_path, entries, message):
  with pytest.raises(InputError, match=message):
    hotpotqa_seeds.write_seeds(_write(tmp_path, entries), tmp_path / "seeds")
  assert not (tmp_path / "seeds" / hotpotqa_seeds.SEEDS_FILE).exists()


def test_download_lays_out_seeds_the_7b_text_preset_reads(
    monkeypatch, tmp_path, capsys):
  body = json.dumps(ENTRIES).encode()
  urls = []

  def urlopen(url, timeout):
    del timeout
    urls.append(url)
    return io.BytesIO(body)

  monkeypatch.setenv("GENENV_CACHE", str(tmp_path / "cache"))
  monkeypatch.setattr(bench_download.urllib.request, "urlopen", urlopen)
  bench_download.main(["hotpotqa"])
  seeds = pathlib.Path(capsys.readouterr().out.strip())
  root = tmp_path / "cache" / "benchmarks" / "hotpotqa"
  assert seeds == root / "seeds"
  assert urls == [hotpotqa_seeds.TRAIN_URL]
  recorded = json.loads((root / bench_download.CHECKSUMS).read_text())
  assert recorded[hotpotqa_seeds.TRAIN_FILE]["sha256"] == bench_download.sha256(
      root / hotpotqa_seeds.TRAIN_FILE)
  # The directory passes the launchers' preflight for the 7B text preset and
  # its records are read as train and held-out tasks.
  config = qwen_tpu.get_config("7b")
  assert seed_data_tool.check(config, str(seeds),
                              seed_data.local_names(str(seeds))) is None
  config.data.source_dir = str(seeds)
  config.data.test_fraction = 1 / 3
  splits = text_data.read_splits(text_data.config_from(config))
  answers = sorted(r.answer for split in splits.values() for r in split)
  assert answers == sorted(["Arthur's Magazine", "Chief of Protocol",
                            "Greenwich Village, New York City"])
  assert len(splits["test"]) == 1
  # A second call reads the cached file (no download) and checks its SHA-256.
  bench_download.main(["hotpotqa"])
  assert len(urls) == 1
