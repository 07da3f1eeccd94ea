"""TravelPlanner (Xie et al., 2024) in sole-planning mode: the model writes a
multi-day travel plan from a query and the query's reference information; the
plan is scored by the benchmark's commonsense and hard constraints, computed
offline from the query's own record.

Source: the Hugging Face dataset `osunlp/TravelPlanner` (CC BY 4.0), per split
(train 45, validation 180, test 1000 queries):

  <split>.csv             one query a row; columns org, dest, days,
                          visiting_city_number, date (a Python list literal),
                          people_number, local_constraint (a Python dict literal:
                          'house rule', 'cuisine', 'room type', 'transportation'),
                          budget, query, level, reference_information (the
                          sole-planning "given information": a Python list
                          literal of {'Description', 'Content'} text tables).
  <split>_ref_info.jsonl  line i: row i's reference information as JSON, a
                          description ("Restaurants in X", "Accommodations in X",
                          "Attractions in X", "Flight from A to B on D",
                          "Self-driving from A to B", "Taxi from A to B") -> a list
                          of records, or a text ("No valid information.", or
                          "self-driving, from A to B, duration: ..., distance: ...,
                          cost: N").
The train split's CSV has one more column, annotated_plan: a Python list literal
of the query's fields and then one dict a day (days, current_city, transportation,
breakfast, attraction, lunch, dinner, accommodation), padded with empty dicts.

A query's id is its 1-based row number (the official submission's `idx`). The
prompt (`messages`) is PLANNER_PROMPT: a paraphrase of the benchmark's direct
sole-planning prompt with an example of this project's, the row's
reference_information and its query. `parse_plan` reads the reply's
"Day N:" blocks of `Field: value` lines (or a JSON list of day objects); a reply
with no day is not delivered.

Constraints (`evaluate`, each True, False or None = not applicable), on the
first `days` days of the plan, as the benchmark's evaluation scripts define them,
with the "sandbox" (the benchmark's databases) replaced by the query's reference
information (`Reference`):
  commonsense: reasonable_city_route (a closed route from the origin, each city
    visited in one stretch, the cities known: the origin or a city of the
    reference information), diverse_restaurants, diverse_attractions,
    minimum_nights (stays at least the accommodation's minimum nights),
    non_conflicting_transportation (day 1 has transport; no self-driving with
    flights or taxis), within_current_city (each entry in the day's city),
    within_sandbox (every flight, drive, restaurant, attraction and accommodation
    exists in the reference information), complete_information (the right number
    of days and visited cities, the required fields filled, at most half of the
    information absent);
  hard (only when the plan is complete and within the sandbox): budget (cost of
    flights x people, self-driving x ceil(people/5), taxi x ceil(people/4),
    meals x people, accommodation nights x ceil(people/maximum occupancy), at most
    the budget), room_rule, cuisine (every requested cuisine among the meals
    outside the origin), room_type, transportation ('no flight',
    'no self-driving').

Where the scripts' code differs from what they state, the stated rule is used:
a single-city day's entries are matched against the city (the scripts compare
its characters), the house rule 'parties' is checked (the scripts spell it
'parities'), a day's meals in the origin are skipped one by one for cuisine
(the scripts skip the rest of the day) and attractions are the `;`-separated
entries (the scripts drop the last one, expecting a trailing `;`).
"""

from __future__ import annotations

import ast
import csv
import json
import math
import os
import re
import sys
from typing import Any, NamedTuple, Sequence

from genenv_jax.scoring import CORRECT, INCORRECT, INVALID, InputError, Verdict
from genenv_jax.scoring import read_jsonl_lines

NAME = "travelplanner"
LICENCE = "CC BY 4.0 (the dataset card of osunlp/TravelPlanner)"
SPLITS = ("train", "validation", "test")
_HF = "https://huggingface.co/datasets/osunlp/TravelPlanner/resolve/main/"
MAX_REPLY_CHARS = 65_536

FIELDS = ("current_city", "transportation", "breakfast", "attraction", "lunch", "dinner",
          "accommodation")
MEALS = ("breakfast", "lunch", "dinner")
COMMONSENSE = ("reasonable_city_route", "diverse_restaurants", "diverse_attractions",
               "minimum_nights", "non_conflicting_transportation", "within_current_city",
               "within_sandbox", "complete_information")
HARD = ("budget", "room_rule", "cuisine", "room_type", "transportation")
LOCAL_KEYS = ("house rule", "cuisine", "room type", "transportation")
_HARD_OF_LOCAL = {"house rule": "room_rule", "cuisine": "cuisine",
                  "room type": "room_type", "transportation": "transportation"}
_COLUMNS = ("org", "dest", "days", "visiting_city_number", "date", "people_number",
            "local_constraint", "budget", "query", "level", "reference_information")
_NOT_NEEDED = "You don't need to fill in the information for this or later days."
_HOUSE_RULES = {"smoking": "No smoking", "parties": "No parties", "parities": "No parties",
                "children under 10": "No children under 10", "visitors": "No visitors",
                "pets": "No pets"}
_ROOM_TYPES = {"shared room": "Shared room", "private room": "Private room",
               "entire room": "Entire home/apt"}

PLANNER_PROMPT = """You are a travel planner. Using only the information given below, write a \
day-by-day plan for the query, naming specific flight numbers, restaurants and \
accommodations. Follow the format of the example exactly: one block per day with the \
fields Current City, Transportation, Breakfast, Attraction, Lunch, Dinner and \
Accommodation, each entry written as "Name, City". Write '-' for a field that does not \
apply (for instance, nothing after returning home). On a day that moves between cities, \
write the Current City as "from A to B". Keep the plan consistent with common sense.

***** Example *****
Query: Please plan a 3-day trip for 2 people from Denver to Tucson, March 4th to March \
6th, 2022, with a budget of $2,400.
Travel Plan:
Day 1:
Current City: from Denver to Tucson
Transportation: Flight Number: F1000001, from Denver to Tucson, Departure Time: 08:10, \
Arrival Time: 09:55
Breakfast: -
Attraction: Sabino Trailhead, Tucson;
Lunch: Saguaro Grill, Tucson
Dinner: Copper Kettle, Tucson
Accommodation: Quiet Adobe Casita, Tucson

Day 2:
Current City: Tucson
Transportation: -
Breakfast: Morning Mesa Cafe, Tucson
Attraction: Desert Garden Walk, Tucson;Old Pueblo Museum, Tucson;
Lunch: Ocotillo Kitchen, Tucson
Dinner: Cactus Flower Bistro, Tucson
Accommodation: Quiet Adobe Casita, Tucson

Day 3:
Current City: from Tucson to Denver
Transportation: Flight Number: F1000002, from Tucson to Denver, Departure Time: 18:30, \
Arrival Time: 20:05
Breakfast: Sunrise Tortilla House, Tucson
Attraction: Mission Orchard, Tucson;
Lunch: Blue Agave Diner, Tucson
Dinner: -
Accommodation: -

***** Example Ends *****

Given information: {information}
Query: {query}
Travel Plan:"""


