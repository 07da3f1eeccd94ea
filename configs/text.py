"""GenEnv on text tasks with Hugging Face models for both players.

Edit the paths below (or override them on the command line), then run:
  python -m train.main --config=configs/text.py --workdir=runs/text \\
    --config.agent.hf_dir=/ckpt/Qwen2.5-0.5B-Instruct \\
    --config.simulator.hf_dir=/ckpt/Qwen2.5-0.5B-Instruct \\
    --config.task.tokenizer_dir=/ckpt/Qwen2.5-0.5B-Instruct \\
    --config.data.source_dir=/data/seed_tasks
`--config=configs/text.py:cpu` shrinks the batches and widths to what a CPU runs.

Variants:
  cpu     small batches and widths for tiny models on a CPU.
  bfcl    BFCL seed data (data.format="bfcl", the `bfcl` verifier on the last tool
          call of a response) at widths that keep >= 95% of every single-turn
          category with a Qwen tokenizer (`python -m train.tools.bfcl_widths`
          measures it; docs/text_tasks.md has the figures).
  api_bank  API-Bank levels 1 and 2 (data.format="api_bank": its training files
          the train split, its test files the held-out split; the `api_bank`
          verifier on the last call list of a response) at widths that keep
          every record of API-Bank's level-1/2 test files and of its
          lv3-api-train.json with a Qwen tokenizer (docs/text_tasks.md).
  api_bank_smoke  the same at sizes a CPU runs with tiny random players, on
          the seed fixture `scoring.apibank_levels.write_seed_fixture` writes.
  bfcl_multi_turn  BFCL multi-turn tool use, an episodic domain
          (genenv_jax/domains/bfcl_multi_turn/domain.py): the simulator writes a variation
          of a BFCL entry (classes, initial state, user turns, ground-truth calls)
          that is kept only if its ground truth runs on the APIs without an error;
          the agent plays it against the APIs, rewarded by the official checker's
          verdict (episodes.reward="success") or the share of turns passed
          ("turn_sum"). Seeds are the bfcl_eval wheel's base and miss_param
          entries, a held-out share of entry numbers kept out (see
          genenv_jax/domains/bfcl_multi_turn/data.py and docs/text_tasks.md).
  bfcl_multi_turn_smoke  the same at sizes a CPU runs with tiny random players:
          first turns only, function names instead of their docs, short steps.
  smollm  GenEnv on a real chat model on a CPU: both players SmolLM2-135M-Instruct
          from $GENENV_SMOLLM2_DIR, else the cache `python -m
          train.tools.real_models smollm2` builds ($GENENV_CACHE or
          ~/.cache/genenv_jax, then smollm2-135m-instruct), on the project's tiny
          seed set configs/data/smollm_seed/:
            python -m train.main --config=configs/text.py:smollm --workdir=runs/smollm

Both players share one tokenizer (its ids are the task format). The seed
directory holds JSONL / parquet files with a prompt and an answer per record
(or BFCL question / function / ground-truth lines with data.format="bfcl");
files named test* are the held-out set (see genenv_jax/domains/text/data.py). The
simulator writes `New Task: ...` / `New Answer: ...`; the agent is scored on
its response by `task.verifier`.
"""

import os

import ml_collections

from configs import default

VARIANTS = ("cpu", "bfcl", "smollm", "bfcl_multi_turn", "bfcl_multi_turn_smoke",
            "api_bank", "api_bank_smoke")
# Other spellings of the delimiters that chat models write.
TASK_DELIMITER_VARIANTS = ("**New Task:**", "**New Task**:", "New task:", "New Task -",
                           "## New Task:", "## New Task", "### New Task:", "### New Task")
