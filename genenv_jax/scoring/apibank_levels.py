"""API-Bank (Li et al., 2023) levels 1-3 from its JSON test files: one item per
gold API call, prompted with the dialogue so far and scored on the call.

Source files (GitHub AlibabaResearch/DAMO-ConvAI, folder api-bank/json_test_data/,
MIT licence; the Hugging Face dataset `liminghao1630/API-Bank` holds the same
files under test-data/), read from a directory holding them (directly or under one
of its FOLDERS: `json_test_data/`, `test-data/`, `training-data/`):

  level-1-api.json  a JSON list of {"file", "id", "instruction", "input",
                    "expected_output"}: `instruction` states the call format and
                    lists the API descriptions (one JSON object per line after
                    "API descriptions:"), `input` is the dialogue so far (lines
                    `User: ...`, `AI: ...`, earlier calls as
                    `API-Request: [Name(...)]->result`) ending with
                    "Generate API Request:", and `expected_output` is the gold
                    `API-Request: [Name(key='value', ...)]`.
  level-2-api.json  the same, with only ToolSearcher described: the model first
                    searches for the API (its result appears in later items'
                    dialogue), then calls it.
  level-3.json      a JSON list of {"requirement", "response", "apis": [{"api_name",
                    "input": {...}, "output": {"api_name", "input", "output",
                    "exception"}}, ...]}: a request that takes several calls
                    (ToolSearcher searches among them), with each recorded result.

Items: level 1 and 2 as they are (id `level-<n>/<file>/<id>`; the system turn is
the instruction, the user turn the input). Level 3 is scored as API-Bank's own
level-3 evaluator scores it, call by call (id `level-3/<dialogue>/<call>`): the
prompt is LEVEL3_INSTRUCTION with ToolSearcher's description, then `User:
<requirement>`, then every earlier gold call of the dialogue with its recorded
result, then "Generate API Request:". The model's own earlier calls are not
executed: offline there is no API implementation to run them against, so the
dialogue continues from the recorded calls and results.

Training on API-Bank (the text domain's `api_bank` seed format, `seed_examples`)
reads levels 1 and 2: the Hugging Face dataset's training files as the train split
and the test files above as the held-out split.

  lv1-api-train.json, lv2-api-train.json  (training-data/) a JSON list of
                    {"instruction", "input", "output"}: `instruction` states the
                    call format and ends with "API descriptions:", `input` holds
                    the API descriptions (JSON lines with keys apiCode,
                    description, parameters, response) and then the dialogue so
                    far, ending with "Generate API Request:", `output` the gold
                    `API-Request: [Name(key='value', ...)]` (as written: some
                    values are unquoted, so not every output is a readable call).

This is the format of the repository's `training-data/lv3-api-train.json` (907
records, 74 of them with an output that is no readable call); the level-1/2
training files are assumed to share it.

Scoring (`score`): a reply is read with genenv_jax/scoring/apibank.py (the call
list after `API-Request:`, or any call format it reads). Where the gold call is an
API's, the reply must hold exactly that one call with equal parameters
(apibank.score's canonical comparison). API-Bank instead executes the predicted
call and compares the API's result with the recorded one; equal parameters give
an equal result, so this can only be stricter where two different parameter
values would have given the same result. Where the gold call is a ToolSearcher
search, API-Bank compares the tool its (sentence-embedding) retriever returns;
offline, `search` ranks the APIs of the catalogue (every API description the
loaded files contain) by the keywords' word overlap with each API's name (split
at capitals, weighted 3) and description, and the reply is correct when it is one
ToolSearcher call whose keywords retrieve the same API as the gold keywords
(apibank.score's comparison where the gold keywords retrieve nothing).
"""

from __future__ import annotations

import ast
import json
import os
import re
from typing import Any, NamedTuple, Sequence

from genenv_jax.scoring import CORRECT, INCORRECT, INVALID, InputError, Verdict
from genenv_jax.scoring import apibank
from genenv_jax.scoring.bfcl import DecodeError

