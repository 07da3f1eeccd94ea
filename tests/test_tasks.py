"""Task domains: the arithmetic domain's parser, verifier, prompts and host-side helpers."""

from __future__ import annotations

import dataclasses
import functools
import re

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from configs import default as default_config
from genenv_jax.domains import TaskDomain, get_domain
from genenv_jax.domains.arithmetic.domain import BOS, DIGIT0, EOS, EQUALS, PAD, PLUS, SEP, ArithmeticDomain

MAX_DIGITS = 3
ROW_BUCKET = 64  # row counts are padded to a multiple of this so each function compiles once


@functools.cache
def _compiled(domain: ArithmeticDomain):
  return jax.jit(domain.parse), jax.jit(domain.verify), jax.jit(domain.simulator_prompt)


def _pad_rows(*arrays: np.ndarray) -> tuple[int, list[np.ndarray]]:
  num_rows = arrays[0].shape[0]
  extra = -num_rows % ROW_BUCKET
  return num_rows, [np.concatenate([a, np.zeros((extra,) + a.shape[1:], a.dtype)]) for a in arrays]


def parse(domain: ArithmeticDomain, tokens, mask):
  num_rows, padded = _pad_rows(np.asarray(tokens, np.int32), np.asarray(mask, bool))
  parsed = jax.device_get(_compiled(domain)[0](*padded))
  return type(parsed)(*(None if field is None else field[:num_rows]
                        for field in parsed))


def verify(domain: ArithmeticDomain, response, response_mask, reference, reference_mask):
  num_rows, padded = _pad_rows(
      np.asarray(response, np.int32), np.asarray(response_mask, bool),
      np.asarray(reference, np.int32), np.asarray(reference_mask, bool),
  )
  return np.asarray(_compiled(domain)[1](*padded))[:num_rows]


def simulator_prompt(domain: ArithmeticDomain, seeds):
  num_rows, padded = _pad_rows(np.asarray(seeds, np.int32))
  tokens, mask = _compiled(domain)[2](*padded)
  return np.asarray(tokens)[:num_rows], np.asarray(mask)[:num_rows]


def _ids(text: str) -> list[int]:
  """Tokens from a compact spelling: digits, '+', '=', '>', E (EOS), B (BOS), _ (pad)."""
  special = {"+": PLUS, "=": EQUALS, ">": SEP, "E": EOS, "B": BOS, "_": PAD}
  return [DIGIT0 + int(c) if c.isdigit() else special[c] for c in text]


def _row(text: str, width: int) -> list[int]:
  ids = _ids(text)
  return ids + [PAD] * (width - len(ids))


@pytest.fixture(params=[True, False], ids=["reversed", "plain"])
def domain(request) -> ArithmeticDomain:
  return ArithmeticDomain(max_digits=MAX_DIGITS, reverse_answer=request.param)


def _parse_texts(domain: ArithmeticDomain, texts: list[str], mask_widths: list[int] | None = None):
  tokens = np.array([_row(t, domain.task_len) for t in texts], np.int32)
  if mask_widths is None:
    mask = tokens != PAD
  else:
    mask = np.arange(domain.task_len)[None, :] < np.array(mask_widths)[:, None]
  return parse(domain, tokens, mask)


def test_widths_follow_max_digits():
  domain = ArithmeticDomain(max_digits=5)
  widths = (domain.task_len, domain.simulator_prompt_len, domain.agent_prompt_len, domain.answer_len)
  assert widths == (13, 14, 13, 7)
  assert domain.max_difficulty == 5 and domain.vocab_size == 16


