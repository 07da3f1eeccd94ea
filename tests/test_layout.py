"""The house rules the layout keeps: the driver never branches on a domain's
name (a domain is its package plus one registry line), and every registered
domain implements the whole interface."""

import inspect
import pathlib
import re

import pytest

from genenv_jax import domains
from genenv_jax.domains import base

ROOT = pathlib.Path(__file__).resolve().parents[1]
# `config.task.name` compared with a name: dispatch that bypasses `DOMAINS`.
_NAME_BRANCH = re.compile(r"task\.name\s*(==|!=|in\b)")


def _sources(*folders):
  for folder in folders:
    yield from sorted((ROOT / folder).rglob("*.py"))


def test_no_module_outside_the_domains_branches_on_a_domains_name():
  offenders = []
  for path in _sources("genenv_jax", "train", "launch", "models"):
    if (ROOT / "genenv_jax" / "domains") in path.parents:
      continue
    for number, line in enumerate(path.read_text().splitlines(), 1):
      code = line.split("#")[0]
      if _NAME_BRANCH.search(code):
        offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
  assert not offenders, "\n".join(offenders)


def test_the_rule_catches_a_branch():
  assert _NAME_BRANCH.search('  if config.task.name == "maze":')
  assert _NAME_BRANCH.search("if config.task.name in ('a', 'b'):")
  assert not _NAME_BRANCH.search("domain = DOMAINS[config.task.name]")


def test_every_registered_domain_implements_the_interface():
  abstract = {name for name, member in vars(base.TaskDomain).items()
              if getattr(member, "__isabstractmethod__", False)}
  assert {"check_config", "parse", "from_config"} <= abstract
  for name, entry in domains.DOMAINS.items():
    assert issubclass(entry.domain, base.TaskDomain), name
    assert not inspect.isabstract(entry.domain), (
        name, entry.domain.__abstractmethods__)
    assert callable(entry.seed_splits), name
    assert domains.registered(name) is entry
  with pytest.raises(ValueError, match="known: \\[.*'arithmetic'"):
    domains.registered("chess")


def test_train_keeps_few_flat_modules():
  flat = sorted(p.name for p in (ROOT / "train").glob("*.py")
                if p.name != "__init__.py")
  assert len(flat) <= 8, flat