NAME = "api_bank"
LICENCE = "MIT (the licence of the AlibabaResearch/DAMO-ConvAI repository)"
LEVEL_FILES = {1: "level-1-api.json", 2: "level-2-api.json", 3: "level-3.json"}
_RAW = "https://raw.githubusercontent.com/AlibabaResearch/DAMO-ConvAI/main/api-bank/"
FILES = {f"json_test_data/{f}": _RAW + "json_test_data/" + f for f in LEVEL_FILES.values()}
TOOL_SEARCHER = "ToolSearcher"
# Where a data directory may hold the files: itself, the GitHub repository's test
# folder, the Hugging Face dataset's test and training folders.
FOLDERS = ("", "json_test_data", "test-data", "training-data")
# Training on API-Bank (`seed_examples`): the Hugging Face dataset's training files
# of levels 1 and 2, and the test files of those levels as the held-out split.
SEED_LEVELS = (1, 2)
TRAIN_FILES = {1: "lv1-api-train.json", 2: "lv2-api-train.json"}

TOOL_SEARCHER_DESCRIPTION = {
    "name": TOOL_SEARCHER,
    "description": "Searches the library for the tool that best matches the keywords.",
    "input_parameters": {"keywords": {"type": "str",
                                      "description": "The keywords to search for."}},
    "output_parameters": {"best_matchs": {"type": "Union[List[dict], dict]",
                                          "description": "The best matching tool(s)."}}}

LEVEL3_INSTRUCTION = (
    "Write the next API request that serves the user's requirement, given the "
    "requests made so far and their results, in the format "
    "[ApiName(key1='value1', key2='value2', ...)].\n"
    "Find an API with ToolSearcher before calling it.\n"
    "Reply with one line:\n"
    "API-Request: [ApiName(key1='value1', key2='value2', ...)]\n\n"
    "API descriptions:\n" + json.dumps(TOOL_SEARCHER_DESCRIPTION))

_STOPWORDS = frozenset(
    "a an and are as at be by can for from get given i in is it me my of on or "
    "please the this to tool tools user what with you your".split())


class Item(NamedTuple):
  """One gold call to predict.

  Attributes:
    id: `level-<n>/<file>/<id>` or `level-3/<dialogue>/<call>`.
    level: 1, 2 or 3.
    system: the instruction (call format and API descriptions).
    user: the dialogue so far, ending with "Generate API Request:".
    gold: the gold call.
    dialogue: the level-3 dialogue's id (`level-3/<dialogue>`); "" for levels 1-2.
    dialogue_calls: how many calls the level-3 dialogue has; 0 for levels 1-2.
  """

  id: str
  level: int
  system: str
  user: str
  gold: apibank.ApiCall
  dialogue: str = ""
  dialogue_calls: int = 0


class Data(NamedTuple):
  """The items of the loaded levels and the API catalogue they describe
  (name -> the words `search` matches)."""

  items: list[Item]
  catalogue: dict[str, str]


def level_path(data_dir: str, level: int) -> str:
  """The file of `level` under `data_dir` (or its json_test_data/).

  Raises:
    InputError: no such file.
  """
  name = LEVEL_FILES[level]
  path = find_file(data_dir, name)
  if path is None:
    raise InputError(f"{data_dir}: no {name} (API-Bank level {level}) in it or in its "
                     f"{'/, '.join(FOLDERS[1:])}/")
  return path


def find_file(data_dir: str, name: str) -> str | None:
  """The file `name` in `data_dir` or in one of its FOLDERS (the first found),
  None when there is none."""
  for folder in FOLDERS:
    path = os.path.join(data_dir, folder, name)
    if os.path.isfile(path):
      return path
  return None


def _read_json_list(path: str) -> list:
  try:
    with open(path, encoding="utf-8") as f:
      records = json.load(f)
  except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
    raise InputError(f"cannot read {path} as JSON: {e}") from e
  if not isinstance(records, list):
    raise InputError(f"{path}: expected a JSON list of records, got "
                     f"{type(records).__name__}")
  return records