def test_valid_tasks_parse_with_prompt_reference_and_difficulty(domain):
  cases = [  # text, difficulty, sum
      ("0+0=E", 1, 0),
      ("7+5=E", 1, 12),
      ("10+9=E", 2, 19),
      ("3+99=E", 2, 102),
      ("999+999=E", 3, 1998),
      ("100+0=E", 3, 100),
  ]
  parsed = _parse_texts(domain, [c[0] for c in cases])
  dtypes = {name: field.dtype for name, field in parsed._asdict().items()
            if field is not None}
  assert dtypes == {
      "prompt": np.int32, "prompt_mask": np.bool_, "reference": np.int32,
      "reference_mask": np.bool_, "valid": np.bool_, "difficulty": np.int32, "task": np.int32,
  }
  assert parsed.delimiter is None  # arithmetic tasks have one spelling
  np.testing.assert_array_equal(parsed.valid, True)
  np.testing.assert_array_equal(parsed.difficulty, [c[1] for c in cases])
  for i, (text, _, total) in enumerate(cases):
    answer = str(total)[::-1] if domain.reverse_answer else str(total)
    expected_reference = _row(answer + "E", domain.answer_len)
    np.testing.assert_array_equal(parsed.reference[i], expected_reference)
    np.testing.assert_array_equal(
        parsed.reference_mask[i], np.arange(domain.answer_len) <= len(answer)
    )
    prompt = _ids("B" + text[:-1])
    expected_prompt = [PAD] * (domain.agent_prompt_len - len(prompt)) + prompt
    np.testing.assert_array_equal(parsed.prompt[i], expected_prompt)
    np.testing.assert_array_equal(parsed.prompt_mask[i], np.array(expected_prompt) != PAD)
    np.testing.assert_array_equal(parsed.task[i], _row(text, domain.task_len))


def test_padded_operands_change_only_the_agent_prompt(domain):
  padded = dataclasses.replace(domain, pad_operands=True)
  texts = ["0+0=E", "10+9=E", "3+99=E", "999+999=E", "01+2=E"]  # the last is invalid
  plain, zero_padded = _parse_texts(domain, texts), _parse_texts(padded, texts)
  for name in ("reference", "reference_mask", "valid", "difficulty", "task"):
    np.testing.assert_array_equal(getattr(zero_padded, name), getattr(plain, name), err_msg=name)
  for i, prompt in enumerate(["B000+000=", "B010+009=", "B003+099=", "B999+999="]):
    np.testing.assert_array_equal(zero_padded.prompt[i], _ids(prompt))
    np.testing.assert_array_equal(zero_padded.prompt_mask[i], True)
  width = domain.agent_prompt_len
  np.testing.assert_array_equal(zero_padded.prompt[4], _row("_" * (width - 1) + "B", width))
  np.testing.assert_array_equal(zero_padded.prompt_mask[4], zero_padded.prompt[4] != PAD)


@pytest.mark.parametrize(
    "text",
    [
        "12=E",  # no '+'
        "1+2+3=E",  # two '+'
        "1=2+3E",  # '=' before '+'
        "1+2==E",  # two '='
        "01+2=E",  # leading zero in a
        "1+00=E",  # leading zero in b
        "1234+1=E",  # a too long
        "1+1234=E",  # b too long
        "+12=E",  # empty a
        "12+=E",  # empty b
        "12+3=",  # no EOS
        "12+3E",  # no '='
        "12+3=4E",  # something between '=' and EOS
        "1>2+3=E",  # separator inside
        "1B+2=E",  # BOS inside
        "E12+3=E",  # EOS first
        "1_2+3=E",  # pad inside
        "",  # all pad
    ],
)
def test_malformed_tasks_are_invalid(domain, text):
  parsed = _parse_texts(domain, [text])
  assert not bool(parsed.valid[0])
  assert int(parsed.difficulty[0]) == 0
  np.testing.assert_array_equal(parsed.task[0], PAD)
  np.testing.assert_array_equal(parsed.reference_mask[0], False)
  np.testing.assert_array_equal(parsed.reference[0], PAD)
  # An invalid row's prompt is a lone BOS, so it still attends to one token.
  np.testing.assert_array_equal(parsed.prompt[0], [PAD] * (domain.agent_prompt_len - 1) + [BOS])


def test_truncated_generation_is_invalid(domain):
  # The same tokens with the mask ending before (invalid) and at (valid) the EOS.
  parsed = _parse_texts(domain, ["12+3=E", "12+3=E"], mask_widths=[5, 6])
  np.testing.assert_array_equal(parsed.valid, [False, True])


def test_tokens_after_eos_are_ignored_and_dropped_from_the_task(domain):
  tokens = np.array([_ids("1+2=E") + _ids("9+>EB")[: domain.task_len - 5]], np.int32)
  parsed = parse(domain, tokens, np.ones_like(tokens, bool))
  assert bool(parsed.valid[0])
  np.testing.assert_array_equal(parsed.task[0], _row("1+2=E", domain.task_len))


