"""A bound on how many dispatched steps may run ahead of the host.

JAX dispatches jitted calls asynchronously, so a Python training loop can
queue hundreds of steps before the first finishes. On XLA's CPU backend with
several (forced host-platform) devices, every device of a multi-device program
runs on a shared thread pool and meets the others at each collective; with
many such programs queued, the pool can fill with participants of later steps
while one participant of an earlier step waits for a thread, and the process
hangs until XLA aborts it. Keeping one step in flight while the next is
dispatched avoids the hang and costs nothing measurable on accelerators, where
the host only needs to stay a step ahead.
"""
import collections

import jax


class DispatchWindow:
  """Blocks until at most `depth` pushed steps are still running.

  Usage, in a loop: `state, out = step(state); window.push(out)`.
  """

  def __init__(self, depth: int = 1):
    if depth < 0:
      raise ValueError(f"DispatchWindow depth must be >= 0, got {depth}.")
    self._depth = depth
    self._pending = collections.deque()

  def push(self, outputs) -> None:
    """Records one step's outputs (any pytree of arrays), then waits for the
    oldest recorded steps until no more than `depth` remain unfinished."""
    leaves = jax.tree.leaves(outputs)
    if leaves:
      self._pending.append(leaves[0])
    while len(self._pending) > self._depth:
      self._pending.popleft().block_until_ready()

  def __len__(self) -> int:
    return len(self._pending)