class Reference(NamedTuple):
  """A query's reference information, indexed.

  Attributes:
    restaurants, accommodations, attractions, flights: the records of each kind.
    ground: (mode 'self-driving' | 'taxi', origin, destination) -> cost, or None
      when there is no such route.
    cities: the cities that have restaurants, accommodations or attractions.
  """

  restaurants: list[dict]
  accommodations: list[dict]
  attractions: list[dict]
  flights: list[dict]
  ground: dict[tuple[str, str, str], float | None]
  cities: frozenset[str]


class Query(NamedTuple):
  """One query of a split: its id (1-based row number), its fields, its
  reference information (`information`: the CSV's text, `reference`: indexed)
  and, in the train split, its annotated plan (the day dicts; else None)."""

  id: int
  org: str
  dest: str
  days: int
  visiting_city_number: int
  dates: list
  people_number: int
  local_constraint: dict
  budget: float
  query: str
  level: str
  information: str
  reference: Reference
  annotated_plan: list[dict[str, str]] | None = None


class Evaluation(NamedTuple):
  """The constraints of one plan: `commonsense` and `hard` map each constraint to
  (True | False | None, why it failed); `hard` is None when not evaluated."""

  delivered: bool
  commonsense: dict[str, tuple[bool | None, str]] | None
  hard: dict[str, tuple[bool | None, str]] | None

  @property
  def passed(self) -> bool:
    return (self.commonsense is not None and self.hard is not None
            and all(v is not False for v, _ in self.commonsense.values())
            and all(v is not False for v, _ in self.hard.values()))


# Loading ------------------------------------------------------------------------

def split_paths(data_dir: str, split: str) -> tuple[str, str]:
  """(<split>.csv, <split>_ref_info.jsonl) under `data_dir`.

  Raises:
    InputError: an unknown split or a missing file.
  """
  if split not in SPLITS:
    raise InputError(f"--split={split!r}: TravelPlanner's splits are {', '.join(SPLITS)}")
  paths = (os.path.join(data_dir, f"{split}.csv"),
           os.path.join(data_dir, f"{split}_ref_info.jsonl"))
  for path in paths:
    if not os.path.isfile(path):
      raise InputError(f"{path}: no such file (TravelPlanner's {split} split needs "
                       f"{split}.csv and {split}_ref_info.jsonl)")
  return paths


def files(split: str) -> dict[str, str]:
  """The official files of a split: path -> URL."""
  return {f"{split}.csv": f"{_HF}{split}.csv",
          f"{split}_ref_info.jsonl": f"{_HF}{split}_ref_info.jsonl"}


def _literal(text: str, where: str, kind: type) -> Any:
  try:  # a Python literal of the dataset, never model text
    value = ast.literal_eval(text)
  except (ValueError, SyntaxError, RecursionError, MemoryError) as e:
    raise InputError(f"{where}: not a Python {kind.__name__} literal ({e})") from e
  if not isinstance(value, kind):
    raise InputError(f"{where}: expected a {kind.__name__}, got {type(value).__name__}")
  return value


def _number(value: Any) -> float | None:
  try:
    number = float(value)
  except (TypeError, ValueError):
    return None
  return number if math.isfinite(number) else None


_GROUND_KEY = re.compile(r"^(Self-driving|Taxi) from (.+) to (.+)$")
_COST = re.compile(r"cost:\s*\$?\s*([0-9][0-9,]*(?:\.[0-9]+)?)", re.IGNORECASE)


def index_reference(info: dict[str, Any], where: str) -> Reference:
  """The indexed form of one ref_info line.

  Raises:
    InputError: a value that is neither a list of records nor a text.
  """
  kinds: dict[str, list[dict]] = {"Restaurants in ": [], "Accommodations in ": [],
                                  "Attractions in ": [], "Flight from ": []}
  ground: dict[tuple[str, str, str], float | None] = {}
  cities = set()
  for description, value in info.items():
    if not isinstance(value, (list, str)):
      raise InputError(f"{where}: {description!r} is neither a list of records nor a text")
    match = _GROUND_KEY.match(description)
    if match:
      cost = _COST.search(value) if isinstance(value, str) else None
      ground[(match.group(1).lower(), match.group(2).strip(), match.group(3).strip())] = (
          _number(cost.group(1).replace(",", "")) if cost else None)
      continue
    for prefix, records in kinds.items():
      if description.startswith(prefix) and isinstance(value, list):
        records.extend(r for r in value if isinstance(r, dict))
        if prefix != "Flight from ":
          cities.add(description[len(prefix):].strip())
  return Reference(kinds["Restaurants in "], kinds["Accommodations in "],
                   kinds["Attractions in "], kinds["Flight from "], ground,
                   frozenset(cities))


def _int_field(row: dict, column: str, where: str) -> int:
  number = _number(row.get(column))
  if number is None or number != int(number) or number < 0:
    raise InputError(f"{where}: column {column!r} is not a non-negative integer "
                     f"(got {row.get(column)!r:.40})")
  return int(number)


