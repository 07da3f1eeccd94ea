"""XLA:CPU settings this project runs with.

XLA's CPU backend can hand dots and reductions to its YNNPACK library fusions
instead of Eigen matmuls and its own emitted loops. On this project's
benchmarks (`python -m train.bench.compare`, 2-core x86 CPU) that speeds up forward +
backward at both model presets and leaves sampling about where it was. The
third kind, elementwise fusions, is left off: with it XLA fails to compile
some of this project's programs ("unsupported layout in YNN fusion").

XLA:CPU also shows the host as one device unless told otherwise, and then
splits each op's work across all cores, so every small op of a decode step
pays for handing out and joining that work. With one CPU device per core (up
to a power of two, see `devices_for_cores`) the runs' `data` mesh axis splits
the batch across cores instead, each device running the same ops on its share
of the rows. That speeds up sampling most; with its weights replicated on
every device the `small` preset's step is slower, which the benchmarks meet
by splitting its weights over the devices instead (docs/performance.md, "Devices and layouts").
Collectives between CPU devices meet across threads; on a
loaded machine one thread can wait long for another, and XLA aborts the
process once its default deadline passes, so the deadlines are lifted too.

Both only change how XLA:CPU compiles and runs; other backends ignore them.
Each is added to XLA_FLAGS unless XLA_FLAGS already sets it (an explicit
choice wins). XLA reads XLA_FLAGS once, when JAX first initialises a backend:
call these before any computation.
"""

from __future__ import annotations

import os
from typing import MutableMapping

YNN_FUSIONS = ("LIBRARY_FUSION_TYPE_DOT", "LIBRARY_FUSION_TYPE_REDUCE")
YNN_FLAG = "--xla_cpu_experimental_ynn_fusion_type"
DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
MAX_DEVICES = 8
COLLECTIVE_DEADLINES = (
    ("--xla_cpu_collective_call_warn_stuck_timeout_seconds", 300),
    ("--xla_cpu_collective_call_terminate_timeout_seconds", 1800),
    ("--xla_cpu_collective_timeout_seconds", 1800),
)


def _add_unless_set(environ: MutableMapping[str, str], flag: str,
                    value) -> None:
  flags = environ.get("XLA_FLAGS", "")
  if flag in flags:
    return
  environ["XLA_FLAGS"] = f"{flags} {flag}={value}".strip()


def use_library_fusions(environ: MutableMapping[str, str] = os.environ
                        ) -> None:
  """Adds the YNNPACK fusion flag to environ["XLA_FLAGS"] unless set."""
  _add_unless_set(environ, YNN_FLAG, ",".join(YNN_FUSIONS))


def host_cores() -> int:
  """The cores this process may run on."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:  # not on Linux
    return os.cpu_count() or 1


def devices_for_cores(cores: int) -> int:
  """The device count for `cores` cores: the largest power of two that is
  at most `cores` and MAX_DEVICES, so that the batches of the shipped configs
  (powers of two times small factors, 8 seed prompts per step at the least)
  split evenly over the `data` axis on any machine."""
  if cores < 1:
    raise ValueError(f"cores={cores} must be >= 1.")
  count = 1
  while count * 2 <= min(cores, MAX_DEVICES):
    count *= 2
  return count


def use_one_device_per_core(environ: MutableMapping[str, str] = os.environ,
                            cores: int | None = None,
                            devices: int = 0) -> None:
  """Makes XLA:CPU show `devices` devices, or when it is 0
  `devices_for_cores(cores)` (cores default: `host_cores()`), unless XLA_FLAGS
  sets a device count; and lifts the collectives' deadlines."""
  if devices < 0:
    raise ValueError(f"cpu_devices={devices} must be >= 0 (0: one per core).")
  _add_unless_set(environ, DEVICE_COUNT_FLAG, devices or devices_for_cores(
      host_cores() if cores is None else cores))
  for flag, seconds in COLLECTIVE_DEADLINES:
    _add_unless_set(environ, flag, seconds)


def with_device_count(flags: str, count: int) -> str:
  """XLA_FLAGS text `flags` with its device count (if any) replaced by
  `count`."""
  kept = [flag for flag in flags.split()
          if flag.split("=", 1)[0] != DEVICE_COUNT_FLAG]
  return " ".join(kept + [f"{DEVICE_COUNT_FLAG}={count}"])


def device_count(flags: str) -> int | None:
  """The device count XLA_FLAGS text `flags` sets, or None."""
  for flag in flags.split():
    name, _, value = flag.partition("=")
    if name == DEVICE_COUNT_FLAG:
      return int(value)
  return None


def flags_per_process(num_processes: int,
                      environ: MutableMapping[str, str] = os.environ) -> str:
  """XLA_FLAGS for each of `num_processes` processes sharing this machine's
  devices evenly: the total is what XLA_FLAGS sets, else
  `devices_for_cores(host_cores())`.

  Raises ValueError when the total does not split evenly.
  """
  flags = environ.get("XLA_FLAGS", "")
  total = device_count(flags) or devices_for_cores(host_cores())
  if num_processes < 1 or total % num_processes:
    raise ValueError(
        f"{total} CPU devices do not split evenly over {num_processes} "
        f"processes (set the total with XLA_FLAGS={DEVICE_COUNT_FLAG}=T).")
  return with_device_count(flags, total // num_processes)


# LLVM's lowest optimisation level and none of its expensive passes: XLA's
# HLO passes (fusion, sharding, buffer assignment) are unchanged, so the
# programs and their memory are the same (same optimised HLO and buffer
# sizes, checked on a sharded program); their machine code compiles faster
# and runs slower. For tests, whose small programs spend more time compiling
# than running.
FAST_COMPILE_FLAGS = (
    ("--xla_backend_optimization_level", 0),
    ("--xla_llvm_disable_expensive_passes", "true"),
)


def use_fast_compiles(environ: MutableMapping[str, str] = os.environ
                      ) -> None:
  """Adds FAST_COMPILE_FLAGS to environ["XLA_FLAGS"], each unless set."""
  for flag, value in FAST_COMPILE_FLAGS:
    _add_unless_set(environ, flag, value)


def use_project_settings(environ: MutableMapping[str, str] = os.environ,
                         devices: int = 0) -> None:
  """Both of the above: what the entry points (demo, benchmarks) run with;
  `devices` is a run's config.cpu_devices (0: one per core)."""
  use_library_fusions(environ)
  use_one_device_per_core(environ, devices=devices)


if __name__ == "__main__":
  # `python -m train.runtime.cpu_flags N`: the XLA_FLAGS each of N processes on this
  # machine runs with (launch/multiprocess.sh).
  import sys  # pylint: disable=g-import-not-at-top
  print(flags_per_process(int(sys.argv[1])))
