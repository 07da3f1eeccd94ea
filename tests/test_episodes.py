"""Multi-turn episodes: the rollout against a hand-written loop over the same
sampler, the loss mask, and host environments behind the adapter."""

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from genenv_jax import coevolve
from genenv_jax import episodes
from genenv_jax import policy
from genenv_jax import sampling
from genenv_jax.domains.maze import domain as maze
from genenv_jax.envs.base import Environment, EnvStep
from genenv_jax.envs.host import HostEnvironment, HostStep, HostTransition
from models import decoder
from models.config import get_preset

VOCAB = 24
EOS, PAD = 2, 0


def _model(vocab=VOCAB):
  return get_preset("tiny", vocab_size=vocab, hidden_size=32,
                    intermediate_size=64, num_heads=2, num_kv_heads=1,
                    num_layers=2)


class _EchoState(NamedTuple):
  turn: jax.Array  # int32[B]


class EchoEnv(Environment):
  """A scripted environment: the observation after an action whose first
  token is x is (x + 1) % VOCAB written turn + 1 times, then 3 (lengths vary
  per turn); the episode ends with reward 1 when x is 5."""
  max_turns = 4
  action_len = 3
  observation_len = 4

  def reset(self, spec):
    return _EchoState(jnp.zeros((spec.shape[0],), jnp.int32))

  def step(self, state, action, action_mask):
    first = action[:, 0]
    count = jnp.minimum(state.turn + 1, self.observation_len - 1)
    columns = jnp.arange(self.observation_len)[None, :]
    obs = jnp.where(columns < count[:, None], ((first + 1) % VOCAB)[:, None],
                    3)
    obs_mask = columns <= count[:, None]
    done = first == 5
    batch = action.shape[0]
    return EnvStep(_EchoState(state.turn + 1), obs.astype(jnp.int32),
                   obs_mask, done.astype(jnp.float32), done, done,
                   ~action_mask[:, 0], jnp.zeros((batch,), bool))


def _prompts(rng, batch, width):
  lengths = rng.integers(2, width + 1, batch)
  tokens = rng.integers(3, VOCAB, (batch, width))
  mask = np.arange(width)[None, :] >= (width - lengths)[:, None]
  return jnp.asarray(np.where(mask, tokens, PAD), jnp.int32), jnp.asarray(mask)


def _hand_loop(model, params, env, prompt, prompt_mask, rng, cfg, rows):
  """The same episodes as a plain Python loop: each turn re-prefills every
  row's whole history (prompt, earlier actions and observations, real
  tokens only) and calls `sampling.sample` for one action."""
  histories = [list(np.asarray(prompt[b])[np.asarray(prompt_mask[b])])
               for b in range(rows)]
  # Every history left-padded to the longest an episode can grow to: one
  # compiled sampler for every turn.
  width = prompt.shape[1] + env.max_turns * (env.action_len
                                             + env.observation_len)
  sample = jax.jit(lambda p, t, m, k: sampling.sample(
      model, p, t, m, k, dataclasses.replace(
          cfg, max_new_tokens=env.action_len)))
  state = env.reset(jnp.zeros((rows, 1), jnp.int32))
  done = np.zeros(rows, bool)
  actions, observations = [], []
  for turn in range(env.max_turns):
    tokens = np.zeros((rows, width), np.int32)
    mask = np.zeros((rows, width), bool)
    for b, h in enumerate(histories):
      tokens[b, width - len(h):] = h
      mask[b, width - len(h):] = True
    out = sample(params, jnp.asarray(tokens), jnp.asarray(mask),
                 jax.random.fold_in(rng, turn))
    act = np.where(np.asarray(out.mask), np.asarray(out.tokens), PAD)
    act_mask = np.asarray(out.mask) & ~done[:, None]
    stepped = env.step(state, jnp.asarray(act), jnp.asarray(act_mask))
    state = stepped.state
    obs = np.asarray(stepped.observation)
    obs_mask = np.asarray(stepped.observation_mask)
    turn_actions, turn_obs = [], []
    for b in range(rows):
      if done[b]:
        turn_actions.append([])
        turn_obs.append([])
        continue
      a = list(act[b][act_mask[b]])
      histories[b] += a
      turn_actions.append(a)
      ends = bool(np.asarray(stepped.done)[b])
      o = [] if ends or turn == env.max_turns - 1 else list(
          obs[b][obs_mask[b]])
      histories[b] += o
      turn_obs.append(o)
      done[b] |= ends
    actions.append(turn_actions)
    observations.append(turn_obs)
  return actions, observations


