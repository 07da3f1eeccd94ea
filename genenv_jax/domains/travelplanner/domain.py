"""TravelPlanner as an episodic domain: the simulator writes a variation of a
train query's travellers, budget and constraints; the agent writes the plan,
scored by the benchmark's constraints over the query's own reference
information (genenv_jax/scoring/travelplanner.py).

Written task. The simulator is shown a seed's pool row through the chat
template and writes a new spec, one field a line ("-" for a constraint not set):

    trip: 3 days from Sarasota to Chattanooga, March 10th, 2022 to March 12th, 2022; its annotated plan costs $1,450 for 2 people
    query: train 12
    people: 2
    budget: 2400
    house rule: pets
    cuisine: Chinese, Mexican
    room type: entire room
    transportation: no flight<EOS>

Text before the first line starting `query:` is ignored (it may reason first).
`query` names a query of the domain's data (`<split> <id>`, the 1-based row of
TravelPlanner's `<split>.csv` under `data_dir`): its origin, destination, dates
and reference information (the sandbox of flights, restaurants, accommodations
and attractions) stay the query's; the spec sets the rest. `parse` runs on the
host (`jax.pure_callback`; genenv_jax/domains/host_text.py) and keeps a
generation iff `read_spec` reads it and
- a `train` query's annotated plan passes every constraint of the varied query
  (commonsense and hard: so the task has a solution, and one the plan shows);
- a `validation` query (the held-out set) is written exactly as it is.
The pool's row is the canonical spec after a `trip:` line that tells the
simulator what the query is (its route and dates, and what its annotated plan
costs the spec's travellers: the lowest budget a valid variation may set),
ignored when read back; the row and the agent's prompt must fit their
widths. Difficulty is `level`: 1 + the number of constraints set + (days - 3)
/ 2 (TravelPlanner's two axes: easy / medium / hard, and 3 / 5 / 7 days),
capped at `max_difficulty`; the budget's tightness is the simulator's lever
that the level does not see.

Episode (`TravelPlannerHost`, a `HostTransition` behind `HostEnvironment`):
one action, the plan. The agent's prompt is the benchmark's sole-planning
prompt (`travelplanner.messages`: the instruction with a worked example, the
query's reference information, and the query, templated from the spec for a
variation, the dataset's own text for a held-out query), through the chat
template. The reply, up to its stop token, is scored by `travelplanner.score`:
success is the benchmark's final pass (every constraint), the turn reward the
share of the query's constraints the plan passes (`constraint_share`);
`config.episodes.reward` chooses which one trains ("success" or "turn_sum").
A reply cut at `max_action_tokens` without its stop token is an invalid action
(still scored).
"""

from __future__ import annotations

import os
import re
from typing import Any, NamedTuple, Sequence

import numpy as np

from genenv_jax import config_fields as fields
from genenv_jax import episodes
from genenv_jax.domains.host_text import (HostTextDomain, HostTextTransition,
                                          WrittenTask)
from genenv_jax.domains.text import domain as text
from genenv_jax.envs.host import HostStep
from genenv_jax.scoring import CORRECT
from genenv_jax.scoring import travelplanner as tp

# TravelPlanner's constraint values (its dataset and evaluation scripts); a
# cuisine may also be another name (`_cuisine`).
HOUSE_RULES = ("smoking", "parties", "children under 10", "visitors", "pets")
CUISINES = ("Chinese", "American", "Italian", "Mexican", "Indian", "Mediterranean",
            "French")
ROOM_TYPES = ("shared room", "not shared room", "private room", "entire room")
TRANSPORTATION = ("no flight", "no self-driving")
SPLITS = ("train", "validation")  # seeds and their variations; the held-out set
MAX_PEOPLE = 8
MAX_BUDGET = 1_000_000
QUERY_FIELD = "query:"
DEFAULT_SIMULATOR_INSTRUCTION = (
    "Here is a travel-planning task: a trip (its origin, destination, dates and "
    "the flights, restaurants and stays it may use are fixed by the query named), "
    "the travellers, the budget and the travellers' constraints.\n\n{seed}\n\n"
    f"Write one new task for the same query: change the number of people (1 to "
    f"{MAX_PEOPLE}), the budget in dollars, and the constraints. House rule: one "
    f"of {', '.join(HOUSE_RULES)} (what the travellers need the stay to allow). "
    f"Cuisine: some of {', '.join(CUISINES)}. Room type: one of "
    f"{', '.join(ROOM_TYPES)}. Transportation: one of {', '.join(TRANSPORTATION)}. "
    "Write - for a constraint not set. Use exactly this format, one field a line:\n"
    "query: ...\npeople: ...\nbudget: ...\nhouse rule: ...\ncuisine: ...\n"
    "room type: ...\ntransportation: ...")


