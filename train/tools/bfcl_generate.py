"""BFCL answers decoded by an agent with the project's sampler, for
`python -m train.tools.evaluate bfcl --generate`.

The agent is a training run's (`--run DIR [--step N]`) or an HF directory's
(`--hf_dir DIR`), loaded (sharded on the mesh) and decoded by
train/tools/agent_generate.py. Each question is asked as
BFCL asks a prompt-mode model: BFCL's default system prompt (Python call
syntax, no tool-call tag, the functions as JSON), built from the templates of
the installed `bfcl_eval` package, then the question's first-turn messages, through
the tokenizer's chat template. Answers are decoded greedily (or at
`--temperature`) in fixed-size batches at one prompt width, so the sampler
compiles once; a prediction is the completion's text without its stop token.
"""

from __future__ import annotations

from typing import Any, Sequence

from genenv_jax.scoring import InputError, bfcl, read_jsonl
from genenv_jax.scoring.bfcl_prompt import bfcl_system_prompt
from train.tools import agent_generate
from train.tools.agent_generate import Agent, generate, load_agent

# The shared pieces under their earlier names here.
_prompt_ids = agent_generate.prompt_ids
_stop_ids = agent_generate.stop_ids
__all__ = ["Agent", "bfcl_system_prompt", "generate", "load_agent", "question_messages",
           "select", "write_predictions"]


def question_messages(record: dict[str, Any]) -> list[dict[str, str]]:
  """The chat messages of a BFCL question line: the system prompt, then the
  first turn's messages (a system message of the question is appended to ours)."""
  question = record.get("question")
  if isinstance(question, str):
    turn = [{"role": "user", "content": question}]
  elif question and isinstance(question[0], list):
    turn = [dict(m) for m in question[0]]
  else:
    raise InputError(f"BFCL id {record.get('id')!r}: 'question' is neither a string "
                     "nor a list of turns")
  system = bfcl_system_prompt(record.get("function", []))
  if turn and turn[0].get("role") == "system":
    turn[0]["content"] = system + "\n\n" + turn[0]["content"]
    return turn
  return [{"role": "system", "content": system}] + turn


def select(items: Sequence[Any], item_id, ids: Sequence[str], category: str) -> list:
  """The items whose `item_id(item)` is in `ids`, in their order; all when `ids`
  is empty.

  Raises:
    InputError: an id of `ids` names no item.
  """
  return agent_generate.select(items, item_id, ids, f"BFCL category {category!r}")


def write_predictions(data_dir: str, category: str, agent: Agent, path: str,
                      max_new_tokens: int, batch_size: int, limit: int = 0,
                      temperature: float = 0.0, ids: Sequence[str] = ()) -> int:
  """Decodes the agent's answers to a category's questions (the first `limit`,
  0: all; of those named in `ids` when given) into the predictions file `path`
  (written by process 0 alone); returns how many.

  Raises:
    InputError: an id of `ids` is not in the category.
  """
  questions, _ = bfcl.category_files(data_dir, category)
  records = select(read_jsonl(questions), lambda r: r.get("id"), ids, category)
  if limit:
    records = records[:limit]
  texts = generate(agent, [question_messages(r) for r in records],
                   max_new_tokens, batch_size, temperature)
  agent_generate.write_records(path, [{"id": record["id"], "result": text}
                                      for record, text in zip(records, texts)])
  return len(records)