def _body_turns(env, tokens, mask, attend):
  """Per turn, per row: (action tokens, observation tokens) read back from
  an episode body by its layout."""
  a, o = env.action_len, env.observation_len
  out = []
  for turn in range(env.max_turns):
    start = turn * (a + o)
    act = [list(tokens[b, start:start + a][mask[b, start:start + a]])
           for b in range(tokens.shape[0])]
    if turn < env.max_turns - 1:
      seg = slice(start + a, start + a + o)
      obs = [list(tokens[b, seg][attend[b, seg] & ~mask[b, seg]])
             for b in range(tokens.shape[0])]
    else:
      obs = [[] for _ in range(tokens.shape[0])]
    out.append((act, obs))
  return out


@pytest.mark.parametrize("scan_layers", [False, True])
def test_rollout_equals_a_hand_written_loop_token_for_token(scan_layers):
  model = _model().replace(scan_layers=scan_layers)
  params = decoder.init_params(model, jax.random.PRNGKey(1))
  env = EchoEnv()
  rows = 6
  prompt, prompt_mask = _prompts(np.random.default_rng(0), rows, 5)
  cfg = sampling.SamplingConfig(max_new_tokens=1, temperature=1.0,
                                eos_ids=(EOS, 5), pad_id=PAD)
  rng = jax.random.PRNGKey(7)
  played = jax.jit(lambda p: episodes.rollout_episodes(
      model, p, env, prompt, prompt_mask,
      env.reset(jnp.zeros((rows, 1), jnp.int32)), rng, cfg))(params)
  want_actions, want_obs = _hand_loop(model, params, env, prompt, prompt_mask,
                                      rng, cfg, rows)
  tokens, mask, attend = (np.asarray(x) for x in (played.tokens, played.mask,
                                                   played.attend))
  got = _body_turns(env, tokens, mask, attend)
  for turn, (act, obs) in enumerate(got):
    assert act == want_actions[turn], turn
    assert obs == want_obs[turn], turn
  # Something happened: several turns, some episodes ending early, some not.
  assert np.asarray(played.turns).max() > 1
  assert np.asarray(played.lengths).sum() > rows
  # The log-probs the rollout recorded are the trainer's over the body.
  scores = policy.response_logprobs(model, params, prompt, prompt_mask,
                                    played.tokens, played.attend)
  np.testing.assert_allclose(np.asarray(scores.logp)[mask],
                             np.asarray(played.logprobs)[mask], atol=2e-5)
  # Each action's stop token is one of its trained tokens: an action ends
  # at a stop id (inside the loss mask) or at A tokens.
  for act, _ in got:
    for row in act:
      if row:
        assert row[-1] in (EOS, 5) or len(row) == env.action_len
  assert any(row and row[-1] in (EOS, 5) for act, _ in got for row in act)


@functools.partial(jax.jit, static_argnums=0)
def _episode_batch(model, params, rows=4):
  env = EchoEnv()
  prompt, prompt_mask = _prompts(np.random.default_rng(1), rows, 4)
  cfg = sampling.SamplingConfig(max_new_tokens=1, temperature=1.0,
                                eos_ids=(EOS,), pad_id=PAD)
  played = episodes.rollout_episodes(
      model, params, env, prompt, prompt_mask,
      env.reset(jnp.zeros((rows, 1), jnp.int32)), jax.random.PRNGKey(3), cfg)
  return coevolve.AgentBatch(
      prompt, prompt_mask, played.tokens, played.mask, played.logprobs,
      played.logprobs - 0.1, jnp.linspace(-1.0, 1.0, rows), played.attend)


