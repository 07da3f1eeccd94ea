"""Seed and held-out questions of the chat arithmetic domain, drawn at random.

Per level, questions written the way a person asks them ("What is 47 + 38?",
"Calculate 6 × 7.", "How much is 9 - 4?"), each a draw of an expression of that
level (`expression_forms`) in one of `PHRASINGS`. The train split seeds D_train,
the simulator's warm-start and the scripted arms' banks; the test split, the
same number of questions per level that no player wrote and none in the train
split, is the held-out set. Deterministic in config.data.seed.
"""

from __future__ import annotations

import itertools

import numpy as np

from genenv_jax.domains.chat_arithmetic.domain import (ChatArithmeticDomain,
                                                       level_of)

PHRASINGS = ("What is {e}?", "Calculate {e}.", "How much is {e}?",
             "Compute {e}.", "What does {e} equal?", "Find the value of {e}.")
_SYMBOLS = {"+": "+", "-": "-", "*": "\u00d7"}


def expression_forms(domain: ChatArithmeticDomain) -> dict[int, list[tuple]]:
  """{level: [(digits, operators), ...]}: every shape of expression the domain
  accepts, by its level: operands of up to `digits` digits (the longest has
  exactly that many) joined by `operators`."""
  forms: dict[int, list[tuple]] = {}
  for count in range(2, domain.max_operands + 1):
    for operators in itertools.product("+-*", repeat=count - 1):
      for digits in range(1, domain.max_operand_digits + 1):
        level = level_of([10 ** (digits - 1)], operators) + (count - 2)
        if level <= domain.max_difficulty:
          forms.setdefault(level, []).append((digits, operators))
  return forms


def draw_question(form: tuple, rng: np.random.Generator) -> str:
  """One question of `form` (digits, operators): operands of at most `digits`
  digits, the first exactly `digits` long (any digit for one-digit forms); a
  lone subtraction's right operand at most its left one (no negative
  answers), a product's factors at least 2."""
  digits, operators = form
  low = 10 ** (digits - 1) if digits > 1 else 0
  operands = [int(rng.integers(low, 10 ** digits))]
  for operator in operators:
    if operator == "-" and len(operators) == 1:
      operands.append(int(rng.integers(0, operands[0] + 1)))
    else:  # a product's factors from 2, so that none is trivial
      operands.append(int(rng.integers(2 if operator == "*" else 0, 10 ** digits)))
  expression = str(operands[0]) + "".join(
      f" {_SYMBOLS[o]} {n}" for o, n in zip(operators, operands[1:]))
  return str(rng.choice(PHRASINGS)).format(e=expression)


def seed_splits(domain: ChatArithmeticDomain, config, data_dir: str
                ) -> tuple[dict, dict]:
  """The run's seed data (the registry's `seed_splits`): per level
  config.data.num_train_per_level train and num_test_per_level test
  questions, distinct, no test question in the train split; `data_dir` is
  unused (nothing is downloaded)."""
  del data_dir
  rng = np.random.default_rng(config.data.seed)
  splits = {"train": ([], []), "test": ([], [])}
  sizes = {"train": config.data.num_train_per_level,
           "test": config.data.num_test_per_level}
  for level, forms in sorted(expression_forms(domain).items()):
    seen: set[str] = set()
    for name in ("test", "train"):
      rows, levels = splits[name]
      tries = 0
      while sum(1 for l in levels if l == level) < sizes[name]:
        tries += 1
        if tries > 100 * sizes[name]:
          raise ValueError(f"chat arithmetic: level {level} has too few distinct "
                           f"questions for config.data.num_{name}_per_level="
                           f"{sizes[name]}")
        written = draw_question(forms[int(rng.integers(len(forms)))], rng)
        seed = domain.seed_row(written)
        if written in seen or seed is None:
          continue
        seen.add(written)
        rows.append(seed[0])
        levels.append(seed[1])
  return tuple({"task": np.asarray(splits[name][0], np.int32).reshape(-1, domain.task_len),
                "difficulty": np.asarray(splits[name][1], np.int32)}
               for name in ("train", "test"))
