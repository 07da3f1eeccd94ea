"""GenEnv on text tasks with both players at Qwen2.5 shapes, on a Cloud TPU pod.

Variants (`--config=configs/qwen_tpu.py:VARIANT`):
  7b    (the default) Qwen2.5-7B players, 32 chips or more, a multiple of 4
        (v4-64, v5p-64, v5litepod-32): the whole step compiled for v4-64 peaks
        at 19.6 GiB per chip, for v5p-64 at 19.4 GiB, for v5litepod-32 (remat
        "full") at 14.3 GiB (docs/tpu_pods.md)
  1.5b  Qwen2.5-1.5B players, a multiple of 8 chips: the whole step compiled
        for v4-16 peaks at 21.3 GiB per chip
  0.5b  Qwen2.5-0.5B players, a multiple of 4 chips: the whole step compiled
        for v4-8 peaks at 18.7 GiB per chip
  cpu   the 7b settings (remat, chunked log-probs) with tiny shapes, small
        batches and float32: runs on a CPU with random weights
  7b_bfcl_multi_turn  the 7b players on BFCL multi-turn tool use
        (configs/text.py:bfcl_multi_turn), an episodic domain: a prompt of up
        to 6,144 tokens (BFCL's system prompt with the classes' docs and the
        first user turn), then up to 4 steps of 256 tokens with observations
        of 384 between them; seeds keep their first 2 turns; 8 seeds x 4
        variations + 8 replayed tasks, 8 episodes each (320 rows), 20 GRPO
        minibatches of 16 rows, log-prob chunks of 32 positions, remat
        "full". Its coevolve_step compiled for v4-64 peaks at 19.5 GiB per
        chip (docs/tpu_pods.md; compile_check with --programs=coevolve_step:
        the held-out program and the phase models are single-answer ones).
  7b_alfworld  the 7b players on ALFWorld games (configs/alfworld.py), an
        episodic domain: ALFWorld's prompt of up to 768 tokens, then up to 30
        commands of 24 tokens with observations of 128 between them (5,328
        tokens a row); the batches, minibatches, log-prob chunks and remat of
        7b_bfcl_multi_turn. Its coevolve_step compiled for v4-64 peaks at
        15.7 GiB per chip (docs/tpu_pods.md). Needs requirements-alfworld.txt
        on every worker (launch/tpu_pod.sh installs it for this preset).
  7b_lora  the 7b players with rank-16 low-rank adapters on every projection
        (config.{agent,simulator}.lora, models/lora.py) on one host, a v5e-8
        (v5litepod-8) or a v4-8: only the adapters and their AdamW moments
        train, the base weights are frozen and kept in bfloat16, and each
        player's reference is its base with the adapters off (no second
        copy). Half the 7b batch (8 seeds x 4 + 8 replayed tasks, 8 attempts:
        320 rows) in 20 GRPO minibatches of 16, remat "full", learning rates
        10x the full fine-tune's (module doc, LORA). Every program compiled
        for v5litepod-8 peaks at 13.3 GiB per chip, for v4-8 at 19.8 GiB
        (docs/tpu_pods.md, "7B on one host with LoRA").
  7b_bfcl, 7b_api_bank  Table 1's single-answer text benchmarks
        (configs/text.py's bfcl and api_bank variants: their seed formats,
        verifiers and widths) with the 7b batches and mesh, remat "full".
        Every program compiled for v4-64 peaks at 20.7 and 17.3 GiB per chip
        (docs/tpu_pods.md, "Table 1's presets at 7B"; docs/table1.md).
  7b_travelplanner  the 7b players on TravelPlanner (configs/travelplanner.py:
        prompts of 16,384 tokens, plans of 1,536) with the episodic batches,
        minibatches, log-prob chunks and remat of 7b_bfcl_multi_turn. Does
        not fit a v4-64: the prefill of its prompts forms XLA's [T, T]
        attention scores; every program compiled for v5p-64 peaks at 68.0
        GiB per chip (docs/tpu_pods.md).

launch/tpu_pod.sh starts it on every worker of a pod slice and fills in the
paths of this command:
  python -m train.main --config=configs/qwen_tpu.py:7b --workdir=gs://BUCKET/run \\
    --config.agent.hf_dir=/ckpt/Qwen2.5-7B-Instruct \\
    --config.simulator.hf_dir=/ckpt/Qwen2.5-7B-Instruct \\
    --config.task.tokenizer_dir=/ckpt/Qwen2.5-7B-Instruct \\
    --config.data.source_dir=/data/seed_tasks
Without hf_dir a player is randomly initialised at the preset's shapes.

What each size sets (everything else is configs/text.py):
  - mesh: parameters are sharded over fsdp (their embed dimension) and tensor
    (heads, MLP, vocabulary); batches over data x fsdp. One axis is -1 and
    takes the remaining chips. `tensor` must divide the KV heads (4 at 7B, 2
    below).
  - model_overrides: bfloat16 compute over float32 master weights (updates
    of lr 1e-6 are not lost to bf16 rounding), a remat policy per block, and
    the preset's vocabulary (so a checkpoint of another size is refused when
    loaded).
  - coevolve.logprob_chunk_size: response positions whose logits [rows,
    chunk, 152k] are formed at once when scoring responses
    (genenv_jax/policy.py); smaller saves memory, larger feeds the MXU better.
  - coevolve.decode_windows=16: the decode loop runs in 16 parts attending
    to the prompt and 1/16, 2/16, ..., all of the response slots, so decode
    steps read 17/32 of the response's KV cache on average instead of all of
    it (docs/tpu_pods.md, "The 7B step, compiled").
  - coevolve.sampling_layout="gathered" (from configs/default.py): once per
    step each player's weights are gathered whole over fsdp (still split over
    tensor) for decoding, so the decode loop does not gather them again at
    every token. The copy is cast to bfloat16 first: at 7B on a mesh with
    tensor=4 it is ~3.8 GB per chip while sampling; "training" decodes from
    the fsdp shards instead, when that memory is short.
  - task.max_answer_tokens: 1,024 agent response tokens at every size.
  - Chip counts assume megacore on v4 and v5p (one JAX device per chip, as
    TPU VMs run them); `python -m train.bench.compile_check` compiles a
    variant for a slice on a CPU host (docs/tpu_pods.md).
  - attention="splash" (TPU sizes): the scoring and training passes attend
    through the splash-attention kernel (models/splash.py), which never
    forms a [T, T] score array; the cpu variant keeps the XLA path.
  - scan_layers: True at every size (one block compiled). Unscanned, the
    step's compile needs more than 18 GB of host memory and 30 CPU-minutes at
    7B, about 19 GB and still growing when stopped at 1.5B, and 14.7 GB and
    24 minutes at 0.5B: too much for the preflight on a workstation
    (docs/tpu_pods.md). The scanned decoder carries the stacked KV cache
    through the layer scan and updates it in place (models/decoder.py).
  - batches (all sizes): 16 seeds x 4 variations = 64 tasks written per step
    (the paper's batch 64 for the simulator), 16 replayed pool tasks, 8
    attempts each = 640 attempts, trained in 10 GRPO minibatches of 64.
    The agent's reference pass scores the attempts in as many row passes.
    Keep num_seeds and each minibatch divisible by data x fsdp.
  - learning rates: the paper's AdamW 1e-6 (agent) and 5e-7 (simulator),
    from configs/text.py.
"""

