"""Running the jitted co-evolution step in tests."""

from genenv_jax import coevolve
from genenv_jax import step_metrics
from genenv_jax import sharding


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