def test_ids_outside_the_vocabulary_are_invalid(domain):
  tokens = np.array([_row("12+3=E", domain.task_len)], np.int32)
  tokens[0, 1] = 99
  assert not bool(parse(domain, tokens, tokens != PAD).valid[0])


def test_simulator_prompt_wraps_the_seed(domain):
  seeds = np.array([_row(t, domain.task_len) for t in ["12+3=E", "999+999=E", ""]], np.int32)
  tokens, mask = simulator_prompt(domain, seeds)
  for i, text in enumerate(["B12+3=>", "B999+999=>", "B>"]):
    ids = _ids(text)
    expected = [PAD] * (domain.simulator_prompt_len - len(ids)) + ids
    np.testing.assert_array_equal(tokens[i], expected)
    np.testing.assert_array_equal(mask[i], np.array(expected) != PAD)


def _verify(domain, responses: list[list[int]], references: list[str]):
  reference_rows = np.array([_row(r, domain.answer_len) for r in references], np.int32)
  response_rows = np.array(
      [r + [PAD] * (domain.answer_len - len(r)) for r in responses], np.int32
  )
  return verify(domain, response_rows, response_rows != PAD, reference_rows, reference_rows != PAD)


def test_verify_is_exact_match_on_the_response(domain):
  rewards = _verify(
      domain,
      [
          _ids("21E"),  # exact
          _ids("22E"),  # wrong digit
          _ids("21"),  # no EOS
          _ids("21E97"),  # extra tokens after EOS
          _ids("2E"),  # too short
          _ids("210E"),  # too long
          _ids("=21E"),  # the answer, but not at the start of the response
          _ids("E21E"),  # EOS first
      ],
      ["21E"] * 8,
  )
  np.testing.assert_array_equal(rewards, [1, 0, 0, 1, 0, 0, 0, 0])


def test_digits_reward_gives_partial_credit_by_position():
  domain = ArithmeticDomain(max_digits=MAX_DIGITS, reward="digits")
  rewards = _verify(
      domain,
      [
          _ids("213E"),  # exact: 1
          _ids("223E"),  # one wrong digit: 3 of 4 positions
          _ids("21E"),  # stops early: '2', '1' right, EOS misplaced: 2 of 4
          _ids("2139"),  # no EOS: 3 of 4
          _ids("2E13"),  # tokens after the first EOS never match: 1 of 4
          _ids("E213"),  # nothing in place
      ],
      ["213E"] * 6,
  )
  np.testing.assert_allclose(rewards, [1, 0.75, 0.5, 0.75, 0.25, 0])
  with pytest.raises(ValueError, match="config.task.reward"):
    ArithmeticDomain(max_digits=2, reward="f1")


def test_answer_in_the_prompt_does_not_count(domain):
  parsed = _parse_texts(domain, ["12+3=E"])
  answer = "51E" if domain.reverse_answer else "15E"
  # prompt + correct answer fed as the "response" does not start with the answer.
  prompt_then_answer = (_ids("12+3=") + _ids(answer))[: domain.answer_len]
  wrong = _ids("9E")
  responses = np.array(
      [r + [PAD] * (domain.answer_len - len(r)) for r in [prompt_then_answer, wrong]]
  )
  references = np.repeat(np.asarray(parsed.reference), 2, axis=0)
  reference_mask = np.repeat(np.asarray(parsed.reference_mask), 2, axis=0)
  rewards = verify(domain, responses, responses != PAD, references, reference_mask)
  np.testing.assert_array_equal(rewards, [0, 0])
  direct = np.array([_row(answer, domain.answer_len)])
  assert verify(domain, direct, direct != PAD, parsed.reference, parsed.reference_mask)[0] == 1.0


def test_invalid_task_reference_matches_nothing(domain):
  parsed = _parse_texts(domain, ["1+"])
  responses = np.array([_row("E", domain.answer_len), np.full(domain.answer_len, EOS)], np.int32)
  rewards = verify(
      domain, responses, np.ones_like(responses, bool),
      np.repeat(np.asarray(parsed.reference), 2, axis=0),
      np.repeat(np.asarray(parsed.reference_mask), 2, axis=0),
  )
  np.testing.assert_array_equal(rewards, [0, 0])


def test_agent_target_scores_full_reward(domain):
  rows, _ = domain.random_tasks(np.random.default_rng(1), 64)
  parsed = parse(domain, rows, rows != PAD)
  target, target_mask = domain.agent_target(parsed)
  rewards = verify(domain, target, target_mask, parsed.reference, parsed.reference_mask)
  np.testing.assert_array_equal(rewards, 1.0)


