"""Low-rank adapters (models/lora.py): an adapted model starts as its base,
only its adapters train (in both players' updates and the warm-start), its
reference is the base with the adapters off, its checkpoints past step 0
hold the adapters alone and a run resumes from them exactly, and an export
folds them into an ordinary HF checkpoint."""

import os
import shutil

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from configs import default
from genenv_jax import coevolve
from genenv_jax.coevolve_state import AgentBatch
from genenv_jax.domains import get_domain
from models import decoder
from models import hf
from models import lora
from models.config import PROJECTIONS, get_preset
from train import build
from train import config_validation
from train import loop
from train import warmstart
from train.checkpoints import export
from train.checkpoints import state_checkpoint
from train.outputs import metrics_log


def _model(scan_layers=False, rank=4):
  return get_preset("tiny", vocab_size=64, num_layers=2, lora_rank=rank,
                    lora_alpha=8.0, scan_layers=scan_layers)


def _tokens(seed=0, shape=(3, 7)):
  tokens = jax.random.randint(jax.random.PRNGKey(seed), shape, 0, 64)
  return tokens, jnp.ones(shape, bool)


def _perturbed(params, seed=1, scale=0.05):
  """params with every adapter leaf moved by random noise (B no longer 0)."""
  trainable, frozen = lora.split(params)
  leaves, treedef = jax.tree.flatten(trainable)
  keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
  moved = [x + scale * jax.random.normal(k, x.shape)
           for x, k in zip(leaves, keys)]
  return lora.join(jax.tree.unflatten(treedef, moved), frozen)


def _leaves_by_path(tree):
  return {jax.tree_util.keystr(p): np.asarray(x)
          for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}


@pytest.mark.parametrize("scan_layers", [False, True])
def test_zero_initialised_adapters_reproduce_the_base_logits(scan_layers):
  config = _model(scan_layers)
  params = decoder.init_params(config, jax.random.PRNGKey(0))
  adapters, base = lora.split(params)
  names = {jax.tree_util.keystr(p).split("'")[-4]
           for p, _ in jax.tree_util.tree_flatten_with_path(adapters)[0]}
  assert names == set(PROJECTIONS)
  assert all(not np.any(np.asarray(b)) for p, b in
             jax.tree_util.tree_flatten_with_path(adapters)[0]
             if "lora_b" in jax.tree_util.keystr(p))
  tokens, mask = _tokens()
  np.testing.assert_array_equal(decoder.forward(config, params, tokens, mask),
                                decoder.forward(config, base, tokens, mask))
  # The adapters are live: moved, they change the logits.
  moved = decoder.forward(config, _perturbed(params), tokens, mask)
  assert float(jnp.abs(moved - decoder.forward(config, base, tokens,
                                               mask)).max()) > 1e-3


@pytest.mark.parametrize("scan_layers", [False, True])
def test_folded_kernels_compute_the_adapted_model(scan_layers):
  config = _model(scan_layers)
  params = _perturbed(decoder.init_params(config, jax.random.PRNGKey(0)))
  folded = lora.fold(params, config)
  assert not lora.has_adapters(folded)
  tokens, mask = _tokens()
  np.testing.assert_allclose(
      decoder.forward(lora.base_config(config), folded, tokens, mask),
      decoder.forward(config, params, tokens, mask), atol=2e-5)
  # restart: the same function, B back at zero.
  restarted = lora.restart(params, config)
  np.testing.assert_allclose(
      decoder.forward(config, restarted, tokens, mask),
      decoder.forward(config, params, tokens, mask), atol=2e-5)
  for path, x in _leaves_by_path(lora.split(restarted)[0]).items():
    assert ("lora_b" not in path) or not x.any(), path


