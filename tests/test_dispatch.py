"""The dispatch window: bounded run-ahead, and the CPU collective hang it
prevents (reproduced in a subprocess with a short XLA abort deadline, so a
regression fails this test instead of stalling the suite)."""
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import pytest

from train.runtime import dispatch

_LOOP = textwrap.dedent("""
    import os, sys
    os.environ["XLA_FLAGS"] = (
        "--xla_force_host_platform_device_count=8 "
        "--xla_cpu_collective_call_warn_stuck_timeout_seconds=5 "
        "--xla_cpu_collective_call_terminate_timeout_seconds=30 "
        "--xla_cpu_collective_timeout_seconds=30")
    os.environ["JAX_PLATFORMS"] = "cpu"
    sys.path.insert(0, sys.argv[1])
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    from train.runtime import dispatch
    mesh = jax.make_mesh((8,), ("data",))
    rows, whole = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
    w = jax.device_put(jnp.ones((128, 128)), whole)

    @jax.jit
    def step(w, x):  # the gradient all-reduces over the 8 devices
      loss, grad = jax.value_and_grad(
          lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w)
      return w - 1e-3 * grad, loss

    window = dispatch.DispatchWindow(int(sys.argv[2]))
    rng = np.random.default_rng(0)
    for _ in range(1500):
      x = jax.device_put(rng.random((64, 128), np.float32), rows)
      w, loss = step(w, x)
      window.push(loss)
    print("finished", float(loss))
""")


def test_window_keeps_at_most_depth_steps_pending():
  window = dispatch.DispatchWindow(depth=2)
  outputs = []
  for i in range(5):
    out = {"loss": jnp.float32(i) * 2, "n": jnp.int32(i)}
    window.push(out)
    outputs.append(out)
    assert len(window) == min(i + 1, 2)
  # Everything but the two newest has been waited for.
  for out in outputs[:-2]:
    assert out["loss"].is_ready()


def test_window_rejects_negative_depth():
  with pytest.raises(ValueError, match="depth"):
    dispatch.DispatchWindow(-1)


@pytest.mark.skipif(jax.default_backend() != "cpu",
                    reason="the hang is specific to XLA's CPU collectives")
def test_many_collective_steps_in_a_loop_finish_with_the_window():
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  done = subprocess.run([sys.executable, "-c", _LOOP, root, "1"], env=env,
                        capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  assert "finished" in done.stdout
