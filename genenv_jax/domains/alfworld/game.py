"""ALFWorld games from compact specs, played through TextWorld on the host.

The `alfworld` wheel ships ALFWorld's PDDL domain (`alfred.pddl`), its text
grammar (`alfred.twl2`), its goal library and 120 room layouts (FloorPlan1-30
kitchens, 201-230 living rooms, 301-330 bedrooms, 401-430 bathrooms), but not
the game files. This module writes games from a one-line spec:

    layout: FloorPlan1; task: pick_heat_then_place apple -> countertop; start: apple in fridge 1, bread in countertop 2

* `layout`: a bundled room. Its receptacles are the layout's receptacle
  instances (`FloorPlanN-openable.json`, one location each) and one instance of
  every other static receptacle type its object list (`FloorPlanN-objects.json`)
  names (a kitchen's stoveburner, toaster, ...). They are named as ALFWorld's
  demangler names them in the game ("cabinet 3").
* `task`: one of TASK_TYPES, its object type and its target: the receptacle
  type to put the object in, or for look_at_obj_in_light the lamp type
  (desklamp, floorlamp). The goal is ALFWorld's own (its goal library), and
  so is the task sentence the agent reads ("put a hot apple in countertop.").
* `start`: where the game's objects start, `<object type> in <receptacle>`,
  comma-separated, at most MAX_PLACEMENTS: object types of the layout's object
  list only, each in a receptacle that can hold it (ALFWorld's canContain
  table); a lamp stands on a receptacle that does not open.

`read_spec` raises SpecError naming the bad field; `problem` writes the PDDL
problem (the agent starts in the middle of the room, receptacles closed);
`plan` asks the bundled Fast Downward planner for a plan (None when it finds
none: an unsolvable task). `GamePool` plays games in TextWorld's PDDL
environment with ALFWorld's demangler (as ALFWorld's own TextWorld loop does),
keeping each episode's game live between turns.

TextWorld and ALFWorld are imported on first use (requirements-alfworld.txt);
this module imports without them. Their translator (`fast_downward.pddl2sas`)
rewrites sys.argv and is not thread-safe: every call here holds one lock,
restores sys.argv, and memoizes translations (a pure function of the domain
and problem text), so resetting a game does not translate it again.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import importlib.util
import json
import os
import re
import sys
import threading
from typing import Any, NamedTuple, Sequence

# Spec task names -> ALFWorld's goal-library keys.
TASK_TYPES = {
    "pick_and_place": "pick_and_place_simple",
    "look_at_obj_in_light": "look_at_obj_in_light",
    "pick_clean_then_place": "pick_clean_then_place_in_recep",
    "pick_heat_then_place": "pick_heat_then_place_in_recep",
    "pick_cool_then_place": "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place": "pick_two_obj_and_place",
}
MAX_PLACEMENTS = 8
MAX_SAME_TYPE = 3
LAMPS = ("DeskLamp", "FloorLamp")
INSTALL_HINT = ("the ALFWorld domain needs alfworld, textworld and their planner: "
                "pip install --no-deps -r requirements-alfworld.txt")
# Receptacle types named by their objects in the layouts' lists.
_BASINS = {"Sink": "SinkBasin", "Bathtub": "BathtubBasin"}
_MANGLE = (("-", "_minus_"), ("|", "_bar_"), ("+", "_plus_"), (".", "_dot_"),
           (",", "_comma_"))
# Domain constants every problem declares (the actions name them).
_DOMAIN_RTYPES = ("SinkBasin", "Microwave", "Fridge")
_DOMAIN_OTYPES = ("Knife", "ButterKnife")
_TRANSLATIONS = 512
# The receptacle type each task's action needs.
NEEDS = {"pick_heat_then_place": "Microwave", "pick_cool_then_place": "Fridge",
          "pick_clean_then_place": "SinkBasin"}


class SpecError(ValueError):
  """A spec that is not a game: malformed, or naming what its layout lacks."""


def _modules() -> Any:
  """ALFWorld's and TextWorld's modules, imported once (ImportError naming
  the requirements file otherwise)."""
  return _load_modules()


@functools.lru_cache(maxsize=None)
def _load_modules() -> Any:
  try:
    # pylint: disable=import-outside-toplevel
    import alfworld.gen.constants as constants
    import alfworld.gen.goal_library as goals
    from alfworld.agents.environment import alfred_tw_env
    import fast_downward
    import textworld
    from textworld.envs.pddl import PddlEnv
  except ImportError as e:
    raise ImportError(f"{INSTALL_HINT} ({e})") from e
  _memoize_translation(fast_downward)
  return collections.namedtuple(
      "Modules", "constants goals demangler textworld pddl_env fast_downward")(
          constants, goals, alfred_tw_env.AlfredDemangler, textworld, PddlEnv,
          fast_downward)


_LOCK = threading.RLock()


def _memoize_translation(fast_downward) -> None:
  """Wraps fast_downward.pddl2sas (which TextWorld calls twice per load and
  per reset) in a bounded cache that also restores sys.argv."""
  translate = fast_downward.pddl2sas
  if getattr(translate, "genenv_memoized", False):
    return
  cache: collections.OrderedDict = collections.OrderedDict()

  def pddl2sas(domain, problem, verbose=False, optimize=False):
    key = (domain, problem, bool(optimize))
    with _LOCK:
      if key in cache:
        cache.move_to_end(key)
        return cache[key]
      argv = list(sys.argv)
      try:
        value = translate(domain, problem, verbose=verbose, optimize=optimize)
      finally:
        sys.argv[:] = argv
      cache[key] = value
      while len(cache) > _TRANSLATIONS:
        cache.popitem(last=False)
      return value

  pddl2sas.genenv_memoized = True
  fast_downward.pddl2sas = pddl2sas


def package_dir() -> str:
  """The installed alfworld package's directory (no import: alfworld's
  __init__ makes a cache directory)."""
  spec = importlib.util.find_spec("alfworld")
  if spec is None or not spec.origin:
    raise ImportError(INSTALL_HINT)
  return os.path.dirname(spec.origin)


@functools.lru_cache(maxsize=None)
def pddl_domain() -> str:
  with open(os.path.join(package_dir(), "data", "alfred.pddl")) as f:
    return f.read()


@functools.lru_cache(maxsize=None)
def grammar_template() -> str:
  with open(os.path.join(package_dir(), "data", "alfred.twl2")) as f:
    return f.read()


@functools.lru_cache(maxsize=None)
def layouts() -> tuple[str, ...]:
  """The bundled layouts ("FloorPlan1", ...) in number order."""
  folder = os.path.join(package_dir(), "gen", "layouts")
  names = {f.split("-")[0] for f in os.listdir(folder) if f.endswith("-openable.json")}
  return tuple(sorted(names, key=layout_number))


def layout_number(layout: str) -> int:
  return int(layout[len("FloorPlan"):])


def scene_type(layout: str) -> str:
  """Kitchen (1-30), LivingRoom (201-230), Bedroom (301-330), Bathroom (401-430)."""
  return {0: "Kitchen", 2: "LivingRoom", 3: "Bedroom", 4: "Bathroom"}[
      layout_number(layout) // 100]


def mangle(name: str) -> str:
  """An ALFRED object id as a PDDL name (ALFWorld's escaping)."""
  for char, word in _MANGLE:
    name = name.replace(char, word)
  return name


class Receptacle(NamedTuple):
  pddl_id: str  # lower case, as the translator writes it
  rtype: str    # ALFWorld's type, e.g. "SinkBasin"
  name: str     # what the agent reads, e.g. "sinkbasin 1"


@dataclasses.dataclass(frozen=True)
class Room:
  """A layout's receptacles (in name order) and its object types."""
  layout: str
  receptacles: tuple[Receptacle, ...]
  object_types: frozenset[str]

  @functools.cached_property
  def by_name(self) -> dict[str, Receptacle]:
    return {r.name: r for r in self.receptacles}

  @functools.cached_property
  def rtypes(self) -> frozenset[str]:
    return frozenset(r.rtype for r in self.receptacles)


@functools.lru_cache(maxsize=None)
def room(layout: str) -> Room:
  """The bundled layout's room (module docstring); SpecError for an unknown one."""
  if layout not in layouts():
    raise SpecError(f"layout: {layout!r} is not a bundled layout (FloorPlan1-30, "
                    "201-230, 301-330, 401-430)")
  m = _modules()
  folder = os.path.join(package_dir(), "gen", "layouts")
  with open(os.path.join(folder, f"{layout}-openable.json")) as f:
    ids = sorted(json.load(f))
  with open(os.path.join(folder, f"{layout}-objects.json")) as f:
    listed = set(json.load(f))
  static = set(m.constants.RECEPTACLES) - set(m.constants.MOVABLE_RECEPTACLES)
  # "Sink|x|y|z|SinkBasin": the receptacle is the basin.
  typed = [(i, i.split("|")[4] if i.count("|") >= 4 else i.split("|")[0]) for i in ids]
  present = {t for _, t in typed}
  for kind in sorted(listed):
    rtype = _BASINS.get(kind, kind)
    if rtype in static and rtype not in present:
      # An id of ALFRED's form, so that the demangler names it alike.
      typed.append((f"{kind}|+00.00|+00.00|+00.00"
                    + (f"|{rtype}" if kind in _BASINS else ""), rtype))
      present.add(rtype)
  pddl_ids = [mangle(i).lower() for i, _ in typed]
  names = _demangled(pddl_ids)
  receptacles = sorted((Receptacle(p, t, names[p]) for p, (_, t) in zip(pddl_ids, typed)),
                       key=lambda r: (r.name.split()[0], int(r.name.split()[1])))
  placeable = set().union(*m.constants.VAL_RECEPTACLE_OBJECTS.values()) - static
  objects = {t for t in listed if (t in placeable or t in LAMPS) and "Sliced" not in t}
  return Room(layout, tuple(receptacles), frozenset(objects))


def _demangled(pddl_ids: Sequence[str]) -> dict[str, str]:
  """{pddl id: agent-facing name} as ALFWorld's demangler names receptacles."""
  from alfworld.agents.utils.misc import Demangler  # pylint: disable=import-outside-toplevel
  Info = collections.namedtuple("Info", "id")
  demangler = Demangler(game_infos={i: Info(i) for i in pddl_ids})
  return {i: demangler.demangle_alfred_name(i).strip() for i in pddl_ids}


@functools.lru_cache(maxsize=None)
def _type_names() -> dict[str, str]:
  """{lower-case name: ALFWorld type} of every object and receptacle type."""
  c = _modules().constants
  return {t.lower(): t for t in (*c.OBJECTS, *c.RECEPTACLES, *_BASINS.values())}


@dataclasses.dataclass(frozen=True)
class Spec:
  """A written task (module docstring). Types are ALFWorld's ("Apple")."""
  layout: str
  task: str
  target_object: str
  target: str
  placements: tuple[tuple[str, str], ...]  # (object type, receptacle name)

  def text(self) -> str:
    """The canonical one-line spec."""
    start = ", ".join(f"{o.lower()} in {r}" for o, r in self.placements)
    return (f"layout: {self.layout}; task: {self.task} {self.target_object.lower()} "
            f"-> {self.target.lower()}; start: {start}")

  def description(self) -> str:
    """The task sentence the agent reads (ALFWorld's first template)."""
    template = _modules().goals.gdict[TASK_TYPES[self.task]]["templates"][0]
    return template.format(obj=self.target_object.lower(), recep=self.target.lower(),
                           toggle=self.target.lower(), mrecep="")


_FIELDS = ("layout", "task", "start")


def read_spec(text: str) -> Spec:
  """The Spec of a one-line spec (case and spacing free, a final '.' allowed).

  Raises:
    SpecError: naming the field that is malformed or names something the
      layout lacks.
  """
  line = " ".join(text.strip().rstrip(".").split())
  parts = [p.strip() for p in line.split(";")]
  if len(parts) != len(_FIELDS):
    raise SpecError(f"expected {len(_FIELDS)} fields separated by ';' "
                    f"({', '.join(_FIELDS)}), found {len(parts)}")
  values = {}
  for part, field in zip(parts, _FIELDS):
    label, _, value = part.partition(":")
    if label.strip().lower() != field or not value.strip():
      raise SpecError(f"field {field!r}: expected '{field}: ...', found {part!r}")
    values[field] = value.strip()
  match = re.fullmatch(r"floorplan(\d+)", values["layout"].lower())
  if not match:
    raise SpecError(f"layout: {values['layout']!r} is not FloorPlan<number>")
  the_room = room(f"FloorPlan{int(match.group(1))}")
  task_match = re.fullmatch(r"(\w+) (\w+) ?-> ?(\w+)", values["task"].lower())
  if not task_match:
    raise SpecError(f"task: {values['task']!r} is not '<task type> <object> -> <target>'")
  task, obj, target = task_match.groups()
  if task not in TASK_TYPES:
    raise SpecError(f"task: {task!r} is not one of {tuple(TASK_TYPES)}")
  types = _type_names()
  target_object = types.get(obj)
  if target_object not in the_room.object_types or target_object in LAMPS:
    raise SpecError(f"task: object {obj!r} is not an object type of {the_room.layout}")
  target_type = types.get(target)
  if task == "look_at_obj_in_light":
    if target_type not in LAMPS:
      raise SpecError(f"task: look_at_obj_in_light needs a lamp target "
                      f"({', '.join(l.lower() for l in LAMPS)}), found {target!r}")
  elif target_type not in the_room.rtypes:
    raise SpecError(f"task: target {target!r} is not a receptacle type of "
                    f"{the_room.layout}")
  placements = []
  for item in values["start"].lower().split(","):
    item_match = re.fullmatch(r"(\w+) in (\w+ \d+)", item.strip())
    if not item_match:
      raise SpecError(f"start: {item.strip()!r} is not '<object> in <receptacle> <n>'")
    kind, where = types.get(item_match.group(1)), item_match.group(2)
    if kind not in the_room.object_types:
      raise SpecError(f"start: {item_match.group(1)!r} is not an object type of "
                      f"{the_room.layout}")
    if where not in the_room.by_name:
      raise SpecError(f"start: {where!r} is not a receptacle of {the_room.layout}")
    if not _can_hold(the_room.by_name[where].rtype, kind):
      raise SpecError(f"start: a {where.split()[0]} cannot hold a {kind.lower()}")
    placements.append((kind, where))
  if len(placements) > MAX_PLACEMENTS:
    raise SpecError(f"start: {len(placements)} objects, more than {MAX_PLACEMENTS}")
  counts = collections.Counter(k for k, _ in placements)
  if max(counts.values()) > MAX_SAME_TYPE:
    raise SpecError(f"start: more than {MAX_SAME_TYPE} objects of one type")
  return Spec(the_room.layout, task, target_object, target_type, tuple(placements))


def _can_hold(rtype: str, kind: str) -> bool:
  m = _modules()
  if kind in LAMPS:
    return rtype not in m.constants.OPENABLE_CLASS_SET
  return kind in m.constants.VAL_RECEPTACLE_OBJECTS.get(rtype, ())


def problem(spec: Spec, planning: bool = False) -> str:
  """The spec's PDDL problem for ALFWorld's domain. `planning`: only the
  receptacles a plan can use (those the objects start in, those of the target
  type and of the type the task's action needs): a smaller search with the
  same shortest plans, for these six task types (the agent holds one object
  at a time and never needs to set one down elsewhere)."""
  c = _modules().constants
  the_room = room(spec.layout)
  objects, init = ["agent1 - agent", "loc_bar_start - location"], [
      "(atLocation agent1 loc_bar_start)"]
  location = {r.name: f"loc_bar_{index + 1}"
              for index, r in enumerate(the_room.receptacles)}
  used = {where for _, where in spec.placements}
  needed = {spec.target, NEEDS.get(spec.task)}
  for r in the_room.receptacles:
    if planning and r.name not in used and r.rtype not in needed:
      continue
    objects += [f"{r.pddl_id} - receptacle", f"{location[r.name]} - location"]
    init += [f"(receptacleType {r.pddl_id} {r.rtype}Type)",
             f"(receptacleAtLocation {r.pddl_id} {location[r.name]})"]
    if r.rtype in c.OPENABLE_CLASS_SET:
      init.append(f"(openable {r.pddl_id})")
  kinds = {k for k, _ in spec.placements} | {spec.target_object}
  if spec.target in LAMPS:
    kinds.add(spec.target)
  for index, (kind, where) in enumerate(spec.placements):
    oid = f"{kind.lower()}_bar_{index + 1}"
    objects.append(f"{oid} - object")
    init += [f"(objectType {oid} {kind}Type)",
             f"(inReceptacle {oid} {the_room.by_name[where].pddl_id})",
             f"(objectAtLocation {oid} {location[where]})"]
    if kind not in LAMPS:
      init.append(f"(pickupable {oid})")
    if kind in c.MOVABLE_RECEPTACLES_SET:
      init.append(f"(isReceptacleObject {oid})")
    for group, fact in (("Cleanable", "cleanable"), ("Heatable", "heatable"),
                        ("Coolable", "coolable"), ("Sliceable", "sliceable"),
                        ("Toggleable", "toggleable")):
      if kind in c.VAL_ACTION_OBJECTS[group]:
        init.append(f"({fact} {oid})")
  for rtype in sorted(the_room.rtypes):
    for kind in sorted(kinds):
      if kind in c.VAL_RECEPTACLE_OBJECTS.get(rtype, ()):
        init.append(f"(canContain {rtype}Type {kind}Type)")
  objects += [f"{t}Type - rtype"
              for t in sorted(the_room.rtypes | set(_DOMAIN_RTYPES))]
  objects += [f"{t}Type - otype" for t in sorted(kinds | set(_DOMAIN_OTYPES))]
  goal = _modules().goals.gdict[TASK_TYPES[spec.task]]["pddl"].format(
      obj=spec.target_object, recep=spec.target, toggle=spec.target, mrecep="")
  # The goal library writes '#' for PDDL's '-' and closes the define.
  return ("(define (problem genenv_alfworld)\n (:domain alfred)\n (:objects\n  "
          + "\n  ".join(objects) + "\n )\n (:init\n  " + "\n  ".join(init)
          + "\n )\n" + goal.replace("#", "-") + "\n")


def game_data(spec: Spec) -> dict[str, str]:
  """The spec's game as a `.tw-pddl` file holds one (JSON fields)."""
  return {"pddl_domain": pddl_domain(),
          "grammar": grammar_template().replace("UNKNOWN GOAL", spec.description()),
          "pddl_problem": problem(spec)}


def plan(spec: Spec) -> tuple[str, ...] | None:
  """The bundled planner's plan for the spec (PDDL operators, on
  `problem(spec, planning=True)`; () when the goal holds at the start), or
  None when it finds none or cannot translate the task. Its search is the one
  TextWorld's walkthroughs use (`fast_downward` solve), which returns shortest
  plans here."""
  m = _modules()
  with _LOCK:
    lib = _planner_lib()
    try:
      _, sas = m.fast_downward.pddl2sas(pddl_domain(), problem(spec, planning=True),
                                     optimize=True)
    except Exception:  # pylint: disable=broad-except
      return None  # the translator rejects some unsolvable goals outright
    if not lib.solve_sas(sas.encode("utf-8"), False):
      return None
    operators = (m.fast_downward.Operator * lib.get_last_plan_length())()
    lib.get_last_plan(operators)
    return tuple(op.name for op in operators)


@functools.lru_cache(maxsize=None)
def _planner_lib():
  return _modules().fast_downward.load_lib()


NOTHING_HAPPENS = "Nothing happens."


class Step(NamedTuple):
  """An outcome: the text the agent reads, whether the game is won, and
  whether the command was among the admissible ones."""
  feedback: str
  won: bool
  admissible: bool


class _Live:
  """A TextWorld environment holding one game, with its last state."""

  def __init__(self, env):
    self.env = env
    self.spec_text: str | None = None
    self.state = None

  def start(self, spec: Spec) -> None:
    if self.spec_text != spec.text():
      self.spec_text = None
      self.env.load(game_data(spec))
      self.spec_text = spec.text()
    self.state = self.env.reset()

  def step(self, command: str) -> Step:
    if command.strip() not in self.state["admissible_commands"]:
      # What TextWorld's PDDL environment answers a command it does not
      # admit, without the state changing; stepping it would only re-derive
      # the same admissible commands (most of a step's time).
      return Step(NOTHING_HAPPENS, self.won, False)
    self.state, _, _ = self.env.step(command)
    return Step(self.state.feedback, self.won, True)

  @property
  def won(self) -> bool:
    return bool(self.state["won"])


def new_environment():
  """A TextWorld PDDL environment with ALFWorld's demangler: what ALFWorld's
  TextWorld loop plays (`alfred_tw_env`, without its expert)."""
  m = _modules()
  infos = m.textworld.EnvInfos(admissible_commands=True, won=True)
  return m.demangler(m.pddl_env(infos))


class GamePool:
  """Live games keyed by (spec, commands played): the next command of an
  episode steps its game instead of replaying it.

  At most `capacity` TextWorld environments exist (each holds its own copy of
  the planner library, which is never unloaded, so they are reused: the least
  recently used one takes a new game).
  """

  def __init__(self, capacity: int = 512):
    if capacity < 1:
      raise ValueError(f"GamePool capacity={capacity} must be >= 1")
    self.capacity = capacity
    self._live: collections.OrderedDict = collections.OrderedDict()
    self._idle: list[_Live] = []
    self._openings: dict[str, tuple[str, str]] = {}
    self.created = 0
    self.starts = 0

  def _environment(self) -> _Live:
    if self._idle:
      return self._idle.pop()
    if self.created < self.capacity:
      self.created += 1
      return _Live(new_environment())
    return self._live.popitem(last=False)[1]

  def _started(self, spec: Spec) -> _Live:
    live = self._environment()
    try:
      live.start(spec)
    except Exception:
      self._idle.append(live)
      raise
    self.starts += 1
    return live

  def _keep(self, key, live: _Live) -> None:
    self._live[key] = live
    self._live.move_to_end(key)

  def _opened(self, spec: Spec) -> _Live:
    key = (spec.text(), ())
    live = self._live.get(key) or self._started(spec)
    self._keep(key, live)
    return live

  def opening(self, spec: Spec) -> str:
    """The game's first text: ALFWorld's welcome, the room as seen from its
    middle (its receptacles, whatever the objects), "Your task is to: ...".
    It is the text of the first game opened in the spec's layout with this
    spec's task sentence in place of that game's, so that no game is loaded
    for it (tests/test_alfworld.py compares it with TextWorld's)."""
    with _LOCK:
      if spec.layout not in self._openings:
        text, sentence = self._opened(spec).state.feedback, spec.description()
        if text.count(sentence) != 1:
          raise RuntimeError(f"the game's first text holds its task sentence "
                             f"{sentence!r} {text.count(sentence)} times")
        self._openings[spec.layout] = tuple(text.split(sentence))
      head, tail = self._openings[spec.layout]
      return head + spec.description() + tail

  def walkthrough(self, spec: Spec, operators: Sequence[str]) -> tuple[str, ...]:
    """The commands of a plan's PDDL operators (`plan`) in the spec's game,
    as TextWorld writes its walkthroughs."""
    with _LOCK:
      live = self._opened(spec)
      return tuple(live.env.unwrapped._pddl_state.plan_to_templated_actions(  # pylint: disable=protected-access
          list(operators), live.env.unwrapped._entity_infos))  # pylint: disable=protected-access

  def play(self, spec: Spec, commands: Sequence[str]) -> Step:
    """The outcome of commands[-1] after commands[:-1] from the start. A
    command after the game is won changes nothing (won, not admissible)."""
    if not commands:
      raise ValueError("play needs at least one command")
    with _LOCK:
      before = (spec.text(), tuple(commands[:-1]))
      live = self._live.pop(before, None)
      if live is None:
        live = self._started(spec)
        for command in commands[:-1]:
          if live.won:
            break
          live.step(command)
      if live.won:
        self._keep(before, live)
        return Step("", True, False)
      step = live.step(commands[-1])
      self._keep((spec.text(), tuple(commands)), live)
      return step