def test_targets_choose_the_adapted_projections():
  config = _model().replace(lora_targets=("q_proj", "v_proj"))
  adapters, _ = lora.split(decoder.init_params(config, jax.random.PRNGKey(0)))
  assert {p.split("'")[-4] for p in _leaves_by_path(adapters)} == {
      "q_proj", "v_proj"}
  with pytest.raises(ValueError, match="lora_targets.*q_proj"):
    config.replace(lora_targets=("qkv",))
  with pytest.raises(ValueError, match="lora_rank=-1"):
    config.replace(lora_rank=-1)


def _players(config, lr=1e-2):
  opt = optax.adam(lr)
  return coevolve.Players(config, config, opt, opt)


def _assert_trained_adapters_only(before, after, moved=lora.ADAPTERS):
  """The base leaves bitwise equal, every adapter leaf named in `moved`
  changed."""
  trained_before, base_before = lora.split(before)
  trained_after, base_after = lora.split(after)
  for path, x in _leaves_by_path(base_before).items():
    np.testing.assert_array_equal(x, _leaves_by_path(base_after)[path],
                                  err_msg=path)
  for path, x in _leaves_by_path(trained_before).items():
    if any(f"'{name}'" in path for name in moved):
      assert not np.array_equal(x, _leaves_by_path(trained_after)[path]), path


def test_agent_update_trains_the_adapters_alone():
  run_config = default.get_config("smoke")
  model = _model()
  players = _players(model)
  params = decoder.init_params(model, jax.random.PRNGKey(0))
  agent = coevolve.new_player_state(params, players.agent_opt)
  assert agent.ref_params is None
  assert (jax.tree.structure(agent.opt_state[0].mu)
          == jax.tree.structure(lora.split(params)[0]))
  n, p, r = 8, 5, 4
  prompt, prompt_mask = _tokens(1, (n, p))
  response, mask = _tokens(2, (n, r))
  batch = AgentBatch(prompt, prompt_mask, response, mask,
                     jnp.full((n, r), -4.0), jnp.full((n, r), -4.0),
                     jnp.where(jnp.arange(n) % 2 == 0, 1.0, -1.0))
  run_config.grpo.kl_coef = 0.0
  # Two epochs: the first moves B off zero, the second then moves A.
  run_config.coevolve.agent_epochs = 2
  updated, metrics = jax.jit(lambda a, b, k: coevolve.agent_update(
      run_config, players, a, b, k))(agent, batch, jax.random.PRNGKey(3))
  assert float(metrics["skipped_updates"]) == 0
  _assert_trained_adapters_only(params, updated.params)
  # The reference is the base, adapters off, whatever the adapters learned.
  tokens, tmask = _tokens()
  np.testing.assert_array_equal(
      decoder.forward(model, updated.reference(), tokens, tmask),
      decoder.forward(model, lora.without_adapters(params), tokens, tmask))


def test_warm_start_update_trains_the_adapters_alone():
  model = _model()
  params = decoder.init_params(model, jax.random.PRNGKey(0))
  opt = optax.adam(1e-2)
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",))
  update = warmstart.supervised_update(model, opt, mesh, ())
  prompt, prompt_mask = _tokens(1, (4, 5))
  target, target_mask = _tokens(2, (4, 3))
  batch = warmstart.SupervisedData(prompt, prompt_mask, target, target_mask)
  opt_state = opt.init(lora.split(params)[0])
  moved, opt_state = params, opt_state
  for _ in range(2):
    moved, opt_state, _, skipped = update(moved, opt_state, batch)
    assert float(skipped) == 0
  _assert_trained_adapters_only(params, moved)


def test_lora_fields_are_validated_by_name():
  config = default.get_config("smoke")
  config.agent.lora.targets = "q_proj,qkv"
  with pytest.raises(ValueError, match=r"config\.agent\.lora\.targets=.*q_proj"):
    config_validation.validate(config, 8)
  config = default.get_config("smoke")
  config.simulator.lora.rank = -2
  with pytest.raises(ValueError, match=r"config\.simulator\.lora\.rank=-2"):
    config_validation.validate(config, 8)


