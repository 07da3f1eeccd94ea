"""Running the jitted co-evolution step in tests, and scripted players for it."""

import torch
import transformers

from genenv_jax import coevolve
from genenv_jax import step_metrics
from genenv_jax import sharding
from train import build


def start(config, domain, rows, difficulty):
  """(players, state, shardings, mesh) of a run of `config` from the seed rows
  int32[n, task_len] of levels int32[n], on a data-only mesh of every device:
  both players as train.main starts them (build.init_both_players: random from
  config.seed, or their HF directories)."""
  players = build.build_players(config, domain)
  mesh = sharding.make_mesh({"data": -1, "fsdp": 1, "tensor": 1})
  agent, simulator = build.init_both_players(config, players, mesh,
                                             sharding.DEFAULT_RULES)
  state, shardings = build.create_state(config, domain, players, agent, simulator,
                                        rows, difficulty, mesh)
  return players, state, shardings, mesh


def run_steps(config, domain, players, state, shardings, mesh, num_steps,
              level_bank=None):
  """num_steps steps of config's step from `state` (level_bank: what
  scripted generation draws from). Returns (final state, the metrics of each
  step on the host as {name: sum / count}, how often the step was
  traced)."""
  step = coevolve.jit_step(
      coevolve.make_step(config, domain, players, level_bank),
      shardings, mesh, sharding.DEFAULT_RULES)
  history = []
  for _ in range(num_steps):
    state, metrics = step.fn(state)
    history.append(step_metrics.metric_values(metrics))
  return state, history, step.trace_count()


def bigram_player(directory, tokenizer, model, scripts) -> str:
  """A tiny Qwen2 HF checkpoint in `directory` that samples the bigram chains of
  `scripts`, each starting at a line break and ending with <|im_end|>:
  attention and MLP outputs zeroed, the output head mapping each token's
  normalised embedding to its successors."""
  torch.manual_seed(0)
  config = transformers.Qwen2Config(
      vocab_size=len(tokenizer), hidden_size=model.hidden_size,
      intermediate_size=model.intermediate_size, num_hidden_layers=model.num_layers,
      num_attention_heads=model.num_heads, num_key_value_heads=model.num_kv_heads,
      tie_word_embeddings=False,
      max_position_embeddings=model.max_position_embeddings)
  net = transformers.AutoModelForCausalLM.from_config(config)
  newline = tokenizer("\n", add_special_tokens=False)["input_ids"]
  end = tokenizer.convert_tokens_to_ids("<|im_end|>")
  with torch.no_grad():
    for layer in net.model.layers:
      layer.self_attn.o_proj.weight.zero_()
      layer.mlp.down_proj.weight.zero_()
    embedding = net.model.embed_tokens.weight
    normed = embedding * torch.rsqrt(embedding.pow(2).mean(-1, keepdim=True)
                                     + config.rms_norm_eps)
    head = torch.zeros_like(net.lm_head.weight)
    pairs = set()
    for script in scripts:
      chain = newline + tokenizer(script, add_special_tokens=False)["input_ids"] + [end]
      pairs |= set(zip(chain[:-1], chain[1:]))
    for current, following in pairs:
      head[following] += 20.0 * normed[current] / normed[current].pow(2).sum()
    net.lm_head.weight.copy_(head)
  net.save_pretrained(str(directory))
  tokenizer.save_pretrained(str(directory))
  return str(directory)
