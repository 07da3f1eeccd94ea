"""The ALFWorld domain: specs, the planner's verdicts, the host environment
against ALFWorld's own TextWorld loop, and the smoke config's co-evolution
steps (configs/alfworld.py:smoke) compiled once."""

from __future__ import annotations

import json
import os

import jax
import numpy as np
import pytest

from configs import alfworld as alfworld_config
from genenv_jax.domains import get_domain
from genenv_jax.domains.alfworld import data
from genenv_jax.domains.alfworld import game
from tests import step_runs

HEAT = ("layout: FloorPlan1; task: pick_heat_then_place apple -> countertop; "
        "start: apple in fridge 1, bread in countertop 2")


@pytest.fixture(scope="module")
def domain(qwen_tokenizer_dir):
  config = alfworld_config.get_config("smoke")
  config.task.tokenizer_dir = qwen_tokenizer_dir
  return get_domain(config.task)


def _rows(domain, texts, eos=True):
  """Token rows int32[n, simulator_len] of texts (EOS after each unless not
  `eos`), pad after, and their masks."""
  width = domain.simulator_len
  rows = np.full((len(texts), width), domain.pad_id, np.int32)
  for i, written in enumerate(texts):
    ids = domain.tokenizer(written, add_special_tokens=False)["input_ids"][:width - 1]
    ids = ids + [domain.eos_id] if eos else ids[:width]
    rows[i, :len(ids)] = ids
  return rows, rows != domain.pad_id


def _action(domain, command):
  return np.asarray(domain.tokenizer(command, add_special_tokens=False)["input_ids"]
                    + [domain.eos_id], np.int32)


# ---------------------------------------------------------------- specs, planner


def test_specs_read_back_and_name_the_bad_field():
  spec = game.read_spec(HEAT)
  assert spec.task == "pick_heat_then_place" and spec.target == "CounterTop"
  assert spec.placements == (("Apple", "fridge 1"), ("Bread", "countertop 2"))
  assert game.read_spec("  " + HEAT.upper().replace("FLOORPLAN", "FloorPlan") + ".") == spec
  assert spec.text() == HEAT
  for written, field in (
      ("layout: FloorPlan99; task: pick_and_place apple -> fridge; start: apple in fridge 1",
       "layout"),
      ("layout: FloorPlan1; task: juggle apple -> fridge; start: apple in fridge 1", "task"),
      ("layout: FloorPlan1; task: pick_and_place teddybear -> fridge; start: apple in fridge 1",
       "task"),
      ("layout: FloorPlan1; task: pick_and_place apple -> bed; start: apple in fridge 1",
       "task"),
      ("layout: FloorPlan1; task: pick_and_place apple -> fridge; start: apple in fridge 7",
       "start"),
      ("layout: FloorPlan1; task: pick_and_place apple -> fridge; start: apple in toaster 1",
       "start"),
      ("layout: FloorPlan1; task: pick_and_place apple -> fridge", "3 fields")):
    with pytest.raises(game.SpecError, match=field):
      game.read_spec(written)


def test_the_planner_solves_games_and_rejects_unsolvable_ones():
  assert len(game.plan(game.read_spec(HEAT))) == 7
  # A fork cannot be heated; a mug the room never holds cannot be moved;
  # an apple already in the fridge is no task.
  for written in (HEAT.replace("apple -> countertop", "fork -> countertop")
                  .replace("apple in fridge 1", "fork in drawer 1"),
                  HEAT.replace("apple -> countertop", "mug -> countertop"),
                  HEAT.replace("pick_heat_then_place", "pick_two_obj_and_place")):
    assert game.plan(game.read_spec(written)) is None, written
  assert game.plan(game.read_spec(
      "layout: FloorPlan1; task: pick_and_place apple -> fridge; "
      "start: apple in fridge 1")) == ()


def test_specs_the_planner_rejects_are_invalid_tasks_never_exceptions(domain):
  small = ("layout: FloorPlan402; task: pick_and_place soapbar -> toilet; "
           "start: soapbar in countertop 1")
  texts = [
      small,                                            # valid: go, take, go, move
      "I'll write one.\n" + small,                      # text before the spec
      small.replace("pick_and_place", "pick_heat_then_place"),  # bathroom, no microwave
      small.replace("soapbar in", "candle in"),         # no soapbar: unsolvable
      HEAT,                                             # 7 steps > max_turns = 5
      small.replace("countertop 1", "countertop 9"),    # no such receptacle
      "layout: FloorPlan402; task: pick_and_place",     # malformed
      "\u2400 garbage \U0001f600",
  ]
  tokens, mask = _rows(domain, texts)
  cut = _rows(domain, [small], eos=False)               # truncated: no EOS
  tokens, mask = np.concatenate([tokens, cut[0]]), np.concatenate([mask, cut[1]])
  parsed = domain.parse(tokens, mask)
  valid = np.asarray(parsed.valid)
  assert valid.tolist() == [True, True] + [False] * 7
  assert np.asarray(parsed.difficulty).tolist() == [1, 1] + [0] * 7
  task = np.asarray(parsed.task)
  assert (task[~valid] == domain.pad_id).all()
  assert domain.text_of(task[0]) == domain.text_of(task[1]) == game.read_spec(small).text()
  # The agent's prompt is the room and the task.
  prompt = domain.decode(np.asarray(parsed.prompt[0]))[0]
  assert "Your task is to: put a soapbar in toilet." in prompt
  # An invalid task's episode ends at once, without an error.
  step = domain.environment.host.transition(task[2], [_action(domain, "look")])
  assert step.done and not step.success and step.reward == 0.0


