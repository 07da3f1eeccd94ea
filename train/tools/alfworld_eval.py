"""ALFWorld played by an agent with the project's sampler, for
`python -m train.tools.evaluate alfworld`.

  python -m train.tools.evaluate alfworld --generate (--run WORKDIR [--step N] | --hf_dir DIR) \
      [--mesh SHAPE] [--data_dir DIR | --download] [--limit K] [--ids A,B] [--max_turns T] \
      --predictions FILE
  python -m train.tools.evaluate alfworld [--data_dir DIR | --download] --predictions FILE
  python -m train.tools.evaluate alfworld --write_fixture DIR

The games are ALFWorld-synthetic by default: the fixed held-out specs of
genenv_jax/domains/alfworld/data.py (`held_out_specs`, `data.test_per_task` of
each task type over the 12 held-out layouts, configs/alfworld.py's count),
played in TextWorld with ALFWorld's text and commands (game.GamePool). With
`--data_dir DIR` (or `--download`) they are ALFWorld's official game files
instead: each trial directory of the split (`--split`, valid_unseen: the
134 "unseen" evaluation games) holding `traj_data.json` and `game.tw-pddl`,
kept as ALFWorld's own TextWorld loop keeps them (`official_games`) and played
in the same TextWorld environment.

Ids: `<task type>/<n>` (the n-th held-out spec of that type) for
ALFWorld-synthetic, the trial directory relative to the split for official
games. Games are ordered round-robin over the six task types, so that
`--limit K` keeps the first K of that order, about K/6 of each.

`--generate` plays every game as an episode, all games batched per turn: the
chat prompt is a system prompt (it is a household text game, reply with one
command; the run's `task.agent_system_prompt` for an ALFWorld run) and the
game's first text (the room, "Your task is to: ..."), then the commands as
assistant messages and ALFWorld's feedback as user messages. A turn decodes
one reply per unfinished game (up to `--max_new_tokens`, default
task.max_action_tokens, 24; greedily, or at `--temperature`; prompts
grouped by width as agent_generate.generate_bucketed does, one compile per
width bucket; the agent sharded on `--mesh` as train/tools/agent_generate.py
lays it out, several processes each decoding their devices' rows); the reply's
first non-blank line, stripped, is the command,
played in the game. An episode ends on a win, after `--max_turns` commands
(default: configs/alfworld.py's task.max_turns, 30), or when the next prompt
and `--max_new_tokens` would pass the model's max_position_embeddings
("context"). FILE gets one JSON line per game: `id`,
`spec` (ALFWorld-synthetic) or `game_file` (official: the file relative to the
split), `task_type`, `commands`, `replies` (the model's outputs),
`observations`, `won`, `turns`, `end`. It prints `generated=` and
`generation_seconds_per_item=` (compilation included). In a job of several
processes every process plays every game (the same host work in the same order)
and only process 0 writes FILE and scores.

Scoring (with or without --generate) replays each line's commands (the first
`--max_turns`) in its game: the verdict comes from the game, never from the
line's `won`. It writes `FILE.verdicts.jsonl` (`id`, `correct`, `verdict`,
`task_type`, `turns` played, `inadmissible` commands among them) and prints
`key=value` lines (`benchmark=`, `games=`, success per task type, ...) ending
with `accuracy=<success rate>`.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import os
import pathlib
import sys
import time
import zipfile
from typing import Any, Callable, Sequence

from genenv_jax.scoring import CORRECT, INCORRECT, InputError, Verdict, read_jsonl_lines
from train.tools import table1

NAME = "alfworld"
SYNTHETIC = "ALFWorld-synthetic"
SPLITS = ("valid_unseen", "valid_seen")
TRAJ_FILE = "traj_data.json"
GAME_FILE = "game.tw-pddl"
# What `alfworld-download` (alfworld 0.4.2) fetches for the text games: the
# trajectories (task types) and the TextWorld game files.
FILES = {
    "json_2.1.1_json.zip":
        "https://github.com/alfworld/alfworld/releases/download/0.2.2/json_2.1.1_json.zip",
    "json_2.1.2_tw-pddl.zip":
        "https://github.com/alfworld/alfworld/releases/download/0.4.0/json_2.1.2_tw-pddl.zip",
}
EXTRACTED = "extracted"


@dataclasses.dataclass(frozen=True)
class Game:
  """One game to play: its id, task type (a key of game.TASK_TYPES), and
  either its spec (ALFWorld-synthetic) or its game file (official)."""

  id: str
  task_type: str
  spec: Any = None        # game.Spec
  game_file: str = ""     # absolute path of an official game.tw-pddl
  game_file_id: str = ""  # that path relative to the split directory

  def source_fields(self) -> dict[str, str]:
    """The field a predictions line names its game by."""
    if self.spec is not None:
      return {"spec": self.spec.text()}
    return {"game_file": self.game_file_id}


def _round_robin(games: Sequence[Game]) -> list[Game]:
  """`games` ordered round-robin over the task types (game.TASK_TYPES's
  order), each type's games in their order."""
  from genenv_jax.domains.alfworld import game  # pylint: disable=import-outside-toplevel
  by_type = collections.defaultdict(list)
  for g in games:
    by_type[g.task_type].append(g)
  queues = [by_type[t] for t in game.TASK_TYPES if by_type[t]]
  out = []
  for index in range(max(map(len, queues), default=0)):
    out += [queue[index] for queue in queues if index < len(queue)]
  return out