ANSWER_DELIMITER_VARIANTS = ("**New Answer:**", "**New Answer**:", "New answer:",
                             "## New Answer:", "## New Answer", "### New Answer:",
                             "### New Answer")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """arg: None for the full-size run, or one of VARIANTS (module doc)."""
  if arg not in (None, "") + VARIANTS:
    raise ValueError(f"configs/text.py: unknown variant {arg!r}; expected none or one "
                     f"of {VARIANTS}.")
  c = default.get_config()
  chat_model_training(c)
  # Greedy held-out evaluation only: sampling K answers per task of a chat
  # model costs K generations.
  c.eval.update(every_steps=20, samples=0)

  c.task = ml_collections.ConfigDict(dict(
      name="text",
      tokenizer_dir="",        # HF tokenizer directory, usually the agent's hf_dir
      task_delimiter="New Task:",
      answer_delimiter="New Answer:",
      max_task_tokens=256,     # widest task the agent's prompt holds
      max_answer_tokens=64,    # widest reference answer (EOS not counted)
      max_response_tokens=1024,  # the agent's budget (EOS not counted): room to
                               # reason before the answer (see answer_from)
      max_written_tokens=384,  # a written task + answer row (the task pool's width)
      max_simulator_tokens=512,  # the simulator's budget: it may reason before
                               # the task delimiter; from it on must fit a row
      task_delimiter_variants=list(TASK_DELIMITER_VARIANTS),
      answer_delimiter_variants=list(ANSWER_DELIMITER_VARIANTS),
      answer_ends="eos",       # eos | line_break: where the written answer ends
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
      agent_instruction=(
          "{task}\n\nThink step by step if you need to, then end with a line "
          "'Final answer: <the answer>'."),
      eos_token="<|im_end|>",  # Qwen2.5-Instruct's end of turn ("" = tokenizer's eos)
      pad_token="",            # "" = the tokenizer's pad token (must differ from eos)
      verifier="exact",        # exact | f1 | tool_call | boxed | bfcl | api_bank
      answer_from="final_answer",  # all | final_answer | last_boxed | last_tool_call
      final_answer_marker="Final answer:",
      max_difficulty=4,        # task-length buckets
      summary_signals=False,   # write {signal} (success rate) into the simulator prompt
      signal_template="The solver currently answers {rate} of such tasks correctly.",
  ))
  c.data = ml_collections.ConfigDict(dict(
      tfds_dir="",             # "" = <workdir>/tfds
      source_dir="",           # seed JSONL / parquet directory
      format="prompt_answer",  # prompt_answer | bfcl | api_bank
      prompt_field="prompt",
      answer_field="answer",
      test_fraction=0.1,       # held out when the directory has no test* files
  ))
  c.data.seed = c.get_ref("seed") + 0  # follows config.seed
  c.pool.update(capacity=16384, num_base=2048, base_max_difficulty=c.task.max_difficulty,
                replay_tasks=8, generation_capacity=2048)
  if arg == "cpu":
    _shrink_to_cpu(c)
  elif arg == "bfcl":
    _bfcl(c)
  elif arg in ("api_bank", "api_bank_smoke"):
    _api_bank(c)
    if arg == "api_bank_smoke":
      _shrink_api_bank(c)
  elif arg == "smollm":
    _smollm(c)
  elif arg in ("bfcl_multi_turn", "bfcl_multi_turn_smoke"):
    _bfcl_multi_turn(c)
    if arg == "bfcl_multi_turn_smoke":
      _shrink_bfcl_multi_turn(c)
  return c


def chat_model_training(c: ml_collections.ConfigDict) -> None:
  """How the runs of instruction-tuned chat players train (text tasks,
  ALFWorld): uniform seeds and replay and the paper's GRPO normalisation
  (their measured settings on text, docs/text_tasks.md; the arithmetic
  demo's choices, docs/demo.md, have not been measured on text); bf16
  players with f32 parameters; the paper's AdamW learning rates, 1e-6
  (agent) and 5e-7 (simulator), and KL coefficient; no warm start (the
  players start as they are); 200 steps of 8 seeds, 4 variations and 8
  attempts; an attempt succeeds at reward 1 (lower
  curriculum.success_threshold for the f1 verifier)."""
  c.coevolve.seed_selection = "uniform"
  c.pool.replay_selection = "uniform"
  c.grpo.update(normalize_std=True, pg_normalizer="all")
  for player in (c.agent, c.simulator):
    player.model_overrides = ml_collections.ConfigDict(dict(
        dtype="bfloat16", param_dtype="float32"))
  c.agent.learning_rate = 1e-6
  c.simulator.learning_rate = 5e-7
  c.grpo.kl_coef = 0.001
  c.warmstart.update(agent_steps=0, simulator_steps=0)
  c.coevolve.update(num_steps=200, num_seeds=8, variations=4, attempts=8,
                    agent_minibatches=4)
  c.curriculum.success_threshold = 1.0


def _bfcl(c: ml_collections.ConfigDict) -> None:
  """BFCL seeds; widths keep >= 95% of each single-turn category (Qwen tokenizer)."""
  c.data.format = "bfcl"
  c.task.update(
      verifier="bfcl", answer_from="last_tool_call",
      agent_instruction="{task}",  # the seed task asks for the call list itself
      max_task_tokens=2048, max_answer_tokens=384, max_written_tokens=2560,
      max_simulator_tokens=2816, max_response_tokens=1024)