def load(data_dir: str, split: str = "validation") -> list[Query]:
  """The queries of a split, in row order.

  Raises:
    InputError: a missing or malformed file (the message names the file, row and
      column), or a CSV and ref_info file of different lengths.
  """
  csv_path, ref_path = split_paths(data_dir, split)
  csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
  try:
    with open(csv_path, encoding="utf-8", newline="") as f:
      rows = list(csv.DictReader(f))
  except (OSError, UnicodeDecodeError, csv.Error) as e:
    raise InputError(f"cannot read {csv_path} as CSV: {e}") from e
  refs = read_jsonl_lines(ref_path)
  if len(refs) != len(rows):
    raise InputError(f"{ref_path} has {len(refs)} lines but {csv_path} has {len(rows)} "
                     "rows; line i is row i's reference information")
  if not rows:
    raise InputError(f"{csv_path}: no rows")
  queries = []
  for number, (row, (line, info)) in enumerate(zip(rows, refs), start=1):
    where = f"{csv_path}: row {number}"
    missing = [c for c in _COLUMNS if c not in row or row[c] is None]
    if missing:
      raise InputError(f"{where}: missing column(s) {', '.join(missing)}")
    local = _literal(row["local_constraint"], f"{where}: column 'local_constraint'", dict)
    dates = _literal(row["date"], f"{where}: column 'date'", list)
    budget = _number(row["budget"])
    if budget is None:
      raise InputError(f"{where}: column 'budget' is not a number (got {row['budget']!r:.40})")
    queries.append(Query(
        number, row["org"].strip(), row["dest"].strip(), _int_field(row, "days", where),
        _int_field(row, "visiting_city_number", where), dates,
        _int_field(row, "people_number", where),
        {k: local.get(k) for k in LOCAL_KEYS}, budget, row["query"], row["level"].strip(),
        row["reference_information"], index_reference(info, f"{ref_path}:{line}"),
        _annotated_plan(row.get("annotated_plan"), f"{where}: column 'annotated_plan'")))
  return queries


def _annotated_plan(text: str | None, where: str) -> list[dict[str, str]] | None:
  """The day dicts of an annotated_plan cell (module docstring); None for no
  cell or an empty one."""
  if not text or not text.strip():
    return None
  days = [d for d in _literal(text, where, list)
          if isinstance(d, dict) and "current_city" in d]
  if not days:
    raise InputError(f"{where}: no day (a dict with 'current_city')")
  return [{f: "-" if d.get(f) in (None, "") else str(d[f]) for f in FIELDS}
          for d in days]


def messages(query: Query) -> list[dict[str, str]]:
  """The chat prompt of a query (one user turn, as the benchmark's direct
  planner sends it)."""
  return [{"role": "user", "content": PLANNER_PROMPT.format(
      information=query.information, query=query.query)}]


# Reading a plan -----------------------------------------------------------------

_DAY = re.compile(r"[#*> \t-]*day[ \t]*:?[ \t]*(\d{1,3})[ \t*:.)-]*", re.IGNORECASE)
_FIELD_NAMES = {"current city": "current_city", "transportation": "transportation",
                "breakfast": "breakfast", "attraction": "attraction",
                "attractions": "attraction", "lunch": "lunch", "dinner": "dinner",
                "accommodation": "accommodation", "accommodations": "accommodation"}
_MAX_HEADER_CHARS = 40
_MAX_VALUE_CHARS = 2_000  # a longer field value is cut (no real entry is this long)


def _json_plan(text: str) -> list[dict[str, str]] | None:
  start, end = text.find("["), text.rfind("]")
  if start < 0 or end <= start:
    return None
  try:
    value = json.loads(text[start:end + 1])
  except (ValueError, RecursionError):
    return None
  if not (isinstance(value, list) and value and all(isinstance(d, dict) for d in value)
          and all("current_city" in d for d in value)):
    return None
  return [{k: str(d[k]).strip()[:_MAX_VALUE_CHARS] for k in FIELDS
           if k in d and d[k] is not None} for d in value]


def parse_plan(text: str) -> list[dict[str, str]]:
  """The days of a reply, each {field: value} for the fields it writes (FIELDS);
  [] when it holds no day (rules in the module docstring). Takes time linear in
  the reply's length."""
  if len(text) > MAX_REPLY_CHARS:
    return []
  days: list[dict[str, str]] = []
  for line in text.splitlines():
    stripped = line.strip()
    if len(stripped) <= _MAX_HEADER_CHARS and _DAY.fullmatch(stripped):
      days.append({})
      continue
    key, colon, value = stripped.partition(":")
    if not colon or not days:
      continue
    field = _FIELD_NAMES.get(" ".join(key.strip(" \t*>#-").lower().split()))
    if field and field not in days[-1]:
      days[-1][field] = value.strip().strip("*").strip()[:_MAX_VALUE_CHARS]
  if not days:
    return _json_plan(text) or []
  return days if any(days) else []


# Constraints ----------------------------------------------------------------------

_FROM_TO = re.compile(r"from\s+(.+?)\s+to\s+([^,]+)")
_FLIGHT_NUMBER = re.compile(r"flight number:\s*([A-Za-z0-9]+)", re.IGNORECASE)


def _empty(value: str | None) -> bool:
  return value is None or value.strip() in ("", "-")


def _before_parenthesis(text: str) -> str:
  return text.split("(", 1)[0].strip()


def _route(text: str) -> tuple[str, str] | None:
  match = _FROM_TO.search(text)
  if not match:
    return None
  return (_before_parenthesis(match.group(1)),
          _before_parenthesis(match.group(2).strip().rstrip(".")))


def _day_cities(current_city: str) -> list[str] | None:
  """The cities of a day: [A, B] for "from A to B", else [the city]; None when a
  "from" cannot be read."""
  if "from " in current_city:
    route = _route(current_city)
    return list(route) if route else None
  return [_before_parenthesis(current_city.rstrip("."))]


def name_city(value: str) -> tuple[str, str]:
  """("Name", "City") of an entry "Name, City"."""
  name, _, city = value.rpartition(",")
  return name.strip(), _before_parenthesis(city.strip().rstrip("."))


def attractions(value: str | None) -> list[str]:
  """The `;`-separated entries of an Attraction field."""
  if _empty(value):
    return []
  return [part.strip().rstrip(".").strip() for part in value.split(";")
          if part.strip().strip(".")]


def _find(records: list[dict], name_key: str, city_key: str, value: str) -> list[dict]:
  """The records whose name contains the entry's name and whose city is its city."""
  name, city = name_city(value)
  if not name:
    return []
  return [r for r in records if name in str(r.get(name_key, ""))
          and str(r.get(city_key, "")).strip() == city]