def test_observation_tokens_get_exactly_zero_gradient():
  model = _model()
  params = decoder.init_params(model, jax.random.PRNGKey(2))
  batch = _episode_batch(model, params)
  config = ml_collections.ConfigDict(dict(grpo=dict(
      clip_low=0.2, clip_high=0.2, kl_coef=0.1, kl_estimator="k3",
      entropy_coef=0.01, aggregation="sequence", normalize_std=True,
      pg_normalizer="all")))
  scores = policy.response_logprobs(model, params, batch.prompt,
                                    batch.prompt_mask, batch.response,
                                    batch.attend)
  observation = np.asarray(batch.attend & ~batch.mask)
  assert observation.sum() > 0

  def loss(logp, entropy):
    return coevolve.grpo_minibatch_loss(
        config, policy.ResponseScores(logp, entropy), batch)[0]

  d_logp, d_entropy = jax.grad(loss, argnums=(0, 1))(scores.logp,
                                                     scores.entropy)
  assert np.all(np.asarray(d_logp)[observation] == 0.0)
  assert np.all(np.asarray(d_entropy)[observation] == 0.0)
  assert np.any(np.asarray(d_logp)[np.asarray(batch.mask)] != 0.0)


class MazeTwin(HostTransition):
  """The maze in plain Python: replays the episode's moves from its spec."""

  def __init__(self, size):
    self.size = size

  def transition(self, spec, actions):
    w = self.size
    cells = [int(c) for c in spec[1:1 + w * w]]
    position = cells.index(maze.START)
    status = maze.MOVED
    for action in actions:
      steps = dict(zip(maze.MOVES, [(-1, 0), (1, 0), (0, -1), (0, 1)]))
      readable = (len(action) == 2 and int(action[1]) == maze.EOS
                  and int(action[0]) in steps)
      if not readable:
        status = maze.BAD
        continue
      dr, dc = steps[int(action[0])]
      r, c = position // w + dr, position % w + dc
      if not (0 <= r < w and 0 <= c < w) or cells[r * w + c] == maze.WALL:
        status = maze.BUMP
        continue
      position = r * w + c
      status = maze.REACHED if cells[position] == maze.GOAL else maze.MOVED
    r, c = position // w, position % w
    view = [maze.FIRST_COORDINATE + r, maze.FIRST_COORDINATE + w + c]
    for dr, dc in [(-1, 0), (1, 0), (0, -1), (0, 1)]:
      rr, cc = r + dr, c + dc
      view.append(cells[rr * w + cc] if 0 <= rr < w and 0 <= cc < w
                  else maze.WALL)
    reached = status == maze.REACHED
    return HostStep([status] + view, float(reached), reached, reached,
                    status == maze.BAD)


class Raising(MazeTwin):
  """The twin, failing on a row's third action when its start is cell 0."""

  def transition(self, spec, actions):
    if len(actions) == 3 and int(spec[1]) == maze.START:
      raise RuntimeError("the API crashed")
    return super().transition(spec, actions)


def _maze_rollout(env, domain, params, model, parsed, samples=3):
  cfg = sampling.SamplingConfig(max_new_tokens=1, temperature=1.0,
                                eos_ids=(maze.EOS,), pad_id=maze.PAD)
  return jax.jit(lambda p: episodes.rollout_episodes(
      model, p, env, parsed.prompt, parsed.prompt_mask,
      env.reset(jnp.repeat(parsed.task, samples, axis=0)),
      jax.random.PRNGKey(5), cfg, samples))(params)


def _maze_tasks(domain):
  grids = [["S..", ".#.", "..G"], ["..S", "G#.", "..."], ["S#G", "...", "..."],
           [".S.", "...", ".G."]]
  rows = domain.encode_tasks(grids)
  return jax.jit(domain.parse)(rows, rows != maze.PAD)