def _gold_call(text: Any, where: str) -> apibank.ApiCall:
  if not isinstance(text, str):
    raise InputError(f"{where}: 'expected_output' is not a string")
  try:
    return apibank.single_call(text)
  except DecodeError as e:
    raise InputError(f"{where}: 'expected_output' is not an API request ({e})") from e


def _check_strings(record: Any, where: str, fields: Sequence[str]) -> None:
  """Raises InputError naming `where` unless `record` is a JSON object whose
  `fields` are strings."""
  if not isinstance(record, dict):
    raise InputError(f"{where}: not a JSON object")
  for field in fields:
    if not isinstance(record.get(field), str):
      raise InputError(f"{where}: field {field!r} is not a string")


def _dialogue_records(path: str, level: int) -> list[tuple[str, str, dict]]:
  """(item id, where, record) of a level-1/2 test file's records, their fields
  checked but `expected_output`'s call not read."""
  records, seen = [], set()
  for index, record in enumerate(_read_json_list(path)):
    where = f"{path}: record {index}"
    _check_strings(record, where, ("file", "instruction", "input"))
    if not isinstance(record.get("id"), int) or isinstance(record.get("id"), bool):
      raise InputError(f"{where}: field 'id' is not an integer")
    item_id = f"level-{level}/{record['file']}/{record['id']}"
    if item_id in seen:
      raise InputError(f"{where}: id {item_id!r} appears twice")
    seen.add(item_id)
    records.append((item_id, f"{where} ({item_id})", record))
  return records


def _load_dialogue_level(path: str, level: int) -> list[Item]:
  return [Item(item_id, level, record["instruction"].strip(), record["input"],
               _gold_call(record.get("expected_output"), where))
          for item_id, where, record in _dialogue_records(path, level)]


class Example(NamedTuple):
  """A seed example of training on API-Bank (`seed_examples`).

  Attributes:
    id: `level-<n>/<file>/<id>` (test files, as `Item.id`) or
      `level-<n>-train/<record index>` (training files).
    system: the instruction (call format, and in test files the API descriptions).
    user: the dialogue so far (training files: the API descriptions first),
      ending with "Generate API Request:".
    answer: the gold call's text as the file writes it, `API-Request:
      [Name(key='value', ...)]` (some of them are no readable call).
  """

  id: str
  system: str
  user: str
  answer: str


def _load_training(path: str, level: int) -> list[Example]:
  examples = []
  for index, record in enumerate(_read_json_list(path)):
    where = f"{path}: record {index}"
    _check_strings(record, where, ("instruction", "input", "output"))
    examples.append(Example(f"level-{level}-train/{index}", record["instruction"].strip(),
                            record["input"], record["output"].strip()))
  return examples


def seed_files(data_dir: str) -> list[str]:
  """The level-1 and level-2 training (TRAIN_FILES) and test (LEVEL_FILES) files
  under `data_dir` (or its FOLDERS), training files first."""
  names = [TRAIN_FILES[level] for level in SEED_LEVELS]
  names += [LEVEL_FILES[level] for level in SEED_LEVELS]
  return [path for path in (find_file(data_dir, name) for name in names) if path]


def is_held_out(path: str) -> bool:
  """Whether a seed file is a test file (its examples are held out from training)."""
  return os.path.basename(path) in {LEVEL_FILES[level] for level in SEED_LEVELS}


def seed_examples(path: str) -> list[Example]:
  """The examples of one level-1 or level-2 file, by its name: a training file
  (a JSON list of {"instruction", "input", "output"}) or a test file (its items;
  the gold call's text as written, readable or not: 41 of the 534 in API-Bank's
  test files of levels 1 and 2 are not, e.g. `attendees='['John', 'Jane']'`).

  Raises:
    InputError: a file of another name, or a malformed file (the message names
      the file, record and field).
  """
  name = os.path.basename(path)
  for level in SEED_LEVELS:
    if name == TRAIN_FILES[level]:
      return _load_training(path, level)
    if name == LEVEL_FILES[level]:
      examples = []
      for item_id, where, record in _dialogue_records(path, level):
        if not isinstance(record.get("expected_output"), str):
          raise InputError(f"{where}: 'expected_output' is not a string")
        examples.append(Example(item_id, record["instruction"].strip(), record["input"],
                                record["expected_output"].strip()))
      return examples
  raise InputError(f"{path}: not an API-Bank level-1/2 file (expected one of "
                   f"{sorted(TRAIN_FILES.values()) + [LEVEL_FILES[1], LEVEL_FILES[2]]})")


