"""Official benchmark files fetched into a cache, with SHA-256 checksums.

`fetch(name, files)` downloads each file of `files` (a path inside the
benchmark's directory -> its URL) with urllib into
`<cache>/benchmarks/<name>/<path>` (the cache is $GENENV_CACHE, else
~/.cache/genenv_jax, as for train/tools/real_models.py) unless it is there
already. The SHA-256 of each file is recorded in `checksums.json` beside them
when the file is first downloaded; a later call checks every file against its
record, so a file that changed on disk (or a source that changed upstream,
once re-downloaded) is an error rather than silently different data. A file
is written under a temporary name and renamed into place, so an interrupted
download leaves nothing that looks complete.

Not exercised here: this machine has no internet. Offline, `fetch` raises
InputError naming the URL that could not be fetched; place the files by hand
and pass `--data_dir` instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import tempfile
import urllib.error
import urllib.request
from typing import Mapping

from genenv_jax.scoring import InputError
from train.tools import real_models

CHECKSUMS = "checksums.json"
_TIMEOUT_S = 60


def benchmark_dir(name: str) -> pathlib.Path:
  """Where the files of benchmark `name` are cached."""
  return real_models.cache_dir() / "benchmarks" / name


def sha256(path: pathlib.Path) -> str:
  """The hex SHA-256 of a file's bytes."""
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


def _read_checksums(path: pathlib.Path) -> dict[str, dict[str, str]]:
  if not path.exists():
    return {}
  try:
    recorded = json.loads(path.read_text(encoding="utf-8"))
  except (OSError, ValueError) as e:
    raise InputError(f"cannot read {path}: {e}") from e
  if not isinstance(recorded, dict):
    raise InputError(f"{path}: expected a JSON object of file -> checksum")
  return recorded


def _download(url: str, target: pathlib.Path) -> None:
  target.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name + ".part")
  try:
    with os.fdopen(fd, "wb") as out:
      with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as response:
        for block in iter(lambda: response.read(1 << 20), b""):
          out.write(block)
    os.replace(tmp, target)
  except (urllib.error.URLError, OSError, ValueError) as e:
    raise InputError(
        f"cannot download {url}: {e}. Without internet access, fetch it elsewhere "
        f"and pass --data_dir (the directory holding {target.name})") from e
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)


def fetch(name: str, files: Mapping[str, str]) -> pathlib.Path:
  """The cache directory of benchmark `name` holding `files` (path -> URL),
  downloading those not there yet and checking each against its recorded
  SHA-256 (recording it at first download).

  Raises:
    InputError: a download fails (the message names the URL), or a file's
      checksum differs from the one recorded for it.
  """
  root = benchmark_dir(name)
  checksums_path = root / CHECKSUMS
  recorded = _read_checksums(checksums_path)
  for relative, url in files.items():
    target = root / relative
    if not target.exists():
      _download(url, target)
    digest = sha256(target)
    entry = recorded.get(relative)
    if entry is None:
      recorded[relative] = {"url": url, "sha256": digest}
    elif entry.get("sha256") != digest:
      raise InputError(
          f"{target}: SHA-256 {digest} differs from {entry.get('sha256')} recorded in "
          f"{checksums_path} when it was first downloaded from {entry.get('url')}; "
          "remove the file (and its entry) to fetch it again")
  root.mkdir(parents=True, exist_ok=True)
  checksums_path.write_text(json.dumps(recorded, indent=2, sort_keys=True) + "\n",
                            encoding="utf-8")
  return root


# API-Bank's training split (levels 1 and 2) and the test files it is held
# out against, as the Hugging Face dataset lays them out: the seed data of
# configs/text.py:api_bank and configs/qwen_tpu.py:7b_api_bank
# (config.data.source_dir; docs/text_tasks.md, "API-Bank seed data").
API_BANK_TRAIN = "api_bank_train"
_API_BANK_HF = "https://huggingface.co/datasets/liminghao1630/API-Bank/resolve/main/"


def api_bank_train_files() -> dict[str, str]:
  """API-Bank's level-1/2 training and test files: path -> URL."""
  from genenv_jax.scoring import apibank_levels  # pylint: disable=import-outside-toplevel
  files = {}
  for level in apibank_levels.SEED_LEVELS:
    for folder, name in (("training-data", apibank_levels.TRAIN_FILES[level]),
                         ("test-data", apibank_levels.LEVEL_FILES[level])):
      files[f"{folder}/{name}"] = f"{_API_BANK_HF}{folder}/{name}"
  return files


def main(argv: list[str] | None = None) -> None:
  """Fetches the official files of a benchmark a domain trains on and prints
  their directory (the preset's seed-data field, train.tools.seed_data):

    python -m train.tools.bench_download travelplanner [--splits train,validation]
        TravelPlanner's splits (config.task.data_dir)
    python -m train.tools.bench_download api_bank
        API-Bank's level-1/2 training and test files (config.data.source_dir)
    python -m train.tools.bench_download hotpotqa
        HotpotQA's training questions as prompt/answer seeds, for a run
        scored on Bamboogle (config.data.source_dir; train/tools/
        hotpotqa_seeds.py)
  """
  import argparse  # pylint: disable=import-outside-toplevel
  from genenv_jax.scoring import travelplanner  # pylint: disable=import-outside-toplevel
  from train.tools import hotpotqa_seeds  # pylint: disable=import-outside-toplevel

  parser = argparse.ArgumentParser(description=main.__doc__.split("\n")[0])
  parser.add_argument("benchmark",
                      choices=[travelplanner.NAME, "api_bank", hotpotqa_seeds.NAME])
  parser.add_argument("--splits", default="train,validation",
                      help=f"travelplanner: comma-separated, of "
                           f"{', '.join(travelplanner.SPLITS)}")
  args = parser.parse_args(argv)
  if args.benchmark == "api_bank":
    print(fetch(API_BANK_TRAIN, api_bank_train_files()))
    return
  if args.benchmark == hotpotqa_seeds.NAME:
    root = fetch(hotpotqa_seeds.NAME,
                 {hotpotqa_seeds.TRAIN_FILE: hotpotqa_seeds.TRAIN_URL})
    print(hotpotqa_seeds.write_seeds(root / hotpotqa_seeds.TRAIN_FILE,
                                     root / hotpotqa_seeds.SEEDS_DIR))
    return
  splits = [s for s in args.splits.split(",") if s]
  unknown = [s for s in splits if s not in travelplanner.SPLITS]
  if unknown or not splits:
    parser.error(f"--splits={args.splits!r}: expected some of "
                 f"{', '.join(travelplanner.SPLITS)}")
  files = {path: url for split in splits
           for path, url in travelplanner.files(split).items()}
  print(fetch(args.benchmark, files))


if __name__ == "__main__":
  main()