def _api_bank(c: ml_collections.ConfigDict) -> None:
  """API-Bank seeds; widths keep every level-1/2 test record and every record of
  lv3-api-train.json (Qwen tokenizer: tasks up to 1256 tokens, answers up to 103)."""
  c.data.format = "api_bank"
  c.task.update(
      verifier="api_bank", answer_from="last_tool_call",
      agent_instruction="{task}",  # the seed task asks for the API request itself
      max_task_tokens=1536, max_answer_tokens=128, max_written_tokens=1792,
      max_simulator_tokens=2048, max_response_tokens=512)


def _shrink_api_bank(c: ml_collections.ConfigDict) -> None:
  """The smoke sizes (`smoke_sizes`) with widths that hold the seed fixture
  (tasks up to 334 tokens, answers up to 40)."""
  smoke_sizes(c, num_steps=2, num_base=16, eval_every_steps=2)
  c.task.update(max_task_tokens=384, max_answer_tokens=48, max_written_tokens=448,
                max_simulator_tokens=128, max_response_tokens=48, max_difficulty=2)


def _bfcl_multi_turn(c: ml_collections.ConfigDict) -> None:
  """BFCL multi-turn variations played as episodes (module doc)."""
  c.task = ml_collections.ConfigDict(dict(
      name="bfcl_multi_turn",
      tokenizer_dir="",          # HF tokenizer directory, usually the agent's hf_dir
      data_dir="",               # BFCL data (function docs); "" = the bfcl_eval wheel's
      function_docs="bfcl",      # bfcl: BFCL's prompt-mode system prompt | names
      max_prompt_tokens=8192,    # system prompt with two classes' docs + turn 1
      max_written_tokens=1536,   # a written variation (state, turns, calls) + EOS
      max_simulator_tokens=2048,  # the simulator may reason before `Classes:`
      max_turns=12,              # K agent steps per episode (all user turns)
      max_action_tokens=256,     # A: one step, its stop token included
      max_observation_tokens=512,  # O: execution results or the next user turn
      calls_per_level=2,         # difficulty = ceil(ground-truth calls / this)
      max_difficulty=4,
      eos_token="<|im_end|>",
      pad_token="",
  ))
  c.data = ml_collections.ConfigDict(dict(
      tfds_dir="",               # unused: seeds come from the bfcl_eval wheel
      categories=("multi_turn_base", "multi_turn_miss_param"),
      test_fraction=0.1,         # share of entry numbers held out (all categories)
      max_seed_turns=0,          # seeds keep their first N turns (0: all)
  ))
  c.data.seed = c.get_ref("seed") + 0  # follows config.seed
  c.episodes = ml_collections.ConfigDict(dict(
      reward="success",          # success: the checker's verdict | turn_sum: share
                                 # of turns passed
      truncated="zero",          # an episode out of steps scores 0 | "mask"
  ))
  c.curriculum.success_threshold = 1.0
  c.pool.update(capacity=4096, num_base=1024, base_max_difficulty=c.task.max_difficulty,
                replay_tasks=8, generation_capacity=1024)
  c.eval = ml_collections.ConfigDict(dict(every_steps=50, samples=0))


def _shrink_bfcl_multi_turn(c: ml_collections.ConfigDict) -> None:
  """The smoke sizes (`smoke_sizes`), first turns only,
  function names for docs, a few short steps."""
  smoke_sizes(c, num_steps=3, num_base=32, eval_every_steps=1000)
  c.task.update(function_docs="names",
                max_prompt_tokens=160, max_written_tokens=160,
                max_simulator_tokens=160, max_turns=3, max_action_tokens=24,
                max_observation_tokens=48, calls_per_level=1, max_difficulty=2)
  c.data.update(max_seed_turns=1, test_fraction=0.2)