def alfworld_config():
  """configs/alfworld.py's full config (task.max_turns, data.test_per_task)."""
  from configs import alfworld  # pylint: disable=import-outside-toplevel
  return alfworld.get_config()


@functools.lru_cache(maxsize=4)
def synthetic_games(test_per_task: int) -> tuple[Game, ...]:
  """ALFWorld-synthetic: data.held_out_specs(test_per_task), ids
  `<task type>/<n>`, round-robin over the task types."""
  from genenv_jax.domains.alfworld import data  # pylint: disable=import-outside-toplevel
  counts: collections.Counter = collections.Counter()
  games = []
  for spec, _ in data.held_out_specs(test_per_task):
    games.append(Game(f"{spec.task}/{counts[spec.task]}", spec.task, spec=spec))
    counts[spec.task] += 1
  return tuple(_round_robin(games))


# ------------------------------------------------------------ official files


def split_dir(data_dir: str, split: str) -> str:
  """The split's directory: `data_dir` itself when it is named `split`, else
  the one directory named `split` under it (ALFWorld's json_2.1.1/<split>).

  Raises:
    InputError: `data_dir` is no directory, or holds no or several such.
  """
  if not os.path.isdir(data_dir):
    raise InputError(f"--data_dir {data_dir}: not a directory")
  if os.path.basename(os.path.normpath(data_dir)) == split:
    return data_dir
  found = sorted(root for root, _, _ in os.walk(data_dir)
                 if os.path.basename(root) == split)
  if not found:
    raise InputError(
        f"--data_dir {data_dir}: no directory named {split!r} under it; expected "
        f"ALFWorld's layout json_2.1.1/{split}/<task>/<trial>/{{{TRAJ_FILE}, "
        f"{GAME_FILE}}} (what `alfworld-download` writes into $ALFWORLD_DATA)")
  if len(found) > 1:
    raise InputError(f"--data_dir {data_dir}: several {split!r} directories "
                     f"({', '.join(found[:3])}); pass the one to play")
  return found[0]


