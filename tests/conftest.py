"""Test setup: an 8-device CPU mesh, created before jax is imported, and a
compilation cache shared by the tests of one run, across its worker processes
(tests that rebuild the same jitted step compile it once), removed when the
run ends."""
import atexit
import gc
import os
import shutil
import sys
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The XLA:CPU settings the training and benchmark entry points run with, but
# 8 CPU devices whatever the machine's cores, so that meshes of every test
# shape fit (their collectives' deadlines lifted, as there: on a busy 2-core
# machine one device's thread can wait long for another's).
from train.runtime import cpu_flags  # pylint: disable=g-import-not-at-top,wrong-import-position

cpu_flags.use_one_device_per_core(cores=8)
cpu_flags.use_library_fusions()
# Tests compile many small programs, each run briefly: their machine code is
# compiled fast (the HLO programs are the same; train/runtime/cpu_flags.py).
# Subprocesses the tests start inherit it through XLA_FLAGS.
cpu_flags.use_fast_compiles()

import jax  # pylint: disable=g-import-not-at-top

# One cache for the whole run: the pytest process creates it (and removes it
# when it exits, the last to do so); its xdist workers inherit the variable,
# so a program one worker compiled is a cache hit in the other. A size limit
# makes JAX lock the directory around each read and write, so that one worker
# never reads an entry the other is still writing. Only programs that took a
# second or more to compile are kept: keeping all of them took that lock so
# often that the workers waited on each other (docs/testing.md).
_CACHE_ENV = "GENENV_JAX_TEST_XLA_CACHE"
if _CACHE_ENV not in os.environ:
  os.environ[_CACHE_ENV] = tempfile.mkdtemp(prefix="genenv_jax_test_xla_cache_")
  atexit.register(shutil.rmtree, os.environ[_CACHE_ENV], ignore_errors=True)
jax.config.update("jax_compilation_cache_dir", os.environ[_CACHE_ENV])
jax.config.update("jax_compilation_cache_max_size", 16 * 2**30)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)


import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position


@pytest.hookimpl(tryfirst=True)  # before the terminal reporter reads it
def pytest_configure(config):
  """Every skipped test is listed with its reason in the run's summary: a
  test that skips tested nothing, and the run says so."""
  if not set("saA") & set(config.option.reportchars):
    config.option.reportchars += "s"


# The test files that take longest (their module fixtures make whole runs),
# longest first, from `./launch/test.sh --durations=0` (docs/testing.md). They
# are collected first, so that pytest-xdist, which hands out files in collection
# order, starts them early and the workers finish together.
LONGEST_FIRST = (
    "test_multiprocess.py", "test_bfcl_multi_turn_run.py",
    "test_api_bank_training.py", "test_alfworld.py", "test_maze_run.py",
    "test_travelplanner_training.py",
    "test_train.py", "test_coevolve.py", "test_lora.py",
    "test_gcs_workdir.py", "test_faults.py", "test_seed.py", "test_preemption.py",
    "test_compile_check.py", "test_text_e2e.py", "test_episodes.py",
    "test_arms.py", "test_scripted.py", "test_two_process_faults.py",
    "test_evaluate_sharded.py",
)


def pytest_collection_modifyitems(items):
  """Moves the files of LONGEST_FIRST to the front, in its order; the others
  keep theirs."""
  here = os.path.dirname(os.path.abspath(__file__))
  missing = [n for n in LONGEST_FIRST if not os.path.exists(os.path.join(here, n))]
  if missing:
    raise pytest.UsageError(f"tests/conftest.py LONGEST_FIRST names {missing}, "
                            "which are not in tests/")
  rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
  items.sort(key=lambda item: rank.get(os.path.basename(str(item.fspath)),
                                       len(rank)))


# A worker's resident memory past which, after a test file, it drops the
# programs jax holds compiled in memory (and what only they kept alive).
RELEASE_ABOVE_BYTES = 3 * 2**30


def _resident_bytes() -> int:
  """This process's resident memory (Linux's /proc; 0 where there is none)."""
  try:
    with open("/proc/self/statm") as f:
      return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
  except (OSError, ValueError, IndexError):
    return 0


@pytest.fixture(scope="module", autouse=True)
def release_compiled_programs():
  """After a test file, a worker holding more than RELEASE_ABOVE_BYTES drops
  its compiled programs (the session's compilation cache on disk keeps those
  that took a second or more to compile): a worker running many files would
  otherwise keep every one's, and the suite's real-model run needs the room.
  Below it, programs stay for the next files to reuse."""
  yield
  if _resident_bytes() > RELEASE_ABOVE_BYTES:
    jax.clear_caches()
    gc.collect()


@pytest.fixture(scope="session")
def smollm2_dir():
  """The SmolLM2-135M-Instruct HF directory (fp32 safetensors, config,
  generation config, tokenizer), built once per machine into the cache of
  `train.tools.real_models` (~30 s the first time)."""
  from train.tools import real_models  # pylint: disable=g-import-not-at-top
  return str(real_models.smollm2_dir())


@pytest.fixture(scope="session")
def smollm2_first4_dir():
  """SmolLM2-135M-Instruct cut to its first 4 of 30 decoder layers (its
  vocabulary, chat template and weights; about 170 MB), built once per machine
  from the full directory by `train.tools.real_models`."""
  from train.tools import real_models  # pylint: disable=g-import-not-at-top
  return str(real_models.smollm2_dir(num_layers=4))


@pytest.fixture(scope="session")
def qwen_tokenizer_dir():
  """A directory of real Qwen tokenizer files (Qwen3's vocabulary), copied
  once per machine into the cache of `train.tools.real_models`."""
  from train.tools import real_models  # pylint: disable=g-import-not-at-top
  return str(real_models.qwen_tokenizer_dir())


@pytest.fixture(scope="session")
def live_run(tmp_path_factory):
  """(tfds_dir, workdir) of the session's finished live smoke run
  (tests/live_run.py), made once for all xdist workers."""
  from tests import live_run as live  # pylint: disable=g-import-not-at-top
  root = tmp_path_factory.getbasetemp()
  if os.environ.get("PYTEST_XDIST_WORKER"):
    root = root.parent  # shared by the workers
  return live.shared_run(str(root))