def smoke_sizes(c: ml_collections.ConfigDict, *, num_steps: int, num_base: int,
                eval_every_steps: int) -> None:
  """What the smoke runs (the episodic domains', API-Bank's) share, sizes a
  2-core CPU runs: both players tiny random decoders (one layer of width 32, f32, learning
  rate 1e-3) on the project's Qwen tokenizer cache (`python -m
  train.tools.real_models qwen_tokenizer`), its <|endoftext|> the pad;
  `num_steps` steps of 8 generations and (8 + 8 replayed) x 2 = 32 episodes,
  rows that split evenly over up to 8 CPU devices (a minibatch: 16 rows); a
  pool of 256 with `num_base` seeds of levels 1..2; greedy held-out
  evaluation every `eval_every_steps`; a log line every step, a checkpoint
  every 1000."""
  c.task.update(tokenizer_dir=os.path.join(model_cache_dir(), "qwen-tokenizer"),
                pad_token="<|endoftext|>")
  for player in (c.agent, c.simulator):
    player.model_overrides = ml_collections.ConfigDict(dict(
        dtype="float32", num_layers=1, hidden_size=32, intermediate_size=64,
        num_heads=2, num_kv_heads=1, max_position_embeddings=1024))
    player.learning_rate = 1e-3
  c.coevolve.update(num_steps=num_steps, num_seeds=4, variations=2, attempts=2,
                    agent_minibatches=2)
  c.pool.update(capacity=256, num_base=num_base, base_max_difficulty=2,
                replay_tasks=8, generation_capacity=32)
  c.eval = ml_collections.ConfigDict(dict(every_steps=eval_every_steps, samples=0))
  c.log_every = 1
  c.checkpoint_every = 1000


def model_cache_dir() -> str:
  """Where train.tools.real_models builds real models and tokenizers:
  $GENENV_CACHE, else ~/.cache/genenv_jax."""
  return os.environ.get("GENENV_CACHE") or os.path.join(
      os.path.expanduser("~"), ".cache", "genenv_jax")


def smollm2_dir() -> str:
  """$GENENV_SMOLLM2_DIR, else where train.tools.real_models caches SmolLM2."""
  return os.environ.get("GENENV_SMOLLM2_DIR") or os.path.join(
      model_cache_dir(), "smollm2-135m-instruct")


def _smollm(c: ml_collections.ConfigDict) -> None:
  """Both players SmolLM2-135M-Instruct, small batches and widths, f32 on a CPU."""
  model_dir = smollm2_dir()
  # Parameters and optimiser states sharded over every device (fsdp), not one
  # copy per device: four 135M-parameter trees per player.
  c.mesh.update(data=1, fsdp=-1, tensor=1)
  for player in (c.agent, c.simulator):
    player.hf_dir = model_dir
    # Scanned layers: one block in the compiled step, not 30 (compile time,
    # memory); each block recomputed in the backward pass (remat "full"), so
    # the updates do not keep 30 layers of activations.
    player.model_overrides = ml_collections.ConfigDict(dict(
        dtype="float32", scan_layers=True, remat_policy="full"))
  c.agent.learning_rate = 1e-6
  c.simulator.learning_rate = 5e-7
  c.task.update(
      tokenizer_dir=model_dir, pad_token="<|endoftext|>",  # its pad is its eos
      # SmolLM2-135M follows a shown example better than a described format, and
      # often comments after the answer's line.
      simulator_instruction=("Here is an example:\n{seed}\n\n"
                             "Write another example in the same format."),
      answer_ends="line_break",
      verifier="f1", answer_from="all",
      agent_instruction="{task}\nAnswer with only the answer, in a few words.",
      max_task_tokens=32, max_answer_tokens=8, max_response_tokens=16,
      max_written_tokens=56, max_simulator_tokens=64, max_difficulty=2)
  c.data.update(source_dir=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                        "data", "smollm_seed"),
                test_fraction=0.0)
  # Sampling from the sharded weights: no whole copy of each player per device.
  # At temperature 1 SmolLM2-135M rarely keeps to a format; 0.7 keeps it often.
  # 8 generations and (8 + 4 replayed) x 4 = 48 attempts a step: rows that
  # split evenly over up to 8 CPU devices (a minibatch: 24 rows).
  c.coevolve.update(num_steps=20, num_seeds=4, variations=2, attempts=4,
                    agent_minibatches=2, sampling_layout="training",
                    simulator_temperature=0.7, agent_temperature=0.7)
  c.curriculum.success_threshold = 0.5  # f1 >= 0.5 counts as solved
  c.pool.update(capacity=256, num_base=32, base_max_difficulty=2, replay_tasks=4,
                generation_capacity=32)
  c.eval.every_steps = 1000  # held-out eval off in short runs
  c.log_every = 1
  c.checkpoint_every = 1000


def _shrink_to_cpu(c: ml_collections.ConfigDict) -> None:
  """Small widths and batches for tiny models on a CPU."""
  c.task.update(max_task_tokens=24, max_answer_tokens=8, max_response_tokens=8,
                max_written_tokens=48, max_simulator_tokens=48, max_difficulty=2,
                answer_from="all", agent_instruction="{task}")
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