def test_host_environment_plays_the_same_episodes_as_its_jax_twin():
  domain = maze.MazeDomain(size=3, max_turns=6, level_width=1, levels=4)
  parsed = _maze_tasks(domain)
  assert np.all(np.asarray(parsed.valid))
  model = _model(domain.vocab_size)
  params = decoder.init_params(model, jax.random.PRNGKey(4))
  # Half-trained: take shortest-path lessons so that episodes both reach the
  # goal and wander.
  tokens, attend, loss = domain.agent_demonstration(parsed)
  grad = jax.jit(jax.grad(lambda p: policy.nll_loss(
      model, p, parsed.prompt, parsed.prompt_mask, tokens, attend,
      loss_mask=loss)))
  for _ in range(90):
    params = jax.tree.map(lambda x, g: x - 0.05 * g, params, grad(params))
  jax_env = domain.environment
  host_env = HostEnvironment(MazeTwin(3), domain.max_turns, maze.ACTION_LEN,
                             maze.OBSERVATION_LEN)
  want = _maze_rollout(jax_env, domain, params, model, parsed)
  got = _maze_rollout(host_env, domain, params, model, parsed)
  for name, w in want._asdict().items():
    np.testing.assert_array_equal(np.asarray(getattr(got, name)),
                                  np.asarray(w), err_msg=name)
  assert 0 < np.asarray(want.success).sum() < len(want.success)
  assert np.asarray(want.turns).max() > 1


def test_a_raising_host_step_ends_its_episode_with_an_error():
  domain = maze.MazeDomain(size=3, max_turns=6, level_width=1, levels=4)
  parsed = _maze_tasks(domain)
  model = _model(domain.vocab_size)
  params = decoder.init_params(model, jax.random.PRNGKey(4))
  host = HostEnvironment(Raising(3), domain.max_turns, maze.ACTION_LEN,
                         maze.OBSERVATION_LEN)
  clean = HostEnvironment(MazeTwin(3), domain.max_turns, maze.ACTION_LEN,
                          maze.OBSERVATION_LEN)
  got = _maze_rollout(host, domain, params, model, parsed)
  want = _maze_rollout(clean, domain, params, model, parsed)
  crashing = np.repeat(np.asarray(parsed.task)[:, 1] == maze.START, 3)
  reached_third = np.asarray(want.turns) >= 3
  hit = crashing & reached_third
  assert hit.any()
  np.testing.assert_array_equal(np.asarray(got.errors), hit.astype(int))
  assert np.all(np.asarray(got.turns)[hit] == 3)
  assert np.all(np.asarray(got.reward)[hit] == 0.0)
  assert not np.asarray(got.truncated)[hit].any()
  assert host.host_errors > 0
  # Other rows play as without the fault.
  np.testing.assert_array_equal(np.asarray(got.tokens)[~hit],
                                np.asarray(want.tokens)[~hit])


def test_truncated_episodes_score_zero_or_are_masked():
  played = episodes.Episodes(
      tokens=None, logprobs=None, mask=None, attend=None, lengths=None,
      reward=jnp.asarray([1.0, 0.5, 2.0]),
      success=jnp.asarray([True, False, False]),
      truncated=jnp.asarray([False, True, True]), turns=None,
      invalid_actions=None, errors=None, observation_tokens=None)
  reward, kept = episodes.episode_rewards(played, "success", "zero")
  np.testing.assert_array_equal(reward, [1.0, 0.0, 0.0])
  np.testing.assert_array_equal(kept, [True, True, True])
  reward, kept = episodes.episode_rewards(played, "turn_sum", "mask")
  np.testing.assert_array_equal(reward, [1.0, 0.0, 0.0])
  np.testing.assert_array_equal(kept, [True, False, False])
  with pytest.raises(ValueError, match="config.episodes.reward"):
    episodes.episode_rewards(played, "sum", "zero")
