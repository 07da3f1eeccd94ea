"""models/splash.py: the splash-attention path of a full-sequence pass
against the XLA path (Pallas' interpreter on this CPU), sharded, and
compiled for a TPU slice without [T, T] score arrays."""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np

from genenv_jax import sharding
from models.config import get_preset
from models.decoder import forward, init_boxed, init_params
from train.bench import compile_check
from train.bench import slices

BATCH, LENGTH = 4, 40  # padded to 128 slots inside the kernel


def _mask() -> np.ndarray:
  """Left padding of 0..3 slots per row and a hole at slot 20 of row 1."""
  mask = np.ones((BATCH, LENGTH), bool)
  for row in range(BATCH):
    mask[row, :row] = False
  mask[1, 20] = False
  return mask


def _inputs(config):
  params = init_params(config, jax.random.PRNGKey(0))
  tokens = jax.random.randint(jax.random.PRNGKey(1), (BATCH, LENGTH), 0,
                              config.vocab_size)
  return params, tokens, jnp.asarray(_mask())


def _loss(config, params, tokens, mask):
  logits = forward(config, params, tokens, mask).astype(jnp.float32)
  return jnp.sum(jnp.where(mask[..., None], jnp.tanh(logits), 0.0))


def test_splash_matches_the_xla_path_forward_and_backward():
  xla = get_preset("tiny", num_layers=1)
  splash = xla.replace(attention="splash_interpret")
  params, tokens, mask = _inputs(xla)
  valid = np.asarray(mask)
  want = np.asarray(forward(xla, params, tokens, mask))[valid]
  got = np.asarray(jax.jit(functools.partial(forward, splash))(
      params, tokens, mask))[valid]
  np.testing.assert_allclose(got, want, atol=2e-4, rtol=2e-4)
  want_grad = jax.grad(functools.partial(_loss, xla))(params, tokens, mask)
  got_grad = jax.jit(jax.grad(functools.partial(_loss, splash)))(
      params, tokens, mask)
  for w, g in zip(jax.tree.leaves(want_grad), jax.tree.leaves(got_grad)):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=5e-4,
                               rtol=2e-3)


def test_splash_runs_per_device_on_a_mesh():
  """Rows over data x fsdp and KV heads over tensor: each device runs the
  kernel on its share, and the result is the unsharded one."""
  config = get_preset("tiny", num_layers=1, attention="splash_interpret")
  params, tokens, mask = _inputs(config)
  mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  rows = sharding.batch_sharding(mesh, sharding.DEFAULT_RULES, 2)
  run = jax.jit(sharding.in_mesh(mesh, sharding.DEFAULT_RULES)(
      functools.partial(forward, config)))
  got = run(params, jax.device_put(tokens, rows), jax.device_put(mask, rows))
  want = forward(config.replace(attention="xla"), params, tokens, mask)
  valid = np.asarray(mask)
  np.testing.assert_allclose(np.asarray(got)[valid], np.asarray(want)[valid],
                             atol=2e-4, rtol=2e-4)


def test_parameter_shapes_are_read_inside_a_mesh_context():
  """`coevolve.params_for_sampling` reads the parameters' logical names by
  tracing `init_boxed`'s one-row batch inside the step's mesh context: fewer
  rows than row shards, which the sharded kernel cannot split."""
  config = get_preset("tiny", num_layers=1, attention="splash_interpret")
  mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  boxed = sharding.in_mesh(mesh, sharding.DEFAULT_RULES)(
      lambda: jax.eval_shape(functools.partial(init_boxed, config),
                             jax.random.PRNGKey(0)))()
  want = init_params(config, jax.random.PRNGKey(0))
  assert ([x.shape for x in jax.tree.leaves(boxed)]
          == [x.shape for x in jax.tree.leaves(want)])


def _tpu_hlo(attention: str, length: int) -> str:
  """A 1-layer bf16 decoder's gradient compiled for a v4-8."""
  config = get_preset("tiny", num_layers=1, head_dim=128, dtype="bfloat16",
                      attention=attention)
  devices = compile_check.topology_devices(slices.parse_slice("v4-8"))
  mesh = sharding.make_mesh({"data": 4}, devices)
  rows = sharding.batch_sharding(mesh, sharding.DEFAULT_RULES, 2)
  params = jax.eval_shape(functools.partial(init_params, config),
                          jax.random.PRNGKey(0))
  params = jax.tree.map(lambda x: jax.ShapeDtypeStruct(
      x.shape, x.dtype, sharding=sharding.replicated(mesh)), params)
  tokens = jax.ShapeDtypeStruct((8, length), jnp.int32, sharding=rows)
  mask = jax.ShapeDtypeStruct((8, length), jnp.bool_, sharding=rows)
  grad = jax.jit(sharding.in_mesh(mesh, sharding.DEFAULT_RULES)(
      jax.grad(functools.partial(_loss, config))))
  return grad.lower(params, tokens, mask).compile().as_text()


def test_on_a_tpu_the_pass_forms_no_score_array_of_the_sequence():
  length = 384
  square = re.compile(r"f32\[[\d,]*\b%d,%d\]" % (length, length))
  assert square.search(_tpu_hlo("xla", length))  # the XLA path forms them
  hlo = _tpu_hlo("splash", length)
  assert "tpu_custom_call" in hlo
  assert not square.search(hlo)
