"""models.hf against transformers: tiny random HF models, logits compared."""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys

import flax.linen as nn
import jax
import numpy as np
import pytest
import tokenizers
import torch
import transformers
from safetensors.numpy import load_file, save_file

from genenv_jax import sharding
from models import decoder, hf, hf_sharded
from models.config import ModelConfig, RopeScaling

TOL = 1e-4
BATCH, LENGTH = 4, 24
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_TINY = dict(vocab_size=128, hidden_size=64, intermediate_size=128,
             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             initializer_range=0.2)

# Each case: a tiny transformers config covering one HF feature.
CASES = {
    "qwen2_bias_tied": lambda: transformers.Qwen2Config(
        **_TINY, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
    "llama_gqa_untied": lambda: transformers.LlamaConfig(
        **_TINY, tie_word_embeddings=False, rms_norm_eps=1e-5),
    "llama_tied_head_dim": lambda: transformers.LlamaConfig(
        **_TINY, tie_word_embeddings=True, head_dim=32),
    "llama3_rope": lambda: transformers.LlamaConfig(
        **_TINY, tie_word_embeddings=False,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0,
                         "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8}),
}


def _random_hf_model(case: str, seed: int = 0):
  """A float32 eval-mode model; biases and norm scales randomised too (HF
  initialises them to 0 and 1, which would hide mapping mistakes)."""
  torch.manual_seed(seed)
  model = transformers.AutoModelForCausalLM.from_config(
      CASES[case](), dtype=torch.float32)
  with torch.no_grad():
    for name, p in model.named_parameters():
      if name.endswith(".bias"):
        p.normal_(0.0, 0.5)
      elif name.endswith("norm.weight"):
        p.normal_(1.0, 0.2)
  return model.eval()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
  """case -> (HF directory, HF logits f32[B, T, V] on `_batch()`)."""
  out = {}
  for case in CASES:
    model = _random_hf_model(case)
    path = str(tmp_path_factory.mktemp(case))
    model.save_pretrained(path)
    out[case] = (path, hf.hf_logits(model, *_batch()))
  return out


def _batch():
  """Left-padded rows (0, 3, 6, 9 pad slots) reaching position 23 > 8."""
  return hf.verification_batch(_TINY["vocab_size"], BATCH, LENGTH, seed=1)


@functools.lru_cache(maxsize=None)
def _jitted_forward(config: ModelConfig):
  return jax.jit(functools.partial(decoder.forward, config))


def _max_real_diff(ours, theirs, mask) -> float:
  return float(np.abs(np.asarray(ours) - theirs)[mask].max())


def _assert_same_tree(params, config: ModelConfig):
  """Same structure, shapes and dtypes as the decoder's own init."""
  expected = jax.eval_shape(functools.partial(decoder.init_params, config),
                            jax.random.key(0))
  assert jax.tree.structure(params) == jax.tree.structure(expected)
  for got, want in zip(jax.tree.leaves(params), jax.tree.leaves(expected)):
    assert (got.shape, got.dtype) == (want.shape, want.dtype)


def _assert_bitwise_equal(a, b):
  assert jax.tree.structure(a) == jax.tree.structure(b)
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    assert x.dtype == y.dtype and np.array_equal(x, y)


@pytest.mark.parametrize("case", list(CASES))
def test_logits_match_transformers(saved, case):
  path, theirs = saved[case]
  params, config = hf.load_hf_params(path)
  assert not config.scan_layers
  _assert_same_tree(params, config)
  tokens, mask = _batch()
  ours = _jitted_forward(config)(params, tokens, mask)
  assert _max_real_diff(ours, theirs, mask) <= TOL


@pytest.mark.parametrize("case", ["qwen2_bias_tied", "llama_gqa_untied"])
def test_scanned_params_sharded_on_mesh_match_transformers(saved, case):
  """scan_layers=True import, placed per DEFAULT_RULES on a 2x2x2 mesh."""
  path, theirs = saved[case]
  params, config = hf.load_hf_params(path, scan_layers=True)
  assert config.scan_layers
  _assert_same_tree(params, config)
  mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  rules = sharding.DEFAULT_RULES
  boxed = jax.eval_shape(functools.partial(decoder.init_boxed, config),
                         jax.random.key(0))
  shardings = nn.unbox(sharding.shardings_from_boxed(boxed, mesh, rules))
  placed = jax.device_put(params, shardings)
  kernel = placed["layers"]["attn"]["q_proj"]["kernel"]  # [L, E, H, D]
  assert len(kernel.sharding.device_set) == 8
  assert kernel.addressable_shards[0].data.shape == (2, 32, 2, 16)
  tokens, mask = _batch()
  batch = sharding.shard_batch((tokens, mask), mesh, rules)
  fwd = jax.jit(sharding.in_mesh(mesh, rules)(
      functools.partial(decoder.forward, config)))
  assert _max_real_diff(fwd(placed, *batch), theirs, mask) <= TOL


def test_config_features_are_read(saved):
  configs = {case: hf.load_hf_params(saved[case][0])[1] for case in CASES}
  assert configs["qwen2_bias_tied"].qkv_bias
  assert configs["qwen2_bias_tied"].tie_embeddings
  assert configs["qwen2_bias_tied"].rope_theta == 1e6
  assert configs["llama_gqa_untied"].num_kv_heads == 2
  assert not configs["llama_gqa_untied"].qkv_bias
  assert configs["llama_gqa_untied"].rms_norm_eps == 1e-5
  assert configs["llama_tied_head_dim"].head_dim == 32
  assert configs["llama_tied_head_dim"].tie_embeddings
  assert configs["llama3_rope"].rope_scaling == RopeScaling(
      factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
      original_max_position_embeddings=8)


def test_llama3_scaling_changes_logits(saved):
  """The llama3 case only tests scaling if ignoring it breaks agreement."""
  path, theirs = saved["llama3_rope"]
  params, config = hf.load_hf_params(path)
  tokens, mask = _batch()
  unscaled = _jitted_forward(config.replace(rope_scaling=None))(params, tokens,
                                                                mask)
  assert _max_real_diff(unscaled, theirs, mask) > 100 * TOL


def test_sharded_checkpoint_imports_identically(saved, tmp_path):
  path, _ = saved["qwen2_bias_tied"]
  model = transformers.AutoModelForCausalLM.from_pretrained(
      path, dtype=torch.float32)
  model.save_pretrained(tmp_path, max_shard_size="40KB")
  assert os.path.isfile(tmp_path / hf.SHARDED_INDEX_FILE)
  assert not os.path.exists(tmp_path / hf.SINGLE_WEIGHTS_FILE)
  single, config = hf.load_hf_params(path)
  sharded, sharded_config = hf.load_hf_params(tmp_path)
  assert sharded_config == config
  _assert_bitwise_equal(single, sharded)


@pytest.mark.parametrize("case", ["qwen2_bias_tied", "llama_gqa_untied"])
def test_import_export_round_trip(saved, case, tmp_path):
  path, theirs = saved[case]
  ckpt, out = tmp_path / "ckpt", tmp_path / "exported"
  assert hf.main(["import", "--hf_dir", path, "--out", str(ckpt),
                  "--scan_layers"]) == 0
  stored, stored_config = hf.load_checkpoint(ckpt)
  assert stored_config.scan_layers
  assert hf.main(["export", "--ckpt", str(ckpt), "--out", str(out)]) == 0
  assert hf.read_hf_config(out)["model_type"] == hf.read_hf_config(
      path)["model_type"]

  original, config = hf.load_hf_params(path, scan_layers=True)
  _assert_bitwise_equal(stored, original)
  assert stored_config == config
  reimported, reimported_config = hf.load_hf_params(out, scan_layers=True)
  _assert_bitwise_equal(reimported, original)
  assert reimported_config == config

  exported = transformers.AutoModelForCausalLM.from_pretrained(
      out, dtype=torch.float32).eval()
  np.testing.assert_array_equal(hf.hf_logits(exported, *_batch()), theirs)


def test_bfloat16_checkpoint_and_param_dtype(saved, tmp_path):
  """bf16 safetensors (as real checkpoints ship) read exactly, and
  param_dtype casts."""
  path, _ = saved["llama_gqa_untied"]
  f32, config = hf.load_hf_params(path)
  model = transformers.AutoModelForCausalLM.from_pretrained(
      path, dtype=torch.bfloat16)
  model.save_pretrained(tmp_path)
  from_bf16, _ = hf.load_hf_params(tmp_path)
  as_bf16, bf16_config = hf.load_hf_params(
      path, config.replace(param_dtype="bfloat16"))
  assert bf16_config.param_dtype == "bfloat16"
  _assert_same_tree(as_bf16, bf16_config)
  _assert_same_tree(from_bf16, config)
  for x, y, z in zip(jax.tree.leaves(f32), jax.tree.leaves(as_bf16),
                     jax.tree.leaves(from_bf16)):
    np.testing.assert_array_equal(x.astype(y.dtype), y)
    np.testing.assert_array_equal(y.astype(np.float32), z)


def _rewrite(src: str, dst, edit) -> str:
  """Copies the HF dir `src` to `dst`, applying `edit` to its tensor dict."""
  os.makedirs(dst, exist_ok=True)
  tensors = load_file(os.path.join(src, hf.SINGLE_WEIGHTS_FILE))
  edit(tensors)
  save_file(tensors, os.path.join(dst, hf.SINGLE_WEIGHTS_FILE),
            metadata={"format": "pt"})
  shutil.copyfile(os.path.join(src, hf.CONFIG_FILE),
                  os.path.join(dst, hf.CONFIG_FILE))
  return str(dst)


def test_missing_unexpected_and_misshaped_tensors_are_named(saved, tmp_path):
  src, _ = saved["llama_gqa_untied"]
  missing = "model.layers.1.mlp.up_proj.weight"
  bad = _rewrite(src, tmp_path / "missing",
                 lambda t: t.pop(missing))
  with pytest.raises(ValueError, match=f"'{missing}'.*\\(128, 64\\)"):
    hf.load_hf_params(bad)

  extra = "model.layers.2.mlp.up_proj.weight"
  bad = _rewrite(src, tmp_path / "unexpected",
                 lambda t: t.update({extra: np.zeros((128, 64), np.float32)}))
  with pytest.raises(ValueError, match=f"unexpected.*'{extra}'"):
    hf.load_hf_params(bad)

  name = "model.layers.0.self_attn.k_proj.weight"
  bad = _rewrite(src, tmp_path / "misshaped",
                 lambda t: t.update({name: np.zeros((48, 64), np.float32)}))
  with pytest.raises(ValueError, match=f"'{name}'.*\\(48, 64\\).*\\(32, 64\\)"):
    hf.load_hf_params(bad)


def test_tied_lm_head_may_be_stored_if_equal(saved, tmp_path):
  src, _ = saved["qwen2_bias_tied"]
  reference, _ = hf.load_hf_params(src)

  def add_head(scale):
    def edit(t):
      t["lm_head.weight"] = t["model.embed_tokens.weight"] * scale
    return edit

  same = _rewrite(src, tmp_path / "same", add_head(1.0))
  _assert_bitwise_equal(hf.load_hf_params(same)[0], reference)
  differs = _rewrite(src, tmp_path / "differs", add_head(2.0))
  with pytest.raises(ValueError, match="'lm_head.weight' differs"):
    hf.load_hf_params(differs)


def test_config_disagreement_is_named(saved):
  path, _ = saved["llama_gqa_untied"]
  config = hf.load_hf_params(path)[1]
  with pytest.raises(ValueError, match="num_kv_heads=4"):
    hf.load_hf_params(path, config.replace(num_kv_heads=4))


def test_config_rejections():
  base = hf.config_to_hf(ModelConfig(
      vocab_size=128, hidden_size=64, intermediate_size=128, num_layers=2,
      num_heads=4, num_kv_heads=2), "llama")
  with pytest.raises(ValueError, match="'mistral'"):
    hf.config_from_hf(dict(base, model_type="mistral"))
  with pytest.raises(ValueError, match="'yarn'"):
    hf.config_from_hf(dict(base, rope_parameters={
        "rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}))
  with pytest.raises(ValueError, match="hidden_act='gelu'"):
    hf.config_from_hf(dict(base, hidden_act="gelu"))
  with pytest.raises(ValueError, match="use_sliding_window"):
    hf.config_from_hf(dict(hf.config_to_hf(ModelConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_layers=2,
        num_heads=4, num_kv_heads=2, qkv_bias=True), "qwen2"),
                           use_sliding_window=True))
  with pytest.raises(ValueError, match="attention_bias=True"):
    hf.config_from_hf(dict(base, attention_bias=True))
  with pytest.raises(ValueError, match="mlp_bias=True"):
    hf.config_from_hf(dict(base, mlp_bias=True))
  unbiased = hf.config_from_hf(base)
  with pytest.raises(ValueError, match="qkv_bias=True"):
    hf.config_to_hf(unbiased, "qwen2")
  with pytest.raises(ValueError, match="qkv_bias=True"):
    hf.config_to_hf(unbiased.replace(qkv_bias=True), "llama")


def test_legacy_config_layout():
  """transformers < 5 configs: top-level rope_theta, rope_scaling with
  `type`, original_max_position_embeddings defaulting to the max length."""
  legacy = {"model_type": "llama", "vocab_size": 128, "hidden_size": 64,
            "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "max_position_embeddings": 4096,
            "rope_theta": 500000.0,
            "rope_scaling": {"type": "llama3", "factor": 8.0,
                             "low_freq_factor": 1.0, "high_freq_factor": 4.0}}
  config = hf.config_from_hf(legacy)
  assert config.num_kv_heads == 4 and config.rope_theta == 500000.0
  assert config.rope_scaling == RopeScaling(8.0, 1.0, 4.0, 4096)
  assert hf.config_from_hf(hf.config_to_hf(config, "llama")) == config


def test_tokenizer_is_copied_and_loaded(saved, tmp_path):
  vocab = {"<unk>": 0, "hello": 1, "world": 2}
  raw = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, "<unk>"))
  raw.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
  tok_dir = tmp_path / "tok"
  transformers.PreTrainedTokenizerFast(
      tokenizer_object=raw, unk_token="<unk>").save_pretrained(tok_dir)
  with pytest.raises(FileNotFoundError, match="no tokenizer files"):
    hf.load_tokenizer(tmp_path)

  path, _ = saved["llama_gqa_untied"]
  params, config = hf.load_hf_params(path)
  out = tmp_path / "with_tokenizer"
  hf.save_hf_params(params, config, out, "llama", tokenizer_dir=tok_dir)
  for name in os.listdir(tok_dir):
    assert (out / name).read_bytes() == (tok_dir / name).read_bytes()
  tokenizer = hf.load_tokenizer(out)
  assert tokenizer("hello world foo")["input_ids"] == [1, 2, 0]


def test_verify_cli_end_to_end(saved):
  path, _ = saved["llama3_rope"]
  env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS="cpu")
  result = subprocess.run(
      [sys.executable, "-m", "models.hf", "verify", "--hf_dir", path,
       "--batch", "2", "--length", "16"],
      cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
      check=False)
  assert result.returncode == 0, result.stderr
  last = result.stdout.strip().splitlines()[-1]
  key, value = last.split("=")
  assert key == "max_abs_logit_diff"
  assert 0.0 <= float(value) <= TOL


def test_verify_cli_fails_above_tolerance_relative_to_the_logits(monkeypatch, capsys):
  # The tolerance is VERIFY_RTOL of the largest |logit| (at least 1).
  for diff, scale, code in ((2e-4, 30.0, 0), (4e-4, 30.0, 1), (2e-5, 0.5, 1),
                            (5e-6, 0.5, 0)):
    monkeypatch.setattr(hf, "verify", lambda *a, d=diff, s=scale: hf.Verification(d, s))
    assert hf.main(["verify", "--hf_dir", "unused"]) == code, (diff, scale)
    assert capsys.readouterr().out.splitlines()[-1] == f"max_abs_logit_diff={diff}"


def _mesh_shardings(config: ModelConfig, mesh):
  boxed = jax.eval_shape(functools.partial(decoder.init_boxed, config),
                         jax.random.key(0))
  return nn.unbox(sharding.shardings_from_boxed(boxed, mesh,
                                                sharding.DEFAULT_RULES))


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("scan_layers", [False, True])
@pytest.mark.parametrize("dims", [(2, 2, 2), (1, 4, 2), (1, 8, 1)])
def test_sharded_load_equals_the_whole_load(saved, case, scan_layers, dims):
  """Each shard read from its covering rows equals the same block of the
  whole-file import, on meshes that split the weights over fsdp and tensor."""
  path, _ = saved[case]
  whole, config = hf.load_hf_params(path, scan_layers=scan_layers)
  mesh = sharding.make_mesh(dict(zip(("data", "fsdp", "tensor"), dims)))
  loaded = hf_sharded.load_sharded(path, config, _mesh_shardings(config, mesh))
  assert jax.tree.structure(loaded) == jax.tree.structure(whole)
  for x, y in zip(jax.tree.leaves(loaded), jax.tree.leaves(whole)):
    assert x.dtype == y.dtype and x.shape == y.shape
    for shard in x.addressable_shards:
      np.testing.assert_array_equal(np.asarray(shard.data), y[shard.index])


def test_sharded_load_reads_only_the_rows_a_shard_covers(saved, monkeypatch):
  """On a tensor-parallel mesh no read covers a whole q/k/v/gate/up weight or
  the embedding: each shard's callback reads its own rows (and the process
  never holds a whole sharded tensor)."""
  path, _ = saved["llama_gqa_untied"]
  _, config = hf.load_hf_params(path)
  reads = []
  read_rows = hf_sharded.read_rows

  def recording(entry, start, stop):
    reads.append((entry.shape, start, stop))
    return read_rows(entry, start, stop)

  monkeypatch.setattr(hf_sharded, "read_rows", recording)
  mesh = sharding.make_mesh({"data": 1, "fsdp": 4, "tensor": 2})
  loaded = hf_sharded.load_sharded(path, config, _mesh_shardings(config, mesh))
  q = loaded["layers_0"]["attn"]["q_proj"]["kernel"]  # [E, H, D], H split
  assert all(s.data.shape[1] < q.shape[1] for s in q.addressable_shards)
  q_reads = [(start, stop) for shape, start, stop in reads
             if shape == (config.num_heads * config.head_dim,
                          config.hidden_size)]
  assert q_reads and all(stop - start < shape_rows for start, stop in q_reads
                         for shape_rows in [config.num_heads * config.head_dim])
  assert max(stop - start for shape, start, stop in reads) < config.vocab_size


def test_sharded_load_names_bad_tensors_and_checks_a_tied_head(saved, tmp_path):
  src, _ = saved["llama_gqa_untied"]
  _, config = hf.load_hf_params(src)
  mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  shardings = _mesh_shardings(config, mesh)
  missing = "model.layers.1.mlp.up_proj.weight"
  bad = _rewrite(src, tmp_path / "missing", lambda t: t.pop(missing))
  with pytest.raises(ValueError, match=f"'{missing}'.*\\(128, 64\\)"):
    hf_sharded.load_sharded(bad, config, shardings)
  name = "model.layers.0.self_attn.k_proj.weight"
  bad = _rewrite(src, tmp_path / "misshaped",
                 lambda t: t.update({name: np.zeros((48, 64), np.float32)}))
  with pytest.raises(ValueError, match=f"'{name}'.*\\(48, 64\\).*\\(32, 64\\)"):
    hf_sharded.load_sharded(bad, config, shardings)
  tied_src, _ = saved["qwen2_bias_tied"]
  _, tied_config = hf.load_hf_params(tied_src)

  def add_head(t):
    t["lm_head.weight"] = t["model.embed_tokens.weight"] * 2.0
  differs = _rewrite(tied_src, tmp_path / "differs", add_head)
  with pytest.raises(ValueError, match="'lm_head.weight' differs"):
    hf_sharded.load_sharded(differs, tied_config,
                            _mesh_shardings(tied_config, mesh))


def test_sharded_load_reads_bfloat16_files(saved, tmp_path):
  path, _ = saved["llama_gqa_untied"]
  model = transformers.AutoModelForCausalLM.from_pretrained(
      path, dtype=torch.bfloat16)
  model.save_pretrained(tmp_path, max_shard_size="40KB")
  whole, config = hf.load_hf_params(tmp_path)
  mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  loaded = hf_sharded.load_sharded(str(tmp_path), config,
                                   _mesh_shardings(config, mesh))
  for x, y in zip(jax.tree.leaves(loaded), jax.tree.leaves(whole)):
    np.testing.assert_array_equal(np.asarray(x), y)
