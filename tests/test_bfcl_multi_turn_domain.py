"""The BFCL multi-turn training domain: what parse keeps (by executing the
ground truth), the held-out split, and the host environment's episodes scored
as the official checker scores the same steps (tests/bfcl_multi_turn_oracle.py,
the oracle; the project's code path never evals)."""

from __future__ import annotations

import numpy as np
import pytest

from configs import text as text_config
from genenv_jax.domains import get_domain
from genenv_jax.domains.bfcl_multi_turn import data as data
from genenv_jax.domains.bfcl_multi_turn import env as env_lib
from genenv_jax.domains.bfcl_multi_turn.domain import BfclMultiTurnDomain
from genenv_jax.scoring import bfcl_variations as bv
from models import hf
from tests.bfcl_multi_turn_oracle import official_verdict

FOLDER = ("Classes: GorillaFileSystem\n"
          'State: {"GorillaFileSystem": {"root": {"home": {"type": "directory", '
          '"contents": {"notes.txt": {"type": "file", "content": "hello"}}}}}}\n'
          "User: Make a folder named drafts here.\n"
          "Calls: [mkdir(dir_name='drafts')]\n"
          "User: Now show me notes.txt.\n"
          "Calls: [cat(file_name='notes.txt')]")


@pytest.fixture(scope="module")
def domain(qwen_tokenizer_dir):
  return BfclMultiTurnDomain(
      hf.load_tokenizer(qwen_tokenizer_dir), function_docs="names",
      max_prompt_tokens=256, max_written_tokens=512, max_turns=8,
      max_action_tokens=96, max_observation_tokens=256, calls_per_level=1,
      max_difficulty=4, eos_token="<|im_end|>", pad_token="<|endoftext|>")


def _rows(domain, texts, width):
  rows = np.full((len(texts), width), domain.pad_id, np.int32)
  for i, written in enumerate(texts):
    ids = domain.tokenizer(written, add_special_tokens=False)["input_ids"]
    rows[i, :len(ids) + 1] = ids + [domain.eos_id]
  return rows


def test_parse_keeps_only_variations_whose_ground_truth_runs(domain):
  broken = {
      "a folder that is not there": FOLDER.replace(
          "cat(file_name='notes.txt')", "cd(folder='nowhere')"),
      "a file that is not there": FOLDER.replace("notes.txt')", "missing.txt')"),
      "a function of another class": FOLDER.replace(
          "mkdir(dir_name='drafts')", "post_tweet(content='hi')"),
      "an unknown class": FOLDER.replace("Classes: GorillaFileSystem",
                                         "Classes: GorillaFileSystem, Shell"),
      "state that is not JSON": FOLDER.replace('"hello"}}}}}}', '"hello"}}}}'),
      "an argument the function does not take": FOLDER.replace(
          "dir_name='drafts'", "folder='drafts'"),
      "no call at all": FOLDER.replace("[mkdir(dir_name='drafts')]", "[]").replace(
          "[cat(file_name='notes.txt')]", "[]"),
      "a missing Calls line": FOLDER.rsplit("\n", 1)[0],
  }
  texts = ["Let me think first.\n" + FOLDER, *broken.values()]
  rows = _rows(domain, texts, domain.simulator_len)
  mask = np.cumsum(rows == domain.eos_id, axis=1) - (rows == domain.eos_id) == 0
  parsed = domain.parse(rows, mask)
  valid = np.asarray(parsed.valid)
  assert valid[0], "the valid variation (after some reasoning) was rejected"
  for (why, _), ok in zip(broken.items(), valid[1:]):
    assert not ok, f"kept a variation with {why}"
  # Difficulty is the replayed ground truth's call count (2 calls, 1 a level).
  assert np.asarray(parsed.difficulty).tolist() == [2] + [0] * len(broken)
  # The pool row is the canonical text, which parses to the same task.
  row = np.asarray(parsed.task)[0]
  assert domain.decode(row)[0] == bv.read(FOLDER).text() + "<|im_end|>"
  again = domain.parse(np.asarray(parsed.task), np.asarray(parsed.task) != domain.pad_id)
  np.testing.assert_array_equal(np.asarray(again.task), np.asarray(parsed.task))
  np.testing.assert_array_equal(np.asarray(again.valid), valid)
  # The agent's prompt: the functions' names and the first user turn.
  prompt = domain.decode(np.asarray(parsed.prompt)[0])[0]
  assert "mkdir" in prompt and "Make a folder named drafts here." in prompt
  assert "Now show me" not in prompt
  # A truncated generation (no EOS inside the mask) is invalid.
  cut = domain.parse(rows[:1], mask[:1] & (np.arange(rows.shape[1]) < 20))
  assert not bool(np.asarray(cut.valid)[0])


