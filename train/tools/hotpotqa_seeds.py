"""HotpotQA's training questions as the text domain's prompt/answer seed data:
what a run scored on Bamboogle trains on (docs/table1.md).

Bamboogle is 125 two-hop test questions without a training split. HotpotQA's
train split (Yang et al., 2018, CC BY-SA 4.0; `hotpot_train_v1.1.json`, a
JSON list of objects with `_id`, `question`, `answer`, `type` ("bridge" |
"comparison"), `level` ("easy" | "medium" | "hard"), `supporting_facts` and
`context`) holds two-hop questions with short answers. Each becomes one line
of `train.jsonl`:

  {"id": _id, "prompt": question, "answer": answer, "type": ..., "level": ...}

read by the text domain's `prompt_answer` format (genenv_jax/domains/text/
data.py) from the directory a run's `data.source_dir` names. The question
is asked closed-book (no context paragraphs), as Bamboogle is scored. A
question whose answer is "yes" or "no" (HotpotQA's comparison questions ask
many; Bamboogle has none) is left out, so that a policy cannot earn half its
reward by guessing one of two words. The held-out split is the text
domain's `test_fraction` of these records (no test file is written).

  python -m train.tools.bench_download hotpotqa   # fetch, convert, print DIR
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

from etils import epath

from genenv_jax.scoring import InputError
from train.checkpoints import checkpointing

NAME = "hotpotqa"
TRAIN_FILE = "hotpot_train_v1.1.json"
TRAIN_URL = "http://curtis.ml.cmu.edu/datasets/hotpot/" + TRAIN_FILE
SEEDS_DIR = "seeds"        # under the benchmark's cache directory
SEEDS_FILE = "train.jsonl"
YES_NO = ("yes", "no")


def seed_records(path: pathlib.Path) -> tuple[list[dict[str, Any]], int]:
  """(prompt/answer records of HotpotQA's file `path`, in its order; how many
  yes/no questions were left out).

  Raises:
    InputError: the file is not a JSON list of objects, or an entry lacks a
      non-empty string `_id`, `question` or `answer` (the message names the
      file, the entry's index and the field).
  """
  try:
    entries = json.loads(path.read_text(encoding="utf-8"))
  except (OSError, ValueError) as e:
    raise InputError(f"cannot read {path}: {e}") from e
  if not isinstance(entries, list):
    raise InputError(f"{path}: expected HotpotQA's JSON list of questions, got "
                     f"a JSON {type(entries).__name__}")
  records, yes_no = [], 0
  for i, entry in enumerate(entries):
    if not isinstance(entry, dict):
      raise InputError(f"{path}: entry {i} is a JSON {type(entry).__name__}, "
                       "not an object")
    for field in ("_id", "question", "answer"):
      value = entry.get(field)
      if not isinstance(value, str) or not value.strip():
        raise InputError(f"{path}: entry {i} has no string {field!r} "
                         f"(got {value!r})")
    answer = entry["answer"].strip()
    if answer.lower() in YES_NO:
      yes_no += 1
      continue
    records.append({"id": entry["_id"], "prompt": entry["question"].strip(),
                    "answer": answer, "type": entry.get("type", ""),
                    "level": entry.get("level", "")})
  return records, yes_no


def write_seeds(source: pathlib.Path, out_dir: pathlib.Path) -> pathlib.Path:
  """Writes `out_dir/train.jsonl` from HotpotQA's file `source` (never
  partial: `checkpointing.write_atomic`) and returns `out_dir`.

  Raises:
    InputError: as `seed_records`, or when no question is left.
  """
  records, yes_no = seed_records(source)
  if not records:
    raise InputError(f"{source}: no question left ({yes_no} yes/no ones "
                     "left out)")
  out_dir.mkdir(parents=True, exist_ok=True)
  checkpointing.write_atomic(
      epath.Path(out_dir) / SEEDS_FILE,
      "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode())
  return out_dir
