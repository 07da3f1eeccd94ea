"""Weights laid out for sampling once per step (coevolve.params_for_sampling):
what the compiled decode loop gathers, and that the samples do not change."""

import re

import jax
import numpy as np

from configs import default
from genenv_jax import coevolve
from genenv_jax import sharding
from genenv_jax.domains import get_domain
from genenv_jax.sampling import SamplingConfig, sample
from train import build

RULES = sharding.DEFAULT_RULES


def _all_gathers_in_loops(hlo_text):
  """The all-gather instructions inside while-loop bodies (and what they
  call) of compiled HLO text."""
  computations, current = {}, None
  for line in hlo_text.splitlines():
    header = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{\s*$", line)
    if header:
      current = header.group(1)
      computations[current] = []
    elif current is not None:
      computations[current].append(line)
  callees = lambda line: re.findall(
      r"(?:calls|to_apply|body|condition|branch_computations)=\{?%?([\w.\-]+)",
      line)
  todo = [b for lines in computations.values() for line in lines
          for b in re.findall(r"body=%?([\w.\-]+)", line)]
  seen = set()
  while todo:
    name = todo.pop()
    if name in seen or name not in computations:
      continue
    seen.add(name)
    todo += [c for line in computations[name] for c in callees(line)]
  return [line for name in seen for line in computations[name]
          if " all-gather(" in line]


def test_weights_gathered_for_sampling_leave_fewer_gathers_in_the_decode_loop():
  run_config = default.get_config("smoke")
  domain = get_domain(run_config.task)
  model = build.build_players(run_config, domain).agent_model.replace(
      num_kv_heads=2, num_layers=2)
  mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  params = build.init_player_params(model, jax.random.PRNGKey(0), mesh, RULES)
  prompt, prompt_mask = domain.simulator_prompt(
      domain.random_tasks(np.random.default_rng(0), 8)[0])
  config = SamplingConfig(max_new_tokens=5, eos_ids=(domain.eos_id,),
                          pad_id=domain.pad_id)
  tokens, in_loops = {}, {}
  for layout in ("gathered", "training"):
    fn = jax.jit(sharding.in_mesh(mesh, RULES)(
        lambda p, key, layout=layout: sample(
            model, coevolve.params_for_sampling(model, p, layout), prompt,
            prompt_mask, key, config, 2).tokens))
    key = jax.random.PRNGKey(1)
    in_loops[layout] = _all_gathers_in_loops(
        fn.lower(params, key).compile().as_text())
    tokens[layout] = np.asarray(fn(params, key))
  np.testing.assert_array_equal(tokens["gathered"], tokens["training"])
  # Training layout: the embedding's fsdp shards are gathered at every token.
  assert len(in_loops["gathered"]) < len(in_loops["training"]), in_loops