def test_parse_rejects_a_ground_truth_longer_than_the_episode(domain, qwen_tokenizer_dir):
  short = BfclMultiTurnDomain(domain.tokenizer, function_docs="names",
                              max_prompt_tokens=256, max_written_tokens=512,
                              max_turns=3, eos_token="<|im_end|>",
                              pad_token="<|endoftext|>")
  rows = _rows(short, [FOLDER], short.simulator_len)
  assert not bool(np.asarray(short.parse(rows, rows != short.pad_id).valid)[0])
  assert bool(np.asarray(domain.parse(rows, rows != domain.pad_id).valid)[0])


def test_held_out_split_shares_no_entry_number_with_train(domain):
  splits = data.bfcl_splits(domain, data.CATEGORIES, 0.2, 0, max_seed_turns=2)
  train, test = splits["train"], splits["test"]
  assert len(train.rows) > 50 and len(test.rows) > 5
  train_numbers = {data.entry_number(i) for i in train.ids}
  test_numbers = {data.entry_number(i) for i in test.ids}
  assert not train_numbers & test_numbers
  # Both categories are in each split, and no written task is in both.
  for split in (train, test):
    assert {i.rsplit("_", 1)[0] for i in split.ids} == set(data.CATEGORIES)
  assert not {r.tobytes() for r in train.rows} & {r.tobytes() for r in test.rows}
  # The rows are the parser's: each parses to itself with its difficulty.
  parsed = domain.parse(test.rows, test.rows != domain.pad_id)
  assert np.asarray(parsed.valid).all()
  np.testing.assert_array_equal(np.asarray(parsed.task), test.rows)
  np.testing.assert_array_equal(np.asarray(parsed.difficulty), test.difficulty)
  # Deterministic in the seed; another seed holds out other numbers.
  again = data.bfcl_splits(domain, data.CATEGORIES, 0.2, 0, max_seed_turns=2)
  assert again["test"].ids == test.ids
  other = data.bfcl_splits(domain, data.CATEGORIES, 0.2, 1, max_seed_turns=2)
  assert {data.entry_number(i) for i in other["test"].ids} != test_numbers


def _scripts(entry):
  """Step scripts for an entry: its ground truth played right, and perturbed."""
  truth = [["[" + ", ".join(calls) + "]", "Done."] if calls else ["Which one?"]
           for calls in entry.ground_truth]
  flat = lambda turns: [s for t in turns for s in t]
  scripts = {"ground truth": flat(truth),
             "chatter only": ["Sure."] * len(entry.ground_truth),
             "repeated": flat([[t[0]] + t for t in truth]),
             "ends early": flat(truth)[:-1]}
  first = next(i for i, calls in enumerate(entry.ground_truth) if calls)
  dropped = [list(t) for t in truth]
  calls = list(entry.ground_truth[first])
  dropped[first][0] = "[" + ", ".join(calls[:-1]) + "]" if len(calls) > 1 else "No."
  scripts["last call dropped"] = flat(dropped)
  later = [list(t) for t in truth]
  if first + 1 < len(later):
    later[first], later[first + 1] = ["Later."], truth[first] + truth[first + 1]
    scripts["delayed a turn"] = flat(later)
  return scripts


def _play(domain, rows, steps_per_row):
  """Each row's episode through the HostEnvironment adapter: (success, reward,
  done) after its steps."""
  env = domain.environment
  state = env.reset(rows)
  n, a = rows.shape[0], env.action_len
  success = np.zeros(n, bool)
  reward = np.zeros(n, np.float32)
  done = np.zeros(n, bool)
  for turn in range(max(map(len, steps_per_row))):
    action = np.full((n, a), domain.pad_id, np.int32)
    mask = np.zeros((n, a), bool)
    for b, steps in enumerate(steps_per_row):
      if turn < len(steps) and not done[b]:
        ids = domain.tokenizer(steps[turn], add_special_tokens=False)["input_ids"]
        ids = ids[:a - 1] + [domain.eos_id]
        action[b, :len(ids)], mask[b, :len(ids)] = ids, True
    live = mask.any(axis=1)
    stepped = env.step(state, action, mask)
    state = type(state)(*[np.where(live.reshape((-1,) + (1,) * (np.ndim(new) - 1)),
                                   new, old) for new, old in zip(stepped.state, state)])
    reward += np.where(live, np.asarray(stepped.reward), 0)
    success |= live & np.asarray(stepped.success)
    done |= live & np.asarray(stepped.done)
  return success, reward, done