# ------------------------------------------------------------ games and episodes


def test_a_specs_game_replays_its_plan_to_a_win():
  """One held-out spec of each task type: the planner's plan, as commands in
  its game, wins at its last command and not before; its length is the one
  TextWorld's own walkthrough (the whole room's search) has."""
  specs = data.held_out_specs(1)
  assert sorted(s.task for s, _ in specs) == sorted(game.TASK_TYPES)
  pool = game.GamePool(4)
  for spec, steps in specs:
    commands = pool.walkthrough(spec, game.plan(spec))
    assert len(commands) == steps
    outcomes = [pool.play(spec, commands[:i + 1]) for i in range(len(commands))]
    assert [o.won for o in outcomes] == [False] * (steps - 1) + [True], spec.text()
    assert all(o.admissible for o in outcomes)
  spec, steps = min(specs, key=lambda s: len(game.room(s[0].layout).receptacles))
  env = _textworld_loop(spec, walkthrough=True)
  assert len(env.reset()["extra.walkthrough"]) == steps


def _textworld_loop(spec, walkthrough=False):
  """ALFWorld's own way to play a game file: textworld.start on the
  .tw-pddl file with its demangler."""
  import tempfile  # pylint: disable=import-outside-toplevel
  import textworld  # pylint: disable=import-outside-toplevel
  from alfworld.agents.environment.alfred_tw_env import AlfredDemangler  # pylint: disable=import-outside-toplevel
  path = os.path.join(tempfile.mkdtemp(), "game.tw-pddl")
  with open(path, "w") as f:
    json.dump(game.game_data(spec), f)
  infos = textworld.EnvInfos(admissible_commands=True, won=True,
                             extras=["walkthrough"] if walkthrough else [])
  return textworld.start(path, request_infos=infos, wrappers=[AlfredDemangler])


def test_the_host_environment_equals_a_direct_textworld_loop(domain):
  spec = game.read_spec(
      "layout: FloorPlan305; task: look_at_obj_in_light cd -> desklamp; "
      "start: cd in drawer 1, desklamp in desk 1, pen in desk 1")
  row = domain.encode_tasks([spec.text()])[0]
  commands = ["look", "go to drawer 1", "take cd 1 from drawer 1", "open drawer 1",
              "take cd 1 from drawer 1", "dance", "inventory", "go to desk 1",
              "examine desk 1", "use desklamp 1"]
  env = _textworld_loop(spec)
  state = env.reset()
  # The prompt holds TextWorld's first text, also when another game of the
  # layout (another task sentence) was opened first.
  domain.prompt_ids(game.read_spec(
      "layout: FloorPlan305; task: pick_and_place pen -> shelf; start: pen in desk 1"))
  assert domain.decode(domain.prompt_ids(spec))[0].count(state.feedback) == 1
  host = domain.environment.host
  for turn, command in enumerate(commands):
    admissible = command in state["admissible_commands"]
    state, _, done = env.step(command)
    step = host.transition(row, [_action(domain, c) for c in commands[:turn + 1]])
    assert step.done == done == state["won"] == (turn == len(commands) - 1), command
    assert step.invalid_action == (not admissible), command
    if done:
      assert step.success and step.reward == 1.0 and not len(step.observation)
    else:
      seen = domain.tokenizer.decode(list(step.observation))
      assert f"user\n{state.feedback}<|im_end|>" in seen, (command, seen)
  assert "Nothing happens." in domain.tokenizer.decode(list(host.transition(
      row, [_action(domain, c) for c in commands[:6]]).observation))
  # Another pool, replaying each episode from its start, agrees.
  again = game.GamePool(2)
  assert [again.play(spec, commands[:i + 1]) for i in range(len(commands))] == [
      domain.games.play(spec, commands[:i + 1]) for i in range(len(commands))]