def _mode(transportation: str) -> str | None:
  lowered = transportation.lower()
  for mode in ("taxi", "self-driving", "flight"):
    if mode in lowered:
      return mode
  return None


def _valid_sequence(cities: list[str]) -> bool:
  """Whether each city is visited in one stretch (the ends aside) and every
  stretch between the ends lasts more than one entry."""
  if len(cities) < 3:
    return False
  seen, start, n = set(), 0, len(cities)
  while start < n:
    end = start
    while end + 1 < n and cities[end + 1] == cities[start]:
      end += 1
    if cities[start] in seen and start not in (0, n - 1):
      return False
    if end == start and 0 < end < n - 1:
      return False
    seen.add(cities[start])
    start = end + 1
  return True


def _reasonable_city_route(q: Query, plan):
  cities = []
  for i, day in enumerate(plan):
    current = day.get("current_city", "")
    day_cities = _day_cities(current)
    if day_cities is None:
      return False, f"day {i + 1}: cannot read the route {current!r:.80}"
    if i == 0 and "from " in current and day_cities[0] != q.org:
      return False, f"day 1 should start from {q.org}"
    cities += day_cities
  if not cities or cities[0] != cities[-1]:
    return False, "the trip is not a closed circle"
  if not _valid_sequence(cities):
    return False, "the city sequence is invalid"
  for index, city in enumerate(cities):
    known = q.reference.cities | {q.org} if index in (0, len(cities) - 1) else \
        q.reference.cities
    if city not in known:
      return False, f"{city} is not a city of the query's reference information"
  return True, ""


def _diverse_restaurants(q: Query, plan):
  seen = set()
  for i, day in enumerate(plan):
    for meal in MEALS:
      value = day.get(meal)
      if not _empty(value):
        if value in seen:
          return False, f"day {i + 1} {meal} {value!r} is repeated"
        seen.add(value)
  return True, ""


def _diverse_attractions(q: Query, plan):
  seen = set()
  for i, day in enumerate(plan):
    for value in attractions(day.get("attraction")):
      if value in seen:
        return False, f"day {i + 1} attraction {value!r} is repeated"
      seen.add(value)
  return True, ""


def _minimum_nights(q: Query, plan):
  if any("accommodation" not in day for day in plan):
    return False, "a day has no accommodation field"
  stays: list[list] = []
  for day in plan:
    if stays and stays[-1][0] == day["accommodation"]:
      stays[-1][1] += 1
    else:
      stays.append([day["accommodation"], 1])
  for value, nights in stays:
    if _empty(value):
      continue
    found = _find(q.reference.accommodations, "NAME", "city", value)
    minimum = _number(found[0].get("minimum nights")) if len(found) == 1 else None
    if minimum is not None and nights < minimum:
      return False, f"{value!r} is stayed {nights} night(s), fewer than its minimum {minimum:g}"
  return True, ""


def _non_conflicting_transportation(q: Query, plan):
  if _empty(plan[0].get("transportation")):
    return False, "day 1 has no transportation"
  modes = {_mode(day["transportation"]) for day in plan
           if not _empty(day.get("transportation"))}
  if "self-driving" in modes and modes & {"flight", "taxi"}:
    return False, "self-driving is combined with " + " and ".join(
        sorted(modes & {"flight", "taxi"}))
  return True, ""


def _within_current_city(q: Query, plan):
  for i, day in enumerate(plan):
    cities = _day_cities(day.get("current_city", ""))
    if not cities:
      return False, f"day {i + 1}: cannot read the current city"
    transportation = day.get("transportation")
    if not _empty(transportation) and any(c not in transportation for c in cities):
      return False, f"day {i + 1}: the transportation is not between {' and '.join(cities)}"
    entries = [(meal, day.get(meal)) for meal in MEALS]
    entries += [("attraction", a) for a in attractions(day.get("attraction"))]
    for field, value in entries:
      if not _empty(value) and not any(c in value for c in cities):
        return False, f"day {i + 1}: the {field} {value!r} is not in {' or '.join(cities)}"
    accommodation = day.get("accommodation")
    if not _empty(accommodation) and cities[-1] not in accommodation:
      return False, f"day {i + 1}: the accommodation is not in {cities[-1]}"
  return True, ""


def _within_sandbox(q: Query, plan):
  ref = q.reference
  for i, day in enumerate(plan):
    transportation = day.get("transportation")
    if not _empty(transportation):
      route = _route(transportation) or _route(day.get("current_city", ""))
      mode = _mode(transportation)
      if mode == "flight":
        number = _FLIGHT_NUMBER.search(transportation)
        if not number or not route or not any(
            f.get("Flight Number") == number.group(1) and f.get("OriginCityName") == route[0]
            and f.get("DestCityName") == route[1] for f in ref.flights):
          return False, f"day {i + 1}: the flight is not in the reference information"
      elif mode in ("self-driving", "taxi"):
        if not route or ref.ground.get((mode, route[0], route[1])) is None:
          return False, f"day {i + 1}: no {mode} route in the reference information"
    for meal in MEALS:
      value = day.get(meal)
      if not _empty(value) and not _find(ref.restaurants, "Name", "City", value):
        return False, f"day {i + 1}: {meal} {value!r} is not in the reference information"
    for value in attractions(day.get("attraction")):
      if not _find(ref.attractions, "Name", "City", value):
        return False, f"day {i + 1}: attraction {value!r} is not in the reference information"
    value = day.get("accommodation")
    if not _empty(value) and not _find(ref.accommodations, "NAME", "city", value):
      return False, f"day {i + 1}: accommodation {value!r} is not in the reference information"
  return True, ""