from __future__ import annotations

import ml_collections

from configs import alfworld
from configs import text
from configs import travelplanner

# Per size: the model preset and its (padded) vocabulary, mesh, remat policy,
# log-prob chunk and GRPO minibatches. At 7B, remat "dots_no_batch" keeps the
# blocks' matmul outputs for the backward pass and recomputes the rest: the
# whole step peaks at 19.6 GiB per v4 chip with 64-row minibatches and
# models 3% faster than "full" on a v4-64, 6% on a v5p-64; 16 GiB chips
# (v5litepod) need "full", which launch/tpu_pod.sh sets for them
# (docs/tpu_pods.md). Log-prob chunks of 128 positions x 8 rows per chip
# read the output projection's 0.27 GB (bf16, a quarter of the vocabulary)
# once per 1,024 tokens, enough to keep its matmul compute-bound.
SIZES = {
    "0.5b": dict(model="qwen2.5-0.5b", vocab_size=151936,
                 mesh=dict(data=-1, fsdp=4, tensor=1),
                 remat_policy="dots_no_batch", logprob_chunk_size=128,
                 answer_tokens=1024, agent_minibatches=10),
    "1.5b": dict(model="qwen2.5-1.5b", vocab_size=151936,
                 mesh=dict(data=-1, fsdp=8, tensor=1),
                 remat_policy="dots_no_batch", logprob_chunk_size=64,
                 answer_tokens=1024, agent_minibatches=10),
    "7b": dict(model="qwen2.5-7b", vocab_size=152064,
               mesh=dict(data=1, fsdp=-1, tensor=4),
               remat_policy="dots_no_batch", logprob_chunk_size=128,
               answer_tokens=1024, agent_minibatches=10),
}
DEFAULT_SIZE = "7b"
DECODE_WINDOWS = 16
# The episodic domains the 7b players run on, by variant suffix.
EPISODIC = ("_bfcl_multi_turn", "_alfworld", "_travelplanner")
# The single-answer text benchmarks (configs/text.py's variant of the same
# name) the 7b players run on, by variant suffix: the 7b batches at the
# benchmark's widths, remat "full" (their rows are 1.6-2.4x the 7b preset's).
SINGLE = ("_bfcl", "_api_bank")
SINGLE_REMAT = "full"
EPISODIC_MINIBATCHES = 20
EPISODIC_LOGPROB_CHUNK = 32
EPISODIC_REMAT = "full"
EPISODIC_HELDOUT_ROWS = 64
# 7B on one host (v5litepod-8, v4-8) with low-rank adapters on both players
# (the "7b_lora" variant, module doc): what it changes from the 7b preset.
# The frozen base in bfloat16 halves the weights' bytes (there is no update
# of them to lose to bf16 rounding; the adapters stay float32). Half the
# batch and 16-row minibatches keep the KV cache and the update's
# activations within a 16 GiB v5e chip. The learning rates are 10x the full
# fine-tune's, as LoRA is usually run (its updates act through a rank-16
# product; not tuned here).
LORA = dict(rank=16, alpha=32.0, param_dtype="bfloat16", remat_policy="full",
            num_seeds=8, replay_tasks=8, agent_minibatches=20,
            agent_learning_rate=1e-5, simulator_learning_rate=5e-6)
