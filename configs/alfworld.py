"""GenEnv on ALFWorld: the simulator writes household games, the agent plays
them in TextWorld with ALFWorld's text and commands.

Run with chat models for both players (docs/alfworld.md):
  python -m train.main --config=configs/alfworld.py --workdir=runs/alfworld \\
    --config.agent.hf_dir=/ckpt/Qwen2.5-0.5B-Instruct \\
    --config.simulator.hf_dir=/ckpt/Qwen2.5-0.5B-Instruct \\
    --config.task.tokenizer_dir=/ckpt/Qwen2.5-0.5B-Instruct
A baseline arm (configs/default.py's ARMS), and the sizes tests run:
  python -m train.main --config=configs/alfworld.py:frozen_env ...
  python -m train.main --config=configs/alfworld.py:smoke --workdir=/tmp/alfworld_smoke

The simulator writes a one-line spec (a bundled room layout, one of ALFWorld's
six task types with its object and target, where the objects start); the
domain keeps it iff ALFWorld's planner solves its game within the turn limit,
and its difficulty is the plan's length in levels (plans of up to 4 steps are
level 1, each 2 more steps a level more). The agent plays each game as an
episode of up to 30 commands, reward 1 for winning (ALFWorld's score). Seeds
are specs drawn over 108 of the 120 layouts; the held-out set
"ALFWorld-synthetic" is a fixed draw over the other 12 (genenv_jax/domains/
alfworld/data.py). Needs requirements-alfworld.txt installed.
"""

import os

import ml_collections

from configs import default


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """arg: as configs/default.py's ("smoke" and/or one arm of default.ARMS)."""
  size, arm = default._parse_variants(arg)  # pylint: disable=protected-access
  if size not in ("", "smoke"):
    raise ValueError(f"configs/alfworld.py: variant {size!r}; its sizes are the "
                     "full run's (none) and 'smoke'.")
  c = default.get_config()
  # As the text runs: uniform seeds, the paper's GRPO normalisation.
  c.coevolve.seed_selection = "uniform"
  c.pool.replay_selection = "uniform"
  c.grpo.update(normalize_std=True, pg_normalizer="all")
  c.task = ml_collections.ConfigDict(dict(
      name="alfworld",
      tokenizer_dir="",          # HF tokenizer directory, usually the agent's hf_dir
      max_prompt_tokens=768,     # system prompt + the room and the task
      max_written_tokens=160,    # a spec + EOS
      max_simulator_tokens=256,  # the simulator may reason before `layout:`
      max_turns=30,              # K commands per episode (ALFWorld's step limit)
      max_action_tokens=24,      # A: one command, its stop token included
      max_observation_tokens=128,  # O: ALFWorld's feedback in the chat template
      first_level_steps=4,       # plans of up to 4 steps are level 1,
      steps_per_level=2,         # each 2 steps more one level more,
      max_difficulty=4,          # up to level 4
      live_games=512,            # TextWorld games kept live between turns
      eos_token="<|im_end|>",
      pad_token="",
  ))
  c.data = ml_collections.ConfigDict(dict(
      tfds_dir="",               # unused: specs are drawn over the bundled layouts
      num_train=600,             # seed specs, equal shares per level
      test_per_task=20,          # ALFWorld-synthetic: specs per task type
  ))
  c.data.seed = c.get_ref("seed") + 0  # follows config.seed
  c.episodes = ml_collections.ConfigDict(dict(
      reward="success",          # 1 for winning within max_turns
      truncated="zero",          # an episode out of turns scores 0 | "mask"
  ))
  for player in (c.agent, c.simulator):
    player.model_overrides = ml_collections.ConfigDict(dict(
        dtype="bfloat16", param_dtype="float32"))
  c.agent.learning_rate = 1e-6
  c.simulator.learning_rate = 5e-7
  c.grpo.kl_coef = 0.001
  c.warmstart.update(agent_steps=0, simulator_steps=0)  # chat players start as they are
  c.coevolve.update(num_steps=200, num_seeds=8, variations=4, attempts=8,
                    agent_minibatches=4)
  c.curriculum.success_threshold = 1.0
  c.pool.update(capacity=4096, num_base=600, base_max_difficulty=c.task.max_difficulty,
                replay_tasks=8, generation_capacity=1024)
  # ALFWorld-synthetic per level, greedily (sampled episodes cost K turns each).
  c.eval = ml_collections.ConfigDict(dict(every_steps=25, samples=0))
  if size == "smoke":
    _shrink_to_smoke(c)
  if arm:
    default.ARMS[arm](c)
    c.arm = arm
  return c


def _shrink_to_smoke(c: ml_collections.ConfigDict) -> None:
  """Tiny random players on the project's Qwen tokenizer cache (`python -m
  train.tools.real_models qwen_tokenizer`), a short system prompt, games of
  plans of up to 5 steps in 5 turns (level 1: up to 4 steps, level 2: 5),
  sizes a 2-core CPU runs."""
  cache = os.environ.get("GENENV_CACHE") or os.path.join(
      os.path.expanduser("~"), ".cache", "genenv_jax")
  c.task.update(tokenizer_dir=os.path.join(cache, "qwen-tokenizer"),
                pad_token="<|endoftext|>",
                agent_system_prompt="Reply with one ALFWorld command.",
                max_prompt_tokens=320, max_written_tokens=96,
                max_simulator_tokens=96, max_turns=5, max_action_tokens=12,
                max_observation_tokens=48, first_level_steps=4, steps_per_level=1,
                max_difficulty=2, live_games=64)
  c.data.update(num_train=12, test_per_task=1)
  for player in (c.agent, c.simulator):
    player.model_overrides = ml_collections.ConfigDict(dict(
        dtype="float32", num_layers=1, hidden_size=32, intermediate_size=64,
        num_heads=2, num_kv_heads=1, max_position_embeddings=1024))
    player.learning_rate = 1e-3
  # 8 generations and (8 + 8 replayed) x 2 = 32 episodes a step: rows that
  # split evenly over up to 8 CPU devices.
  c.coevolve.update(num_steps=2, num_seeds=4, variations=2, attempts=2,
                    agent_minibatches=2)
  c.pool.update(capacity=256, num_base=12, base_max_difficulty=2, replay_tasks=8,
                generation_capacity=32)
  c.eval = ml_collections.ConfigDict(dict(every_steps=2, samples=0))
  c.log_every = 1
  c.checkpoint_every = 1000