def format_call(name: str, parameters: dict[str, Any]) -> str:
  """A call as API-Bank writes it: `[Name(key='value', ...)]`."""
  return f"[{name}({', '.join(f'{k}={v!r}' for k, v in parameters.items())})]"


def _load_level3(path: str) -> tuple[list[Item], list[dict]]:
  """The level-3 items and the API descriptions ToolSearcher returned."""
  items, descriptions = [], []
  for index, record in enumerate(_read_json_list(path)):
    where = f"{path}: record {index}"
    if not isinstance(record, dict) or not isinstance(record.get("requirement"), str):
      raise InputError(f"{where}: not an object with a string 'requirement'")
    apis = record.get("apis")
    if not isinstance(apis, list) or not apis:
      raise InputError(f"{where}: 'apis' is not a non-empty list")
    history = [f"User: {record['requirement'].strip()}"]
    for call_index, api in enumerate(apis):
      call_where = f"{where}, apis[{call_index}]"
      if (not isinstance(api, dict) or not isinstance(api.get("api_name"), str)
          or not isinstance(api.get("input"), dict)):
        raise InputError(f"{call_where}: needs a string 'api_name' and an object 'input'")
      gold = apibank.ApiCall(api["api_name"], api["input"])
      items.append(Item(f"level-3/{index}/{call_index}", 3, LEVEL3_INSTRUCTION,
                        "\n".join(history + ["Generate API Request:"]) + "\n", gold,
                        f"level-3/{index}", len(apis)))
      recorded = api.get("output")
      result = recorded.get("output") if isinstance(recorded, dict) else recorded
      exception = recorded.get("exception") if isinstance(recorded, dict) else None
      shown = f"Exception: {exception}" if exception else repr(result)
      history.append(f"API-Request: {format_call(gold.name, gold.parameters)}->{shown}")
      if gold.name == TOOL_SEARCHER:
        descriptions.extend(r for r in (result if isinstance(result, list) else [result])
                            if isinstance(r, dict))
  return items, descriptions


def _descriptions_in(text: str) -> list[dict]:
  """The API descriptions written in an instruction (JSON lines after "API
  descriptions:") or in dialogue lines `...ToolSearcher(...)]->{...}`."""
  found = []
  _, _, listed = text.partition("API descriptions:")
  for line in listed.splitlines():
    try:
      value = json.loads(line)
    except ValueError:
      continue
    if isinstance(value, dict):
      found.append(value)
  for line in text.splitlines():
    if f"{TOOL_SEARCHER}(" in line and "->" in line:
      try:  # a Python literal of the dataset, never model text
        value = ast.literal_eval(line.split("->", 1)[1].strip())
      except (ValueError, SyntaxError, RecursionError, MemoryError):
        continue
      found.extend(v for v in (value if isinstance(value, list) else [value])
                   if isinstance(v, dict))
  return found


def split_words(text: str) -> list[str]:
  """Lower-case words of `text`, CamelCase split ("QueryStock" -> query, stock)."""
  spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", text)
  return re.findall(r"[a-z0-9]+", spaced.lower())


def _catalogue(descriptions: Sequence[dict]) -> dict[str, str]:
  catalogue = {}
  for description in descriptions:
    name = description.get("name")
    if isinstance(name, str) and name != TOOL_SEARCHER and name not in catalogue:
      catalogue[name] = " ".join(
          [str(description.get("description", ""))]
          + [str(k) for k in description.get("input_parameters", {}) or {}])
  return catalogue


