"""The text domain with a real byte-level BPE tokenizer trained here: delimiter
parsing, prompt splicing, the written-task format and its config checks."""

from __future__ import annotations

import json
import math

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
import tokenizers
import transformers

from genenv_jax.domains import get_domain
from genenv_jax.domains.text.domain import TextDomain

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

QA = [
    ("What is the capital of France?", "Paris"),
    ("What is the capital of Italy?", "Rome"),
    ("What is 2 plus 3?", "5"),
    ("Add 4 and 5.", "9"),
    ("Name the largest planet.", "Jupiter"),
    ("What colour is the sky?", "blue"),
    ("Which city hosts the Louvre?", "Paris"),
    ("Call the weather tool for Paris.",
     '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'),
    ("Solve 3 times 4.", "\\boxed{12}"),
]


def make_tokenizer(directory) -> transformers.PreTrainedTokenizerBase:
  """A byte-level BPE (GPT-2 style pre-tokenizer) with Qwen's chat markers and
  template, trained on delimited tasks; saved to and loaded back from `directory`."""
  corpus = []
  for task, answer in QA:
    corpus += [f"New Task: {task}\nNew Answer: {answer}", task, answer,
               f"{task} New Answer: {answer}", answer.lower(), answer.upper()]
  raw = tokenizers.Tokenizer(tokenizers.models.BPE())
  raw.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
  raw.decoder = tokenizers.decoders.ByteLevel()
  trainer = tokenizers.trainers.BpeTrainer(
      vocab_size=480, special_tokens=SPECIAL_TOKENS,
      initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
  raw.train_from_iterator(corpus * 20, trainer)
  fast = transformers.PreTrainedTokenizerFast(
      tokenizer_object=raw, eos_token="<|im_end|>", pad_token="<|endoftext|>")
  fast.chat_template = CHAT_TEMPLATE
  fast.save_pretrained(str(directory))
  return transformers.AutoTokenizer.from_pretrained(str(directory))


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
  return make_tokenizer(tmp_path_factory.mktemp("tokenizer"))


WIDTHS = dict(max_task_tokens=16, max_answer_tokens=6, max_written_tokens=40,
              max_difficulty=4)


@pytest.fixture(scope="module")
def domain(tokenizer):
  return TextDomain(tokenizer, **WIDTHS)


BATCH = 16  # every parse of the shared domain runs at this batch: one compilation


@pytest.fixture(scope="module")
def parse(domain):
  """rows (and mask) -> ParsedTasks on the host, through one jitted parse."""
  jitted = jax.jit(domain.parse)

  def run(rows, mask=None):
    mask = rows != domain.pad_id if mask is None else mask
    n = len(rows)
    rows = np.concatenate([rows, np.full((BATCH - n, rows.shape[1]), domain.pad_id)])
    mask = np.concatenate([mask, np.zeros((BATCH - n, mask.shape[1]), bool)])
    return jax.tree.map(lambda x: x[:n], jax.device_get(jitted(rows, mask)))
  return run


def _chat(tokenizer, content: str) -> str:
  return tokenizer.apply_chat_template([{"role": "user", "content": content}],
                                       tokenize=False, add_generation_prompt=True)


def _rows(domain, texts, eos=True):
  """Written rows of raw simulator texts: ids, EOS (unless eos=False), pad."""
  rows = np.full((len(texts), domain.task_len), domain.pad_id, np.int32)
  for i, text in enumerate(texts):
    ids = domain.tokenizer(text, add_special_tokens=False)["input_ids"]
    ids = (ids + [domain.eos_id] if eos else ids)[:domain.task_len]
    rows[i, :len(ids)] = ids
  return rows


def _span_len(tokenizer, text: str) -> int:
  return len(tokenizer(" " + text, add_special_tokens=False)["input_ids"])


def test_written_tasks_parse_into_prompt_reference_and_row(tokenizer, domain, parse):
  tasks = ["What is the capital of France?", "Add 4 and 5.",
           "Name the largest planet. What is the capital of Italy? Which city?"]
  answers = ["Paris", "9", "Jupiter"]
  rows = domain.encode_tasks(tasks, answers)
  parsed = parse(rows)
  assert parsed.valid.tolist() == [True, True, True]
  for i, (task, answer) in enumerate(zip(tasks, answers)):
    prompt = np.asarray(parsed.prompt[i])
    mask = np.asarray(parsed.prompt_mask[i])
    assert mask[-1] and np.all(np.diff(mask.astype(int)) >= 0)  # left-padded
    assert domain.decode(prompt[mask])[0] == _chat(tokenizer, task)
    reference = np.asarray(parsed.reference[i])[np.asarray(parsed.reference_mask[i])]
    assert domain.decode(reference)[0] == answer + "<|im_end|>"
    assert reference[-1] == domain.eos_id
    np.testing.assert_array_equal(np.asarray(parsed.task[i]), rows[i])
    span = _span_len(tokenizer, task)
    assert parsed.difficulty[i] == 1 + (span - 1) * 4 // 16
  assert int(parsed.difficulty[0]) < int(parsed.difficulty[2])
  # Every agent prompt has the width the domain announces.
  assert parsed.prompt.shape == (3, domain.agent_prompt_len)
  assert parsed.reference.shape == (3, domain.answer_len)


def test_delimiters_found_after_a_preamble_and_on_one_line(tokenizer, domain, parse):
  texts = ["Sure. New Task: What is 2 plus 3?\nNew Answer: 5",
           "New Task: What is 2 plus 3? New Answer: 5"]
  rows = _rows(domain, texts)
  parsed = parse(rows)
  assert parsed.valid.all()
  for i in range(2):
    prompt = np.asarray(parsed.prompt[i])[np.asarray(parsed.prompt_mask[i])]
    assert domain.decode(prompt)[0] == _chat(tokenizer, "What is 2 plus 3?")
    assert domain.decode(np.asarray(parsed.reference[i]))[0] == "5<|im_end|>"
  # The pool row drops the preamble and re-parses to the same task.
  assert domain.decode(np.asarray(parsed.task[0]))[0] == (
      "New Task: What is 2 plus 3?\nNew Answer: 5<|im_end|>")
  again = parse(parsed.task)
  np.testing.assert_array_equal(again.prompt, parsed.prompt)
  np.testing.assert_array_equal(again.reference, parsed.reference)


INVALID = {
    "no delimiter": "What is 2 plus 3? 5",
    "no answer delimiter": "New Task: What is 2 plus 3? 5",
    "two task delimiters": "New Task: Add 4 and 5.\nNew Task: Add 4 and 5.\nNew Answer: 9",
    "two answer delimiters": "New Task: Add 4 and 5.\nNew Answer: 9\nNew Answer: 9",
    "answer before task": "New Answer: 9\nNew Task: Add 4 and 5.",
    "empty task": "New Task: \nNew Answer: 9",
    "empty answer": "New Task: Add 4 and 5.\nNew Answer:  \n",
    "task too long": "New Task: " + "What is the capital of France? " * 4 + "\nNew Answer: 9",
    "answer too long": "New Task: Add 4 and 5.\nNew Answer: " + "Paris " * 8,
    "special token": "New Task: Add <|im_start|> 4 and 5.\nNew Answer: 9",
}


def test_malformed_generations_are_invalid(domain, parse):
  names = list(INVALID)
  rows = _rows(domain, [INVALID[n] for n in names])
  # Truncation: the budget filled without EOS; and an EOS outside the mask.
  full = _rows(domain, ["New Task: Add 4 and 5.\nNew Answer: " + "9 " * 40], eos=False)
  fine = _rows(domain, ["New Task: Add 4 and 5.\nNew Answer: 9"])
  rows = np.concatenate([rows, full, fine, fine])
  mask = rows != domain.pad_id
  eos_col = int(np.argmax(fine[0] == domain.eos_id))
  mask[-2, eos_col] = False  # the EOS was not written by the simulator
  names += ["truncated at max length", "EOS outside the mask", "well formed"]
  assert (full[0] != domain.pad_id).all() and domain.eos_id not in full[0]
  parsed = parse(rows, mask)
  assert dict(zip(names, parsed.valid.tolist())) == {
      n: n == "well formed" for n in names}
  invalid = ~parsed.valid
  assert (parsed.difficulty[invalid] == 0).all()
  assert (parsed.task[invalid] == domain.pad_id).all()
  assert not parsed.reference_mask[invalid].any()
  assert parsed.prompt_mask.any(axis=1).all()  # every prompt attends to something


def test_answer_ends_at_its_first_line_break(tokenizer, parse):
  """answer_ends="line_break": what follows the answer's line is ignored (a chat
  model's comment, a second example), a generation cut after that line still counts,
  and the pool row ends after the line; the EOS rule would reject all of these."""
  lines = TextDomain(tokenizer, answer_ends="line_break", **WIDTHS)
  texts = {
      "comment after": "New Task: Add 4 and 5.\nNew Answer: 9\n\nThis is easy.",
      "second example": "New Task: Add 4 and 5.\nNew Answer: 9\nNew Task: Add 4 and 5.",
      "answer on the next line": "New Task: Add 4 and 5.\nNew Answer:\n9\nDone",
      "no line break": "New Task: Add 4 and 5.\nNew Answer: 9",
      "two lines, too long": "New Task: Add 4 and 5.\nNew Answer: " + "Paris " * 8
                             + "\nok",
  }
  rows = _rows(lines, list(texts.values()))
  cut = _rows(lines, ["New Task: Add 4 and 5.\nNew Answer: 9\nThis is " + "easy " * 40],
              eos=False)
  assert lines.eos_id not in cut[0]
  rows = np.concatenate([rows, cut])
  names = list(texts) + ["cut after the answer's line"]
  by_line = jax.device_get(jax.jit(lines.parse)(rows, rows != lines.pad_id))
  assert dict(zip(names, by_line.valid.tolist())) == {
      n: n != "two lines, too long" for n in names}
  for i in np.flatnonzero(by_line.valid):
    reference = by_line.reference[i][by_line.reference_mask[i]]
    assert lines.decode(reference)[0] in ("9<|im_end|>", "9\n<|im_end|>"), names[i]
    assert lines.decode(by_line.task[i])[0].rstrip("\n").startswith(
        "New Task: Add 4 and 5.\nNew Answer:"), names[i]
  # The row ends at the answer's line and parses again to the same task.
  assert lines.decode(by_line.task[0])[0] == (
      "New Task: Add 4 and 5.\nNew Answer: 9\n<|im_end|>")
  again = jax.device_get(jax.jit(lines.parse)(by_line.task, by_line.task != lines.pad_id))
  assert again.valid[by_line.valid].all()
  np.testing.assert_array_equal(again.reference, by_line.reference)
  # Under the EOS rule the comment, the second example and the cut generation are
  # invalid, and the next-line answer runs on to EOS.
  by_eos = parse(rows)
  assert dict(zip(names, by_eos.valid.tolist())) == {
      n: n in ("no line break", "answer on the next line") for n in names}
  reference = by_eos.reference[2][by_eos.reference_mask[2]]
  assert lines.decode(reference)[0] == "9\nDone<|im_end|>"
  with pytest.raises(ValueError, match="config.task.answer_ends='comma'"):
    TextDomain(tokenizer, answer_ends="comma", **WIDTHS)


def test_simulator_prompt_splices_the_seed_into_the_chat_template(tokenizer, domain):
  rows = domain.encode_tasks(["Add 4 and 5.", "Name the largest planet."], ["9", "Jupiter"])
  prompt, mask = jax.device_get(jax.jit(domain.simulator_prompt)(rows))
  assert prompt.shape == (2, domain.simulator_prompt_len)
  for i, (task, answer) in enumerate([("Add 4 and 5.", "9"),
                                      ("Name the largest planet.", "Jupiter")]):
    assert np.all(np.diff(mask[i].astype(int)) >= 0) and mask[i, -1]
    seed = f"New Task: {task}\nNew Answer: {answer}"
    expected = _chat(tokenizer, (
        f"Here is a task with its answer:\n\n{seed}\n\nWrite one new task of the same "
        "kind, with its correct answer, in exactly this format:\nNew Task: <the task>\n"
        "New Answer: <the answer>"))
    assert domain.decode(prompt[i][mask[i]])[0] == expected


def test_summary_signal_writes_the_success_rate(tokenizer):
  domain = TextDomain(tokenizer, summary_signals=True,
                      simulator_instruction="Seed:\n{seed}\n{signal}\nWrite a new one.",
                      signal_template="Solved: {rate}.", **WIDTHS)
  rows = domain.encode_tasks(["Add 4 and 5."] * 4, ["9"] * 4)
  prompt, mask = jax.device_get(jax.jit(domain.simulator_prompt)(
      rows, np.array([0.42, 1.0, math.nan, 3.0], np.float32)))
  texts = [domain.decode(p[m])[0] for p, m in zip(prompt, mask)]
  seed = "New Task: Add 4 and 5.\nNew Answer: 9"
  assert [t for t in texts] == [
      _chat(tokenizer, f"Seed:\n{seed}\nSolved: {rate}.\nWrite a new one.")
      for rate in ("40%", "100%", "unknown", "unknown")]
  unknown, _ = jax.device_get(jax.jit(domain.simulator_prompt)(rows))
  np.testing.assert_array_equal(unknown[2], prompt[2])


def test_plain_prompts_without_chat_template(tokenizer):
  domain = TextDomain(tokenizer, use_chat_template=False,
                      agent_instruction="Question: {task}\nAnswer:", **WIDTHS)
  rows = domain.encode_tasks(["Add 4 and 5."], ["9"])
  parsed = jax.device_get(jax.jit(domain.parse)(rows, rows != domain.pad_id))
  assert domain.decode(parsed.prompt[0][parsed.prompt_mask[0]])[0] == (
      "Question: Add 4 and 5.\nAnswer:")


def test_host_verifier_rejects_uncheckable_references(domain, tokenizer):
  tool = TextDomain(tokenizer, verifier="tool_call", max_task_tokens=16,
                    max_answer_tokens=40, max_written_tokens=64)
  call = '<tool_call>{"name": "f", "arguments": {}}</tool_call>'
  rows = tool.encode_tasks(["Add 4 and 5.", "Add 4 and 5.", "Add 4 and 5."],
                           [call, "9", "<tool_call>{not json}</tool_call>"])
  parsed = jax.device_get(jax.jit(tool.parse)(rows, rows != tool.pad_id))
  assert parsed.valid.tolist() == [True, False, False]


def test_config_errors_name_the_field(tokenizer, tmp_path):
  with pytest.raises(ValueError, match="eos_token and pad_token"):
    TextDomain(tokenizer, pad_token="<|im_end|>", **WIDTHS)
  with pytest.raises(ValueError, match="config.task.verifier"):
    TextDomain(tokenizer, verifier="regex", **WIDTHS)
  with pytest.raises(ValueError, match=r"\{task\} exactly once"):
    TextDomain(tokenizer, agent_instruction="Answer:", **WIDTHS)
  with pytest.raises(ValueError, match="max_written_tokens=5"):
    TextDomain(tokenizer, **dict(WIDTHS, max_written_tokens=5))
  with pytest.raises(ValueError, match="'<bos>' is not a token"):
    TextDomain(tokenizer, eos_token="<bos>", **WIDTHS)
  with pytest.raises(ValueError, match="task 0 is"):
    TextDomain(tokenizer, **WIDTHS).encode_tasks(["word " * 50], ["x"])


def test_registry_builds_the_domain_from_config(tokenizer, tmp_path):
  tokenizer.save_pretrained(str(tmp_path))
  config = ml_collections.ConfigDict(dict(
      name="text", tokenizer_dir=str(tmp_path), verifier="f1", **WIDTHS))
  domain = get_domain(config)
  assert isinstance(domain, TextDomain)
  assert domain.verifier == "f1" and domain.task_len == 40
  assert domain.eos_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
  assert domain.pad_id == tokenizer.convert_tokens_to_ids("<|endoftext|>")


def test_checkpoint_stop_ids_end_rows_and_read_as_eos(tokenizer, tmp_path):
  """Qwen2.5-Instruct's generation_config.json lists <|im_end|> and
  <|endoftext|> (also its pad): both stop sampling, and a row the model ended
  with <|endoftext|> parses like one ended with <|im_end|>."""
  tokenizer.save_pretrained(str(tmp_path))
  im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
  endoftext = tokenizer.convert_tokens_to_ids("<|endoftext|>")
  (tmp_path / "generation_config.json").write_text(
      json.dumps({"eos_token_id": [im_end, endoftext]}))
  config = ml_collections.ConfigDict(dict(
      name="text", tokenizer_dir=str(tmp_path), verifier="f1", **WIDTHS))
  domain = get_domain(config)
  assert domain.stop_ids == (im_end, endoftext)
  rows = _rows(domain, ["New Task: what is two plus two? New Answer: four"])
  ended_by_pad = np.where(rows == domain.eos_id, endoftext, rows)
  mask = np.cumsum(ended_by_pad == endoftext, axis=1) <= 1  # through the stop
  canonical = domain.canonical_stops(jnp.asarray(ended_by_pad), jnp.asarray(mask))
  np.testing.assert_array_equal(np.asarray(canonical), rows)
  assert bool(domain.parse(canonical, jnp.asarray(mask)).valid[0])
  # Without a generation config only eos stops.
  (tmp_path / "generation_config.json").unlink()
  assert get_domain(config).stop_ids == (im_end,)