def _oracle(domain: ArithmeticDomain, row: np.ndarray, mask: np.ndarray):
  """Independent host-side check: (a, b) if the row is a valid task, else None."""
  eos = np.flatnonzero(row == EOS)
  if eos.size == 0 or not mask[: eos[0] + 1].all():
    return None
  content = row[: eos[0]]
  if not np.isin(content, list(range(DIGIT0, DIGIT0 + 10)) + [PLUS, EQUALS]).all():
    return None
  text = domain.decode(content)[0]
  operand = rf"(0|[1-9][0-9]{{0,{domain.max_digits - 1}}})"
  match = re.fullmatch(rf"{operand}\+{operand}=", text)
  return None if match is None else (int(match.group(1)), int(match.group(2)))


def test_random_token_rows_agree_with_an_independent_oracle(domain):
  rng = np.random.default_rng(0)
  num_rows = 4096
  tokens = np.full((num_rows, domain.task_len), PAD, np.int32)
  # Half the rows are near-tasks: operands of 0..max_digits+1 digits (leading zeros
  # allowed) around '+' and '=', then EOS; the other half is uniform over all ids and
  # one id outside the vocabulary. Then 3% of all tokens are replaced by random ids.
  for i in range(num_rows // 2):
    a, b = (
        "".join(rng.choice(list("0123456789"), size=rng.integers(0, domain.max_digits + 2)))
        for _ in "ab"
    )
    ids = _ids(f"{a}+{b}=E")[: domain.task_len]
    tokens[i, : len(ids)] = ids
  garbage = tokens[num_rows // 2 :]
  garbage[:] = rng.integers(0, domain.vocab_size + 1, size=garbage.shape)
  noise = rng.random(tokens.shape) < 0.03
  tokens = np.where(noise, rng.integers(0, domain.vocab_size, size=tokens.shape), tokens)
  tokens = tokens.astype(np.int32)
  mask_widths = rng.integers(domain.task_len // 2, domain.task_len + 1, size=(num_rows, 1))
  mask = np.arange(domain.task_len)[None, :] < mask_widths
  parsed = parse(domain, tokens, mask)
  for field in parsed:
    assert field is None or np.all(np.isfinite(field))
  expected = [_oracle(domain, tokens[i], mask[i]) for i in range(num_rows)]
  np.testing.assert_array_equal(parsed.valid, [e is not None for e in expected])
  valid_rows = np.flatnonzero(parsed.valid)
  assert valid_rows.size > 200, "the generator should produce a fair number of valid rows"
  a = np.array([expected[i][0] for i in valid_rows])
  b = np.array([expected[i][1] for i in valid_rows])
  np.testing.assert_array_equal(parsed.task[valid_rows], domain.encode_tasks(a, b))
  np.testing.assert_array_equal(
      parsed.difficulty[valid_rows], [max(len(str(x)), len(str(y))) for x, y in zip(a, b)]
  )
  answers = [str(x + y)[::-1] if domain.reverse_answer else str(x + y) for x, y in zip(a, b)]
  np.testing.assert_array_equal(
      parsed.reference[valid_rows], [_row(answer + "E", domain.answer_len) for answer in answers]
  )
  invalid_rows = np.flatnonzero(~parsed.valid)
  np.testing.assert_array_equal(parsed.difficulty[invalid_rows], 0)
  np.testing.assert_array_equal(parsed.task[invalid_rows], PAD)
  # Random responses against the references: rewards stay in {0, 1} and no NaN.
  responses = rng.integers(0, 16, size=(num_rows, domain.answer_len)).astype(np.int32)
  rewards = verify(
      domain, responses, np.ones_like(responses, bool), parsed.reference, parsed.reference_mask
  )
  assert np.all((rewards == 0) | (rewards == 1))


def test_random_tasks_hit_requested_difficulties():
  domain = ArithmeticDomain(max_digits=MAX_DIGITS)
  rng = np.random.default_rng(3)
  for level in range(1, MAX_DIGITS + 1):
    rows, difficulty = domain.random_tasks(rng, 200, level)
    np.testing.assert_array_equal(difficulty, level)
    parsed = parse(domain, rows, rows != PAD)
    np.testing.assert_array_equal(parsed.valid, True)
    np.testing.assert_array_equal(parsed.difficulty, level)
    np.testing.assert_array_equal(parsed.task, rows)
  rows, difficulty = domain.random_tasks(rng, 2000)
  np.testing.assert_array_equal(np.sort(np.unique(difficulty)), np.arange(1, MAX_DIGITS + 1))
  np.testing.assert_array_equal(parse(domain, rows, rows != PAD).difficulty, difficulty)
  rows, difficulty = domain.random_tasks(rng, 300, [1, 3])
  assert set(difficulty.tolist()) == {1, 3}


def test_random_operands_spread_over_both_positions_and_lengths():
  domain = ArithmeticDomain(max_digits=4)
  a, b = domain.random_operands(np.random.default_rng(5), np.full(4000, 4))
  a_len = np.array([len(str(x)) for x in a])
  b_len = np.array([len(str(x)) for x in b])
  assert np.all(np.maximum(a_len, b_len) == 4)
  assert 0.4 < np.mean(a_len == 4) < 0.75  # the longer operand is either one
  shorter = np.where(a_len == 4, b_len, a_len)
  assert set(shorter.tolist()) == {1, 2, 3, 4}


def test_operand_digits_reads_each_operands_length_and_zeroes_invalid_rows():
  domain = ArithmeticDomain(max_digits=3)
  rows = domain.encode_tasks(np.array([123, 7, 0, 45]), np.array([45, 980, 6, 100]))
  malformed = rows[:1].copy()
  malformed[0, 0] = PLUS  # `+23+45=`: not a task
  digits = domain.operand_digits(np.concatenate([rows, malformed]))
  np.testing.assert_array_equal(digits, [[3, 2], [1, 3], [1, 1], [2, 3], [0, 0]])
  with pytest.raises(ValueError, match=r"tasks must have shape \[N, 9\]"):
    domain.operand_digits(rows[:, :5])


def test_encode_tasks_rejects_bad_operands():
  domain = ArithmeticDomain(max_digits=2)
  with pytest.raises(ValueError, match="a must lie in 0..99"):
    domain.encode_tasks(np.array([100]), np.array([1]))
  with pytest.raises(ValueError, match="b must lie"):
    domain.encode_tasks(np.array([1]), np.array([-1]))
  with pytest.raises(ValueError, match="same shape"):
    domain.encode_tasks(np.array([1, 2]), np.array([1]))


def test_shape_errors_name_the_tensor(domain):
  with pytest.raises(ValueError, match="simulator_tokens must have shape"):
    domain.parse(
        jnp.zeros((2, domain.task_len + 1), jnp.int32), jnp.ones((2, domain.task_len + 1), bool)
    )
  with pytest.raises(ValueError, match="response must have shape"):
    domain.verify(
        jnp.zeros((2, 3), jnp.int32), jnp.ones((2, 3), bool),
        jnp.zeros((2, domain.answer_len), jnp.int32), jnp.ones((2, domain.answer_len), bool),
    )


def test_max_digits_is_bounded_by_int32():
  with pytest.raises(ValueError, match="max_digits"):
    ArithmeticDomain(max_digits=10)


def test_nine_digit_sums_do_not_overflow():
  domain = ArithmeticDomain(max_digits=9, reverse_answer=False)
  rows = domain.encode_tasks(np.array([999_999_999]), np.array([999_999_999]))
  parsed = parse(domain, rows, rows != PAD)
  assert domain.decode(parsed.reference) == ["1999999998<eos>"]


def test_decode_renders_rows():
  domain = ArithmeticDomain(max_digits=2)
  row = np.array([BOS, DIGIT0 + 4, PLUS, DIGIT0, EQUALS, SEP, EOS, PAD, 40])
  assert domain.decode(row) == ["<bos>4+0=><eos><40>"]


def test_get_domain_builds_from_config():
  config = default_config.get_config().task
  config.max_digits = 4
  config.reverse_answer = False
  config.pad_operands = True
  domain = get_domain(config)
  assert isinstance(domain, TaskDomain)
  assert domain == ArithmeticDomain(max_digits=4, reverse_answer=False, pad_operands=True)
  with pytest.raises(ValueError, match=r"config.task.name='sudoku'.*arithmetic"):
    get_domain(ml_collections.ConfigDict({"name": "sudoku"}))