def official_games(data_dir: str, split: str) -> tuple[list[Game], dict[str, int]]:
  """The official games of `split` under `data_dir` and the trials skipped per
  reason. As ALFWorld's AlfredTWEnv.collect_game_files: every directory holding
  traj_data.json, except those whose path (here: relative to the split) names
  'movable' or 'Sliced', whose task type is not one of the six, without
  game.tw-pddl, or whose game file is not marked solvable.

  Raises:
    InputError: no split directory, an unreadable or malformed file (named),
      or no game kept.
  """
  from genenv_jax.domains.alfworld import game  # pylint: disable=import-outside-toplevel
  types = {key: name for name, key in game.TASK_TYPES.items()}
  root = split_dir(data_dir, split)
  games, skipped = [], collections.Counter()
  for folder, _, files in os.walk(root):
    if TRAJ_FILE not in files:
      continue
    relative = os.path.relpath(folder, root).replace(os.sep, "/")
    if "movable" in relative or "Sliced" in relative:
      skipped["movable_or_sliced"] += 1
      continue
    traj = _read_json(os.path.join(folder, TRAJ_FILE))
    task_type = traj.get("task_type")
    if task_type not in types:
      skipped["task_type"] += 1
      continue
    path = os.path.join(folder, GAME_FILE)
    if not os.path.isfile(path):
      skipped["no_game_file"] += 1
      continue
    data = _read_json(path)
    missing = [k for k in ("pddl_domain", "grammar", "pddl_problem") if k not in data]
    if missing:
      raise InputError(f"{path}: no {', '.join(missing)} (not a TextWorld game file)")
    if not data.get("solvable"):
      skipped["not_solvable"] += 1
      continue
    games.append(Game(relative, types[task_type], game_file=path,
                      game_file_id=f"{relative}/{GAME_FILE}"))
  if not games:
    raise InputError(f"{root}: no playable game (trials skipped: {dict(skipped)})")
  games.sort(key=lambda g: g.id)
  return _round_robin(games), dict(skipped)


def _read_json(path: str) -> dict:
  try:
    with open(path, encoding="utf-8") as f:
      value = json.load(f)
  except (OSError, ValueError) as e:
    raise InputError(f"cannot read {path}: {e}") from e
  if not isinstance(value, dict):
    raise InputError(f"{path}: expected a JSON object")
  return value


def download(split: str) -> str:
  """The cache directory holding `split`'s official games: FILES fetched
  (train/tools/bench_download.py, checksums recorded) and the split's
  traj_data.json and game.tw-pddl files extracted under `extracted/`."""
  from train.tools import bench_download  # pylint: disable=import-outside-toplevel
  root = bench_download.fetch(NAME, FILES)
  out = root / EXTRACTED
  for name in FILES:
    try:
      with zipfile.ZipFile(root / name) as archive:
        for member in archive.namelist():
          parts = member.split("/")
          if (split in parts[:-1] and parts[-1] in (TRAJ_FILE, GAME_FILE)
              and not (out / member).exists()):
            archive.extract(member, out)
    except (OSError, zipfile.BadZipFile) as e:
      raise InputError(f"cannot extract {root / name}: {e}") from e
  return str(out)


# Fixture: hand-written specs' games in the official layout (not ALFWorld's games).
_FIXTURE = (
    # (task directory, spec, solvable)
    ("pick_heat_then_place_in_recep-Apple-None-CounterTop-1",
     "layout: FloorPlan1; task: pick_heat_then_place apple -> countertop; "
     "start: apple in fridge 1, bread in countertop 2", True),
    ("look_at_obj_in_light-AlarmClock-None-DeskLamp-301",
     "layout: FloorPlan301; task: look_at_obj_in_light alarmclock -> desklamp; "
     "start: alarmclock in shelf 2, desklamp in desk 1", True),
    ("pick_and_place_simple-SoapBar-None-Toilet-401",
     "layout: FloorPlan401; task: pick_and_place soapbar -> toilet; "
     "start: soapbar in shelf 1, candle in shelf 2", False),   # marked unsolvable
    ("pick_heat_then_place_in_recep-AppleSliced-None-CounterTop-1",
     "layout: FloorPlan1; task: pick_heat_then_place apple -> countertop; "
     "start: apple in countertop 1", True),                    # a sliced task: skipped
)