def test_the_jax_environment_rewards_a_win_and_flags_invalid_actions(domain):
  """Rows through HostEnvironment's reset/step (jitted, the host callback):
  the plan wins at its last command, reward 1; an inadmissible or cut
  command is an invalid action; an all-pad row is done at once."""
  spec = game.read_spec("layout: FloorPlan402; task: pick_and_place soapbar -> "
                        "toilet; start: soapbar in countertop 1")
  plan = domain.games.walkthrough(spec, game.plan(spec))
  assert len(plan) == 4
  env = domain.environment
  rows = np.full((3, domain.task_len), domain.pad_id, np.int32)
  rows[:2] = domain.encode_tasks([spec.text()] * 2)
  scripts = [list(plan), ["look", "dance", "take soapbar 1 from countertop 1 " * 3, "look"],
             ["look"]]
  state = env.reset(rows)
  step = jax.jit(env.step)
  outcomes = []
  for turn in range(4):
    action = np.full((3, env.action_len), domain.pad_id, np.int32)
    for b, script in enumerate(scripts):
      ids = list(_action(domain, script[min(turn, len(script) - 1)]))
      ids = ids[:env.action_len]  # the long one loses its stop token
      action[b, :len(ids)] = ids
    stepped = step(state, action, action != domain.pad_id)
    state = stepped.state
    outcomes.append({k: np.asarray(getattr(stepped, k)).tolist()
                     for k in ("reward", "done", "success", "invalid_action", "error")})
  assert [o["done"][0] for o in outcomes] == [False, False, False, True]
  assert outcomes[3]["reward"][0] == 1.0 and outcomes[3]["success"][0]
  assert [o["invalid_action"][1] for o in outcomes] == [False, True, True, False]
  assert outcomes[0]["done"][2] and not outcomes[0]["error"][2]
  assert not any(e for o in outcomes for e in o["error"])


# ------------------------------------------------------------------ the smoke run


@pytest.fixture(scope="module")
def smoke(qwen_tokenizer_dir, tmp_path_factory):
  config = alfworld_config.get_config("smoke")
  config.task.tokenizer_dir = qwen_tokenizer_dir
  domain = get_domain(config.task)
  data_dir = str(tmp_path_factory.mktemp("alfworld_data"))
  seeds = data.seed_splits(domain, config, data_dir)
  cached = data._read_cache(domain, data._cache_path(domain, config, data_dir))  # pylint: disable=protected-access
  real = data.alfworld_splits
  data.alfworld_splits = None  # the second call reads the kept splits
  try:
    again = data.seed_splits(domain, config, data_dir)
  finally:
    data.alfworld_splits = real
  splits = {"train": cached["train"], "test": cached["test"], "returned": seeds,
            "again": again}
  train = splits["train"]
  players, state, shardings, mesh = step_runs.start(config, domain, train["task"],
                                                    train["difficulty"])
  state, history, traces = step_runs.run_steps(config, domain, players, state,
                                               shardings, mesh, 2)
  return dict(config=config, domain=domain, splits=splits, history=history,
              traces=traces, state=state)


def test_the_seed_splits_are_disjoint_levelled_and_kept(smoke):
  splits, domain = smoke["splits"], smoke["domain"]
  train, test = splits["train"], splits["test"]
  # What seed_splits returned is what it kept, and read back the second time.
  for returned in (splits["returned"], splits["again"]):
    for split, name in zip(returned, ("train", "test")):
      np.testing.assert_array_equal(split["task"], splits[name]["task"])
      np.testing.assert_array_equal(split["difficulty"], splits[name]["difficulty"])
  assert len(train["task"]) == smoke["config"].data.num_train
  assert set(np.unique(train["difficulty"])) == {1, 2}
  assert len(test["task"]) >= 3
  layouts = lambda split: {game.read_spec(s).layout for s in split["specs"]}
  assert layouts(test) <= set(data.HELD_OUT_LAYOUTS)
  assert not layouts(train) & set(data.HELD_OUT_LAYOUTS)
  for split in (train, test):
    for row, level, steps in zip(split["task"], split["difficulty"],
                                 split["plan_lengths"]):
      assert domain.level(int(steps)) == level > 0


def test_the_smoke_config_runs_two_coevolution_steps_with_one_compile(smoke):
  config = smoke["config"]
  assert smoke["traces"] == 1
  assert len(smoke["history"]) == 2
  episodes = (config.coevolve.num_seeds * config.coevolve.variations
              + config.pool.replay_tasks) * config.coevolve.attempts
  assert episodes % 8 == 0
  for metrics in smoke["history"]:
    for name, value in metrics.items():
      assert np.isfinite(value), name
    assert metrics["episode/errors"] == 0.0
    assert 1.0 <= metrics["episode/turns"] <= config.task.max_turns
    assert metrics["episode/observation_token_frac"] > 0.0
    # The random simulator writes no spec; its generations were read on the host.
    generated = config.coevolve.num_seeds * config.coevolve.variations
    assert metrics["env/invalid_count"] == generated
  assert smoke["domain"].environment.host_errors == 0


def test_the_configs_validate_and_keep_a_steps_games_live():
  from train import config_validation  # pylint: disable=import-outside-toplevel
  for variant in (None, "smoke", "smoke,frozen_env"):
    config_validation.validate(alfworld_config.get_config(variant), 8)
  config = alfworld_config.get_config("smoke")
  config.task.live_games = 31  # a step plays (4 * 2 + 8) * 2 = 32 episodes
  with pytest.raises(ValueError, match="task.live_games=31"):
    config_validation.validate(config, 8)
  with pytest.raises(ValueError, match="variant 'live'"):
    alfworld_config.get_config("live")