def _lora_smoke(tfds_dir):
  """The smoke run with rank-4 adapters on both players. Weight decay moves
  the agent's A matrices at every step (the smoke agent earns no reward),
  so a resume that lost them or their optimiser state would show."""
  config = default.get_config("smoke")
  config.data.tfds_dir = tfds_dir
  for player in (config.agent, config.simulator):
    player.lora = ml_collections.ConfigDict(dict(
        rank=4, alpha=8.0, targets=",".join(PROJECTIONS)))
    player.weight_decay = 0.5
  return config


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
  root = tmp_path_factory.mktemp("lora")
  tfds_dir, workdir = str(root / "tfds"), str(root / "run")
  loop.train_and_evaluate(_lora_smoke(tfds_dir), workdir)
  return tfds_dir, workdir


def test_lora_checkpoints_hold_the_adapters_past_step0(lora_run):
  _, workdir = lora_run
  last = _lora_smoke("").coevolve.num_steps
  for player in ("agent", "simulator"):
    _, saved = state_checkpoint.read_parts(workdir, last, [f"{player}.params"])
    saved = saved[f"{player}.params"]
    assert lora.has_adapters(saved) and not lora.split(saved)[1], player
    _, start = state_checkpoint.read_player_params(workdir, 0, player)
    _, end = state_checkpoint.read_player_params(workdir, last, player)
    # Only the agent's A matrices move here (weight decay): B leaves zero on
    # gradients alone, which the smoke players earn none of, and the smoke
    # simulator keeps no task to learn from (the update tests above move
    # both).
    _assert_trained_adapters_only(
        start, end, moved=("lora_a",) if player == "agent" else ())


def test_lora_run_resumes_exactly(lora_run, tmp_path):
  tfds_dir, workdir = lora_run
  config = _lora_smoke(tfds_dir)
  last = config.coevolve.num_steps
  resumed = str(tmp_path / "resumed")
  shutil.copytree(workdir, resumed)
  # Back to the checkpoint before the last: the resume recomputes the rest.
  middle = last - config.checkpoint_every
  shutil.rmtree(os.path.join(resumed, "checkpoints", str(last)))
  loop.train_and_evaluate(config, resumed)
  read = lambda w: [{k: v for k, v in r.items()
                     if not k.startswith("perf/")
                     and k not in ("steps_per_sec", "uptime")}
                    for r in metrics_log.read_metrics(
                        os.path.join(w, "metrics.jsonl"))]
  assert [r for r in read(resumed) if len(r) > 1] == [
      r for r in read(workdir) if len(r) > 1]
  assert middle > 0
  for player in ("agent", "simulator"):
    for part in (f"{player}.params", f"{player}.opt_state"):
      _, a = state_checkpoint.read_parts(workdir, last, [part])
      _, b = state_checkpoint.read_parts(resumed, last, [part])
      for path, x in _leaves_by_path(a[part]).items():
        np.testing.assert_array_equal(x, _leaves_by_path(b[part])[path],
                                      err_msg=f"{part}{path}")


def test_export_folds_the_adapters_into_an_hf_checkpoint(lora_run, tmp_path):
  tfds_dir, workdir = lora_run
  out = str(tmp_path / "hf")
  summary = export.export_player(workdir, "agent", out, dtype="float32")
  _, params = state_checkpoint.read_player_params(workdir, summary["step"],
                                                  "agent")
  config = _lora_smoke(tfds_dir)
  model = build.build_players(config, get_domain(config.task)).agent_model
  assert model.lora_rank == 4
  exported, _ = hf.load_hf_params(out, lora.base_config(model))
  assert not lora.has_adapters(exported)
  tokens, mask = _tokens(4, (2, 6))
  tokens = tokens % model.vocab_size
  np.testing.assert_allclose(
      decoder.forward(lora.base_config(model), exported, tokens, mask),
      decoder.forward(model, params, tokens, mask), atol=1e-5)