def write_fixture(directory: str) -> list[str]:
  """A few games written from hand-written specs in ALFWorld's official layout
  and file formats: json_2.1.1/valid_unseen/<task>/<trial>/ holding
  traj_data.json (task_type, scene, pddl_params, turk_annotations) and
  game.tw-pddl (pddl_domain, grammar with the task sentence, pddl_problem,
  solvable, walkthrough). Two are playable; one is marked unsolvable and one
  is a 'Sliced' trial, which loading skips."""
  from genenv_jax.domains.alfworld import game  # pylint: disable=import-outside-toplevel
  pool = game.GamePool(1)
  written = []
  for index, (task_dir, text, solvable) in enumerate(_FIXTURE):
    spec = game.read_spec(text)
    folder = (pathlib.Path(directory) / "json_2.1.1" / "valid_unseen" / task_dir
              / f"trial_T20250101_000000_{index:06d}")
    folder.mkdir(parents=True, exist_ok=True)
    steps = game.plan(spec)
    walkthrough = list(pool.walkthrough(spec, steps)) if solvable else None
    game_file = {**game.game_data(spec), "solvable": solvable, "walkthrough": walkthrough}
    traj = {"task_id": folder.name, "task_type": game.TASK_TYPES[spec.task],
            "scene": {"floor_plan": spec.layout,
                      "scene_num": game.layout_number(spec.layout)},
            "pddl_params": {"object_target": spec.target_object,
                            "parent_target": spec.target, "mrecep_target": "",
                            "toggle_target": "", "object_sliced": "Sliced" in task_dir},
            "turk_annotations": {"anns": [{"task_desc": spec.description()}]}}
    for name, value in ((GAME_FILE, game_file), (TRAJ_FILE, traj)):
      (folder / name).write_text(json.dumps(value), encoding="utf-8")
      written.append(str(folder / name))
  return written


class FileGames:
  """Official game files played as game.GamePool plays specs: live games
  keyed by (file, commands played), so that the next command of an episode
  steps its game. At most `capacity` TextWorld environments, reused."""

  def __init__(self, capacity: int = 512):
    self.capacity = capacity
    self._live: collections.OrderedDict = collections.OrderedDict()
    self._idle: list = []
    self._created = 0

  def _started(self, path: str):
    from genenv_jax.domains.alfworld import game  # pylint: disable=import-outside-toplevel
    if self._idle:
      live = self._idle.pop()
    elif self._created < self.capacity:
      self._created += 1
      live = {"env": game.new_environment(), "path": None}
    else:
      live = self._live.popitem(last=False)[1]
    if live["path"] != path:
      live["path"] = None
      live["env"].load(path)
      live["path"] = path
    live["state"] = live["env"].reset()
    return live

  def opening(self, path: str) -> str:
    """The game's first text (its reset feedback)."""
    live = self._live.pop((path, ()), None) or self._started(path)
    self._live[(path, ())] = live
    return live["state"].feedback

  def play(self, path: str, commands: Sequence[str]):
    """game.GamePool.play's outcome (a game.Step) for a game file."""
    from genenv_jax.domains.alfworld import game  # pylint: disable=import-outside-toplevel
    live = self._live.pop((path, tuple(commands[:-1])), None)
    if live is None:
      live = self._started(path)
      for command in commands[:-1]:
        if live["state"]["won"]:
          break
        self._step(live, command)
    if live["state"]["won"]:
      step = game.Step("", True, False)
    else:
      step = self._step(live, commands[-1])
    self._live[(path, tuple(commands))] = live
    return step

  @staticmethod
  def _step(live, command: str):
    from genenv_jax.domains.alfworld import game  # pylint: disable=import-outside-toplevel
    state = live["state"]
    if command.strip() not in state["admissible_commands"]:
      # As game._Live: TextWorld's answer to a command it does not admit.
      return game.Step(game.NOTHING_HAPPENS, bool(state["won"]), False)
    live["state"], _, _ = live["env"].step(command)
    return game.Step(live["state"].feedback, bool(live["state"]["won"]), True)


