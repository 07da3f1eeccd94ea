"""What a run is made of, built from its config: the players (model configs and
optimisers), their parameters on the mesh, the seed data, D_train's base rows and
the CoevolveState. The driver (train/loop.py) and the tools that read or rebuild a
run (train/tools/, train/bench/, train/checkpoints/export.py) build it here.
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import numpy as np
import optax

from genenv_jax import coevolve
from genenv_jax import domains
from genenv_jax import scripted
from genenv_jax import sharding
from models import decoder
from models import hf
from models import hf_sharded
from models import lora
from models.config import get_preset
from train.checkpoints import checkpointing
from train.checkpoints import state_layout


def _optimizer(player_cfg) -> optax.GradientTransformation:
  return optax.chain(
      optax.clip_by_global_norm(player_cfg.grad_clip),
      optax.adamw(player_cfg.learning_rate, b1=player_cfg.b1,
                  b2=player_cfg.b2, weight_decay=player_cfg.weight_decay))


def _lora_fields(player_cfg) -> dict:
  """The ModelConfig fields of a player's `lora` block (rank 0: none)."""
  block = player_cfg.get("lora")
  if block is None or not block.rank:
    return {}
  return dict(lora_rank=block.rank, lora_alpha=float(block.alpha),
              lora_targets=tuple(t.strip() for t in block.targets.split(",")
                                 if t.strip()))


def build_players(config, domain) -> coevolve.Players:
  """Model configs and optimisers of both players.

  A player whose config names an `hf_dir` takes its architecture from that HF
  directory's config.json (model_overrides may only change how it computes:
  dtypes, remat, scan); otherwise it is the `model` preset with the domain's
  vocabulary. A `lora` block of rank > 0 gives it low-rank adapters
  (models/lora.py), which alone then train.
  """
  def model(player_cfg):
    overrides = dict(player_cfg.model_overrides, **_lora_fields(player_cfg))
    hf_dir = player_cfg.get("hf_dir", "")
    if hf_dir:
      model_config = hf.config_from_hf(hf.read_hf_config(hf_dir)).replace(
          **overrides)
      if model_config.vocab_size < domain.vocab_size:
        raise ValueError(
            f"{hf_dir}: the model's vocab_size {model_config.vocab_size} is "
            f"smaller than the task domain's {domain.vocab_size}.")
      return model_config
    overrides.setdefault("vocab_size", domain.vocab_size)
    return get_preset(player_cfg.model, **overrides)
  return coevolve.Players(agent_model=model(config.agent),
                          simulator_model=model(config.simulator),
                          agent_opt=_optimizer(config.agent),
                          simulator_opt=_optimizer(config.simulator))


def init_player_params(model_config, key, mesh, rules, hf_dir: str = ""):
  """A player's parameters laid out per `rules`: random from `key`, or the
  weights of the HF directory `hf_dir` (local or gs://) when given, read
  shard by shard into that layout (models/hf_sharded.py: each process reads
  only what its devices hold). A model with adapters gets them initialised
  from `key` beside the base (B zero: the base's function)."""
  init = functools.partial(decoder.init_boxed, model_config)
  if not hf_dir:
    params, _ = sharding.sharded_init(init, mesh, rules, key)
    return params
  base_config = lora.base_config(model_config)
  shardings = nn.unbox(sharding.shardings_from_boxed(
      jax.eval_shape(functools.partial(decoder.init_boxed, base_config), key),
      mesh, rules))
  base = hf_sharded.load_sharded(hf_dir, base_config, shardings)
  if not model_config.lora_rank:
    return base
  # Only the adapters are returned, so the compiled init computes no base.
  adapters, _ = sharding.sharded_init(lambda k: lora.split(init(k))[0], mesh,
                                      rules, key)
  return lora.join(adapters, base)


def init_both_players(config, players: coevolve.Players, mesh, rules):
  """(agent params, simulator params) at the start of stage 1: random from
  config.seed, or their HF directories' weights. Players that start from
  one HF directory with one architecture are read once: the simulator's
  are a device copy of the agent's."""
  agent_key, simulator_key = jax.random.split(jax.random.PRNGKey(config.seed))
  agent_dir = config.agent.get("hf_dir", "")
  simulator_dir = config.simulator.get("hf_dir", "")
  agent = init_player_params(players.agent_model, agent_key, mesh, rules,
                             agent_dir)
  if (agent_dir and agent_dir == simulator_dir
      and players.agent_model == players.simulator_model):
    return agent, jax.tree.map(lambda x: x.copy(), agent)
  return agent, init_player_params(players.simulator_model, simulator_key,
                                   mesh, rules, simulator_dir)