def test_episodes_score_as_the_official_checker(domain):
  splits = data.bfcl_splits(domain, data.CATEGORIES, 0.2, 0, max_seed_turns=2)
  rows, steps, expected, names = [], [], [], []
  for index in np.linspace(0, len(splits["train"].rows) - 1, 6).astype(int):
    row = splits["train"].rows[index]
    entry = domain.environment.host.task(row)
    question = {"id": entry.id, "question": [list(t) for t in entry.turns],
                "initial_config": entry.initial_config,
                "involved_classes": list(entry.involved_classes)}
    for name, script in _scripts(entry).items():
      turns = env_lib.result_turns(entry, script)
      rows.append(row)
      steps.append(script)
      expected.append(official_verdict(question, [list(t) for t in entry.ground_truth],
                                       turns))
      names.append(f"{entry.id}: {name}")
  success, reward, done = _play(domain, np.stack(rows), steps)
  for name, ok, want, end in zip(names, success, expected, done):
    # Every script but "ends early" finishes its last turn; an unfinished
    # episode is truncated (it scores 0 whatever its turns so far would get).
    assert end != name.endswith("ends early"), name
    if end:
      assert ok == want, f"{name}: episode success {ok}, official verdict {want}"
    else:
      assert not ok, name
  assert any(expected) and not all(expected)
  # A passed episode earns every turn; a failed one less.
  assert np.all(reward[success] == 1.0) and np.all(reward[~success] < 1.0)


def test_smoke_preset_builds_its_domain_from_the_tokenizer_cache(qwen_tokenizer_dir):
  config = text_config.get_config("bfcl_multi_turn_smoke")
  config.task.tokenizer_dir = qwen_tokenizer_dir
  built = get_domain(config.task)
  assert isinstance(built, BfclMultiTurnDomain)
  assert built.environment.max_turns == config.task.max_turns
  full = text_config.get_config("bfcl_multi_turn")
  assert full.task.function_docs == "bfcl" and full.task.max_prompt_tokens >= 7680


def test_long_observations_keep_their_head_and_the_template_closing(domain):
  messages = [{"role": "tool", "name": "cat(file_name='a')", "content": "x " * 50},
              {"role": "tool", "name": "ls()", "content": "word " * 400}]
  full = domain.observation_ids(messages, 10_000)
  text = domain.tokenizer.decode(full)
  assert text.startswith("\n<|im_start|>user") and text.endswith(
      "<|im_end|>\n<|im_start|>assistant\n")
  cut = domain.observation_ids(messages, 64)
  assert len(cut) == 64 < len(full)
  closing = domain.tokenizer("\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
                             add_special_tokens=False)["input_ids"]
  assert cut[:64 - len(closing)] == full[:64 - len(closing)]
  assert cut[-len(closing):] == closing


def test_config_validation_names_bad_bfcl_multi_turn_fields():
  from train import config_validation  # pylint: disable=import-outside-toplevel
  config_validation.validate(text_config.get_config("bfcl_multi_turn_smoke"), 8)
  for field, value in (("task.function_docs", "xml"), ("task.max_turns", 0),
                       ("data.categories", ("multi_turn_miss_func",)),
                       ("episodes.reward", "steps")):
    config = text_config.get_config("bfcl_multi_turn_smoke")
    section, name = field.split(".")
    config[section][name] = value
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
      config_validation.validate(config, 8)


def test_a_task_field_the_domain_does_not_take_is_named():
  task = text_config.get_config("bfcl_multi_turn_smoke").task
  task.tokenizer_dir = "/nonexistent"
  task.max_agent_step = 3  # not a field of the domain
  with pytest.raises(ValueError, match=r"does not know: \['max_agent_step'\]"):
    BfclMultiTurnDomain.from_config(task)
