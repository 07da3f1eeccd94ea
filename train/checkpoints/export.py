"""One player of a training run, written as a Hugging Face checkpoint.

  python -m train.tools.export_player --run DIR [--step N] --player agent|simulator \
      --out DIR [--dtype bfloat16|float32]

Reads the run's config.json (the player's architecture: its `hf_dir`, or its
preset with the task domain's vocabulary, as `build.build_players` makes it),
restores from `checkpoints/` only that player's parameters (an orbax partial
restore: neither the other player, the optimiser states, the references nor
the pools are read), folds any low-rank adapters into their kernels
(models/lora.py), and writes sharded safetensors with their index,
config.json with the bos/eos/pad ids, generation_config.json (the stop ids:
the domain's eos and, when the player started from an HF checkpoint, that
checkpoint's own) and the tokenizer files (the player's hf_dir's, else the
run's task.tokenizer_dir's, when it has any). DIR and --out may be local paths
or cloud URIs such as gs://bucket/run (etils.epath).
"""

from __future__ import annotations

import os
import tempfile

from etils import epath
import jax

from genenv_jax.domains import get_domain
from models import decoder
from models import hf
from models import lora
from train import build
from train.checkpoints import state_checkpoint
from train.checkpoints import workdir as workdir_lib

PLAYERS = ("agent", "simulator")


def restore_player_params(run: str, player: str, step: int | None = None):
  """(step, the player's params as host numpy arrays), restoring only the
  subtree `<player>.params` of the checkpointed CoevolveState (and, for a
  player with adapters past step 0, its base from step 0)."""
  if player not in PLAYERS:
    raise ValueError(f"--player {player!r}: expected one of {PLAYERS}.")
  return state_checkpoint.read_player_params(run, step, player)


def _check_shapes(params, model_config, where: str) -> None:
  """Raises ValueError naming the first parameter whose shape differs from
  what `model_config` gives."""
  expected = jax.eval_shape(lambda: decoder.init_params(
      model_config, jax.random.key(0)))
  flat = dict(jax.tree_util.tree_flatten_with_path(params)[0])
  for path, leaf in jax.tree_util.tree_flatten_with_path(expected)[0]:
    name = jax.tree_util.keystr(path)
    if path not in flat:
      raise ValueError(f"{where}: the checkpoint lacks parameter {name}.")
    if tuple(flat[path].shape) != tuple(leaf.shape):
      raise ValueError(f"{where}: parameter {name} has shape "
                       f"{tuple(flat[path].shape)}, the run's config gives "
                       f"{tuple(leaf.shape)}.")


def export_player(run: str, player: str, out: str, step: int | None = None,
                  dtype: str = "bfloat16",
                  max_shard_bytes: int = hf.MAX_SHARD_BYTES) -> dict:
  """Writes the HF directory (see module doc). Returns a summary dict."""
  config = workdir_lib.read_run_config(run)
  domain = get_domain(config.task)
  player_cfg = config[player]
  model_config = getattr(build.build_players(config, domain),
                         f"{player}_model")
  step, params = restore_player_params(run, player, step)
  _check_shapes(params, model_config, f"--run {run} --player {player}")
  # Adapters are folded into their kernels: an ordinary HF checkpoint.
  params = lora.fold(params, model_config)
  model_config = lora.base_config(model_config)
  hf_dir = player_cfg.get("hf_dir", "")
  tokenizer_dir = hf_dir or config.task.get("tokenizer_dir", "") or None
  if tokenizer_dir and not any(os.path.isfile(os.path.join(tokenizer_dir, n))
                               for n in hf.TOKENIZER_FILES):
    tokenizer_dir = None
  model_type = (hf.read_hf_config(hf_dir)["model_type"] if hf_dir else
                "qwen2" if model_config.qkv_bias else "llama")
  stop_ids = (domain.eos_id,)
  if hf_dir:
    stop_ids += hf.stop_token_ids(hf_dir)
  stop_ids = tuple(dict.fromkeys(stop_ids))
  special = {"bos_token_id": domain.bos_id, "pad_token_id": domain.pad_id,
             "eos_token_id": stop_ids[0] if len(stop_ids) == 1
             else list(stop_ids)}

  out_path = epath.Path(out)
  local = None if "://" in out else os.path.abspath(out)
  with tempfile.TemporaryDirectory() as scratch:
    target = local or scratch
    hf.save_hf_params(params, model_config, target, model_type,
                      tokenizer_dir=tokenizer_dir, dtype=dtype,
                      max_shard_bytes=max_shard_bytes, special_ids=special)
    if local is None:
      out_path.mkdir(parents=True, exist_ok=True)
      for name in sorted(os.listdir(scratch)):
        (out_path / name).write_bytes(
            epath.Path(scratch, name).read_bytes())
  return {"out": str(out_path if local is None else local), "step": step,
          "player": player, "model_type": model_type, "dtype": dtype,
          "stop_ids": list(stop_ids)}
