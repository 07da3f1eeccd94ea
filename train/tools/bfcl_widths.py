"""How many BFCL single-turn tasks a text config's widths keep, per category.

  python -m train.tools.bfcl_widths                          # configs/text.py:bfcl
  python -m train.tools.bfcl_widths --config=configs/text.py:bfcl \\
      --config.task.tokenizer_dir=/ckpt/Qwen2.5-7B-Instruct --data_dir=DIR

Each category's question file (`BFCL_v<N>_<category>.json` with its
`possible_answer/` file) is read as the text domain's seed data
(`genenv_jax.domains.text.data`, format "bfcl") and turned into written-task rows by
`text_datasets.seed_rows`: a task is kept when it fits the widths and its
reference passes the `bfcl` verifier's check. `--data_dir` defaults to the data
of the installed `bfcl_eval` package; an empty `config.task.tokenizer_dir` to
the Qwen tokenizer that `python -m train.tools.real_models qwen_tokenizer`
builds. Prints one line per category (records, kept, keep rate and the 95th
percentile of written-task tokens) and the total.
"""

from __future__ import annotations

import os

from absl import app
from absl import flags
from ml_collections import config_flags
import numpy as np

from genenv_jax.scoring import bfcl
from genenv_jax.domains.text.domain import TextDomain
from genenv_jax.domains.text import data as text_datasets
from train.tools import real_models

CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "live_simple",
              "live_multiple", "live_parallel", "live_parallel_multiple")

_CONFIG = config_flags.DEFINE_config_file("config", "configs/text.py:bfcl",
                                          "The text config whose widths are measured.")
_DATA_DIR = flags.DEFINE_string("data_dir", "", "BFCL data directory ('' = bfcl_eval's).")
_CATEGORIES = flags.DEFINE_list("categories", list(CATEGORIES), "Categories to measure.")


def bfcl_eval_data_dir() -> str:
  """The data directory of the installed bfcl_eval package."""
  try:
    import bfcl_eval  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise RuntimeError("bfcl_eval is not installed; pass --data_dir") from e
  return os.path.join(os.path.dirname(bfcl_eval.__file__), "data")


def qwen_tokenizer() -> str:
  """The cached Qwen tokenizer directory, built when absent."""
  cached = real_models.cache_dir() / real_models.QWEN_TOKENIZER_NAME
  return str(cached if cached.exists() else real_models.qwen_tokenizer_dir())


def keep_rates(domain: TextDomain, data_dir: str, categories) -> list[dict]:
  """One row per category: records, kept, keep rate, p95 of written tokens."""
  spec = text_datasets.TextTasksConfig(data_dir, format="bfcl")
  rows = []
  for category in categories:
    questions, _ = bfcl.category_files(data_dir, category)
    records = text_datasets.read_source_file(spec, questions)
    kept = len(records) - text_datasets.seed_rows(domain, records).num_dropped
    written = [len(domain.written_task_ids(r.task, r.answer)) for r in records]
    rows.append(dict(category=category, records=len(records), kept=kept,
                     keep_rate=kept / max(len(records), 1),
                     written_p95=float(np.percentile(written, 95))))
  return rows


def main(argv) -> None:
  del argv
  config = _CONFIG.value
  if not config.task.tokenizer_dir:
    config.task.tokenizer_dir = qwen_tokenizer()
  domain = TextDomain.from_config(config.task)
  print(f"widths: max_task_tokens={domain.max_task_tokens} "
        f"max_answer_tokens={domain.max_answer_tokens} max_written_tokens={domain.task_len}"
        f" tokenizer={config.task.tokenizer_dir}")
  rows = keep_rates(domain, _DATA_DIR.value or bfcl_eval_data_dir(), _CATEGORIES.value)
  for row in rows:
    print(f"{row['category']:24s} records={row['records']:5d} kept={row['kept']:5d} "
          f"keep_rate={row['keep_rate']:.3f} written_p95={row['written_p95']:.0f}")
  records, kept = sum(r["records"] for r in rows), sum(r["kept"] for r in rows)
  print(f"{'total':24s} records={records:5d} kept={kept:5d} keep_rate={kept / records:.3f}"
        f" min_category_keep_rate={min(r['keep_rate'] for r in rows):.3f}")


if __name__ == "__main__":
  app.run(main)
