"""genenv_jax.cpu_flags: the XLA:CPU flag the entry points (and this suite,
through conftest) run with."""

import os

from genenv_jax import cpu_flags


def test_adds_the_library_fusions_and_keeps_other_flags():
  environ = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
  cpu_flags.use_library_fusions(environ)
  flags = environ["XLA_FLAGS"].split()
  assert flags[0] == "--xla_force_host_platform_device_count=8"
  assert flags[1] == (cpu_flags.YNN_FLAG + "=LIBRARY_FUSION_TYPE_DOT,"
                      "LIBRARY_FUSION_TYPE_REDUCE")
  cpu_flags.use_library_fusions(environ)  # a second call adds nothing
  assert environ["XLA_FLAGS"].split() == flags
  empty = {}
  cpu_flags.use_library_fusions(empty)
  assert empty["XLA_FLAGS"] == flags[1]


def test_an_explicit_choice_is_kept():
  mine = f"{cpu_flags.YNN_FLAG}=LIBRARY_FUSION_TYPE_DOT"
  environ = {"XLA_FLAGS": mine}
  cpu_flags.use_library_fusions(environ)
  assert environ["XLA_FLAGS"] == mine


def test_this_suite_runs_with_the_flag():
  assert cpu_flags.YNN_FLAG in os.environ["XLA_FLAGS"]