class SpecError(ValueError):
  """Text that is no TravelPlanner spec of this domain (the message says why)."""


class Spec(NamedTuple):
  """A written task: the query it varies and the values it sets."""

  split: str
  id: int
  people: int
  budget: int
  house_rule: str | None
  cuisine: tuple[str, ...]
  room_type: str | None
  transportation: str | None

  def text(self) -> str:
    """The canonical text (module docstring)."""
    return "\n".join([
        f"query: {self.split} {self.id}", f"people: {self.people}",
        f"budget: {self.budget}", f"house rule: {self.house_rule or '-'}",
        f"cuisine: {', '.join(self.cuisine) or '-'}",
        f"room type: {self.room_type or '-'}",
        f"transportation: {self.transportation or '-'}"])

  @property
  def num_constraints(self) -> int:
    return sum(bool(v) for v in (self.house_rule, self.cuisine, self.room_type,
                                 self.transportation))

  def local_constraint(self) -> dict[str, Any]:
    """The spec's constraints as the dataset writes them (`Query.local_constraint`)."""
    return {"house rule": self.house_rule, "cuisine": list(self.cuisine) or None,
            "room type": self.room_type, "transportation": self.transportation}


_FIELDS = ("query", "people", "budget", "house rule", "cuisine", "room type",
           "transportation")
_LINE = re.compile(r"^\s*([a-z ]+?)\s*:\s*(.*?)\s*$", re.IGNORECASE)


def _choice(value: str, allowed: Sequence[str], field: str) -> str | None:
  if value in ("-", "", "none", "None"):
    return None
  for option in allowed:
    if value.lower() == option.lower():
      return option
  raise SpecError(f"{field}: {value!r} is not one of {', '.join(allowed)} (or -)")


def _cuisine(value: str) -> str:
  """A cuisine's name, title-cased: TravelPlanner's (CUISINES) or any other
  word or two, which the query's restaurants may serve."""
  value = value.strip()
  if not re.fullmatch(r"[A-Za-z][A-Za-z ]{0,29}", value):
    raise SpecError(f"cuisine: {value!r} is not a cuisine's name")
  return value.title()


def _integer(value: str, field: str, high: int) -> int:
  digits = value.replace(",", "").replace("$", "").strip()
  if not re.fullmatch(r"[0-9]{1,7}", digits):
    raise SpecError(f"{field}: {value!r} is not a whole number")
  number = int(digits)
  if not 1 <= number <= high:
    raise SpecError(f"{field}: {number} is not in 1..{high}")
  return number


def read_spec(written: str) -> Spec:
  """The spec written from the first line starting `query:` on (module
  docstring); every field once, in any order, other lines ignored.

  Raises:
    SpecError: no such line, a field missing or repeated, or a value outside
      its range.
  """
  lines = written.splitlines()
  start = next((i for i, l in enumerate(lines)
                if l.strip().lower().startswith(QUERY_FIELD)), None)
  if start is None:
    raise SpecError(f"no line starts {QUERY_FIELD!r}")
  values: dict[str, str] = {}
  for line in lines[start:]:
    match = _LINE.match(line)
    key = match.group(1).lower() if match else None
    if key not in _FIELDS:
      continue
    if key in values:
      raise SpecError(f"the field {key!r} is written twice")
    values[key] = match.group(2).strip().strip("*").strip()
  missing = [f for f in _FIELDS if f not in values]
  if missing:
    raise SpecError(f"no {missing[0]!r} line")
  query = values["query"].split()
  if len(query) != 2 or query[0].lower() not in SPLITS or not query[1].isdigit():
    raise SpecError(f"query: {values['query']!r} is not '<split> <row>' with split "
                    f"one of {', '.join(SPLITS)}")
  cuisine = ()
  if values["cuisine"] not in ("-", "", "none", "None"):
    cuisine = tuple(dict.fromkeys(_cuisine(c) for c in values["cuisine"].split(",")))
  return Spec(query[0].lower(), int(query[1]),
              _integer(values["people"], "people", MAX_PEOPLE),
              _integer(values["budget"], "budget", MAX_BUDGET),
              _choice(values["house rule"], HOUSE_RULES, "house rule"), cuisine,
              _choice(values["room type"], ROOM_TYPES, "room type"),
              _choice(values["transportation"], TRANSPORTATION, "transportation"))