def load(data_dir: str, levels: Sequence[int] = (1, 2, 3)) -> Data:
  """The items of `levels` under `data_dir` (levels in order, each file's order)
  and the API catalogue of those files.

  Raises:
    InputError: a missing or malformed file (the message names the file, record
      and field), an unknown level, or a repeated id.
  """
  unknown = [level for level in levels if level not in LEVEL_FILES]
  if unknown or not levels:
    raise InputError(f"--levels: {unknown or 'none'} given; API-Bank levels are 1, 2, 3")
  items, descriptions = [], []
  for level in levels:
    path = level_path(data_dir, level)
    if level == 3:
      level_items, found = _load_level3(path)
      descriptions.extend(found)
    else:
      level_items = _load_dialogue_level(path, level)
      for item in level_items:
        descriptions.extend(_descriptions_in(item.system + "\n" + item.user))
    items.extend(level_items)
  if not items:
    raise InputError(f"{data_dir}: API-Bank levels {list(levels)} hold no items")
  return Data(items, _catalogue(descriptions))


def search(keywords: str, catalogue: dict[str, str]) -> str | None:
  """The catalogue API whose name (weight 3 a word) and description (weight 1)
  share the most keyword words (stopwords aside); the first by name on ties;
  None when none shares a word."""
  wanted = set(split_words(keywords)) - _STOPWORDS
  best, best_score = None, 0
  for name in sorted(catalogue):
    name_words = set(split_words(name))
    other_words = set(split_words(catalogue[name])) - name_words
    score = 3 * len(wanted & name_words) + len(wanted & other_words)
    if score > best_score:
      best, best_score = name, score
  return best


def _score_search(gold: apibank.ApiCall, text: str, catalogue: dict[str, str]) -> Verdict:
  target = search(str(gold.parameters.get("keywords", "")), catalogue)
  if target is None:
    return apibank.score(gold, text)
  try:
    calls = apibank.parse_prediction(text)
  except DecodeError as e:
    return Verdict(INVALID, str(e))
  if len(calls) != 1:
    return Verdict(INCORRECT, f"expected one API call, got {len(calls)}")
  call, = calls
  if call.name != TOOL_SEARCHER:
    return Verdict(INCORRECT, f"called {call.name!r}, expected {TOOL_SEARCHER!r}")
  if set(call.args) != {"keywords"} or not isinstance(call.args["keywords"], str):
    return Verdict(INCORRECT, f"{TOOL_SEARCHER} takes one string 'keywords', got "
                              f"{sorted(call.args)}")
  found = search(call.args["keywords"], catalogue)
  if found != target:
    return Verdict(INCORRECT, f"keywords {call.args['keywords']!r} retrieve {found!r}, "
                              f"expected {target!r}")
  return Verdict(CORRECT)


def score(item: Item, text: str, catalogue: dict[str, str]) -> Verdict:
  """The verdict on one reply (rules in the module docstring)."""
  try:
    if item.gold.name == TOOL_SEARCHER:
      return _score_search(item.gold, text, catalogue)
    return apibank.score(item.gold, text)
  except RecursionError:
    return Verdict(INVALID, "reply nested too deeply")


def messages(item: Item) -> list[dict[str, str]]:
  """The chat prompt of an item: the instruction, then the dialogue."""
  return [{"role": "system", "content": item.system},
          {"role": "user", "content": item.user}]


def limit_per_level(items: Sequence[Item], k: int) -> list[Item]:
  """The first `k` items of each level."""
  kept, counts = [], {}
  for item in items:
    counts[item.level] = counts.get(item.level, 0) + 1
    if counts[item.level] <= k:
      kept.append(item)
  return kept


# The fixture: APIs, dialogues and calls written for the tests and offline trials
# (not from API-Bank), in API-Bank's file formats.

def _api(name: str, description: str, inputs: dict[str, tuple[str, str]],
         outputs: dict[str, tuple[str, str]]) -> dict:
  return {"name": name, "description": description,
          "input_parameters": {k: {"type": t, "description": d}
                               for k, (t, d) in inputs.items()},
          "output_parameters": {k: {"type": t, "description": d}
                                for k, (t, d) in outputs.items()}}