def create_state(config, domain, players, agent_params, simulator_params,
                 base_rows, base_difficulty, mesh):
  """Assembles a CoevolveState, placed on the mesh. Returns (state, shardings).

  The current parameters also become the references: the agent's GRPO
  reference and the simulator's initial model. Every leaf's sharding is
  derived from the parameters' (train/checkpoints/state_layout.py).
  """
  host = state_layout.host_parts(config, domain, base_rows, base_difficulty)
  unplaced = coevolve.CoevolveState(
      agent=jax.eval_shape(functools.partial(
          coevolve.new_player_state, optimizer=players.agent_opt),
                           agent_params),
      simulator=jax.eval_shape(functools.partial(
          coevolve.new_player_state, optimizer=players.simulator_opt),
                               simulator_params),
      **host)
  unplaced = unplaced.replace(
      agent=unplaced.agent.replace(params=agent_params),
      simulator=unplaced.simulator.replace(params=simulator_params))
  shardings = state_layout.state_shardings(players, unplaced, mesh)
  everywhere = lambda tree, s: jax.tree.map(sharding.from_host, tree, s)

  def player(params, optimizer, s: coevolve.PlayerState):
    # The parameters are placed as they are: only the optimiser state and
    # the reference (a copy, or none with adapters) are made here.
    trainable, _ = lora.split(params)
    reference = None
    if s.ref_params is not None:
      reference = jax.jit(lambda p: jax.tree.map(lambda x: x.copy(), p),
                          out_shardings=s.ref_params)(params)
    return coevolve.PlayerState(
        params=params,
        opt_state=jax.jit(optimizer.init, out_shardings=s.opt_state)(
            trainable),
        ref_params=reference)
  state = coevolve.CoevolveState(
      agent=player(agent_params, players.agent_opt, shardings.agent),
      simulator=player(simulator_params, players.simulator_opt,
                       shardings.simulator),
      pool=everywhere(host["pool"], shardings.pool),
      generation_pool=everywhere(host["generation_pool"],
                                 shardings.generation_pool),
      rng=sharding.from_host(host["rng"], shardings.rng),
      step=sharding.from_host(host["step"], shardings.step),
      level_success=sharding.from_host(host["level_success"],
                                       shardings.level_success),
      offspring_success=sharding.from_host(host["offspring_success"],
                                           shardings.offspring_success))
  return state, shardings


def seed_data(config, domain, workdir: str) -> tuple[dict, dict]:
  """The domain's seed data (`genenv_jax.domains.seed_splits`), tensorflow-datasets
  builders preparing theirs in config.data.tfds_dir, else <workdir>/tfds."""
  data_dir = (config.data.tfds_dir
              or str(checkpointing.workdir_path(workdir) / "tfds"))
  return domains.seed_splits(config, domain, data_dir)


def base_row_indices(config, train_difficulty: np.ndarray) -> np.ndarray:
  """int64[Nb]: the seed train split's rows that become D_train's base data
  (up to config.pool.num_base of those at levels up to
  config.pool.base_max_difficulty), in their order in the pool.

  Args:
    train_difficulty: int[n] the train split's difficulty per row.
  """
  easy = np.flatnonzero(train_difficulty <= config.pool.base_max_difficulty)
  return np.random.default_rng(config.data.seed).permutation(easy)[
      :config.pool.num_base]


def scripted_level_bank(config, domain, train: dict
                        ) -> scripted.LevelBank | None:
  """The level bank scripted generation draws from (genenv_jax/scripted.py),
  from the seed train split {"task", "difficulty"}; None for the other
  generation modes."""
  if config.coevolve.generation not in scripted.SCRIPTED_GENERATIONS:
    return None
  return scripted.level_bank(train["task"], train["difficulty"],
                             domain.max_difficulty,
                             config.coevolve.scripted_bank_per_level,
                             config.data.seed)
