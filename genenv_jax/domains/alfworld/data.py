"""Seed tasks and the held-out set "ALFWorld-synthetic" of the ALFWorld domain.

  python -m genenv_jax.domains.alfworld.data --config=configs/alfworld.py:smoke
      # each split's size, levels, task types and plan lengths

`sample_spec` draws a spec over a bundled layout: a task type the room allows
(ALFWorld's own table of which task types each kind of room has, and the
receptacle or lamp the type needs), a target object of the room's object
types that the task can use, a target receptacle type that can hold it, and
where the objects start: the target object(s) (two for pick_two_obj_and_place,
sometimes one more), the lamp for look_at_obj_in_light, and up to three other
objects of the room, each in a random receptacle that can hold it.

The layouts are split: HELD_OUT_LAYOUTS (every layout whose number ends in 0,
three of each room kind) hold the held-out set and no seed, so its rooms are
unseen in training. The held-out set is fixed: `test_per_task` specs of each of
the six task types that the planner solves, drawn by a generator of its own
seed (TEST_SEED), the same in every run; it is reported as
"ALFWorld-synthetic". Train seeds are drawn from the other layouts with
config.data.seed, the six task types in turn, in equal shares per level of
`AlfworldDomain.level` as far as the draws reach (the rest at any level). Both
splits are the rows `AlfworldDomain.seed_row` makes of them: a spec over the
domain's turn limit or widths is dropped and counted. `seed_splits` keeps
them in the run's data directory (config.data.tfds_dir, else <workdir>/tfds).
"""

from __future__ import annotations

import collections
import hashlib
import importlib.metadata
import json
import os
from typing import Callable, Sequence

from absl import logging
import numpy as np

from genenv_jax.domains.alfworld import game
from genenv_jax.domains.alfworld.domain import AlfworldDomain

BENCHMARK = "ALFWorld-synthetic"
TEST_SEED = 20251219
_ABILITY = {"pick_heat_then_place": "Heatable", "pick_cool_then_place": "Coolable",
            "pick_clean_then_place": "Cleanable"}
_MAX_DRAWS = 8
_GIVE_UP = 20


def held_out_layout(layout: str) -> bool:
  """Whether a layout belongs to the held-out rooms (number ending in 0)."""
  return game.layout_number(layout) % 10 == 0


HELD_OUT_LAYOUTS = tuple(f"FloorPlan{n}" for n in (10, 20, 30, 210, 220, 230, 310,
                                                    320, 330, 410, 420, 430))


def task_types_of(layout: str) -> tuple[str, ...]:
  """The task types a layout's room allows (ALFWorld's GOALS_VALID, and the
  receptacle or lamp each needs)."""
  constants = game._modules().constants  # pylint: disable=protected-access
  room = game.room(layout)
  kinds = []
  for task, key in game.TASK_TYPES.items():
    if game.scene_type(layout) not in constants.GOALS_VALID[key]:
      continue
    if task in game.NEEDS and game.NEEDS[task] not in room.rtypes:
      continue
    if task == "look_at_obj_in_light" and not set(game.LAMPS) & room.object_types:
      continue
    kinds.append(task)
  return tuple(kinds)


def sample_spec(rng: np.random.Generator, layout: str, task: str
                ) -> game.Spec | None:
  """A random spec of `task` in `layout` (module docstring); None when the
  room has no object or receptacle the task can use."""
  constants = game._modules().constants  # pylint: disable=protected-access
  room = game.room(layout)
  movable = sorted(t for t in room.object_types if t not in game.LAMPS)
  if task in _ABILITY:
    movable_targets = [t for t in movable if t in constants.VAL_ACTION_OBJECTS[_ABILITY[task]]]
  else:
    movable_targets = movable
  if task == "look_at_obj_in_light":
    lamps = sorted(set(game.LAMPS) & room.object_types)
    pairs = [(o, l) for o in movable_targets for l in lamps]
  else:
    pairs = [(o, r) for o in movable_targets for r in sorted(room.rtypes)
             if o in constants.VAL_RECEPTACLE_OBJECTS.get(r, ())]
  if not pairs:
    return None
  target_object, target = pairs[rng.integers(len(pairs))]
  count = (2 if task == "pick_two_obj_and_place" else 1) + int(rng.random() < 0.3)
  kinds = [target_object] * count
  if task == "look_at_obj_in_light":
    kinds.append(target)
  others = [t for t in movable if t != target_object]
  for _ in range(rng.integers(0, 4)):
    if others:
      kinds.append(others[rng.integers(len(others))])
  placements = []
  for kind in kinds:
    holders = [r.name for r in room.receptacles
               if game._can_hold(r.rtype, kind)]  # pylint: disable=protected-access
    if not holders:
      return None
    placements.append((kind, holders[rng.integers(len(holders))]))
  return game.Spec(layout, task, target_object, target, tuple(placements))


