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

import ml_collections

from configs import default
from configs import text


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """arg: as configs/default.py's ("smoke" and/or one arm of default.ARMS)."""
  smoke, arm = default.smoke_and_arm(arg, "configs/alfworld.py", "full run's")
  c = default.get_config()
  text.chat_model_training(c)  # as the text runs
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
  c.pool.update(capacity=4096, num_base=600, base_max_difficulty=c.task.max_difficulty,
                replay_tasks=8, generation_capacity=1024)
  # ALFWorld-synthetic per level, greedily (sampled episodes cost K turns each).
  c.eval = ml_collections.ConfigDict(dict(every_steps=25, samples=0))
  if smoke:
    _shrink_to_smoke(c)
  return default.with_arm(c, arm)


def _shrink_to_smoke(c: ml_collections.ConfigDict) -> None:
  """The smoke sizes (`text.smoke_sizes`), a short system prompt, games of
  plans of up to 5 steps in 5 turns (level 1: up to 4 steps, level 2: 5)."""
  text.smoke_sizes(c, num_steps=2, num_base=12, eval_every_steps=2)
  c.task.update(agent_system_prompt="Reply with one ALFWorld command.",
                max_prompt_tokens=320, max_written_tokens=96,
                max_simulator_tokens=96, max_turns=5, max_action_tokens=12,
                max_observation_tokens=48, first_level_steps=4, steps_per_level=1,
                max_difficulty=2, live_games=64)
  c.data.update(num_train=12, test_per_task=1)
