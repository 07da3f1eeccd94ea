"""GenEnv on TravelPlanner: the simulator varies the travellers, budget and
constraints of TravelPlanner's train queries, the agent writes the plans.

Fetch TravelPlanner's train and validation splits once (the command prints
their directory, DATA), then run with chat models for both players:
  python -m train.tools.bench_download travelplanner
  python -m train.main --config=configs/travelplanner.py --workdir=runs/travelplanner \\
    --config.task.data_dir=DATA \\
    --config.agent.hf_dir=/ckpt/Qwen2.5-7B-Instruct \\
    --config.simulator.hf_dir=/ckpt/Qwen2.5-7B-Instruct \\
    --config.task.tokenizer_dir=/ckpt/Qwen2.5-7B-Instruct
A baseline arm (configs/default.py's ARMS), and the sizes tests run (on the
fixture `scoring.travelplanner.write_fixture` writes for both splits):
  python -m train.main --config=configs/travelplanner.py:frozen_env ...
  python -m train.main --config=configs/travelplanner.py:smoke --workdir=/tmp/tp_smoke \\
    --config.task.data_dir=FIXTURE

The simulator writes a spec naming a train query and its travellers, budget
and constraints; the domain keeps it iff the query's annotated plan passes
every constraint of the variation, so every written task has a solution
(genenv_jax/domains/travelplanner/domain.py). The agent writes one plan,
rewarded 1 when it passes every constraint (the benchmark's final pass);
episodes.reward="turn_sum" trains on the share of constraints passed instead.
The held-out set is TravelPlanner's validation split, never trained on.
"""

import ml_collections

from configs import default
from configs import text


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """arg: as configs/default.py's ("smoke" and/or one arm of default.ARMS)."""
  smoke, arm = default.smoke_and_arm(arg, "configs/travelplanner.py", "full run's")
  c = default.get_config()
  text.chat_model_training(c)  # as the text runs
  for player in (c.agent, c.simulator):  # rows of up to 18K tokens: keep only
    player.model_overrides.remat_policy = "full"  # each block's input
  c.task = ml_collections.ConfigDict(dict(
      name="travelplanner",
      tokenizer_dir="",          # HF tokenizer directory, usually the agent's hf_dir
      data_dir="",               # train.csv, train_ref_info.jsonl, validation.*
      max_prompt_tokens=16384,   # the planner prompt, a query's reference
                                 # information (8K+ tokens for 7 days) and the query
      max_written_tokens=128,    # the trip line, a spec, EOS
      max_simulator_tokens=512,  # the simulator may reason before `query:`
      max_action_tokens=1536,    # the plan, its stop token included
      max_difficulty=4,          # 1 + constraints + (days - 3) / 2, capped
      eos_token="<|im_end|>",
      pad_token="",
  ))
  c.data = ml_collections.ConfigDict(dict(
      tfds_dir="",               # unused: seeds are the train split's queries
  ))
  c.data.seed = c.get_ref("seed") + 0  # follows config.seed
  c.episodes = ml_collections.ConfigDict(dict(
      reward="success",          # success: the final pass | turn_sum: the share
                                 # of the query's constraints passed
      truncated="zero",          # a plan cut at max_action_tokens scores 0 | "mask"
  ))
  c.pool.update(capacity=4096, num_base=45, base_max_difficulty=c.task.max_difficulty,
                replay_tasks=8, generation_capacity=1024)
  # The validation queries per level, greedily (a sampled plan costs a whole
  # generation of up to max_action_tokens).
  c.eval = ml_collections.ConfigDict(dict(every_steps=25, samples=0))
  if smoke:
    _shrink_to_smoke(c)
  return default.with_arm(c, arm)


def _shrink_to_smoke(c: ml_collections.ConfigDict) -> None:
  """The smoke sizes (`text.smoke_sizes`) at widths that hold the fixture's
  prompts (up to 1,450 tokens with the Qwen tokenizer), plans of 16 tokens,
  the fixture's three train queries (levels 2-4) as seeds."""
  text.smoke_sizes(c, num_steps=2, num_base=3, eval_every_steps=2)
  c.task.update(max_prompt_tokens=1472, max_written_tokens=96,
                max_simulator_tokens=96, max_action_tokens=16)
  c.pool.base_max_difficulty = c.task.max_difficulty
  for player in (c.agent, c.simulator):
    player.model_overrides.max_position_embeddings = 2048