_CONVERT = _api("ConvertCurrency", "This API converts an amount of money into another "
                "currency.", {"amount": ("float", "The amount to convert."),
                              "from_currency": ("str", "Three-letter code, e.g. USD."),
                              "to_currency": ("str", "Three-letter code, e.g. EUR.")},
                {"converted": ("float", "The converted amount.")})
_BOOK = _api("BookTable", "This API reserves a table at a restaurant.",
             {"restaurant": ("str", "The restaurant's name."),
              "time": ("str", "The time of the booking. Format: %Y-%m-%d %H:%M:%S"),
              "people": ("int", "How many guests.")},
             {"status": ("str", "success or failed")})
_PARCEL = _api("QueryParcel", "This API looks up where a parcel is and when it will be "
               "delivered.", {"tracking_number": ("str", "The parcel's tracking number.")},
               {"status": ("str", "Where the parcel is."),
                "delivery_date": ("str", "Format: %Y-%m-%d")})
_SMS = _api("SendSms", "This API sends a text message to a phone number.",
            {"phone": ("str", "The phone number."), "message": ("str", "The text.")},
            {"status": ("str", "success or failed")})
_SEARCHER = _api(TOOL_SEARCHER, "Searches the library for relevant tools by keywords.",
                 {"keywords": ("str", "The keywords to search for.")},
                 {"best_matchs": ("Union[List[dict], dict]", "The best match tool(s).")})


def _instruction(apis: Sequence[dict]) -> str:
  return ("\nWrite an API request in the format [ApiName(key1='value1', key2='value2', "
          "...)] from the dialogue so far.\nThe current year is 2023.\n\nExpected "
          "output:\nAPI-Request: [ApiName(key1='value1', key2='value2', ...)]\n\n"
          "API descriptions:\n" + "\n".join(json.dumps(a) for a in apis))


def _record(file: str, record_id: int, apis: Sequence[dict], lines: Sequence[str],
            call: str) -> dict:
  return {"file": file, "id": record_id, "instruction": _instruction(apis),
          "input": "\n".join(list(lines) + ["Generate API Request:"]) + "\n",
          "expected_output": f"API-Request: {call}"}


def _fixture() -> dict[str, list]:
  book_request = ("User: Could you reserve a table for two at Golden Wok tonight, "
                  "May 12th, at 8 pm?")
  level1 = [
      _record("ConvertCurrency-level-1-1.jsonl", 0, [_CONVERT],
              ["User: How much is 250 US dollars in euros?",
               "AI: Let me convert that for you."],
              "[ConvertCurrency(amount='250', from_currency='USD', to_currency='EUR')]"),
      _record("BookTable-ConvertCurrency-level-1-2.jsonl", 0, [_BOOK, _CONVERT],
              ["User: Please book a table for 4 at Luigi's on March 3rd at 7 pm.",
               "AI: Sure, booking it now."],
              "[BookTable(restaurant=\"Luigi's\", time='2023-03-03 19:00:00', people='4')]"),
  ]
  level2 = [
      _record("BookTable-level-2-1.jsonl", 0, [_SEARCHER],
              [book_request, "AI: Let me look for a tool that can do that."],
              "[ToolSearcher(keywords='reserve restaurant table')]"),
      _record("BookTable-level-2-1.jsonl", 1, [_SEARCHER],
              [book_request, "AI: Let me look for a tool that can do that.",
               f"API-Request: [ToolSearcher(keywords='reserve restaurant table')]->{_BOOK!r}"],
              "[BookTable(restaurant='Golden Wok', time='2023-05-12 20:00:00', "
              "people='2')]"),
  ]
  track = {"status": "in transit", "delivery_date": "2023-06-02"}
  message = "Your parcel 1Z999 arrives on 2023-06-02."

  def step(name, inputs, output):
    return {"api_name": name, "input": inputs,
            "output": {"api_name": name, "input": inputs, "output": output,
                       "exception": None}}

  level3 = [{
      "requirement": " Track parcel 1Z999 and text its delivery date to +1-555-0100.",
      "response": "Your parcel is in transit and arrives on 2023-06-02; I texted "
                  "+1-555-0100.",
      "apis": [step(TOOL_SEARCHER, {"keywords": "track parcel"}, _PARCEL),
               step("QueryParcel", {"tracking_number": "1Z999"}, track),
               step(TOOL_SEARCHER, {"keywords": "send text message"}, _SMS),
               step("SendSms", {"phone": "+1-555-0100", "message": message}, "success")],
  }]
  return {LEVEL_FILES[1]: level1, LEVEL_FILES[2]: level2, LEVEL_FILES[3]: level3}