class Player:
  """Opens and plays the games of either source."""

  def __init__(self):
    from genenv_jax.domains.alfworld import game  # pylint: disable=import-outside-toplevel
    self.specs = game.GamePool()
    self.files = FileGames()

  def opening(self, g: Game) -> str:
    return self.specs.opening(g.spec) if g.spec is not None else self.files.opening(g.game_file)

  def play(self, g: Game, commands: Sequence[str]):
    if g.spec is not None:
      return self.specs.play(g.spec, commands)
    return self.files.play(g.game_file, commands)


# ------------------------------------------------------------------ episodes


def command_of(reply: str) -> str:
  """The command a reply writes: its first non-blank line, stripped."""
  return next((line.strip() for line in reply.splitlines() if line.strip()), "")


def system_prompt(run_dir: str) -> str:
  """The agent's system prompt: an ALFWorld run's task.agent_system_prompt
  when `run_dir` is one that sets it, else the ALFWorld domain's default."""
  from genenv_jax.domains.alfworld import domain  # pylint: disable=import-outside-toplevel
  if run_dir:
    from train.checkpoints import workdir as workdir_lib  # pylint: disable=import-outside-toplevel
    try:
      task = workdir_lib.read_run_config(run_dir).task
    except FileNotFoundError:
      task = None  # load_agent names the problem
    if task is not None and task.get("name") == "alfworld" and task.get(
        "agent_system_prompt"):
      return task.agent_system_prompt
  return domain.DEFAULT_AGENT_SYSTEM_PROMPT


def play_episodes(agent, games: Sequence[Game], player: Player, system: str,
                  max_turns: int, max_new_tokens: int, batch_size: int,
                  temperature: float = 0.0) -> list[dict[str, Any]]:
  """Each game's episode (module docstring), all games batched per turn."""
  from train.tools import agent_generate  # pylint: disable=import-outside-toplevel
  limit = agent.model.max_position_embeddings
  episodes = []
  for g in games:
    messages = ([{"role": "system", "content": system}] if system else [])
    messages.append({"role": "user", "content": player.opening(g)})
    episodes.append({"messages": messages, "commands": [], "replies": [],
                     "observations": [], "won": False, "end": ""})
  for turn in range(max_turns):
    playing = []
    for index, episode in enumerate(episodes):
      if episode["end"]:
        continue
      width = len(agent_generate.prompt_ids(agent.tokenizer, episode["messages"]))
      if width + max_new_tokens > limit:
        episode["end"] = "context"
      else:
        playing.append(index)
    if not playing:
      break
    replies = agent_generate.generate_bucketed(
        agent, [episodes[i]["messages"] for i in playing], max_new_tokens,
        batch_size, temperature, seed=turn * 1009)
    for index, reply in zip(playing, replies):
      episode = episodes[index]
      command = command_of(reply)
      episode["replies"].append(reply)
      episode["commands"].append(command)
      step = player.play(games[index], episode["commands"])
      episode["observations"].append(step.feedback)
      episode["messages"] += [{"role": "assistant", "content": command},
                              {"role": "user", "content": step.feedback}]
      if step.won:
        episode["won"], episode["end"] = True, "won"
    print(f"turn {turn + 1}/{max_turns}: {len(playing)} game(s) played, "
          f"{sum(e['won'] for e in episodes)} won so far", file=sys.stderr, flush=True)
  for episode in episodes:
    episode["end"] = episode["end"] or "max_turns"
  return [{"id": g.id, **g.source_fields(), "task_type": g.task_type,
           "commands": e["commands"], "replies": e["replies"],
           "observations": e["observations"], "won": e["won"],
           "turns": len(e["commands"]), "end": e["end"]}
          for g, e in zip(games, episodes)]