def spec_of(query: tp.Query, split: str) -> Spec:
  """A query's own values as a spec."""
  local = query.local_constraint
  cuisine = local.get("cuisine") or ()
  return Spec(split, query.id, query.people_number, int(round(query.budget)),
              local.get("house rule") or None,
              tuple([cuisine] if isinstance(cuisine, str) else cuisine),
              local.get("room type") or None, local.get("transportation") or None)


def _date(iso: str) -> str:
  year, month, day = (int(x) for x in iso.split("-"))
  months = ("January", "February", "March", "April", "May", "June", "July",
            "August", "September", "October", "November", "December")
  suffix = "th" if 10 <= day % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
  return f"{months[month - 1]} {day}{suffix}, {year}"


_NEEDS = {"smoking": "allows smoking", "parties": "allows parties",
          "children under 10": "allows children under 10",
          "visitors": "allows visitors", "pets": "allows pets"}
_ROOMS = {"shared room": "a shared room", "not shared room": "not a shared room",
          "private room": "a private room", "entire room": "an entire home"}


def _people(number: int) -> str:
  return "one person" if number == 1 else f"{number} people"


def _when(query: tp.Query) -> str:
  dates = query.dates
  if dates and all(re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(d)) for d in dates):
    return f"{_date(dates[0])} to {_date(dates[-1])}"
  return f"on {', '.join(str(d) for d in dates)}"


def trip_line(query: tp.Query, spec: Spec) -> str:
  """What the simulator reads of the query a spec names (the line before
  its `query:` line in a pool row): the route, days and dates, and for a
  train query what its annotated plan costs the spec's travellers."""
  line = (f"trip: {query.days} days from {query.org} to {query.dest}, "
          f"{_when(query)}")
  if query.annotated_plan is not None:
    cost = tp.total_cost(query._replace(people_number=spec.people),
                         query.annotated_plan)
    line += f"; its annotated plan costs ${cost:,.0f} for {_people(spec.people)}"
  return line


def query_text(query: tp.Query, spec: Spec) -> str:
  """The query a variation asks, in words: the query's trip with the spec's
  travellers, budget and constraints."""
  cities = (f", visiting {query.visiting_city_number} cities in {query.dest}"
            if query.visiting_city_number > 1 else "")
  sentences = [f"Please plan a {query.days}-day trip for {_people(spec.people)} from {query.org} to "
               f"{query.dest}{cities}, {_when(query)}, with a budget of ${spec.budget:,}."]
  if spec.house_rule:
    sentences.append(f"Our accommodation must be one that {_NEEDS[spec.house_rule]}.")
  if spec.room_type:
    sentences.append(f"We want {_ROOMS[spec.room_type]}.")
  if spec.cuisine:
    sentences.append(f"We would like to try {', '.join(spec.cuisine)} cuisine.")
  if spec.transportation:
    sentences.append({"no flight": "We do not want to fly.",
                      "no self-driving": "We do not want to drive ourselves."}[
                          spec.transportation])
  return " ".join(sentences)


def constraint_share(query: tp.Query, evaluation: tp.Evaluation) -> float:
  """The share of the query's constraints a plan passes: the commonsense
  ones, the budget and each local constraint set; 0 for no plan."""
  if not evaluation.delivered:
    return 0.0
  local = sum(query.local_constraint.get(k) not in (None, "", [])
              for k in tp.LOCAL_KEYS)
  passed = sum(v is True for v, _ in evaluation.commonsense.values())
  if evaluation.hard is not None:
    passed += sum(v is True for v, _ in evaluation.hard.values())
  return passed / (len(tp.COMMONSENSE) + 1 + local)