LORA_SUFFIX = "_lora"
VARIANTS = (tuple(SIZES) + ("cpu",)
            + tuple(DEFAULT_SIZE + e for e in EPISODIC + SINGLE)
            + (DEFAULT_SIZE + LORA_SUFFIX,))

# The cpu variant's players: the Qwen2.5 layout (GQA, qkv bias, tied
# embeddings) at widths a CPU runs; the vocabulary is the tokenizer's.
CPU_SHAPES = dict(hidden_size=64, intermediate_size=128, num_layers=2,
                  num_heads=4, num_kv_heads=2)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """arg: one of VARIANTS (module doc); None or "" is "7b"."""
  variant = arg or DEFAULT_SIZE
  if variant not in VARIANTS:
    raise ValueError(f"configs/qwen_tpu.py: unknown variant {arg!r}; expected "
                     f"one of {VARIANTS}.")
  on_cpu = variant == "cpu"
  episodic = next((e for e in EPISODIC if variant.endswith(e)), "")
  single = next((e for e in SINGLE if variant.endswith(e)), "")
  lora = variant.endswith(LORA_SUFFIX)
  size = SIZES[DEFAULT_SIZE if on_cpu else size_of(variant)]
  if episodic == "_alfworld":
    c = alfworld.get_config()
  elif episodic == "_travelplanner":
    c = travelplanner.get_config()
  else:
    c = text.get_config("cpu" if on_cpu else
                        "bfcl_multi_turn" if episodic else
                        single.removeprefix("_") or None)
  c.mesh = ml_collections.ConfigDict(size["mesh"])
  c.coevolve.logprob_chunk_size = size["logprob_chunk_size"]
  c.coevolve.decode_windows = DECODE_WINDOWS
  for player in (c.agent, c.simulator):
    player.model = size["model"]
    player.model_overrides = ml_collections.ConfigDict(dict(
        dtype="bfloat16", param_dtype="float32",
        remat_policy=size["remat_policy"], scan_layers=True,
        vocab_size=size["vocab_size"]))
  if on_cpu:
    _shrink_to_cpu(c)
  elif episodic:
    _episodic(c, bfcl=episodic == "_bfcl_multi_turn")
  else:
    c.coevolve.update(num_seeds=16, variations=4, attempts=8,
                      agent_minibatches=size["agent_minibatches"])
    if not single:  # a benchmark keeps its own widths (configs/text.py)
      c.task.max_answer_tokens = size["answer_tokens"]
    c.pool.replay_tasks = 16
    for player in (c.agent, c.simulator):
      player.model_overrides.attention = "splash"
      if single:
        player.model_overrides.remat_policy = SINGLE_REMAT
  if lora:
    _lora(c)
  return c


