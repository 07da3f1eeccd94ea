"""GenEnv on text tasks with Hugging Face models for both players.

Edit the paths below (or override them on the command line), then run:
  python -m train.main --config=configs/text.py --workdir=runs/text \\
    --config.agent.hf_dir=/ckpt/Qwen2.5-0.5B-Instruct \\
    --config.simulator.hf_dir=/ckpt/Qwen2.5-0.5B-Instruct \\
    --config.task.tokenizer_dir=/ckpt/Qwen2.5-0.5B-Instruct \\
    --config.data.source_dir=/data/seed_tasks
`--config=configs/text.py:cpu` shrinks the batches and widths to what a CPU runs.

Both players share one tokenizer (its ids are the task format). The seed
directory holds JSONL / parquet files with a prompt and an answer per record
(or BFCL question / function / ground-truth lines with data.format="bfcl");
files named test* are the held-out set (see train/text_datasets.py). The
simulator writes `New Task: ...` / `New Answer: ...`; the agent is scored on
its response by `task.verifier`.
"""

import ml_collections

from configs import default


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """arg: None for the full-size run, or "cpu": small batches and widths."""
  if arg not in (None, "", "cpu"):
    raise ValueError(f"configs/text.py: unknown variant {arg!r}; expected none or 'cpu'.")
  c = default.get_config()

  c.task = ml_collections.ConfigDict(dict(
      name="text",
      tokenizer_dir="",        # HF tokenizer directory, usually the agent's hf_dir
      task_delimiter="New Task:",
      answer_delimiter="New Answer:",
      max_task_tokens=256,     # widest task the agent's prompt holds
      max_answer_tokens=64,    # widest reference answer and the agent's response
                               # budget (EOS not counted): leave room to reason
      max_written_tokens=384,  # the simulator's budget for one task + answer
      use_chat_template=True,
      # Prompts: {seed} / {task} mark where the seed task / the new task go;
      # {task_delimiter}, {answer_delimiter} and {signal} are filled in too.
      simulator_system_prompt="",
      simulator_instruction=(
          "Here is a task with its answer:\n\n{seed}\n\n"
          "Write one new task of the same kind, with its correct answer, in "
          "exactly this format:\n{task_delimiter} <the task>\n"
          "{answer_delimiter} <the answer>"),
      agent_system_prompt="",
      agent_instruction="{task}",
      eos_token="<|im_end|>",  # Qwen2.5-Instruct's end of turn ("" = tokenizer's eos)
      pad_token="",            # "" = the tokenizer's pad token (must differ from eos)
      verifier="exact",        # exact | f1 | tool_call | boxed | bfcl
      max_difficulty=4,        # task-length buckets
      summary_signals=False,   # write {signal} (success rate) into the simulator prompt
      signal_template="The solver currently answers {rate} of such tasks correctly.",
  ))
  c.data = ml_collections.ConfigDict(dict(
      tfds_dir="",             # "" = <workdir>/tfds
      source_dir="",           # seed JSONL / parquet directory
      format="prompt_answer",  # prompt_answer | bfcl
      prompt_field="prompt",
      answer_field="answer",
      test_fraction=0.1,       # held out when the directory has no test* files
      seed=0,
  ))
  for player in (c.agent, c.simulator):
    player.model_overrides = ml_collections.ConfigDict(dict(
        dtype="bfloat16", param_dtype="float32"))
  # Paper: AdamW, lr 1e-6 (agent) and 5e-7 (simulator).
  c.agent.learning_rate = 1e-6
  c.simulator.learning_rate = 5e-7

  c.warmstart.update(agent_steps=0, simulator_steps=0)  # instruction-tuned players start as they are
  c.coevolve.update(num_steps=200, num_seeds=8, variations=4, attempts=8,
                    agent_minibatches=4)
  c.curriculum.success_threshold = 1.0  # lower it for the f1 verifier
  c.pool.update(capacity=16384, num_base=2048, base_max_difficulty=c.task.max_difficulty,
                replay_tasks=8, generation_capacity=2048)
  if arg == "cpu":
    _shrink_to_cpu(c)
  return c


def _shrink_to_cpu(c: ml_collections.ConfigDict) -> None:
  """Small widths and batches for tiny models on a CPU."""
  c.task.update(max_task_tokens=24, max_answer_tokens=8, max_written_tokens=48,
                max_difficulty=2)
  for player in (c.agent, c.simulator):
    player.model_overrides = ml_collections.ConfigDict(dict(dtype="float32"))
    player.learning_rate = 1e-4
  c.coevolve.update(num_steps=4, num_seeds=4, variations=2, attempts=4,
                    agent_minibatches=2)
  c.pool.update(capacity=256, num_base=64, base_max_difficulty=2, replay_tasks=4,
                generation_capacity=32)
  c.eval.every_steps = 2
  c.log_every = 1
  c.checkpoint_every = 2
