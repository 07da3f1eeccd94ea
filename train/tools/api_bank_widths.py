"""How many API-Bank seed records a text config's widths keep, per split.

  python -m train.tools.api_bank_widths --data_dir=DIR       # configs/text.py:api_bank
  python -m train.tools.api_bank_widths --data_dir=DIR --config=configs/text.py:api_bank \\
      --config.task.tokenizer_dir=/ckpt/Qwen2.5-7B-Instruct

DIR holds API-Bank's level-1/2 files as the text domain's `api_bank` seed format
reads them (`genenv_jax.domains.text.data`: training files the train split, test
files the held-out split). Each split's records become written-task rows by
`text_datasets.seed_rows`: a record is kept when it fits the widths and the
`api_bank` verifier reads its gold call. An empty `config.task.tokenizer_dir`
is the Qwen tokenizer that `python -m train.tools.real_models qwen_tokenizer`
builds. Prints one line per split: records, kept, unreadable gold calls,
records too long, and the 95th percentile and maximum of the task, answer and
written-task tokens.
"""

from __future__ import annotations

from absl import app
from absl import flags
from ml_collections import config_flags
import numpy as np

from genenv_jax.domains.text import data as text_datasets
from genenv_jax.domains.text import verifiers as text_verifiers
from genenv_jax.domains.text.domain import TextDomain
from train.tools import real_models

_CONFIG = config_flags.DEFINE_config_file("config", "configs/text.py:api_bank",
                                          "The text config whose widths are measured.")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "API-Bank seed directory.",
                                required=True)


def split_widths(domain: TextDomain, records) -> dict:
  """Records, kept, unreadable gold calls, too long, and token percentiles of one
  split."""
  encode = lambda text: len(domain.tokenizer(text, add_special_tokens=False)["input_ids"])
  tasks = np.array([encode(r.task) for r in records])
  answers = np.array([encode(r.answer) for r in records])
  written = np.array([len(domain.written_task_ids(r.task, r.answer)) for r in records])
  kept = len(records) - text_datasets.seed_rows(domain, records).num_dropped
  unreadable = sum(not text_verifiers.api_bank_reference_ok(r.answer) for r in records)
  too_long = int(((tasks > domain.max_task_tokens) | (answers > domain.max_answer_tokens)
                  | (written > domain.task_len)).sum())
  return dict(records=len(records), kept=kept, unreadable=unreadable, too_long=too_long,
              **{f"{name}_{stat}": float(fn(values)) for name, values in
                 (("task", tasks), ("answer", answers), ("written", written))
                 for stat, fn in (("p95", lambda v: np.percentile(v, 95)),
                                  ("max", np.max))})


def main(argv) -> None:
  del argv
  config = _CONFIG.value
  if not config.task.tokenizer_dir:
    config.task.tokenizer_dir = str(real_models.qwen_tokenizer_dir())
  domain = TextDomain.from_config(config.task)
  print(f"widths: max_task_tokens={domain.max_task_tokens} "
        f"max_answer_tokens={domain.max_answer_tokens} max_written_tokens={domain.task_len}"
        f" tokenizer={config.task.tokenizer_dir}")
  spec = text_datasets.TextTasksConfig(_DATA_DIR.value, format="api_bank")
  for split, records in text_datasets.read_splits(spec).items():
    row = split_widths(domain, records)
    print(f"{split:5s} " + " ".join(
        f"{k}={v:.0f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))


if __name__ == "__main__":
  app.run(main)