def _complete_information(q: Query, plan):
  planned = sum(1 for day in plan if day and day.get("current_city") not in (None, "", _NOT_NEEDED))
  if planned != q.days:
    return False, f"{planned} day(s) planned, the query has {q.days}"
  visited = set()
  for i, day in enumerate(plan):
    cities = _day_cities(day.get("current_city", ""))
    if cities is None:
      return False, f"day {i + 1}: cannot read the current city"
    if i == 0 and len(cities) == 2 and cities[0] != q.org:
      return False, f"day 1 should start from {q.org}"
    visited.update(cities)
  visited.discard(q.org)
  if len(visited) != q.visiting_city_number:
    return False, (f"{len(visited)} cities visited, the query asks for "
                   f"{q.visiting_city_number}")
  filled = 0
  for i, day in enumerate(plan):
    absent = [f for f in FIELDS if f not in day]
    if absent:
      return False, f"day {i + 1} has no {absent[0]} field"
    current = day["current_city"]
    travelling = "from " in current or " to " in current
    if travelling and _empty(day["transportation"]):
      return False, f"day {i + 1} moves between cities without transportation"
    if not travelling and _empty(day["attraction"]):
      return False, f"day {i + 1} has no attraction"
    if i != q.days - 1 and _empty(day["accommodation"]):
      return False, f"day {i + 1} has no accommodation"
    if not travelling and any(_empty(day[m]) for m in MEALS):
      return False, f"day {i + 1} lacks a meal"
    filled += sum(not _empty(day[f]) for f in FIELDS)
  if filled < 0.5 * 6 * q.days:
    return False, "more than half of the information is absent"
  return True, ""


def total_cost(q: Query, plan) -> float:
  """The plan's cost (the budget rule in the module docstring); entries not in
  the reference information cost nothing."""
  ref, people, cost = q.reference, q.people_number, 0.0
  for day in plan:
    transportation = day.get("transportation")
    if not _empty(transportation):
      mode = _mode(transportation)
      route = _route(transportation) or _route(day.get("current_city", ""))
      if mode == "flight":
        number = _FLIGHT_NUMBER.search(transportation)
        prices = [_number(f.get("Price")) for f in ref.flights
                  if number and f.get("Flight Number") == number.group(1)]
        cost += (prices[0] or 0.0) * people if prices else 0.0
      elif mode in ("self-driving", "taxi") and route:
        fare = ref.ground.get((mode, route[0], route[1])) or 0.0
        cost += fare * math.ceil(people / (5 if mode == "self-driving" else 4))
    for meal in MEALS:
      if not _empty(day.get(meal)):
        found = _find(ref.restaurants, "Name", "City", day[meal])
        cost += (_number(found[0].get("Average Cost")) or 0.0) * people if found else 0.0
    if not _empty(day.get("accommodation")):
      found = _find(ref.accommodations, "NAME", "city", day["accommodation"])
      if found:
        occupancy = _number(found[0].get("maximum occupancy")) or 1.0
        cost += (_number(found[0].get("price")) or 0.0) * math.ceil(people / max(occupancy, 1))
  return cost


def _stays(q: Query, plan) -> list[tuple[str, dict]]:
  stays = []
  for day in plan:
    if not _empty(day.get("accommodation")):
      found = _find(q.reference.accommodations, "NAME", "city", day["accommodation"])
      if found:
        stays.append((day["accommodation"], found[0]))
  return stays


def _hard(q: Query, plan) -> dict[str, tuple[bool | None, str]]:
  local = q.local_constraint
  cost = total_cost(q, plan)
  result = {"budget": (cost <= q.budget, "" if cost <= q.budget else
                       f"costs {cost:g}, over the budget {q.budget:g}")}
  rule = local.get("house rule")
  result["room_rule"] = (None, "")
  if rule:
    forbidden = _HOUSE_RULES.get(str(rule).lower(), f"No {rule}")
    broken = [v for v, record in _stays(q, plan) if forbidden in str(record.get("house_rules"))]
    result["room_rule"] = (not broken, f"{broken[0]!r} says {forbidden!r}" if broken else "")
  cuisines = local.get("cuisine")
  result["cuisine"] = (None, "")
  if cuisines:
    wanted = [cuisines] if isinstance(cuisines, str) else list(cuisines)
    served = set()
    for day in plan:
      for meal in MEALS:
        value = day.get(meal)
        if _empty(value) or name_city(value)[1] == q.org:
          continue
        found = _find(q.reference.restaurants, "Name", "City", value)
        if found:
          served.update(c for c in wanted if c in str(found[0].get("Cuisines", "")))
    missing = [c for c in wanted if c not in served]
    result["cuisine"] = (not missing, f"no {missing[0]} meal" if missing else "")
  room = local.get("room type")
  result["room_type"] = (None, "")
  if room:
    room = str(room).lower()
    for value, record in _stays(q, plan):
      kind = str(record.get("room type"))
      ok = kind != "Shared room" if room == "not shared room" else kind == _ROOM_TYPES.get(room)
      if not ok:
        result["room_type"] = (False, f"{value!r} is a {kind}, not a {room}")
        break
    else:
      result["room_type"] = (True, "")
  transport = local.get("transportation")
  result["transportation"] = (None, "")
  if transport:
    banned = {"no flight": "flight", "no self-driving": "self-driving"}.get(str(transport).lower())
    used = [day["transportation"] for day in plan if not _empty(day.get("transportation"))
            and banned and banned in day["transportation"].lower()]
    result["transportation"] = (not used, f"uses {banned} although {transport}" if used else "")
  return result


_COMMONSENSE_CHECKS = {
    "reasonable_city_route": _reasonable_city_route,
    "diverse_restaurants": _diverse_restaurants,
    "diverse_attractions": _diverse_attractions,
    "minimum_nights": _minimum_nights,
    "non_conflicting_transportation": _non_conflicting_transportation,
    "within_current_city": _within_current_city,
    "within_sandbox": _within_sandbox,
    "complete_information": _complete_information,
}


def evaluate(query: Query, plan: Sequence[dict[str, str]]) -> Evaluation:
  """The constraints of a parsed plan (module docstring)."""
  plan = list(plan)[:query.days]
  if not plan:
    return Evaluation(False, None, None)
  commonsense = {name: check(query, plan) for name, check in _COMMONSENSE_CHECKS.items()}
  hard = None
  if commonsense["complete_information"][0] and commonsense["within_sandbox"][0]:
    hard = _hard(query, plan)
  return Evaluation(True, commonsense, hard)


