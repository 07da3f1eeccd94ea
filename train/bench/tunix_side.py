"""Tunix side of `train.bench.compare`: a worker process run by a Python that has
`google-tunix` installed (named by the TUNIX_PYTHON environment variable).

It imports nothing from this repository. Requests arrive as JSON lines on
stdin, each answered by one JSON line on stdout (library output goes to
stderr):

  {"op": "setup", "bench": "sampler", "model": {...}, "batch": B,
   "prompt_length": P, "new_tokens": N, "temperature": t, "seed": s}
      Tunix's Sampler on a random Qwen2 model with these shapes; prompts are
      random token ids (a numpy array of strings for a whitespace "tokenizer"
      of ids); temperature 0 is greedy, otherwise top_p=1 sampling.
  {"op": "setup", "bench": "train", "model": {...}, "batch": B, "length": T,
   "seed": s}
      forward + backward of the next-token cross-entropy, nnx.jit-compiled.
  {"op": "setup", "bench": "grpo", "model": {...}, "num_prompts": Q,
   "generations": G, "prompt_length": P, "new_tokens": N, "seed": s}
      one step of Tunix's GRPOLearner (`GRPOLearner.train` on a one-batch
      dataset): Q random P-token prompts, G completions of N tokens each
      (temperature 1, top_p=1; rollout colocated with the policy, sharing its
      weights), log-probs of a reference model (a second copy of the initial
      weights; KL penalty "low_var_kl", i.e. k3, beta=0.001), group-relative
      advantages of a cheap reward (the share of even token ids in each
      completion), then one policy update (num_iterations=1, one minibatch,
      token-mean loss, clip 0.2; the old policy's log-probs are then the
      current ones, which Tunix takes under stop_gradient rather than
      computing separately) with AdamW (lr 1e-4, b1 0.9, b2 0.99, no weight
      decay) after gradient clipping at global norm 1. The random model's
      logits are so peaked that its samples are near-greedy, so a group's
      completions, rewards and hence advantages come out equal (advantages 0);
      that changes no shape and so no amount of work.
  {"op": "run", "repeat": k}
      runs the benchmark set up last once; replies {"seconds": t}.
Any failure replies {"error": "..."}. "model" holds the fields of
`train.bench.model_shapes`.
"""

from __future__ import annotations

import json
import sys
import time
import traceback

_REPLIES = sys.stdout
sys.stdout = sys.stderr  # keep library prints off the reply channel

import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import jax.numpy as jnp  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position
import optax  # pylint: disable=g-import-not-at-top,wrong-import-position
from flax import nnx  # pylint: disable=g-import-not-at-top,wrong-import-position
from tunix.generate import sampler as sampler_lib  # pylint: disable=g-import-not-at-top,wrong-import-position
from tunix.models.qwen2 import model as qwen2  # pylint: disable=g-import-not-at-top,wrong-import-position
from tunix.rl import rl_cluster as rl_cluster_lib  # pylint: disable=g-import-not-at-top,wrong-import-position
from tunix.rl.grpo import grpo_learner  # pylint: disable=g-import-not-at-top,wrong-import-position
from tunix.rl.rollout import base_rollout  # pylint: disable=g-import-not-at-top,wrong-import-position


class IdTokenizer:
  """Token ids written as whitespace-separated integers (the prompts are
  random ids, so no real tokenizer is needed)."""

  def __init__(self, vocab_size: int):
    self._vocab_size = vocab_size

  def encode(self, text: str, **_) -> list[int]:
    return [int(t) for t in text.split()]

  def decode(self, ids, **_) -> str:
    return " ".join(str(int(i)) for i in ids)

  def bos_id(self) -> int:
    return 0  # falsy: the Sampler adds no BOS, a prompt is exactly its ids

  def eos_id(self) -> int:
    return self._vocab_size - 1

  def pad_id(self) -> int:
    return 0


def _mesh():
  # Every device on the fsdp axis (one unless `train.bench --tunix_devices`).
  # Auto axes: Tunix's sharding annotations then need no explicit mesh
  # context in every call.
  return jax.make_mesh((jax.device_count(), 1), ("fsdp", "tp"),
                       axis_types=(jax.sharding.AxisType.Auto,) * 2)


def _model(shapes: dict, seed: int) -> qwen2.Qwen2:
  config = qwen2.ModelConfig(
      num_layers=shapes["num_layers"], vocab_size=shapes["vocab_size"],
      embed_dim=shapes["hidden_size"], hidden_dim=shapes["intermediate_size"],
      num_heads=shapes["num_heads"], head_dim=shapes["head_dim"],
      num_kv_heads=shapes["num_kv_heads"],
      rope_theta=int(shapes["rope_theta"]), norm_eps=shapes["rms_norm_eps"],
      use_tied_embedding=shapes["tie_embeddings"])
  return qwen2.Qwen2(config, rngs=nnx.Rngs(seed))


def _random_prompts(rng: np.random.Generator, vocab_size: int, count: int,
                    length: int) -> np.ndarray:
  """str[count]: `length` random ids each, neither pad (0), BOS (1) nor EOS
  (vocab_size - 1), in IdTokenizer's text form."""
  ids = rng.integers(2, vocab_size - 1, (count, length))
  return np.array([" ".join(str(i) for i in row) for row in ids])


