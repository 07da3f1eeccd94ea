"""GenEnv on mazes: the agent acts in an environment the simulator draws.

Run (about an hour on this 2-core CPU beside three other runs):
  python -m train.main --config=configs/maze.py --workdir=runs/maze
A baseline arm (the arms of configs/default.py), optionally with smoke sizes:
  python -m train.main --config=configs/maze.py:frozen_env --workdir=runs/maze_frozen
  python -m train.main --config=configs/maze.py:smoke --workdir=/tmp/maze_smoke

The simulator writes a 6×6 grid (walls, one start, one goal); the domain keeps
it iff it is a maze with a path, and its difficulty is the shortest path's
length (one level a move, paths of 1..12). The agent plays each written maze as
an episode of up to 14 turns (one move a turn, its outcome and new surroundings
observed), reward 1 on reaching the goal. Seeds are drawn from the two levels
whose written mazes the agent solves just above and just below α, mixed so
that the expected success is α. Stage 1 teaches the agent shortest paths through
easy mazes and the simulator to draw mazes of every level; stage 2 is the
co-evolution step of configs/default.py with `play_episodes` as its attempt
stage (genenv_jax/episodes.py, genenv_jax/domains/maze/domain.py).
"""

import ml_collections

from configs import default


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """arg: as configs/default.py's ("smoke" and/or one arm of default.ARMS)."""
  smoke, arm = default.smoke_and_arm(arg, "configs/maze.py", "demo's")
  c = default.get_config()
  c.task = ml_collections.ConfigDict(dict(
      name="maze",
      size=6,          # the grid's side W
      max_turns=14,    # K moves per episode (>= level_width * levels)
      level_width=1,   # difficulty level = ceil(shortest path / level_width)
      levels=12,       # paths of 1..12 moves; longer ones are invalid mazes
      # The simulator's prompt carries the agent's success on the seed.
      summary_signals=True,
  ))
  c.data = ml_collections.ConfigDict(dict(
      tfds_dir="",     # unused: mazes are drawn by genenv_jax/domains/maze/data.py
      num_train=8000,  # seed mazes, equal shares per level
      num_test_per_level=30,
  ))
  c.data.seed = c.get_ref("seed") + 0  # follows config.seed
  # Episodes: an action is one move and EOS (A = 2), an observation the
  # move's outcome, position and neighbours (O = 7); the prompt is the map,
  # the goal's position and the start's surroundings.
  c.episodes = ml_collections.ConfigDict(dict(
      reward="success",   # "success" (1 on reaching the goal) | "turn_sum"
      truncated="zero",   # an episode out of turns scores 0 | "mask": no loss
  ))
  for player in (c.agent, c.simulator):
    player.model_overrides = ml_collections.ConfigDict(dict(
        max_position_embeddings=256))
  c.agent.learning_rate = 1e-4
  c.simulator.learning_rate = 1e-4
  c.grpo.kl_coef = 0.001  # the maze runs' (docs/episodes.md)
  c.warmstart.update(
      agent_steps=500, simulator_steps=1000, batch_size=64,
      # Shortest paths through mostly short mazes (paths of 1..6).
      agent_level_weights=(4, 4, 2, 2, 1, 1),
      simulator_difficulty_step=1, checkpoint_every=100,
      # The simulator learns to edit its seed (a few cells) to the level
      # asked: drawing a maze of a given path length from scratch is beyond
      # it, copying and editing one is not.
      simulator_lessons="edited",
      # Co-evolution starts from a simulator asked for two levels (moves)
      # above its seeds (then ± 1).
      simulator_start="hard",
      simulator_start_offsets=ml_collections.ConfigDict(dict(hard=2, easy=-1)))
  c.coevolve.update(num_steps=120, num_seeds=8, variations=4, attempts=8,
                    agent_epochs=1, agent_minibatches=2)
  # The simulator learns from each maze's own p̂ (its 8 episodes), imitating
  # every maze whose episodes disagree, weighted by exp(10 R_env): mostly
  # those nearest α; half of each update's rows are earlier kept mazes
  # (D_env). The band filter alone kept ~3% of mazes (per-seed p̂) and moved
  # nothing in 120 steps; keeping every valid maze also imitates the mazes
  # the agent always solves. None of these reaches the α band in 120 steps
  # (docs/episodes.md).
  c.curriculum.update(per_seed=False, keep="informative",
                      rwr_temperature=10.0)
  # Seeds by what seeds of each level yield: the agent's recent success on
  # the mazes written from seeds of that level (agent/offspring_success_d<l>;
  # an edit shortens a path more often than it lengthens one, so a seed's
  # variations are easier than the seed), the two levels bracketing α mixed
  # so that the expected success is α (pool.level_target_weights), then a
  # seed of the drawn level. What the simulator writes follows the agent's
  # edge as it learns. Seeds drawn by learnability left success at
  # 0.81-0.85; by the α reward of each level's own success, at 0.62-0.75 on
  # 5×5 grids, whose longest paths (10 moves) the agent outgrew
  # (docs/episodes.md).
  c.coevolve.seed_selection = "level_target"
  c.coevolve.seed_level_estimate = "offspring"
  c.simulator_update.replay_share = 0.5
  # Seeds of every level: an edited seed keeps about its level, so the
  # hardest mazes the simulator writes are edits of hard seeds.
  c.pool.update(capacity=4096, num_base=1024, base_max_difficulty=12,
                replay_tasks=8, generation_capacity=1024)
  # Held-out mazes per level, greedily and by 4 sampled episodes each.
  c.eval = ml_collections.ConfigDict(dict(every_steps=20, samples=4))
  c.log_every = 5
  c.checkpoint_every = 40
  if smoke:
    _shrink_to_smoke(c)
  return default.with_arm(c, arm)


def _shrink_to_smoke(c: ml_collections.ConfigDict) -> None:
  """Tiny players, 3×3 mazes, a few steps, and a stage 1 long enough that
  both players train in stage 2 (the simulator writes valid mazes, the
  agent solves some): tests compare runs on it."""
  c.task.update(size=3, max_turns=4, level_width=1, levels=4)
  c.warmstart.agent_level_weights = (2, 1)
  c.data.update(num_train=200, num_test_per_level=8)
  # Fast enough that a few steps change some held-out answers.
  c.agent.learning_rate = 1e-3
  for player in (c.agent, c.simulator):
    player.model_overrides = ml_collections.ConfigDict(dict(
        num_layers=1, hidden_size=32, intermediate_size=64, num_heads=2,
        num_kv_heads=1, max_position_embeddings=64))
  c.warmstart.update(agent_steps=100, simulator_steps=300,
                     simulator_start_steps=4, batch_size=16,
                     learning_rate=3e-3, checkpoint_every=100)
  c.coevolve.update(num_steps=4, num_seeds=4, variations=2, attempts=4,
                    agent_minibatches=2)
  c.pool.update(capacity=256, num_base=32, base_max_difficulty=2,
                replay_tasks=4, generation_capacity=32)
  c.eval.update(every_steps=2, samples=2)
  c.log_every = 1
  c.checkpoint_every = 2
