"""Test setup: an 8-device CPU mesh, created before jax is imported, and a
compilation cache shared by the tests of one run (tests that rebuild the same
jitted step compile it once), removed when the test process exits."""
import atexit
import os
import shutil
import sys
import tempfile

# 8 fake CPU devices. Their collectives rendezvous across threads; on a busy
# 2-core machine a thread can wait long, so XLA's default deadline (after which
# it aborts the process) is lifted well above any test's duration.
_FLAGS = ("--xla_force_host_platform_device_count=8",
          "--xla_cpu_collective_call_warn_stuck_timeout_seconds=300",
          "--xla_cpu_collective_call_terminate_timeout_seconds=1800",
          "--xla_cpu_collective_timeout_seconds=1800")
for _flag in _FLAGS:
  if _flag.split("=")[0] not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{_flag} {os.environ.get('XLA_FLAGS', '')}"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The XLA:CPU flags the training and benchmark entry points run with.
from genenv_jax import cpu_flags  # pylint: disable=g-import-not-at-top,wrong-import-position

cpu_flags.use_library_fusions()

import jax  # pylint: disable=g-import-not-at-top

_CACHE_DIR = tempfile.mkdtemp(prefix="genenv_jax_test_xla_cache_")
atexit.register(shutil.rmtree, _CACHE_DIR, ignore_errors=True)
jax.config.update("jax_compilation_cache_dir", _CACHE_DIR)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
