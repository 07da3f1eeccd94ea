"""Against transformers on a real chat model (SmolLM2-135M-Instruct, built
once per machine by the `smollm2_dir` fixture): logits, greedy generation
through the sampler's left padding and KV cache, stop ids; and a bf16 player
against its f32 twin."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from genenv_jax import generate
from genenv_jax import sampling
from models import decoder
from models import hf
from models.config import get_preset
from train.bench import logp_mismatch

CHATS = [
    {"prompt": "Hi"},
    {"prompt": "What is 2+2?"},
    {"messages": [{"role": "system", "content": "You are terse."},
                  {"role": "user", "content": "Capital of France?"}]},
    {"prompt": "Name three colors of the rainbow, please, and explain why "
               "the sky is blue."},
]
NEW_TOKENS = 24


def test_verify_matches_transformers(smollm2_dir):
  result = hf.verify(smollm2_dir, batch=2, length=16, log=lambda _: None)
  assert result.max_abs_logit > 1.0  # a real model's logits, not a blank head
  assert result.passed, result


def test_stop_ids_come_from_the_generation_config(smollm2_dir, tmp_path):
  assert hf.stop_token_ids(smollm2_dir) == (2,)  # <|im_end|>, also the pad
  (tmp_path / hf.GENERATION_CONFIG_FILE).write_text(
      '{"eos_token_id": [151645, 151643, 151645]}')
  assert hf.stop_token_ids(tmp_path) == (151645, 151643)
  (tmp_path / hf.GENERATION_CONFIG_FILE).write_text('{"eos_token_id": "x"}')
  with pytest.raises(ValueError, match="eos_token_id"):
    hf.stop_token_ids(tmp_path)


def test_greedy_generation_matches_transformers_token_for_token(smollm2_dir):
  """Four chat prompts of different lengths in one left-padded batch, 24
  greedy tokens on the 30-layer model (scanned, to compile one block);
  SmolLM2's stop id <|im_end|> is also its pad id and still ends rows."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  tokenizer = hf.load_tokenizer(smollm2_dir)
  params, config = hf.load_hf_params(smollm2_dir, scan_layers=True)
  stop_ids = hf.stop_token_ids(smollm2_dir)
  assert tokenizer.pad_token_id in stop_ids
  ours = generate.generate(config, params, tokenizer, CHATS, NEW_TOKENS,
                           stop_ids)
  model = transformers.AutoModelForCausalLM.from_pretrained(
      smollm2_dir, dtype=torch.float32).eval()
  rows = [generate.prompt_ids(tokenizer, r) for r in CHATS]
  assert len({len(r) for r in rows}) == len(rows)
  tokens, mask = generate.left_pad(rows, tokenizer.pad_token_id)
  with torch.no_grad():
    out = model.generate(input_ids=torch.from_numpy(tokens.astype(np.int64)),
                         attention_mask=torch.from_numpy(mask.astype(np.int64)),
                         max_new_tokens=NEW_TOKENS, do_sample=False,
                         pad_token_id=tokenizer.pad_token_id)
  identical = 0
  for row, theirs in zip(ours, out[:, tokens.shape[1]:].tolist()):
    stop = next((i for i, t in enumerate(theirs) if t in stop_ids), None)
    identical += row["tokens"] == theirs[:stop] and row["stopped"] == (
        stop is not None)
  assert identical == len(CHATS), [r["completion"] for r in ours]
  assert any(r["stopped"] for r in ours) and not all(r["stopped"]
                                                      for r in ours)


def test_a_stop_id_equal_to_the_pad_id_ends_its_row():
  """A row that emits the pad id, when it is a stop id, ends there (mask
  True on it, pad after); `completions` drops it and reports the stop."""
  config = get_preset("tiny")
  params = decoder.init_params(config, jax.random.key(0))
  prompt = jnp.asarray(np.random.default_rng(0).integers(
      0, config.vocab_size, (2, 5)), jnp.int32)
  mask = jnp.ones((2, 5), bool)
  run = lambda s: sampling.sample(config, params, prompt, mask,
                                  jax.random.key(1), s)
  free = run(sampling.SamplingConfig(max_new_tokens=8, temperature=0.0))
  stop = int(free.tokens[0, 2])  # row 0's third greedy token
  first = [list(np.asarray(r)).index(stop) if stop in np.asarray(r) else None
           for r in free.tokens]
  out = run(sampling.SamplingConfig(max_new_tokens=8, temperature=0.0,
                                    eos_ids=(stop,), pad_id=stop))
  for b, at in enumerate(first):
    length = 8 if at is None else at + 1
    assert int(out.lengths[b]) == length
    np.testing.assert_array_equal(out.tokens[b, :length],
                                  free.tokens[b, :length])
    assert bool(np.all(np.asarray(out.tokens[b, length:]) == stop))
  rows = generate.completions(out, (stop,))
  assert rows[0] == (list(np.asarray(free.tokens[0, :first[0]])), True)
  assert int(out.lengths[0]) < 8


def test_bfloat16_player_log_probs_agree_with_trainer_and_f32_twin():
  """A bf16 player (cached decode included) with logits of real magnitude
  (|logit| up to ~20): the sampler's log-probs match the trainer's and the
  f32 twin's closely with the f32 head, and more closely than with logits
  rounded to bf16."""
  config = get_preset("tiny", tie_embeddings=False)
  params = decoder.init_params(config, jax.random.key(0))
  params["lm_head"]["kernel"] = params["lm_head"]["kernel"] * 20
  rng = np.random.default_rng(0)
  prompt = jnp.asarray(rng.integers(0, 512, (4, 12)), jnp.int32)
  mask = jnp.arange(12)[None, :] >= jnp.array([0, 3, 6, 9])[:, None]
  both = logp_mismatch.both_heads(config.replace(dtype="bfloat16"), params,
                                  prompt, mask, 16)
  result = both["float32"]
  assert result["tokens"] == 64
  assert result["sampler_vs_trainer"] < 5e-2, result
  assert 0 < result["bf16_vs_f32"] < 5e-2, result
  for measure in ("sampler_vs_trainer", "bf16_vs_f32"):  # the bf16 head's
    assert result[measure] < both["bfloat16"][measure], both


def test_first_layers_cut_keeps_the_first_layers_exactly(smollm2_dir,
                                                          smollm2_first4_dir,
                                                          tmp_path):
  import pathlib  # pylint: disable=import-outside-toplevel
  import safetensors.numpy  # pylint: disable=import-outside-toplevel
  from train.tools import real_models  # pylint: disable=import-outside-toplevel
  full = safetensors.numpy.load_file(f"{smollm2_dir}/model.safetensors")
  cut = safetensors.numpy.load_file(f"{smollm2_first4_dir}/model.safetensors")
  assert sorted(cut) == sorted(
      n for n in full if not n.startswith("model.layers.")
      or int(n.split(".")[2]) < 4)
  for name, array in cut.items():
    np.testing.assert_array_equal(array, full[name], err_msg=name)
  assert hf.read_hf_config(smollm2_first4_dir)["num_hidden_layers"] == 4
  assert hf.stop_token_ids(smollm2_first4_dir) == hf.stop_token_ids(smollm2_dir)
  with pytest.raises(ValueError, match="num_layers=31: .* has 30 layers"):
    real_models.write_first_layers(pathlib.Path(smollm2_dir), 31, tmp_path)
