"""Where a domain's seed data arrives: the config field a launcher's
`--seed_data` sets, and the files the domain reads from that directory.

Each domain that reads files declares a `SeedData` in its package's data.py
(`DOMAINS` in genenv_jax/domains/__init__.py holds it): the text domain reads
`config.data.source_dir`, TravelPlanner and BFCL multi-turn read
`config.task.data_dir`; the arithmetic, maze, chat-arithmetic and ALFWorld
domains draw or build their seeds and read no directory (`None`).

A launcher asks `train.tools.seed_data` for the field (so `--seed_data`
reaches every domain through one registry) and checks the directory's file
names before anything runs. The check sees names only, relative to the
directory (a local listing or a `gcloud storage ls` of a bucket), so it
works before the files are copied anywhere; reading them is the domain's.
"""

from __future__ import annotations

import os
from typing import Any, Callable, NamedTuple, Sequence

from genenv_jax.scoring import InputError


class SeedData(NamedTuple):
  """A domain's seed-data directory.

  Attributes:
    field: the config field, dotted under the run's config ("data.source_dir").
    expected: config -> the files the domain reads there, in words.
    missing: (config, names) -> what the directory lacks, in words (empty when
      the domain can read it); `names` are its files' paths relative to it,
      "/"-separated, at any depth.
    required: whether a run needs the directory (False: the domain has a
      default source, e.g. BFCL multi-turn's bfcl_eval wheel).
  """

  field: str
  expected: Callable[[Any], str]
  missing: Callable[[Any, Sequence[str]], list[str]]
  required: bool = True


def local_names(path: str) -> list[str]:
  """The files under a local directory, relative to it, "/"-separated.

  Raises:
    InputError: `path` is not a directory.
  """
  if not os.path.isdir(path):
    raise InputError(f"{path} is not a directory")
  names = []
  for root, _, files in os.walk(path):
    for name in files:
      names.append(os.path.relpath(os.path.join(root, name), path).replace(
          os.sep, "/"))
  return sorted(names)


def listed_names(lines: Sequence[str], root: str) -> list[str]:
  """The files of a recursive listing (`gcloud storage ls --recursive ROOT`:
  one URL a line, directory headers ending in "/:" or "/", blank lines),
  relative to `root`."""
  prefix = root.rstrip("/") + "/"
  names = []
  for line in lines:
    line = line.strip()
    if not line or line.endswith("/") or line.endswith(":"):
      continue
    if line.startswith(prefix):
      names.append(line[len(prefix):])
  return sorted(names)


def field_value(config: Any, field: str) -> Any:
  """config's value at a dotted field ("task.data_dir")."""
  node = config
  for key in field.split("."):
    node = node[key]
  return node


def problem(config: Any, spec: SeedData, path: str,
            names: Sequence[str]) -> str | None:
  """None when the domain can read `names` (the files under `path`), else
  a message naming the field, the path and the files expected."""
  lacking = spec.missing(config, names)
  if not lacking:
    return None
  return (f"config.{spec.field}={path}: the {config.task.name} domain reads "
          f"{spec.expected(config)}; {path} lacks {'; '.join(lacking)} "
          f"({len(names)} files found there)")


def top_level(names: Sequence[str], suffixes: tuple[str, ...]) -> list[str]:
  """The names directly in the directory that end in one of `suffixes`."""
  return [n for n in names if "/" not in n and n.endswith(suffixes)]