def _generate(args, games: Sequence[Game], player: Player, max_turns: int) -> None:
  from train.tools import agent_generate  # pylint: disable=import-outside-toplevel
  if not games:
    raise InputError("alfworld: no games to play")
  if args.max_new_tokens < 1 or args.batch_size < 1:
    raise InputError(f"--max_new_tokens={args.max_new_tokens} and "
                     f"--batch_size={args.batch_size} must be >= 1")
  agent = agent_generate.load_agent(args.run_dir, args.hf_dir, args.step, args.dtype,
                                    args.mesh, args.batch_size)
  began = time.perf_counter()
  records = play_episodes(agent, games, player, system_prompt(args.run_dir),
                          max_turns, args.max_new_tokens, args.batch_size,
                          args.temperature)
  seconds = time.perf_counter() - began
  agent_generate.write_records(args.predictions, records)
  ended = collections.Counter(r["end"] for r in records)
  if ended["context"]:
    print(f"warning: {ended['context']} episode(s) ended when the prompt reached the "
          f"model's max_position_embeddings={agent.model.max_position_embeddings}",
          file=sys.stderr)
  print(f"generated={len(records)}")
  print(f"generation_seconds_per_item={seconds / len(records):.2f}")


# ------------------------------------------------------------------ scoring


def read_episodes(path: str, games: Sequence[Game], source: str,
                  allow_missing: bool) -> dict[str, list[str]]:
  """{id: commands} of a predictions file, for games of `source`.

  Raises:
    InputError: a line that is not a JSON object, without a known string id
      or a list of string commands, naming another game than the id's
      (`spec` / `game_file`), an id twice, no lines, or (unless
      `allow_missing`) a game without a line; the message names the line.
  """
  by_id = {g.id: g for g in games}
  commands: dict[str, list[str]] = {}
  for number, record in read_jsonl_lines(path):
    where = f"{path}:{number}"
    entry_id = record.get("id")
    if entry_id not in by_id:
      raise InputError(f"{where}: id {entry_id!r} is not a game of {source}")
    played = record.get("commands")
    if not isinstance(played, list) or not all(isinstance(c, str) for c in played):
      raise InputError(f"{where}: id {entry_id!r} has no 'commands' list of strings")
    for key, value in by_id[entry_id].source_fields().items():
      if key in record and record[key] != value:
        raise InputError(f"{where}: id {entry_id!r} names {key} {record[key]!r}, but "
                         f"{source}'s game {entry_id!r} is {value!r}")
    if entry_id in commands:
      raise InputError(f"{where}: id {entry_id!r} appears twice")
    commands[entry_id] = played
  if not commands:
    raise InputError(f"{path}: no episodes")
  missing = [g.id for g in games if g.id not in commands]
  if missing and not allow_missing:
    raise InputError(f"{path}: {len(missing)} game(s) of {source} have no line (e.g. "
                     f"{', '.join(map(repr, missing[:5]))}); pass --allow_missing to "
                     "score only those played")
  return commands


def score_episode(player: Player, g: Game, commands: Sequence[str], max_turns: int
                  ) -> tuple[Verdict, int, int]:
  """(verdict, commands played, inadmissible ones among them): the first
  `max_turns` commands replayed in the game until it is won."""
  inadmissible = 0
  for turn in range(1, min(len(commands), max_turns) + 1):
    step = player.play(g, commands[:turn])
    inadmissible += not step.admissible
    if step.won:
      return Verdict(CORRECT), turn, inadmissible
  played = min(len(commands), max_turns)
  return Verdict(INCORRECT, f"not won in {played} command(s)"), played, inadmissible


