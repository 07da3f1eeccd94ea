"""Seed data by the domain (genenv_jax/domains/seed_data.py,
train/tools/seed_data.py): each domain's config field, and the check of a
directory's files (local or a bucket listing) against what the domain reads."""

from __future__ import annotations

import pytest

from configs import alfworld, chat, default, maze, qwen_tpu, text, travelplanner
from genenv_jax import domains
from genenv_jax.domains import seed_data
from genenv_jax.scoring import apibank_levels
from genenv_jax.scoring import travelplanner as tp
from train.tools import seed_data as tool

# Each registered domain, a config of it and the field its seed data arrives in
# (None: it reads none).
FIELDS = [
    ("text", text.get_config("cpu"), "data.source_dir"),
    ("text api_bank", text.get_config("api_bank"), "data.source_dir"),
    ("bfcl_multi_turn", text.get_config("bfcl_multi_turn"), "task.data_dir"),
    ("travelplanner", travelplanner.get_config(), "task.data_dir"),
    ("alfworld", alfworld.get_config(), None),
    ("arithmetic", default.get_config(), None),
    ("maze", maze.get_config(), None),
    ("chat_arithmetic", chat.get_config(), None),
]


def test_every_domain_declares_where_its_seed_data_arrives():
  named = {config.task.name for _, config, _ in FIELDS}
  assert named == set(domains.DOMAINS)
  for label, config, field in FIELDS:
    assert tool.field_of(config) == field, label
    if field:  # the field exists in the config, as train.main reads it
      assert seed_data.field_value(config, field) == "", label


def test_the_7b_presets_name_their_benchmarks_field():
  for variant, field in [("7b", "data.source_dir"), ("7b_bfcl", "data.source_dir"),
                         ("7b_api_bank", "data.source_dir"),
                         ("7b_travelplanner", "task.data_dir"),
                         ("7b_bfcl_multi_turn", "task.data_dir"),
                         ("7b_alfworld", None), ("7b_lora", "data.source_dir")]:
    assert tool.field_of(qwen_tpu.get_config(variant)) == field, variant


def test_travelplanner_needs_both_splits_and_names_them(tmp_path):
  config = travelplanner.get_config()
  tp.write_fixture(str(tmp_path), "train")
  message = tool.check(config, str(tmp_path), seed_data.local_names(str(tmp_path)))
  assert message.startswith(f"config.task.data_dir={tmp_path}: the travelplanner "
                            "domain reads")
  assert "lacks validation.csv; validation_ref_info.jsonl" in message
  assert "train.csv" not in message.split("lacks", 1)[1]
  tp.write_fixture(str(tmp_path), "validation")
  assert tool.check(config, str(tmp_path),
                    seed_data.local_names(str(tmp_path))) is None


def test_api_bank_files_are_found_in_their_folders(tmp_path):
  config = text.get_config("api_bank")
  message = tool.check(config, str(tmp_path), [])
  assert "config.data.source_dir=" in message and "lv1-api-train.json" in message
  apibank_levels.write_seed_fixture(str(tmp_path))  # under training-data/, test-data/
  assert tool.check(config, str(tmp_path),
                    seed_data.local_names(str(tmp_path))) is None


def test_prompt_answer_files_must_be_at_the_top_level():
  config = text.get_config("cpu")
  assert tool.check(config, "d", ["sub/a.jsonl"]) is not None
  assert tool.check(config, "d", ["a.parquet", "notes.txt"]) is None


def test_a_bfcl_directory_needs_each_category_its_answers_and_docs():
  config = text.get_config("bfcl_multi_turn")
  names = ["BFCL_v4_multi_turn_base.json", "possible_answer/BFCL_v4_multi_turn_base.json",
           "BFCL_v4_multi_turn_miss_param.json", "multi_turn_func_doc/gorilla.json"]
  message = tool.check(config, "gs://b/bfcl", names)
  assert "possible_answer/BFCL_v4_multi_turn_miss_param.json" in message
  names.append("possible_answer/BFCL_v4_multi_turn_miss_param.json")
  assert tool.check(config, "gs://b/bfcl", names) is None
  assert "multi_turn_func_doc/" in tool.check(config, "d", names[:2] + names[4:])


def test_a_bucket_listing_reads_as_relative_names():
  lines = ["gs://b/tp/:", "gs://b/tp/train.csv", "gs://b/tp/sub/:",
           "gs://b/tp/sub/x.jsonl", "", "gs://b/tp/sub/"]
  assert seed_data.listed_names(lines, "gs://b/tp/") == ["sub/x.jsonl", "train.csv"]


def test_a_domain_without_seed_data_says_so():
  assert tool.check(alfworld.get_config(), "d", []) == (
      "config.task.name=alfworld reads no seed data")


@pytest.mark.parametrize("bad", ["/nonexistent/dir"])
def test_a_missing_local_directory_is_an_error(bad):
  with pytest.raises(Exception, match="is not a directory"):
    seed_data.local_names(bad)


def test_api_bank_training_files_download_where_the_preset_reads_them(
    monkeypatch, tmp_path, capsys):
  """`python -m train.tools.bench_download api_bank` (urllib stubbed with the
  seed fixture's files) lays out the files 7b_api_bank's data field reads,
  and reading them gives train and held-out examples."""
  import io  # pylint: disable=import-outside-toplevel
  import pathlib  # pylint: disable=import-outside-toplevel
  from train.tools import bench_download  # pylint: disable=import-outside-toplevel
  fixture = tmp_path / "fixture"
  apibank_levels.write_seed_fixture(str(fixture))
  by_name = {p.name: p.read_bytes() for p in fixture.rglob("*.json")}
  urls = []

  def urlopen(url, timeout):
    del timeout
    urls.append(url)
    return io.BytesIO(by_name[url.rsplit("/", 1)[1]])

  monkeypatch.setenv("GENENV_CACHE", str(tmp_path / "cache"))
  monkeypatch.setattr(bench_download.urllib.request, "urlopen", urlopen)
  bench_download.main(["api_bank"])
  root = capsys.readouterr().out.strip()
  assert pathlib.Path(root) == tmp_path / "cache" / "benchmarks" / "api_bank_train"
  assert len(urls) == 4 and all(u.startswith(
      "https://huggingface.co/datasets/liminghao1630/API-Bank/resolve/main/")
      for u in urls)
  config = qwen_tpu.get_config("7b_api_bank")
  assert tool.check(config, root, seed_data.local_names(root)) is None
  paths = apibank_levels.seed_files(root)
  assert [apibank_levels.is_held_out(p) for p in paths] == [False, False, True, True]