def score(query: Query, text: str) -> tuple[Evaluation, Verdict]:
  """The constraints and the verdict of one reply: CORRECT when every
  constraint passes (the benchmark's final pass), INVALID when no plan is
  delivered."""
  if len(text) > MAX_REPLY_CHARS:
    return Evaluation(False, None, None), Verdict(
        INVALID, f"reply of {len(text)} characters is longer than {MAX_REPLY_CHARS}")
  evaluation = evaluate(query, parse_plan(text))
  if not evaluation.delivered:
    return evaluation, Verdict(INVALID, "no plan (no 'Day N:' block) in the reply")
  if evaluation.passed:
    return evaluation, Verdict(CORRECT)
  for name in COMMONSENSE:
    value, why = evaluation.commonsense[name]
    if value is False:
      return evaluation, Verdict(INCORRECT, f"{name}: {why}")
  if evaluation.hard is None:
    return evaluation, Verdict(INCORRECT, "hard constraints not evaluated")
  for name in HARD:
    value, why = evaluation.hard[name]
    if value is False:
      return evaluation, Verdict(INCORRECT, f"{name}: {why}")
  return evaluation, Verdict(INCORRECT, "")


def summary(queries: Sequence[Query], evaluations: Sequence[Evaluation]) -> dict[str, str]:
  """The benchmark's rates over the scored queries: delivery, commonsense and hard
  constraint micro (passed constraints / constraints) and macro (plans passing
  all) pass rates, and the final pass rate (plans passing everything)."""
  n = len(evaluations)
  common_pass = sum(v is True for e in evaluations if e.commonsense
                    for v, _ in e.commonsense.values())
  hard_pass = sum(v is True for e in evaluations if e.hard for v, _ in e.hard.values())
  hard_total = n + sum(q.local_constraint.get(k) not in (None, "", [])
                       for q in queries for k in LOCAL_KEYS)
  common_macro = sum(e.commonsense is not None and all(
      v is not False for v, _ in e.commonsense.values()) for e in evaluations)
  hard_macro = sum(e.commonsense is not None and e.hard is not None and all(
      v is not False for v, _ in e.hard.values()) for e in evaluations)
  rates = {
      "delivery_rate": sum(e.delivered for e in evaluations) / n,
      "commonsense_micro_pass_rate": common_pass / (len(COMMONSENSE) * n),
      "commonsense_macro_pass_rate": common_macro / n,
      "hard_micro_pass_rate": hard_pass / hard_total,
      "hard_macro_pass_rate": hard_macro / n,
      "final_pass_rate": sum(e.passed for e in evaluations) / n,
  }
  return {k: f"{v:.6f}" for k, v in rates.items()}


def row_fields(evaluation: Evaluation) -> dict[str, Any]:
  """The verdict line's constraint fields: delivered, and each constraint's
  True / False / None."""
  def flat(box):
    return None if box is None else {k: v for k, (v, _) in box.items()}
  return {"delivered": evaluation.delivered, "commonsense": flat(evaluation.commonsense),
          "hard": flat(evaluation.hard)}


# The fixture: queries, places and prices written for the tests and offline
# trials (not from TravelPlanner), in TravelPlanner's file formats.

def _restaurant(name, cost, cuisines, city):
  return {"Name": name, "Average Cost": cost, "Cuisines": cuisines,
          "Aggregate Rating": 4.0, "City": city}


def _stay(name, price, kind, rules, nights, occupancy, city):
  return {"NAME": name, "price": price, "room type": kind, "house_rules": rules,
          "minimum nights": nights, "maximum occupancy": occupancy,
          "review rate number": 4.0, "city": city}


def _sight(name, city):
  return {"Name": name, "Latitude": 0.0, "Longitude": 0.0, "Address": f"1 Main St, {city}",
          "Phone": "Unknown", "Website": "Unknown", "City": city}


def _flight(number, price, dep, arr, date, org, dest):
  return {"Flight Number": number, "Price": price, "DepTime": dep, "ArrTime": arr,
          "ActualElapsedTime": "2 hours", "FlightDate": date, "OriginCityName": org,
          "DestCityName": dest, "Distance": 900.0}


def _drive(mode, org, dest, hours, km, cost):
  return f"{mode}, from {org} to {dest}, duration: {hours} hours, distance: {km} km, cost: {cost}"