def size_of(variant: str) -> str:
  """The model size of a TPU variant ("7b_alfworld" -> "7b")."""
  for suffix in EPISODIC + SINGLE + (LORA_SUFFIX,):
    variant = variant.removesuffix(suffix)
  return variant


def _lora(c: ml_collections.ConfigDict) -> None:
  """Low-rank adapters on both players at one host's sizes (LORA)."""
  c.coevolve.update(num_seeds=LORA["num_seeds"],
                    agent_minibatches=LORA["agent_minibatches"])
  c.pool.replay_tasks = LORA["replay_tasks"]
  c.agent.learning_rate = LORA["agent_learning_rate"]
  c.simulator.learning_rate = LORA["simulator_learning_rate"]
  for player in (c.agent, c.simulator):
    player.lora.update(rank=LORA["rank"], alpha=LORA["alpha"])
    player.model_overrides.update(param_dtype=LORA["param_dtype"],
                                  remat_policy=LORA["remat_policy"])


def _episodic(c: ml_collections.ConfigDict, bfcl: bool) -> None:
  """Episodes at TPU sizes (module doc): BFCL multi-turn's widths when `bfcl`,
  else the domain's own (ALFWorld's)."""
  if bfcl:
    c.task.update(max_prompt_tokens=6144, max_written_tokens=1536,
                  max_simulator_tokens=2048, max_turns=4, max_action_tokens=256,
                  max_observation_tokens=384)
    # 4 steps hold 2 turns of one call step and one closing step each: seeds
    # keep their first 2 turns (150 train / 20 held-out entries fit,
    # docs/tpu_pods.md).
    c.data.max_seed_turns = 2
  # Rows of up to 8,320 tokens: 16-row minibatches, 32-position log-prob chunks
  # and remat "full" keep the step within a v4 chip (docs/tpu_pods.md).
  c.coevolve.update(num_seeds=8, variations=4, attempts=8,
                    agent_minibatches=EPISODIC_MINIBATCHES,
                    logprob_chunk_size=EPISODIC_LOGPROB_CHUNK)
  c.pool.replay_tasks = 8
  for player in (c.agent, c.simulator):
    player.model_overrides.remat_policy = EPISODIC_REMAT
    player.model_overrides.attention = "splash"
  # Held-out episodes EPISODIC_HELDOUT_ROWS at a time: 512 of BFCL's rows in
  # one pass would need 100.7 GiB a v4 chip (train/heldout.py).
  c.eval.rows_per_pass = EPISODIC_HELDOUT_ROWS


def _shrink_to_cpu(c: ml_collections.ConfigDict) -> None:
  """Tiny float32 players with the tokenizer's vocabulary, every device on the
  data axis (configs/text.py's cpu variant set the widths and batches);
  log-probs still chunked (the agent's R = 9 response positions in chunks of
  4)."""
  c.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, tensor=1))
  c.coevolve.logprob_chunk_size = 4
  for player in (c.agent, c.simulator):
    overrides = dict(player.model_overrides, **CPU_SHAPES, dtype="float32")
    del overrides["vocab_size"]
    player.model_overrides = ml_collections.ConfigDict(overrides)