def draw_specs(rng: np.random.Generator, layouts: Sequence[str],
               wanted: Callable[[int], bool], count: int,
               tasks: Sequence[str] = tuple(game.TASK_TYPES)
               ) -> list[tuple[game.Spec, int]]:
  """Up to `count` distinct specs with their plan lengths, each one whose
  plan length `wanted` accepts (and marks taken: a quota may change): task
  types in turn over `tasks`, each in a layout drawn among those that allow
  it. A task type that yields nothing in its first _GIVE_UP draws is dropped;
  all stop after _MAX_DRAWS draws per spec asked for."""
  out, seen = [], set()
  allowed = {t: [l for l in layouts if t in task_types_of(l)] for t in tasks}
  tried, kept = collections.Counter(), collections.Counter()
  turn = 0
  for _ in range(_MAX_DRAWS * max(count, 1)):
    active = [t for t in tasks if allowed[t] and (kept[t] or tried[t] < _GIVE_UP)]
    if len(out) >= count or not active:
      break
    task = active[turn % len(active)]
    turn += 1
    tried[task] += 1
    spec = sample_spec(rng, allowed[task][rng.integers(len(allowed[task]))], task)
    if spec is None or spec.text() in seen:
      continue
    seen.add(spec.text())
    steps = game.plan(spec)
    if steps is not None and wanted(len(steps)):
      kept[task] += 1
      out.append((spec, len(steps)))
  return out


def held_out_specs(test_per_task: int) -> list[tuple[game.Spec, int]]:
  """ALFWorld-synthetic: `test_per_task` specs of each task type over
  HELD_OUT_LAYOUTS that the planner solves (plan length >= 1), drawn by a
  generator seeded with TEST_SEED: the same specs in every run."""
  rng = np.random.default_rng(TEST_SEED)
  out = []
  for task in game.TASK_TYPES:
    out += draw_specs(rng, HELD_OUT_LAYOUTS, lambda n: n >= 1, test_per_task, (task,))
  return out


def train_specs(domain: AlfworldDomain, seed: int, num_train: int
                ) -> list[tuple[game.Spec, int]]:
  """`num_train` specs over the other layouts, in equal shares per level of
  `domain.level` as far as _MAX_DRAWS allows, the rest filled at any level."""
  quota = {level: num_train // domain.max_difficulty
           + (level <= num_train % domain.max_difficulty)
           for level in range(1, domain.max_difficulty + 1)}

  def wanted(steps: int) -> bool:
    level = domain.level(steps)
    if quota.get(level, 0) > 0:
      quota[level] -= 1
      return True
    return False

  layouts = [l for l in game.layouts() if not held_out_layout(l)]
  rng = np.random.default_rng(seed)
  drawn = draw_specs(rng, layouts, wanted, num_train)
  if len(drawn) < num_train:  # levels the draws rarely reach
    known = {s.text() for s, _ in drawn}
    more = draw_specs(rng, layouts, lambda n: domain.level(n) > 0,
                      num_train - len(drawn) + len(known))
    drawn += [d for d in more if d[0].text() not in known][:num_train - len(drawn)]
  return drawn


def alfworld_splits(domain: AlfworldDomain, seed: int, num_train: int,
                    test_per_task: int) -> dict[str, dict]:
  """{"train": split, "test": split}, each {"task": int32[n, task_len],
  "difficulty": int32[n], "specs": [spec text], "plan_lengths": int32[n],
  "dropped": specs that do not parse in this domain (turn limit, widths)}:
  rows as `domain.seed_row` reads them (module docstring)."""
  return {"train": _split(domain, train_specs(domain, seed, num_train)),
          "test": _split(domain, held_out_specs(test_per_task))}


def _split(domain: AlfworldDomain, drawn: list[tuple[game.Spec, int]]) -> dict:
  rows, levels, texts, lengths = [], [], [], []
  for spec, steps in drawn:
    seed = domain.seed_row(spec.text())
    if seed is not None:
      rows.append(seed[0])
      levels.append(seed[1])
      texts.append(spec.text())
      lengths.append(steps)
  return {"task": np.asarray(rows, np.int32).reshape(-1, domain.task_len),
          "difficulty": np.asarray(levels, np.int32), "specs": texts,
          "plan_lengths": np.asarray(lengths, np.int32),
          "dropped": len(drawn) - len(rows)}