def _fixture_queries() -> list[tuple[dict, dict]]:
  """(CSV row without reference_information, ref_info) of each fixture query."""
  chat = "Chattanooga"
  ref1 = {
      f"Attractions in {chat}": [_sight("Rock Ridge Overlook", chat),
                                 _sight("Riverside Glass Museum", chat),
                                 _sight("Lookout Incline Park", chat)],
      f"Restaurants in {chat}": [
          _restaurant("Maple Hearth", 20, "American, Cafe", chat),
          _restaurant("Blue Heron Noodles", 35, "Chinese, Seafood", chat),
          _restaurant("Porchlight BBQ", 30, "BBQ, American", chat),
          _restaurant("Little Olive Trattoria", 45, "Italian, Pizza", chat),
          _restaurant("Sunrise Biscuit Co.", 15, "Bakery, Cafe", chat)],
      f"Accommodations in {chat}": [
          _stay("Cozy Riverfront Loft", 180.0, "Entire home/apt", "No smoking", 2.0, 2, chat),
          _stay("Shared Bunk Hideaway", 45.0, "Shared room", "No parties & No pets", 1.0, 1,
                chat)],
      f"Flight from Sarasota to {chat} on 2022-03-10": [
          _flight("F9000101", 210, "07:30", "09:40", "2022-03-10", "Sarasota", chat)],
      f"Self-driving from Sarasota to {chat}": _drive("self-driving", "Sarasota", chat, 9,
                                                       990, 49),
      f"Taxi from Sarasota to {chat}": _drive("taxi", "Sarasota", chat, 9, 990, 990),
      f"Flight from {chat} to Sarasota on 2022-03-12": [
          _flight("F9000102", 190, "19:00", "21:05", "2022-03-12", chat, "Sarasota")],
      f"Self-driving from {chat} to Sarasota": _drive("self-driving", chat, "Sarasota", 9,
                                                       990, 49),
      f"Taxi from {chat} to Sarasota": _drive("taxi", chat, "Sarasota", 9, 990, 990),
  }
  row1 = {"org": "Sarasota", "dest": chat, "days": 3, "visiting_city_number": 1,
          "date": str(["2022-03-10", "2022-03-11", "2022-03-12"]), "people_number": 1,
          "local_constraint": str({"house rule": None, "cuisine": None, "room type": None,
                                   "transportation": None}),
          "budget": 1500, "level": "easy",
          "query": "Please plan a 3-day trip for one person from Sarasota to Chattanooga, "
                   "March 10th to March 12th, 2022, with a budget of $1,500."}
  spo = "Spokane"
  ref2 = {
      f"Attractions in {spo}": [_sight("Falls Footbridge", spo), _sight("Lilac Carousel", spo)],
      f"Restaurants in {spo}": [
          _restaurant("Huckleberry Table", 25, "American", spo),
          _restaurant("Tamarack Tacos", 18, "Mexican", spo),
          _restaurant("Inland Pho House", 22, "Vietnamese", spo),
          _restaurant("Gondola Pizza Works", 28, "Pizza, Italian", spo)],
      f"Accommodations in {spo}": [
          _stay("Garden Cottage", 150.0, "Entire home/apt", "No pets", 1.0, 4, spo),
          _stay("Riverview Bungalow", 170.0, "Entire home/apt", "No smoking", 1.0, 3, spo)],
      f"Flight from Boise to {spo} on 2022-04-02":
          f"There is no flight from Boise to {spo} on 2022-04-02.",
      f"Self-driving from Boise to {spo}": _drive("self-driving", "Boise", spo, 6, 620, 31),
      f"Taxi from Boise to {spo}": _drive("taxi", "Boise", spo, 6, 620, 620),
      f"Flight from {spo} to Boise on 2022-04-04":
          f"There is no flight from {spo} to Boise on 2022-04-04.",
      f"Self-driving from {spo} to Boise": _drive("self-driving", spo, "Boise", 6, 620, 31),
      f"Taxi from {spo} to Boise": _drive("taxi", spo, "Boise", 6, 620, 620),
  }
  row2 = {"org": "Boise", "dest": spo, "days": 3, "visiting_city_number": 1,
          "date": str(["2022-04-02", "2022-04-03", "2022-04-04"]), "people_number": 2,
          "local_constraint": str({"house rule": "pets", "cuisine": None,
                                   "room type": "entire room", "transportation": None}),
          "budget": 1200, "level": "medium",
          "query": "We are two people driving from Boise to Spokane for 3 days, April 2nd "
                   "to April 4th, 2022, with $1,200; we bring our dog and want an entire "
                   "home."}
  eug, bend = "Eugene", "Bend"
  ref3 = {
      f"Attractions in {eug}": [_sight("Skinner Butte Trail", eug),
                                _sight("Duck Pond Arboretum", eug)],
      f"Restaurants in {eug}": [_restaurant("Willamette Cantina", 24, "Mexican", eug),
                                _restaurant("Cascade Diner", 19, "American", eug),
                                _restaurant("Hops & Greens", 27, "Seafood", eug),
                                _restaurant("Riverbend Noodle Bar", 22, "Chinese", eug),
                                _restaurant("Fern Ridge Cafe", 14, "Cafe", eug)],
      f"Accommodations in {eug}": [_stay("Campus Guest Suite", 120.0, "Private room",
                                         "No parties", 2.0, 2, eug)],
      f"Attractions in {bend}": [_sight("Pilot Butte Summit", bend),
                                 _sight("Deschutes River Walk", bend)],
      f"Restaurants in {bend}": [_restaurant("Siam Pine Kitchen", 26, "Thai", bend),
                                 _restaurant("Lava Rock Grill", 31, "American", bend),
                                 _restaurant("High Desert Bakery", 12, "Bakery", bend),
                                 _restaurant("Sagebrush Cafe", 16, "Cafe", bend),
                                 _restaurant("Obsidian Steakhouse", 38, "American", bend),
                                 _restaurant("Tumalo Deli", 13, "Deli", bend)],
      f"Accommodations in {bend}": [_stay("Juniper Cabin", 140.0, "Entire home/apt",
                                          "No smoking", 2.0, 2, bend)],
      f"Flight from Reno to {eug} on 2022-05-01": [
          _flight("F9000301", 160, "08:00", "09:30", "2022-05-01", "Reno", eug)],
      f"Self-driving from Reno to {eug}": _drive("self-driving", "Reno", eug, 7, 700, 35),
      f"Taxi from Reno to {eug}": "No valid information.",
      f"Self-driving from {eug} to {bend}": _drive("self-driving", eug, bend, 2, 200, 10),
      f"Taxi from {eug} to {bend}": _drive("taxi", eug, bend, 2, 200, 200),
      f"Flight from {bend} to Reno on 2022-05-05": [
          _flight("F9000302", 150, "17:00", "18:20", "2022-05-05", bend, "Reno")],
      f"Self-driving from {bend} to Reno": _drive("self-driving", bend, "Reno", 6, 600, 30),
      f"Taxi from {bend} to Reno": "No valid information.",
  }
  row3 = {"org": "Reno", "dest": "Oregon", "days": 5, "visiting_city_number": 2,
          "date": str([f"2022-05-0{d}" for d in range(1, 6)]), "people_number": 1,
          "local_constraint": str({"house rule": None, "cuisine": ["Mexican", "Thai"],
                                   "room type": None, "transportation": "no flight"}),
          "budget": 2000, "level": "hard",
          "query": "Plan a 5-day trip from Reno through 2 cities in Oregon, May 1st to May "
                   "5th, 2022, for one person with $2,000, without flying; I would like "
                   "Mexican and Thai food."}
  return [(row1, ref1), (row2, ref2), (row3, ref3)]