class TravelPlannerDomain(HostTextDomain):
  """TravelPlanner variations (format and rules in the module docstring).

  Args: `HostTextDomain`'s but max_turns (one action: the plan), and
    data_dir: a directory holding TravelPlanner's train split (train.csv and
      train_ref_info.jsonl, with its annotated plans) and, for the held-out
      set, its validation split.
    max_action_tokens: the plan's budget, its stop token included.
    max_difficulty: the highest level (`level`).
  """

  domain_title = "TravelPlanner"
  task_noun = "spec"
  task_error = SpecError

  def __init__(self, tokenizer: Any, *, data_dir: str,
               max_prompt_tokens: int = 12288, max_written_tokens: int = 96,
               max_simulator_tokens: int | None = 512,
               max_action_tokens: int = 1536, max_difficulty: int = 4,
               simulator_system_prompt: str = "",
               simulator_instruction: str = DEFAULT_SIMULATOR_INSTRUCTION,
               eos_token: str = "", pad_token: str = ""):
    if not data_dir:
      raise ValueError("config.task.data_dir must name a directory holding "
                       "TravelPlanner's train split (train.csv, train_ref_info.jsonl)")
    super().__init__(
        tokenizer, TravelPlannerHost(self), max_prompt_tokens=max_prompt_tokens,
        max_written_tokens=max_written_tokens,
        max_simulator_tokens=max_simulator_tokens, max_turns=1,
        max_action_tokens=max_action_tokens, max_observation_tokens=1,
        max_difficulty=max_difficulty,
        simulator_system_prompt=simulator_system_prompt,
        simulator_instruction=simulator_instruction, eos_token=eos_token,
        pad_token=pad_token)
    self.queries = {split: tp.load(data_dir, split) for split in SPLITS
                    if split == "train" or os.path.isfile(
                        os.path.join(data_dir, f"{split}.csv"))}

  @classmethod
  def from_config(cls, config: Any) -> TravelPlannerDomain:
    """Builds the domain from `config.task` (`text.from_task_config`)."""
    return text.from_task_config(cls, config, "the travelplanner domain")

  @staticmethod
  def check_config(config: Any) -> None:
    for field in ("max_prompt_tokens", "max_written_tokens", "max_action_tokens",
                  "max_difficulty"):
      fields.integer(config, f"task.{field}", low=1)
    if not config.task.data_dir:
      fields.fail("task.data_dir", config.task.data_dir,
                  "a directory with TravelPlanner's train and validation splits "
                  "(python -m train.tools.evaluate travelplanner --download fetches "
                  "them; docs/benchmarks.md)")
    fields.choice(config, "episodes.reward", episodes.EPISODE_REWARDS)
    fields.choice(config, "episodes.truncated", episodes.TRUNCATED)

  # ------------------------------------------------------------------ host side

  def level(self, query: tp.Query, spec: Spec) -> int:
    """1 + the spec's constraints + (days - 3) // 2, in 1..max_difficulty."""
    return max(1, min(self.max_difficulty,
                      1 + spec.num_constraints + max(0, query.days - 3) // 2))

  def read_task(self, written: str) -> tuple[Spec, tp.Query]:
    """The spec of `written` (`read_spec`) and the query it asks: the named
    query with the spec's values and, for a variation, its text in words.

    Raises:
      SpecError: not a spec; a query the data does not have; a held-out query
        written otherwise than it is; a variation its annotated plan fails.
    """
    spec = read_spec(written)
    queries = self.queries.get(spec.split, ())
    if not 1 <= spec.id <= len(queries):
      raise SpecError(f"query: the {spec.split} split has no row {spec.id} "
                      f"({len(queries)} rows)")
    query = queries[spec.id - 1]
    if spec.split != "train":
      if spec != spec_of(query, spec.split):
        raise SpecError(f"a {spec.split} query is written as it is, not varied")
      return spec, query
    if query.annotated_plan is None:
      raise SpecError(f"query: train row {spec.id} has no annotated plan")
    varied = query._replace(people_number=spec.people, budget=float(spec.budget),
                            local_constraint=spec.local_constraint(),
                            query=query_text(query, spec))
    evaluation = tp.evaluate(varied, query.annotated_plan)
    if not evaluation.passed:
      failed = [f"{name} ({why})" if why else name
                for box in (evaluation.commonsense or {}, evaluation.hard or {})
                for name, (value, why) in box.items() if value is False]
      raise SpecError("the query's annotated plan does not pass it: "
                      + (", ".join(failed) or "hard constraints not evaluated"))
    return spec, varied

  def written_task(self, written: str) -> WrittenTask:
    """The canonical text of `written` (`read_task`: its `trip_line`, then
    its spec), its level and the agent's prompt."""
    spec, query = self.read_task(written)
    return WrittenTask(f"{trip_line(query, spec)}\n{spec.text()}",
                       self.level(query, spec),
                       lambda: self.chat_prompt_ids(tp.messages(query)))


class TravelPlannerHost(HostTextTransition):
  """The episode of a written spec: one reply, the plan, scored."""

  def task_of_text(self, written: str) -> tp.Query:
    """The query of a pool row's spec."""
    return self.domain.read_task(written)[1]

  def play(self, task: tp.Query, actions: Sequence[np.ndarray], cut_short: bool
           ) -> HostStep:
    """The plan's verdict (`travelplanner.score`): done, the share of the
    query's constraints it passes, success iff it passes every one."""
    ids = np.asarray(actions[-1])
    stops = np.flatnonzero(np.isin(ids, self.domain.stop_ids))
    reply = self.domain.text_of(ids[:stops[0]] if len(stops) else ids)
    evaluation, verdict = tp.score(task, reply)
    return HostStep((), constraint_share(task, evaluation), True,
                    verdict.status == CORRECT, cut_short)
