"""Where every leaf of the co-evolution state lives on the mesh, and the state
as shapes alone.

Each leaf's NamedSharding is derived, never defaulted: parameters and the
frozen references keep their parameters' shardings, every optimiser-state
leaf shaped like a trained parameter (every parameter, or the adapters
alone: models/lora.py) takes that parameter's sharding, and the
optimiser's scalars (step counts), the pools, the rng and the step counter are
replicated by name. A parameter without a NamedSharding on the mesh, or an
optimiser-state leaf that is neither parameter-shaped nor a scalar, is an
error naming the leaf.

`abstract_state` gives the whole state as ShapeDtypeStructs with shardings,
from `jax.eval_shape` alone: a resumed run restores its checkpoint into it
without initialising or loading any weights.
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import numpy as np
import optax
from jax.sharding import NamedSharding

from genenv_jax import coevolve
from genenv_jax import pool as pool_lib
from genenv_jax import scripted
from genenv_jax import sharding
from models import decoder
from models import lora


def _path_name(path) -> str:
  return "/".join(str(getattr(k, "key", getattr(k, "name",
                                                 getattr(k, "idx", k))))
                  for k in path)


def param_shardings(params, mesh, name: str):
  """The NamedSharding of each parameter of `params` (arrays or
  ShapeDtypeStructs with shardings). Raises ValueError naming the leaf
  (`name`/path) that has none on `mesh`."""
  def one(path, x):
    s = getattr(x, "sharding", None)
    if not isinstance(s, NamedSharding) or s.mesh.shape != mesh.shape:
      raise ValueError(
          f"{name}/{_path_name(path)}: {s!r} is not a NamedSharding on the "
          f"mesh {dict(mesh.shape)}; place the parameters on the mesh first "
          "(build.init_player_params).")
    return s
  return jax.tree_util.tree_map_with_path(one, params)


def opt_state_shardings(optimizer, opt_state, shardings, mesh, name: str):
  """NamedShardings of `opt_state` (arrays or ShapeDtypeStructs): each copy of
  the parameter tree inside it takes `shardings` (the parameters'); scalars
  are replicated. Raises ValueError naming any other leaf."""
  replicated = sharding.replicated(mesh)
  marker = object()  # stands for each leaf that is not a parameter's copy
  mapped = optax.tree_map_params(
      optimizer, lambda _, s: s, opt_state, shardings,
      transform_non_params=lambda _: marker,
      is_leaf=lambda x: isinstance(x, NamedSharding))

  def one(path, leaf, x):
    if leaf is not marker:
      return leaf
    if not np.shape(x):
      return replicated
    raise ValueError(
        f"{name}/opt_state/{_path_name(path)}: shape {tuple(x.shape)} is "
        "neither shaped like a parameter nor a scalar; give it a sharding "
        "in train/checkpoints/state_layout.py.")
  return jax.tree_util.tree_map_with_path(
      one, mapped, opt_state, is_leaf=lambda x: x is marker)


def state_shardings(players: coevolve.Players, state, mesh):
  """A NamedSharding for every leaf of `state` (a CoevolveState of arrays
  or ShapeDtypeStructs whose parameters carry NamedShardings)."""
  replicated = sharding.replicated(mesh)
  everywhere = lambda tree: jax.tree.map(lambda _: replicated, tree)

  def player(p: coevolve.PlayerState, optimizer, name: str):
    shardings = param_shardings(p.params, mesh, f"{name}/params")
    trainable, _ = lora.split(shardings)
    return coevolve.PlayerState(
        params=shardings,
        opt_state=opt_state_shardings(optimizer, p.opt_state, trainable, mesh,
                                      name),
        ref_params=None if p.ref_params is None else shardings)
  return coevolve.CoevolveState(
      agent=player(state.agent, players.agent_opt, "agent"),
      simulator=player(state.simulator, players.simulator_opt, "simulator"),
      pool=everywhere(state.pool),
      generation_pool=everywhere(state.generation_pool),
      rng=replicated, step=replicated, level_success=replicated,
      offspring_success=replicated)


def abstract_params(model_config, mesh, rules):
  """A player's parameters as ShapeDtypeStructs with their shardings per
  `rules` (nothing is initialised)."""
  init = functools.partial(decoder.init_boxed, model_config)
  boxed = jax.eval_shape(init, jax.random.PRNGKey(0))
  shardings = nn.unbox(sharding.shardings_from_boxed(boxed, mesh, rules))
  return jax.tree.map(
      lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
      nn.unbox(boxed), shardings)


def host_parts(config, domain, base_rows: np.ndarray,
               base_difficulty: np.ndarray) -> dict:
  """The step-0 state's pools, rng, step and per-level success estimates
  (every level unknown) as host arrays (the same on every process).

  Args:
    base_rows: int32[Nb, task_len] D_train's base data; base_difficulty:
      int32[Nb].
  """
  return dict(
      pool=pool_lib.create_task_pool(base_rows, base_difficulty,
                                     config.pool.capacity),
      generation_pool=pool_lib.create_generation_pool(
          config.pool.generation_capacity, domain.simulator_prompt_len,
          domain.simulator_len),
      rng=jax.random.PRNGKey(config.seed + 3),
      step=np.int32(0),
      level_success=scripted.initial_level_success(domain.max_difficulty),
      offspring_success=scripted.initial_level_success(
          domain.max_difficulty))


def abstract_state(config, domain, players: coevolve.Players,
                   base_rows: np.ndarray, base_difficulty: np.ndarray, mesh,
                   rules):
  """(the step-0 state as ShapeDtypeStructs with shardings, its shardings):
  what a checkpoint restores into, with no weights loaded or initialised."""
  agent = abstract_params(players.agent_model, mesh, rules)
  simulator = abstract_params(players.simulator_model, mesh, rules)
  shapes = jax.eval_shape(lambda a, s: coevolve.CoevolveState(
      agent=coevolve.new_player_state(a, players.agent_opt),
      simulator=coevolve.new_player_state(s, players.simulator_opt),
      **host_parts(config, domain, base_rows, base_difficulty)),
                          agent, simulator)
  # eval_shape drops the parameters' shardings; they come back from the
  # abstract parameters.
  reference = lambda p, params: None if p.ref_params is None else params
  shapes = shapes.replace(
      agent=shapes.agent.replace(
          params=agent, ref_params=reference(shapes.agent, agent)),
      simulator=shapes.simulator.replace(
          params=simulator,
          ref_params=reference(shapes.simulator, simulator)))
  shardings = state_shardings(players, shapes, mesh)
  target = jax.tree.map(
      lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
      shapes, shardings)
  return target, shardings
