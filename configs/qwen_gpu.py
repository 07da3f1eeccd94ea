"""GenEnv on text tasks with both players at Qwen2.5 shapes, on NVIDIA GPUs.

Variants (`--config=configs/qwen_gpu.py:VARIANT`):
  0.5b  (the default) Qwen2.5-0.5B players on one 80 GB GPU; on 2, 4 or 8
        GPUs the same step runs data-parallel (each GPU a share of the rows)
  7b    Qwen2.5-7B players on one node of 8 x 80 GB GPUs, weights, gradients
        and AdamW moments sharded over the 8 (fsdp); on two such nodes
        (launch/gpu_node.sh through SLURM) each node holds a copy and the
        rows split over the nodes too (data). As XLA:CPU compiles its step
        (train/bench/cpu_peak.py) it needs 103 GiB a device, more than a
        GPU's 80 GB; not yet run on a GPU (docs/gpu.md)
  7b_lora  Qwen2.5-7B players with rank-16 low-rank adapters on one 80 GB
        GPU: configs/qwen_tpu.py:7b_lora (frozen bfloat16 base, float32
        adapters and their AdamW moments, each reference the base with its
        adapters off) at a quarter of the 7b batch (4 seeds x 4 + 4
        replayed tasks, 8 attempts: 160 rows) in 10 GRPO minibatches of 16;
        sized from the shapes (module doc), not run on a GPU
  7b_bfcl, 7b_bfcl_multi_turn, 7b_api_bank, 7b_travelplanner, 7b_alfworld
        the Table 1 benchmarks' 7B presets (configs/qwen_tpu.py's variants of
        the same names: docs/table1.md) on the 7b variant's node of 8 x 80 GB
        GPUs (fsdp=8); as for 7b, not yet run on a GPU
The batches split over those counts only (16 seeds, 64-row minibatches at
7b; the benchmark presets' own); `GPUS` lists them.

launch/gpu_node.sh runs it on one node or on several:
  launch/gpu_node.sh --preset=7b --workdir=/shared/runs/7b \\
    --hf_dir=/ckpt/Qwen2.5-7B-Instruct --seed_data=/data/seed_tasks
which runs
  python -m train.main --config=configs/qwen_gpu.py:7b --workdir=/shared/runs/7b \\
    --config.agent.hf_dir=/ckpt/Qwen2.5-7B-Instruct \\
    --config.simulator.hf_dir=/ckpt/Qwen2.5-7B-Instruct \\
    --config.task.tokenizer_dir=/ckpt/Qwen2.5-7B-Instruct \\
    --config.data.source_dir=/data/seed_tasks
Without hf_dir a player is randomly initialised at the preset's shapes.

What each size sets; everything else (batches, learning rates, the task's
widths, log-prob chunks, decode windows) is configs/qwen_tpu.py's size of
the same name, so a GPU run trains what a TPU run trains:
  - mesh: 0.5b data=-1 (fsdp=1, tensor=1): one GPU holds both players
    whole; 7b data=-1, fsdp=8, tensor=1: the 8 GPUs of a node hold one copy
    split over fsdp (parameters' embed dimension), over NVLink, and only
    the data axis, gradients' all-reduce, crosses nodes (jax.make_mesh puts
    the last axes on neighbouring devices: a process's own GPUs).
  - model_overrides: bfloat16 compute over float32 master weights, scanned
    layers, attention="dot_product" (jax.nn.dot_product_attention:
    cuDNN's flash attention for the scoring and training passes, no
    [T, T] score array per head; models/decoder.py), and remat "full"
    (each block keeps only its input for the backward pass). The TPU sizes
    keep the blocks' matmul outputs ("dots_no_batch") with 16 rows per chip
    at 0.5B and 4 at 7B; here a GPU holds all 64 rows of a GRPO minibatch
    at 0.5B and 8 at 7B (with the whole 18,944-wide MLP: tensor=1). Kept,
    those outputs are 0.6 MB a token at 0.5B and 2.8 MB at 7B (bfloat16,
    all layers): ~50 GB and ~29 GB a GPU at rows of ~1.3k tokens (a
    256-token task in the chat template, 1,024 response tokens), on top of
    float32 weights, references and AdamW moments (both players: 16 GB at
    0.5B; 244 GB at 7B, 30.5 GB a GPU). "full" keeps 0.04 MB a token at
    0.5B and 0.2 MB at 7B. Estimates from the shapes, not measured on a GPU
    (docs/gpu.md).
  - sampling_layout "gathered" (configs/default.py): at 7B a GPU holds a
    bfloat16 copy of the sampling player's whole weights (15.2 GB: tensor=1
    leaves nothing to split it over); "training" decodes from the fsdp
    shards instead, gathering the weights at every token.
  - 7b_lora on one GPU, estimated from the shapes: both players' bfloat16
    bases 30.5 GB; while a player samples, its adapters folded into a
    bfloat16 copy of its weights (15.2 GB) and the KV cache (57 KB a token
    at 7B: 160 rows x 1,025 response tokens, the prompt's 287 shared by a
    task's 8 attempts, ~9.7 GB); in the update, 16 rows of 1,312 tokens at
    remat "full" (~4 GB); adapters and AdamW moments ~0.5 GB. About 56 GB
    at the sampling peak, within the launcher's 90% pool of an 80 GB GPU
    (72 GB); the 7b_lora TPU preset's 320 rows would add ~9.7 GB more.
"""

from __future__ import annotations

import ml_collections

from configs import qwen_tpu

SIZES = {
    "0.5b": dict(mesh=dict(data=-1, fsdp=1, tensor=1), remat_policy="full"),
    "7b": dict(mesh=dict(data=-1, fsdp=8, tensor=1), remat_policy="full"),
    "7b_lora": dict(mesh=dict(data=-1, fsdp=1, tensor=1), remat_policy="full"),
}
# The Table 1 benchmarks' presets: configs/qwen_tpu.py's variant of the same
# name on the 7b size's GPUs.
BENCHMARKS = ("7b_bfcl", "7b_bfcl_multi_turn", "7b_api_bank",
              "7b_travelplanner", "7b_alfworld")
DEFAULT_SIZE = "0.5b"
VARIANTS = tuple(SIZES) + BENCHMARKS
ATTENTION = "dot_product"
# 7b_lora on one GPU: a quarter of the 7b batch (module doc).
LORA_BATCH = dict(num_seeds=4, replay_tasks=4, agent_minibatches=10)
# The GPU counts each variant runs on: the batches split over them
# (train/config_validation.py).
GPUS = {"0.5b": (1, 2, 4, 8), "7b": (8, 16), "7b_lora": (1,),
        **{name: (8, 16) for name in BENCHMARKS}}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """arg: one of VARIANTS (module doc); None or "" is "0.5b"."""
  variant = arg or DEFAULT_SIZE
  if variant not in VARIANTS:
    raise ValueError(f"configs/qwen_gpu.py: unknown variant {arg!r}; expected "
                     f"one of {VARIANTS}.")
  size = SIZES[variant if variant in SIZES else "7b"]
  c = qwen_tpu.get_config(variant)
  c.mesh = ml_collections.ConfigDict(size["mesh"])
  for player in (c.agent, c.simulator):
    player.model_overrides.update(attention=ATTENTION,
                                  remat_policy=size["remat_policy"])
  if variant == "7b_lora":
    c.coevolve.update(num_seeds=LORA_BATCH["num_seeds"],
                      agent_minibatches=LORA_BATCH["agent_minibatches"])
    c.pool.replay_tasks = LORA_BATCH["replay_tasks"]
  return c