def _table(records: list[dict]) -> str:
  """Records as an aligned text table (how the CSV shows reference tables)."""
  keys = list(records[0])
  cells = [[str(k) for k in keys]] + [[str(r.get(k, "")) for k in keys] for r in records]
  widths = [max(len(row[i]) for row in cells) for i in range(len(keys))]
  return "\n".join(" ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells)


def reference_text(info: dict[str, Any]) -> str:
  """The CSV's reference_information for a ref_info record: a Python list literal
  of {'Description': ..., 'Content': <text table or text>}."""
  return str([{"Description": d, "Content": _table(v) if isinstance(v, list) else v}
              for d, v in info.items()])


def _day(number, city, transportation="-", breakfast="-", attraction="-", lunch="-",
         dinner="-", accommodation="-"):
  return {"days": number, "current_city": city, "transportation": transportation,
          "breakfast": breakfast, "attraction": attraction, "lunch": lunch,
          "dinner": dinner, "accommodation": accommodation}


def _fixture_plans() -> list[list[dict]]:
  """A plan of each fixture query that passes every constraint of its own
  and of its train row (`_TRAIN_ROWS`)."""
  chat, spo, eug, bend = "Chattanooga", "Spokane", "Eugene", "Bend"
  loft, bungalow = f"Cozy Riverfront Loft, {chat}", f"Riverview Bungalow, {spo}"
  suite, cabin = f"Campus Guest Suite, {eug}", f"Juniper Cabin, {bend}"
  return [
      [_day(1, f"from Sarasota to {chat}", f"Flight Number: F9000101, from Sarasota to "
            f"{chat}, Departure Time: 07:30, Arrival Time: 09:40",
            attraction=f"Rock Ridge Overlook, {chat};", lunch=f"Maple Hearth, {chat}",
            dinner=f"Blue Heron Noodles, {chat}", accommodation=loft),
       _day(2, chat, breakfast=f"Sunrise Biscuit Co., {chat}",
            attraction=f"Riverside Glass Museum, {chat};Lookout Incline Park, {chat};",
            lunch=f"Porchlight BBQ, {chat}", dinner=f"Little Olive Trattoria, {chat}",
            accommodation=loft),
       _day(3, f"from {chat} to Sarasota", f"Flight Number: F9000102, from {chat} to "
            "Sarasota, Departure Time: 19:00, Arrival Time: 21:05")],
      [_day(1, f"from Boise to {spo}", f"Self-driving, from Boise to {spo}, duration: 6 "
            "hours, distance: 620 km, cost: 31", attraction=f"Falls Footbridge, {spo};",
            dinner=f"Huckleberry Table, {spo}", accommodation=bungalow),
       _day(2, spo, breakfast=f"Tamarack Tacos, {spo}", attraction=f"Lilac Carousel, {spo};",
            lunch=f"Inland Pho House, {spo}", dinner=f"Gondola Pizza Works, {spo}",
            accommodation=bungalow),
       _day(3, f"from {spo} to Boise", f"Self-driving, from {spo} to Boise, duration: 6 "
            "hours, distance: 620 km, cost: 31")],
      [_day(1, f"from Reno to {eug}", f"Self-driving, from Reno to {eug}, duration: 7 "
            "hours, distance: 700 km, cost: 35", attraction=f"Skinner Butte Trail, {eug};",
            lunch=f"Willamette Cantina, {eug}", dinner=f"Cascade Diner, {eug}",
            accommodation=suite),
       _day(2, eug, breakfast=f"Fern Ridge Cafe, {eug}",
            attraction=f"Duck Pond Arboretum, {eug};", lunch=f"Hops & Greens, {eug}",
            dinner=f"Riverbend Noodle Bar, {eug}", accommodation=suite),
       _day(3, f"from {eug} to {bend}", f"Self-driving, from {eug} to {bend}, duration: 2 "
            "hours, distance: 200 km, cost: 10", attraction=f"Pilot Butte Summit, {bend};",
            lunch=f"Siam Pine Kitchen, {bend}", dinner=f"Lava Rock Grill, {bend}",
            accommodation=cabin),
       _day(4, bend, breakfast=f"High Desert Bakery, {bend}",
            attraction=f"Deschutes River Walk, {bend};", lunch=f"Sagebrush Cafe, {bend}",
            dinner=f"Obsidian Steakhouse, {bend}", accommodation=cabin),
       _day(5, f"from {bend} to Reno", f"Self-driving, from {bend} to Reno, duration: 6 "
            "hours, distance: 600 km, cost: 30", breakfast=f"Tumalo Deli, {bend}")],
  ]


# The train split's rows: each fixture query with other travellers, budget and
# constraints (so that no train query is a validation query), and its plan.
_TRAIN_ROWS = (
    {"people_number": 2, "budget": 2000,
     "local_constraint": str({"house rule": "parties", "cuisine": None, "room type": None,
                              "transportation": None}), "level": "medium",
     "query": "Please plan a 3-day trip for two people from Sarasota to Chattanooga, "
              "March 10th to March 12th, 2022, with a budget of $2,000, staying "
              "where parties are allowed."},
    {"people_number": 3, "budget": 1500, "level": "medium",
     "query": "Three of us are driving from Boise to Spokane for 3 days, April 2nd to "
              "April 4th, 2022, with $1,500; we bring our dog and want an entire home."},
    {"people_number": 1, "budget": 1500, "level": "medium",
     "local_constraint": str({"house rule": None, "cuisine": ["Mexican"],
                              "room type": None, "transportation": "no flight"}),
     "query": "Plan a 5-day trip from Reno through 2 cities in Oregon, May 1st to May "
              "5th, 2022, for one person with $1,500, without flying; I would like "
              "Mexican food."},
)


def write_fixture(directory: str, split: str = "validation") -> list[str]:
  """Writes three hand-written queries (easy, medium, hard) as `split` in
  TravelPlanner's format under `directory`; returns the paths. The train split
  varies their travellers, budgets and constraints and adds each one's
  annotated plan (`_fixture_plans`), as TravelPlanner's train split does."""
  os.makedirs(directory, exist_ok=True)
  csv_path = os.path.join(directory, f"{split}.csv")
  ref_path = os.path.join(directory, f"{split}_ref_info.jsonl")
  queries = _fixture_queries()
  columns = list(_COLUMNS)
  if split == "train":
    columns.append("annotated_plan")
    queries = [({**row, **changes, "annotated_plan": str([
        {k: row[k] for k in ("org", "dest", "days")}, *plan, {}])}, info)
               for (row, info), changes, plan in zip(queries, _TRAIN_ROWS,
                                                     _fixture_plans())]
  with open(csv_path, "w", encoding="utf-8", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=columns)
    writer.writeheader()
    for row, info in queries:
      writer.writerow({**row, "reference_information": reference_text(info)})
  with open(ref_path, "w", encoding="utf-8") as f:
    for _, info in queries:
      f.write(json.dumps(info) + "\n")
  return [csv_path, ref_path]
