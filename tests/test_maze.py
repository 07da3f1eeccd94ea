"""The maze domain: specs executed into valid tasks and difficulties, bad
specs invalid (never an exception), the seed data, the environment's moves
and the warm start's shortest-path demonstrations."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from genenv_jax.domains.maze import data as maze_data
from genenv_jax.domains.maze import domain as maze
from train.tools import maze_plans

DOMAIN = maze.MazeDomain(size=4, max_turns=8, level_width=2, levels=4)


def _parse(rows, mask=None):
  rows = jnp.asarray(rows, jnp.int32)
  return jax.jit(DOMAIN.parse)(rows, rows != maze.PAD if mask is None
                               else jnp.asarray(mask))


def test_specs_are_executed_for_validity_and_difficulty():
  rows = DOMAIN.encode_tasks([
      ["S...", "....", "....", "...G"],   # 6 moves: level 3
      ["SG..", "....", "....", "...."],   # 1 move: level 1
      ["S#..", "##..", "....", "...G"],   # walled in: no path
      ["S...", "....", "....", "..GG"],   # two goals
      ["....", "....", "....", "...G"],   # no start
      ["S#G.", ".#..", ".#..", "...."],   # 8 moves around walls: level 4
  ])
  parsed = _parse(rows)
  np.testing.assert_array_equal(parsed.valid, [1, 1, 0, 0, 0, 1])
  np.testing.assert_array_equal(parsed.difficulty, [3, 1, 0, 0, 0, 4])
  assert np.all(np.asarray(parsed.task)[~np.asarray(parsed.valid)] == maze.PAD)
  # Every row above planned level 1; the written task carries the grid's own.
  np.testing.assert_array_equal(np.asarray(parsed.task)[0],
                                DOMAIN.encode_tasks([["S...", "....", "....",
                                                      "...G"]], plan=3)[0])
  np.testing.assert_array_equal(
      np.asarray(parsed.task)[np.asarray(parsed.valid), 0],
      DOMAIN.first_level + np.asarray([3, 1, 4]) - 1)


def test_malformed_rows_are_invalid_not_errors():
  good = DOMAIN.encode_tasks([["S...", "....", "....", "...G"]])[0]
  out_of_range = good.copy()
  out_of_range[3] = 10_000
  negative = good.copy()
  negative[5] = -3
  move_token = good.copy()
  move_token[2] = maze.UP
  no_eos = good.copy()
  no_eos[-1] = maze.OPEN
  cell_as_plan = good.copy()
  cell_as_plan[0] = maze.OPEN
  past_last_level = good.copy()
  past_last_level[0] = DOMAIN.first_rate  # a success-rate token
  rows = np.stack([good, out_of_range, negative, move_token, no_eos,
                   cell_as_plan, past_last_level])
  parsed = _parse(rows)
  np.testing.assert_array_equal(parsed.valid, [1, 0, 0, 0, 0, 0, 0])
  # Truncated (EOS outside the written mask) is invalid too.
  mask = rows != maze.PAD
  mask[0, -1] = False
  assert not bool(_parse(rows, mask).valid[0])
  # Too long a path for the levels: invalid.
  longest = maze.MazeDomain(size=4, max_turns=8, level_width=1, levels=5)
  snake = longest.encode_tasks([["S...", "###.", "....", "G###"]])
  assert not bool(jax.jit(longest.parse)(snake, snake != 0).valid[0])


def test_the_simulator_prompt_carries_the_seed_and_its_success_rate():
  signals = maze.MazeDomain(size=4, max_turns=8, level_width=2, levels=4,
                            summary_signals=True)
  rows = signals.encode_tasks([["S...", "....", "....", "...G"]] * 4, plan=3)
  rate = jnp.asarray([0.0, 0.46, 1.0, -1.0])
  tokens, mask = jax.jit(signals.simulator_prompt)(jnp.asarray(rows), rate)
  assert tokens.shape == (4, signals.simulator_prompt_len) and bool(mask.all())
  np.testing.assert_array_equal(tokens[:, 1:-2], rows[:, :-1])
  unknown = signals.first_rate + maze.RATE_BUCKETS
  np.testing.assert_array_equal(
      tokens[:, -2], signals.first_rate + np.asarray([0, 5, 10, 11]))
  assert signals.decode(tokens[:2, -2:]) == ["p0.0 >", "p0.5 >"]
  # No rate given, or a domain without summary signals: "?" on every row.
  for domain, given in ((signals, None), (DOMAIN, rate)):
    tokens, _ = jax.jit(domain.simulator_prompt)(jnp.asarray(rows), given)
    assert np.all(np.asarray(tokens)[:, -2] == unknown)


def test_a_too_short_turn_limit_is_refused():
  with pytest.raises(ValueError, match="config.task.max_turns=5"):
    maze.MazeDomain(size=4, max_turns=5, level_width=2, levels=4)


def test_seed_data_difficulties_agree_with_the_parser():
  train, test = maze_data.maze_splits(DOMAIN, seed=3, num_train=400,
                                      test_per_level=10)
  for split, size in ((train, 400), (test, 40)):
    parsed = _parse(split["task"])
    assert len(split["task"]) == size
    assert np.all(np.asarray(parsed.valid))
    np.testing.assert_array_equal(parsed.difficulty, split["difficulty"])
  np.testing.assert_array_equal(np.bincount(train["difficulty"]),
                                [0, 100, 100, 100, 100])
  train_keys = {r.tobytes() for r in train["task"]}
  assert not any(r.tobytes() in train_keys for r in test["task"])


def test_edited_variations_are_small_edits_of_their_seed_at_the_wanted_level():
  train, _ = maze_data.maze_splits(DOMAIN, seed=2, num_train=400,
                                   test_per_level=1)
  rng = np.random.default_rng(0)
  seeds = train["task"]
  wanted = np.clip(train["difficulty"] + rng.integers(-1, 2, len(seeds)), 1,
                   DOMAIN.levels)
  edited = maze_data.edited_variations(DOMAIN, seeds, wanted, rng)
  parsed = _parse(edited)
  assert np.all(np.asarray(parsed.valid))
  # The row's level token is the level its grid has, and it is the wanted
  # one for nearly every seed (the rest: the nearest an edit reached).
  np.testing.assert_array_equal(np.asarray(parsed.task), edited)
  level = edited[:, 0] - DOMAIN.first_level + 1
  assert np.mean(level == wanted) > 0.85
  # An edit toggles at most three cells and may move the goal (two more).
  changed = np.sum(edited[:, 1:-1] != seeds[:, 1:-1], axis=1)
  assert changed.max() <= 5 and np.mean(changed > 0) > 0.9


def test_moves_bumps_and_unreadable_actions():
  env = DOMAIN.environment
  rows = DOMAIN.encode_tasks([["S#..", "G...", "....", "...."]] * 4)
  state = env.reset(jnp.asarray(rows))
  action = jnp.asarray([[maze.RIGHT, maze.EOS], [maze.UP, maze.EOS],
                        [maze.DOWN, maze.EOS], [maze.DOWN, maze.DOWN]])
  stepped = env.step(state, action, jnp.ones((4, 2), bool))
  np.testing.assert_array_equal(stepped.observation[:, 0],
                                [maze.BUMP, maze.BUMP, maze.REACHED, maze.BAD])
  np.testing.assert_array_equal(stepped.state.position, [0, 0, 4, 0])
  np.testing.assert_array_equal(stepped.done, [0, 0, 1, 0])
  np.testing.assert_array_equal(stepped.invalid_action, [0, 0, 0, 1])
  # Row and column of cell 4 (row 1, column 0), then its neighbours:
  # up S, down ., left off-grid (wall), right .
  np.testing.assert_array_equal(
      stepped.observation[2, 1:],
      [maze.FIRST_COORDINATE + 1, maze.FIRST_COORDINATE + 4, maze.START,
       maze.OPEN, maze.WALL, maze.OPEN])


def test_demonstrations_are_shortest_paths_that_reach_the_goal():
  train, _ = maze_data.maze_splits(DOMAIN, seed=1, num_train=40,
                                   test_per_level=1)
  parsed = _parse(train["task"])
  tokens, attend, loss = jax.jit(DOMAIN.agent_demonstration)(parsed)
  tokens, attend, loss = (np.asarray(x) for x in (tokens, attend, loss))
  moves = np.sum(loss & np.isin(tokens, maze.MOVES), axis=1)
  np.testing.assert_array_equal(-(-moves // DOMAIN.level_width),
                                train["difficulty"])
  # Replayed in the environment, the moves reach the goal without a bump;
  # the loss is on moves and their EOS only, observations are attended.
  assert set(np.unique(tokens[loss])) <= set(maze.MOVES) | {maze.EOS}
  assert np.all(attend[loss]) and np.any(attend & ~loss)
  assert not np.any(tokens[attend & ~loss] == maze.BUMP)
  env = DOMAIN.environment
  state = env.reset(parsed.task)
  reached = np.zeros(len(tokens), bool)
  for turn in range(DOMAIN.max_turns):
    column = turn * (env.action_len + env.observation_len)
    action = jnp.asarray(tokens[:, column:column + 2])
    stepped = env.step(state, action, jnp.asarray(loss[:, column:column + 2]))
    state = stepped.state
    reached |= np.asarray(stepped.done)
  assert reached.all()


def test_maze_plans_counts_seed_levels_plans_and_drawn_levels():
  rows = DOMAIN.encode_tasks([["S...", "....", "....", "...G"],   # level 3
                              ["SG..", "....", "....", "...."],   # level 1
                              ["S#..", "##..", "....", "...G"]],  # no path
                             plan=2)
  seeds = DOMAIN.encode_tasks([["SG..", "....", "....", "...."]] * 3, plan=1)
  prompt, _ = DOMAIN.simulator_prompt(jnp.asarray(seeds))
  pad = np.zeros((1, rows.shape[1]), np.int32)  # an unfilled D_env row
  by_seed, by_plan = maze_plans.plan_counts(DOMAIN, dict(
      prompt=np.concatenate([np.asarray(prompt), np.zeros_like(prompt[:1])]),
      task=np.concatenate([rows, pad]),
      task_mask=np.concatenate([rows, pad]) != maze.PAD, size=np.int32(3)))
  assert by_seed == {(1, 2): 3}
  assert by_plan == {(2, 3): 1, (2, 1): 1, (2, 0): 1}
