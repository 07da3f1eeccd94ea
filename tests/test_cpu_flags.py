"""train.runtime.cpu_flags: the XLA:CPU flags the entry points (and this suite,
through conftest) run with."""

import os

import pytest

from train.runtime import cpu_flags


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


def test_devices_for_cores_is_the_largest_power_of_two_up_to_the_cap():
  counts = [cpu_flags.devices_for_cores(c) for c in (1, 2, 3, 4, 6, 8, 12, 96)]
  assert counts == [1, 2, 2, 4, 4, 8, 8, 8]
  with pytest.raises(ValueError, match="cores=0"):
    cpu_flags.devices_for_cores(0)


def test_one_device_per_core_sets_the_count_and_lifts_the_deadlines():
  environ = {"XLA_FLAGS": "--xla_dump_to=/tmp/x"}
  cpu_flags.use_one_device_per_core(environ, cores=6)
  flags = dict(flag.split("=", 1) for flag in environ["XLA_FLAGS"].split())
  assert flags["--xla_dump_to"] == "/tmp/x"
  assert flags[cpu_flags.DEVICE_COUNT_FLAG] == "4"
  for flag, seconds in cpu_flags.COLLECTIVE_DEADLINES:
    assert flags[flag] == str(seconds)
  before = environ["XLA_FLAGS"]
  cpu_flags.use_one_device_per_core(environ, cores=5)  # already set: kept
  assert environ["XLA_FLAGS"] == before


def test_one_device_per_core_defaults_to_the_cores_this_process_may_use():
  environ = {}
  cpu_flags.use_one_device_per_core(environ)
  count = cpu_flags.devices_for_cores(cpu_flags.host_cores())
  assert (f"{cpu_flags.DEVICE_COUNT_FLAG}={count}"
          in environ["XLA_FLAGS"].split())
  explicit = {"XLA_FLAGS": f"{cpu_flags.DEVICE_COUNT_FLAG}=1"}
  cpu_flags.use_one_device_per_core(explicit)
  counts = [flag for flag in explicit["XLA_FLAGS"].split()
            if flag.startswith(cpu_flags.DEVICE_COUNT_FLAG)]
  assert counts == [f"{cpu_flags.DEVICE_COUNT_FLAG}=1"]


def test_a_configured_device_count_replaces_one_per_core():
  environ = {}
  cpu_flags.use_one_device_per_core(environ, cores=8, devices=1)
  assert cpu_flags.device_count(environ["XLA_FLAGS"]) == 1
  explicit = {"XLA_FLAGS": f"{cpu_flags.DEVICE_COUNT_FLAG}=4"}
  cpu_flags.use_project_settings(explicit, devices=1)  # XLA_FLAGS wins
  assert cpu_flags.device_count(explicit["XLA_FLAGS"]) == 4
  with pytest.raises(ValueError, match="cpu_devices=-1"):
    cpu_flags.use_one_device_per_core({}, devices=-1)


def test_project_settings_are_both():
  environ = {}
  cpu_flags.use_project_settings(environ)
  assert cpu_flags.YNN_FLAG in environ["XLA_FLAGS"]
  assert cpu_flags.DEVICE_COUNT_FLAG in environ["XLA_FLAGS"]


def test_with_device_count_replaces_only_the_count():
  flags = (f"--xla_dump_to=/tmp/x {cpu_flags.DEVICE_COUNT_FLAG}=8 "
           f"{cpu_flags.YNN_FLAG}=A")
  assert cpu_flags.with_device_count(flags, 1).split() == [
      "--xla_dump_to=/tmp/x", f"{cpu_flags.YNN_FLAG}=A",
      f"{cpu_flags.DEVICE_COUNT_FLAG}=1"]
  assert (cpu_flags.with_device_count("", 2)
          == f"{cpu_flags.DEVICE_COUNT_FLAG}=2")


def test_fast_compiles_are_added_unless_set():
  environ = {"XLA_FLAGS": "--xla_backend_optimization_level=2 --a=1"}
  cpu_flags.use_fast_compiles(environ)
  flags = environ["XLA_FLAGS"].split()
  assert flags == ["--xla_backend_optimization_level=2", "--a=1",
                   "--xla_llvm_disable_expensive_passes=true"]
  # This suite compiles with them (tests/conftest.py).
  assert "--xla_backend_optimization_level=0" in os.environ["XLA_FLAGS"]