def score(games: Sequence[Game], commands: dict[str, list[str]], player: Player,
          max_turns: int, verdict_row: Callable
          ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
  """Verdict rows of the played games (in the games' order) and the summary."""
  from genenv_jax.domains.alfworld import game  # pylint: disable=import-outside-toplevel
  rows = []
  for g in games:
    if g.id not in commands:
      continue
    verdict, turns, inadmissible = score_episode(player, g, commands[g.id], max_turns)
    rows.append({**verdict_row(g.id, verdict), "task_type": g.task_type,
                 "turns": turns, "inadmissible": inadmissible})
  by_type = []
  for task in game.TASK_TYPES:
    of_type = [r for r in rows if r["task_type"] == task]
    if of_type:
      by_type.append(f"{task}:{sum(r['correct'] for r in of_type)}/{len(of_type)}")
  won = [r["turns"] for r in rows if r["correct"]]
  played = sum(r["turns"] for r in rows)
  return rows, {
      "games": len(rows), "max_turns": max_turns,
      "success_by_task": ",".join(by_type),
      "mean_turns_when_won": f"{sum(won) / len(won):.2f}" if won else "nan",
      "inadmissible_rate": f"{sum(r['inadmissible'] for r in rows) / max(played, 1):.6f}",
  }


# ------------------------------------------------------------------ command


def _select(games: Sequence[Game], args) -> list[Game]:
  ids = [i for i in args.ids.split(",") if i]
  if ids:
    known = {g.id for g in games}
    unknown = [i for i in ids if i not in known]
    if unknown:
      raise InputError(f"--ids: {', '.join(map(repr, unknown[:5]))} not among the games")
    games = [g for g in games if g.id in set(ids)]
  if args.limit:
    games = list(games)[:args.limit]
  return list(games)


def run(args, report: Callable, verdict_row: Callable) -> None:
  """The command (module docstring); `report` and `verdict_row` are
  train/tools/evaluate.py's `_report` and `_verdict_row`."""
  if table1.wrote_fixture(args, write_fixture):
    return
  if args.data_dir and args.download:
    raise InputError("alfworld: give at most one of --data_dir and --download")
  config = alfworld_config()
  max_turns = args.max_turns or config.task.max_turns
  args.max_new_tokens = args.max_new_tokens or config.task.max_action_tokens
  if max_turns < 1:
    raise InputError(f"--max_turns={max_turns} must be >= 1")
  if args.data_dir or args.download:
    data_dir = args.data_dir or download(args.split)
    games, skipped = official_games(data_dir, args.split)
    source = f"ALFWorld {args.split}"
    if skipped:
      print(f"skipped trials (as ALFWorld's loader): {skipped}", file=sys.stderr)
  else:
    games = list(synthetic_games(config.data.test_per_task))
    source = SYNTHETIC
  player = Player()
  some = False
  if args.generate:
    chosen = _select(games, args)
    some = len(chosen) < len(games)
    _generate(args, chosen, player, max_turns)
    from train.tools import agent_generate  # pylint: disable=import-outside-toplevel
    if not agent_generate.chief():
      return
  commands = read_episodes(args.predictions, games, source, args.allow_missing or some)
  rows, summary = score(games, commands, player, max_turns, verdict_row)
  report(args, rows, {"benchmark": source, **summary})


def add_arguments(sub) -> None:
  """The alfworld command's flags."""
  sub.add_argument("--predictions", default="",
                   help="JSONL of episodes: {\"id\": ..., \"commands\": [...], ...}")
  sub.add_argument("--allow_missing", action="store_true",
                   help="score only the games that have a line")
  sub.add_argument("--data_dir", default="",
                   help="ALFWorld's official games (json_2.1.1/<split>/...); default: "
                        "ALFWorld-synthetic")
  sub.add_argument("--download", action="store_true",
                   help="fetch the official games into the cache (needs internet)")
  sub.add_argument("--split", default="valid_unseen", choices=SPLITS,
                   help="the official split with --data_dir / --download")
  sub.add_argument("--write_fixture", default="", metavar="DIR",
                   help="write a few hand-written games in the official format and stop")
  sub.add_argument("--generate", action="store_true",
                   help="write --predictions first by playing the games with an agent")
  table1.add_agent_arguments(sub)
  sub.add_argument("--limit", type=int, default=0,
                   help="with --generate: play only the first K games (round-robin "
                        "over the task types; 0: all)")
  sub.add_argument("--ids", default="",
                   help="with --generate: play only these comma-separated ids")
  sub.add_argument("--max_turns", type=int, default=0,
                   help="commands per episode (0: configs/alfworld.py's task.max_turns)")
  sub.add_argument("--max_new_tokens", type=int, default=0,
                   help="tokens of one reply, one command (0: configs/alfworld.py's "
                        "task.max_action_tokens)")