def _sampler_bench(request: dict):
  shapes = request["model"]
  batch, prompt_length = request["batch"], request["prompt_length"]
  new_tokens, temperature = request["new_tokens"], request["temperature"]
  model = _model(shapes, request["seed"])
  sampler = sampler_lib.Sampler(
      model, IdTokenizer(shapes["vocab_size"]),
      sampler_lib.CacheConfig(cache_size=prompt_length + new_tokens,
                              num_layers=shapes["num_layers"],
                              num_kv_heads=shapes["num_kv_heads"],
                              head_dim=shapes["head_dim"]))
  prompts = _random_prompts(np.random.default_rng(request["seed"]),
                            shapes["vocab_size"], batch, prompt_length)
  options = (dict(temperature=temperature, top_p=1.0) if temperature > 0
             else dict(temperature=0.0))

  def run(repeat: int):
    out = sampler(prompts, max_generation_steps=new_tokens,
                  max_prompt_length=prompt_length, seed=repeat,
                  pad_output=True, **options)
    return out.tokens
  return run


def _train_bench(request: dict):
  shapes = request["model"]
  batch, length = request["batch"], request["length"]
  model = _model(shapes, request["seed"])
  tokens = jnp.asarray(np.random.default_rng(request["seed"]).integers(
      0, shapes["vocab_size"], (batch, length)), jnp.int32)
  positions = jnp.broadcast_to(jnp.arange(length), (batch, length))
  causal = jnp.tril(jnp.ones((length, length), bool))
  mask = jnp.broadcast_to(causal, (batch, length, length))

  def loss_fn(model, tokens):
    logits, _ = model(tokens, positions, None, mask)
    log_probs = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32), -1)
    target = jnp.take_along_axis(log_probs, tokens[:, 1:, None], axis=-1)
    return -jnp.mean(target)

  grad_fn = nnx.jit(nnx.value_and_grad(loss_fn))

  def run(_):
    return jax.block_until_ready(grad_fn(model, tokens))
  return run


def _even_token_share(prompts, completions, **_) -> list[float]:
  """GRPO reward: the share of even ids among a completion's tokens (0 for an
  empty completion); cheap and deterministic."""
  del prompts
  rewards = []
  for text in completions:
    ids = [int(t) for t in text.split()]
    rewards.append(sum(i % 2 == 0 for i in ids) / len(ids) if ids else 0.0)
  return rewards


def _grpo_bench(request: dict):
  shapes = request["model"]
  num_prompts, generations = request["num_prompts"], request["generations"]
  prompt_length, new_tokens = request["prompt_length"], request["new_tokens"]
  mesh = _mesh()
  roles = (rl_cluster_lib.Role.ACTOR, rl_cluster_lib.Role.REFERENCE,
           rl_cluster_lib.Role.ROLLOUT)
  optimizer = optax.chain(
      optax.clip_by_global_norm(1.0),
      optax.adamw(1e-4, b1=0.9, b2=0.99, weight_decay=0.0))
  cluster = rl_cluster_lib.RLCluster(
      actor=_model(shapes, request["seed"]),
      reference=_model(shapes, request["seed"]),
      tokenizer=IdTokenizer(shapes["vocab_size"]),
      cluster_config=rl_cluster_lib.ClusterConfig(
          role_to_mesh={role: mesh for role in roles},
          rollout_engine="vanilla",
          training_config=rl_cluster_lib.RLTrainingConfig(
              actor_optimizer=optimizer, eval_every_n_steps=1,
              # GRPOLearner.train stops at max_steps or when the data ends;
              # every run feeds one batch, so the data ends first.
              max_steps=2**31 - 1, pbar_description=None),
          rollout_config=base_rollout.RolloutConfig(
              max_tokens_to_generate=new_tokens,
              max_prompt_length=prompt_length,
              kv_cache_size=prompt_length + new_tokens, temperature=1.0,
              top_p=1.0, top_k=None)))
  learner = grpo_learner.GRPOLearner(
      rl_cluster=cluster,
      algo_config=grpo_learner.GRPOConfig(
          num_generations=generations, num_iterations=1, beta=0.001,
          kl_loss_mode="low_var_kl", epsilon=0.2, loss_agg_mode="token-mean"),
      reward_fns=_even_token_share)
  batch = {"prompts": _random_prompts(np.random.default_rng(request["seed"]),
                                      shapes["vocab_size"], num_prompts,
                                      prompt_length)}

  def run(_):
    learner.train([batch])
    return nnx.state(cluster.actor_trainer.model, nnx.Param)
  return run


_BENCHES = {"sampler": _sampler_bench, "train": _train_bench,
            "grpo": _grpo_bench}


def main() -> None:
  run = None
  mesh = _mesh()
  for line in sys.stdin:
    request = json.loads(line)
    try:
      with jax.set_mesh(mesh):
        if request["op"] == "setup":
          run = _BENCHES[request["bench"]](request)
          jax.block_until_ready(run(0))
          reply = {"ok": True}
        elif request["op"] == "run":
          start = time.perf_counter()
          jax.block_until_ready(run(request["repeat"]))
          reply = {"seconds": time.perf_counter() - start}
        else:
          reply = {"error": f"unknown op {request['op']!r}"}
    except Exception:  # pylint: disable=broad-except
      reply = {"error": traceback.format_exc(limit=3)}
    _REPLIES.write(json.dumps(reply) + "\n")
    _REPLIES.flush()


if __name__ == "__main__":
  main()