def write_fixture(directory: str) -> list[str]:
  """Writes hand-written items of the three levels in API-Bank's format under
  `directory`/json_test_data/; returns the paths."""
  folder = os.path.join(directory, "json_test_data")
  os.makedirs(folder, exist_ok=True)
  paths = []
  for name, records in _fixture().items():
    path = os.path.join(folder, name)
    with open(path, "w", encoding="utf-8") as f:
      json.dump(records, f, indent=4)
    paths.append(path)
  return paths


# The training fixture: hand-written records in the format of API-Bank's training
# files (module doc), for the text domain's `api_bank` seed format.

def _training_record(apis: Sequence[dict], lines: Sequence[str], call: str) -> dict:
  described = [json.dumps({"apiCode": a["name"], "description": a["description"],
                           "parameters": a["input_parameters"],
                           "response": a["output_parameters"]}) for a in apis]
  return {"instruction": _instruction(()),
          "input": "\n".join(described + list(lines) + ["Generate API Request: "]),
          "output": f"API-Request: {call}"}


def _training_fixture() -> dict[str, list]:
  level1 = [
      _training_record([_CONVERT], ["User: Convert 40 euros to Japanese yen, please."],
                       "[ConvertCurrency(amount='40', from_currency='EUR', "
                       "to_currency='JPY')]"),
      _training_record([_PARCEL], ["User: Where is my parcel 7Q12?"],
                       "[QueryParcel(tracking_number='7Q12')]"),
      _training_record([_SMS], ["User: Text +1-555-0199 that I am running late."],
                       "[SendSms(phone='+1-555-0199', message='I am running late.')]"),
      # As in API-Bank's training files, a gold call with unquoted values: no
      # readable call, so the text domain drops it.
      _training_record([_BOOK], ["User: Book Chez Anna for 3 at 7 pm on June 1st."],
                       "[BookTable(restaurant=Chez Anna, time=2023-06-01 19:00:00, "
                       "people=3)]"),
  ]
  parcel = "User: Is parcel 5K77 on its way?"
  level2 = [
      _training_record([_SEARCHER], [parcel],
                       "[ToolSearcher(keywords='parcel tracking')]"),
      _training_record([_SEARCHER], [
          parcel, f"API-Request: [ToolSearcher(keywords='parcel tracking')]->{_PARCEL!r}"],
                       "[QueryParcel(tracking_number='5K77')]"),
  ]
  return {TRAIN_FILES[1]: level1, TRAIN_FILES[2]: level2}


def write_seed_fixture(directory: str) -> list[str]:
  """Writes the seed files of training on API-Bank under `directory`, as the
  Hugging Face dataset lays them out: hand-written training records of levels 1
  and 2 under training-data/ and the test fixture's level-1/2 files under
  test-data/; returns the paths (`seed_files`' order)."""
  test = _fixture()
  files = dict(_training_fixture(), **{LEVEL_FILES[level]: test[LEVEL_FILES[level]]
                                       for level in SEED_LEVELS})
  paths = []
  for name, records in files.items():
    folder = os.path.join(directory, "training-data" if name in TRAIN_FILES.values()
                          else "test-data")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name)
    with open(path, "w", encoding="utf-8") as f:
      json.dump(records, f, indent=4)
    paths.append(path)
  return paths
