"""The co-evolution step's data: what persists between steps (`CoevolveState`:
both players' `PlayerState`s, the pools, the rng, the step, the per-level
success estimate), what is static about the players (`Players`), and what one
step hands from stage to stage (`Generation`, `Attempts`, `AgentBatch`,
`SimulatorBatch`). The stages are in genenv_jax/coevolve.py.

Shapes: S seeds, m variations per seed, M = S·m generated tasks, T tasks
attempted, G attempts per task, N = T·G attempts.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import flax.struct
import jax
import optax

from genenv_jax import episodes as episodes_lib
from genenv_jax import pool as pool_lib
from genenv_jax.domains.base import ParsedTasks
from genenv_jax.sampling import SampleOutput
from models import lora
from models.config import ModelConfig


@flax.struct.dataclass
class PlayerState:
  """A player's weights and optimiser state.

  params: the policy's parameters; with low-rank adapters (models/lora.py)
    the base weights and the adapters, of which only the adapters train.
  opt_state: the optimiser's state over what trains (`lora.split`'s
    trainable part: every parameter, or the adapters alone).
  ref_params: the fixed reference (the agent's GRPO reference; the
    simulator's initial model for its KL penalty): a copy of the step-0
    parameters, or None for a player with adapters, whose reference is its
    base with the adapters off (no second copy). Read it by `reference()`.
  """
  params: Any
  opt_state: Any
  ref_params: Any

  def reference(self):
    """The reference policy's parameters."""
    if self.ref_params is None:
      return lora.without_adapters(self.params)
    return self.ref_params


def new_player_state(params, optimizer: optax.GradientTransformation
                     ) -> PlayerState:
  """A player starting from `params` (arrays, or ShapeDtypeStructs under
  jax.eval_shape): a fresh optimiser state over what trains, and its
  reference (a copy of `params`, or none with adapters)."""
  trainable, _ = lora.split(params)
  reference = (None if lora.has_adapters(params)
               else jax.tree.map(lambda x: x.copy(), params))
  return PlayerState(params=params, opt_state=optimizer.init(trainable),
                     ref_params=reference)


@flax.struct.dataclass
class CoevolveState:
  agent: PlayerState
  simulator: PlayerState
  pool: pool_lib.TaskPool
  generation_pool: pool_lib.GenerationPool
  rng: jax.Array
  step: jax.Array
  # f32[D] the agent's recent success per level 1..D, UNKNOWN_SUCCESS before
  # any attempt (genenv_jax/scripted.py: the estimator; oracle_learnability
  # draws its levels from it).
  level_success: jax.Array
  # f32[D] the agent's recent success on the tasks written from seeds of each
  # level 1..D (the same estimator, keyed by the seed's level instead of the
  # written task's; online generation only): what a seed of that level
  # yields, which `coevolve.seed_level_estimate="offspring"` draws by.
  offspring_success: jax.Array


@dataclasses.dataclass(frozen=True)
class Players:
  """What is static about the two players: architectures and optimisers."""
  agent_model: ModelConfig
  simulator_model: ModelConfig
  agent_opt: optax.GradientTransformation
  simulator_opt: optax.GradientTransformation


class AgentBatch(NamedTuple):
  """One GRPO batch of N attempts (responses, or episode bodies whose
  observation tokens are attended to but carry no loss)."""
  prompt: jax.Array       # int32[N, P]
  prompt_mask: jax.Array  # bool[N, P]
  response: jax.Array     # int32[N, R]
  mask: jax.Array         # bool[N, R] the loss mask: the agent's tokens
  old_logp: jax.Array     # f32[N, R]
  ref_logp: jax.Array     # f32[N, R]
  advantages: jax.Array   # f32[N]
  # bool[N, R] the real tokens the passes attend to (episodes: the agent's
  # and the observations'); None: the mask.
  attend: jax.Array | None = None


class SimulatorBatch(NamedTuple):
  """The simulator's update batch: its M = S·m generations, seed-major, then
  any generations replayed from D_env (`replay.with_replayed_generations`;
  valid False, so they stay out of the KL-cap measurement)."""
  prompt: jax.Array       # int32[M, Pe] the prompt each generation answered
  prompt_mask: jax.Array  # bool[M, Pe]
  task: jax.Array         # int32[M, L] what it wrote
  task_mask: jax.Array    # bool[M, L]
  old_logp: jax.Array     # f32[M, L] under the sampling simulator
  ref_logp: jax.Array     # f32[M, L] under the initial simulator
  valid: jax.Array        # bool[M] well-formed tasks
  reward: jax.Array       # f32[M] R_env
  weights: jax.Array      # f32[M] RWR weights (0 outside the band)


class Generation(NamedTuple):
  """Stages 1-2: what the simulator wrote this step.

  Attributes:
    seed_idx: int32[S] the D_train rows the seeds came from (scripted
      generation: int32[M] the LevelBank rows drawn).
    prompt: int32[M, Pe] the simulator's prompt of each generation (its seed's
      prompt repeated for the m variations); prompt_mask bool[M, Pe]. None
      for scripted generation.
    out: the simulator's SampleOutput (tokens int32[M, L], logprobs, mask);
      None for scripted generation (the simulator wrote nothing).
    tasks: the M fresh ParsedTasks.
  """
  seed_idx: jax.Array
  prompt: jax.Array | None
  prompt_mask: jax.Array | None
  out: SampleOutput | None
  tasks: ParsedTasks


class Attempts(NamedTuple):
  """Stages 3-4: the agent's G attempts at each of T tasks, scored.

  Attributes:
    tasks: the T ParsedTasks attempted.
    out: the agent's SampleOutput for the N = T·G attempts, grouped by task
      (for episodes: the episode bodies, mask = the agent's tokens).
    rewards: f32[T, G] the reward per attempt GRPO trains on (the verifier's,
      response only; or the episode's).
    success: f32[T, G] what p̂ and the pools count as success (with
      curriculum.success_threshold): the rewards, or 1 for a successful
      episode.
    attend: bool[N, W] the episode bodies' real tokens; None for single
      answers (their mask).
    kept: bool[N] attempts GRPO trains on (episodes.truncated = "mask" drops
      truncated episodes); None: all of them.
    episodes: the rollout's Episodes (their statistics feed the metrics);
      None for single answers.
  """
  tasks: ParsedTasks
  out: SampleOutput
  rewards: jax.Array
  success: jax.Array
  attend: jax.Array | None = None
  kept: jax.Array | None = None
  episodes: episodes_lib.Episodes | None = None