def seed_splits(domain: AlfworldDomain, config, data_dir: str
                ) -> tuple[dict, dict]:
  """The run's seed data (the registry's `seed_splits`): `alfworld_splits`
  with config.data's seed, num_train and test_per_task, kept in
  `<data_dir>/alfworld/` (a local data_dir) under a name that changes with
  everything they depend on, so that a resumed or repeated run reads them."""
  path = _cache_path(domain, config, data_dir)
  splits = _read_cache(domain, path)
  if splits is None:
    splits = alfworld_splits(domain, config.data.seed, config.data.num_train,
                             config.data.test_per_task)
    _write_cache(path, splits)
  for name, split in splits.items():
    if not len(split["task"]):
      raise ValueError(f"ALFWorld: no {name} spec fits the domain's widths and "
                       f"turn limit ({split['dropped']} dropped; widen "
                       "config.task.max_turns or the widths).")
    logging.info("ALFWorld seeds: %d %s specs (%s), %d dropped, per level %s.",
                 len(split["task"]), name, BENCHMARK if name == "test" else "seeds",
                 split["dropped"], np.bincount(split["difficulty"]).tolist())
  return tuple({"task": splits[name]["task"], "difficulty": splits[name]["difficulty"]}
               for name in ("train", "test"))


def _cache_path(domain: AlfworldDomain, config, data_dir: str) -> str | None:
  """Where seed_splits keeps the splits; None for no local data_dir."""
  if not data_dir or "://" in data_dir:
    return None
  tokenizer = domain.tokenizer
  key = json.dumps({
      "format": 1,
      "packages": [importlib.metadata.version(p) for p in ("alfworld", "textworld")],
      "data": [config.data.seed, config.data.num_train, config.data.test_per_task],
      "task": {k: v for k, v in config.task.to_dict().items()
               if k not in ("tokenizer_dir", "live_games")},
      "tokenizer": [len(tokenizer), tokenizer.chat_template,
                    tokenizer(_PROBE, add_special_tokens=False)["input_ids"]],
  }, sort_keys=True, default=str)
  name = hashlib.sha256(key.encode()).hexdigest()[:16]
  return os.path.join(data_dir, "alfworld", f"splits-{name}.json")


_PROBE = ("layout: FloorPlan1; task: pick_two_obj_and_place soapbottle -> "
          "countertop; start: soapbottle in cabinet 1")


def _read_cache(domain: AlfworldDomain, path: str | None) -> dict | None:
  if not path or not os.path.isfile(path):
    return None
  with open(path) as f:
    stored = json.load(f)
  return {name: {"task": domain.encode_tasks(split["specs"]).reshape(-1, domain.task_len),
                 "difficulty": np.asarray(split["difficulty"], np.int32),
                 "specs": split["specs"],
                 "plan_lengths": np.asarray(split["plan_lengths"], np.int32),
                 "dropped": split["dropped"]}
          for name, split in stored.items()}


def _write_cache(path: str | None, splits: dict) -> None:
  if not path:
    return
  os.makedirs(os.path.dirname(path), exist_ok=True)
  stored = {name: {"specs": s["specs"], "difficulty": s["difficulty"].tolist(),
                   "plan_lengths": s["plan_lengths"].tolist(), "dropped": s["dropped"]}
            for name, s in splits.items()}
  temporary = f"{path}.{os.getpid()}.tmp"
  with open(temporary, "w") as f:
    json.dump(stored, f)
  os.replace(temporary, path)


def main(argv) -> None:
  """Prints each split's size, levels, task types and plan lengths for
  --config."""
  del argv
  from absl import flags  # pylint: disable=import-outside-toplevel
  config = flags.FLAGS.config
  domain = AlfworldDomain.from_config(config.task)
  splits = alfworld_splits(domain, config.data.seed, config.data.num_train,
                           config.data.test_per_task)
  for name, split in splits.items():
    name = BENCHMARK if name == "test" else name
    tasks = collections.Counter(s.split("task: ")[1].split()[0] for s in split["specs"])
    print(f"{name}: {len(split['task'])} specs, per level "
          f"{np.bincount(split['difficulty'], minlength=domain.max_difficulty + 1)[1:].tolist()}, "
          f"plan lengths {np.bincount(split['plan_lengths']).tolist()}, "
          f"{split['dropped']} dropped, tasks {dict(tasks)}")


if __name__ == "__main__":
  from absl import app  # pylint: disable=g-import-not-at-top
  from ml_collections import config_flags  # pylint: disable=g-import-not-at-top
  config_flags.DEFINE_config_file("config", None, "An alfworld config.")
  app.run(main)
