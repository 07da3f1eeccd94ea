"""Entry point: python -m train.main --config=configs/default.py --workdir=DIR.

Config fields can be overridden on the command line, e.g.
  --config.curriculum.alpha=0.3 --config.coevolve.num_steps=50
Re-running the same command on an existing workdir resumes from its latest
checkpoint.

On several hosts (a TPU pod slice) every host runs the same command;
`--distributed` makes them one JAX job (`jax.distributed.initialize`) before
any device is touched. Its default, auto, does so when the environment names
more than one host (TPU_WORKER_HOSTNAMES or TPU_PROCESS_ADDRESSES) or a
coordinator (JAX_COORDINATOR_ADDRESS); on one host it does nothing.

Several processes on one machine (`launch/multiprocess.sh N`) name the job
themselves: `--coordinator_address=HOST:PORT --num_processes=N
--process_id=I` (or the variables JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES,
JAX_PROCESS_ID), each process with its own share of the CPU devices. Their
CPU collectives then go through gloo.
"""

from __future__ import annotations

import logging as python_logging
import os
import sys
from typing import Callable, Mapping

from absl import app
from absl import flags
from absl import logging
import jax
from ml_collections import config_flags

from train.runtime import cpu_flags
from train.runtime import peer_watch
from train.runtime import quiet_start

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file(
    "config", "configs/default.py", "Path to an ml_collections config file.",
    lock_config=True)
flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics and "
                    "the report.")
flags.DEFINE_enum("distributed", "auto", ["auto", "true", "false"],
                  "Initialise multi-host JAX: true, false, or auto (when the "
                  "environment names several hosts or a coordinator).")
flags.DEFINE_bool("library_logs", False, "Show the INFO logs of the libraries "
                  "(orbax, tensorflow-datasets, TensorFlow, JAX) and the "
                  "driver's own; off, the console shows progress lines and "
                  "warnings.")
flags.DEFINE_string("coordinator_address", "",
                    "HOST:PORT of process 0 of a job this command names "
                    "itself (default: $JAX_COORDINATOR_ADDRESS).")
flags.DEFINE_integer("num_processes", 0, "Processes in that job (default: "
                     "$JAX_NUM_PROCESSES).")
flags.DEFINE_integer("process_id", -1, "This process's index in it, 0 .. "
                     "num_processes - 1 (default: $JAX_PROCESS_ID).")
flags.DEFINE_string("compilation_cache_dir", "auto",
                    "Persistent XLA compilation cache: a directory, auto "
                    "(<workdir>/xla_cache) or none.")
flags.DEFINE_integer("heartbeat_timeout_s", 120,
                     "Multi-process jobs: seconds without a heartbeat from a "
                     "process (a hung one, or a lost host) before every "
                     "other one stops, naming it. Several processes sharing "
                     "a busy machine's cores can miss heartbeats for minutes "
                     "while they compile: launch/multiprocess.sh passes 900 "
                     "(a process that ends is noticed at once all the same: "
                     "--lost_host_timeout_s).")
flags.DEFINE_integer("lost_host_timeout_s", 60,
                     "Multi-process jobs: each process holds a connection to "
                     "process 0 (train/runtime/peer_watch.py). A process that ends "
                     "closes it, noticed at once; a host that stops "
                     "answering its TCP keepalive probes (its kernel answers "
                     "them, so a busy process never misses one) is declared "
                     "lost after this many seconds. Every other process "
                     "then exits with status 1, naming it. 0: no watch.")
flags.DEFINE_integer("initialization_timeout_s", 300,
                     "Multi-process jobs: seconds each process waits at "
                     "start-up for all of them to connect.")
flags.DEFINE_integer("barrier_timeout_s", 3600,
                     "Multi-process jobs: seconds a process waits at a "
                     "barrier for the others (e.g. while process 0 prepares "
                     "the seed data).")
flags.mark_flags_as_required(["workdir"])

# Variables holding a comma-separated list of the job's hosts.
HOST_LIST_VARIABLES = ("TPU_WORKER_HOSTNAMES", "TPU_PROCESS_ADDRESSES")
COORDINATOR_VARIABLE = "JAX_COORDINATOR_ADDRESS"
NUM_PROCESSES_VARIABLE = "JAX_NUM_PROCESSES"
PROCESS_ID_VARIABLE = "JAX_PROCESS_ID"


def named_job(coordinator_address: str = "", num_processes: int = 0,
              process_id: int = -1,
              environ: Mapping[str, str] = os.environ) -> dict:
  """`jax.distributed.initialize` arguments of a job the command line (or,
  for what it leaves out, the JAX_* variables) names: {} when neither names
  one; else coordinator_address, num_processes and process_id.

  Raises ValueError naming the flag that is missing or out of range.
  """
  address = coordinator_address or environ.get(COORDINATOR_VARIABLE, "")
  count = num_processes or int(environ.get(NUM_PROCESSES_VARIABLE, 0) or 0)
  index = process_id if process_id >= 0 else int(
      environ.get(PROCESS_ID_VARIABLE, -1) or -1)
  if not count and index < 0:
    return {}
  if not address or count < 1 or not 0 <= index < count:
    raise ValueError(
        f"--coordinator_address={address!r} --num_processes={count} "
        f"--process_id={index}: a job named here needs all three, with "
        "0 <= process_id < num_processes (or the variables "
        f"{COORDINATOR_VARIABLE}, {NUM_PROCESSES_VARIABLE}, "
        f"{PROCESS_ID_VARIABLE}).")
  return {"coordinator_address": address, "num_processes": count,
          "process_id": index}


def job_timeouts(heartbeat_s: int, initialization_s: int,
                 lost_host_s: int = 0) -> dict:
  """`jax.distributed.initialize`'s timeout arguments. Raises ValueError
  naming a flag that is not positive (--lost_host_timeout_s: too short for
  its keepalive probes, 0 allowed)."""
  for flag, value in (("--heartbeat_timeout_s", heartbeat_s),
                      ("--initialization_timeout_s", initialization_s)):
    if value <= 0:
      raise ValueError(f"{flag}={value}: expected a positive number of "
                       "seconds.")
  if lost_host_s:
    peer_watch.keepalive_options(lost_host_s)
  return {"heartbeat_timeout_seconds": heartbeat_s,
          "initialization_timeout": initialization_s}


def multi_host_reason(environ: Mapping[str, str]) -> str | None:
  """Which variable of `environ` shows a multi-host job, or None."""
  for name in HOST_LIST_VARIABLES:
    hosts = [h for h in environ.get(name, "").split(",") if h.strip()]
    if len(hosts) > 1:
      return f"{name} lists {len(hosts)} hosts"
  if environ.get(COORDINATOR_VARIABLE):
    return f"{COORDINATOR_VARIABLE} is set"
  return None


def maybe_initialize_distributed(
    mode: str, environ: Mapping[str, str] = os.environ,
    initialize: Callable[..., None] | None = None,
    job: Mapping[str, object] | None = None,
    timeouts: Mapping[str, int] | None = None) -> bool:
  """Calls `initialize(**job, **timeouts)` (default
  `jax.distributed.initialize`; `timeouts` from `job_timeouts`) for mode
  "true", or for "auto" on several hosts or when `job` (a `named_job`) names
  the processes. XLA:CPU's collectives across processes go through gloo
  (other backends ignore that setting).

  Returns whether it did. Raises ValueError naming an unknown mode.
  """
  if mode not in ("auto", "true", "false"):
    raise ValueError(f"--distributed={mode!r}; expected auto, true or false.")
  job = dict(job or {})
  reason = None
  if mode == "auto":
    reason = (f"{job['num_processes']} processes named"
              if job else multi_host_reason(environ))
  if mode == "true" or reason:
    logging.info("Initialising multi-host JAX (%s).",
                 reason or "--distributed=true")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    (initialize or jax.distributed.initialize)(**job, **(timeouts or {}))
    return True
  return False


def quiet_library_logs() -> None:
  """Warnings and errors only, from Python loggers (absl's verbosity sets the
  root logger's level) and from TensorFlow's C++ start-up (read when
  TensorFlow is first imported, so call this before); tensorflow-datasets'
  warnings are dropped too."""
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  logging.set_verbosity(logging.WARNING)
  # tensorflow-datasets warns on every load of a builder config made in code
  # ("Using custom data configuration"), which is how the seed data is built.
  logging.get_absl_handler().addFilter(
      lambda record: record.levelno >= python_logging.ERROR
      or "tensorflow_datasets" not in record.pathname)
def compilation_cache_dir(flag: str, workdir: str,
                          gloo_job: bool = False) -> str | None:
  """The persistent compilation cache's directory for --compilation_cache_dir
  `flag`: auto is <workdir>/xla_cache, so a resumed run reads the programs
  its first run compiled; none turns the cache off.

  A multi-process job whose collectives go through gloo (`gloo_job`: CPU
  devices) runs without it (auto is none there, a directory is refused with
  a ValueError naming the flag): JAX keys the cache per process and writes
  it from process 0 only, so a rerun's process 0 would read its programs
  while the others compile theirs, and gloo gives up on a collective whose
  processes arrive more than 30 s apart (a limit jaxlib does not let one
  set). Compiling in every process keeps them together.
  """
  if flag == "none" or (gloo_job and flag == "auto"):
    return None
  if gloo_job:
    raise ValueError(
        f"--compilation_cache_dir={flag}: a multi-process job on CPU "
        "devices cannot use a persistent compilation cache (only process 0 "
        "would read it, reaching the job's first collectives minutes before "
        "the others, past gloo's 30 s); use auto or none.")
  path = workdir.rstrip("/") + "/xla_cache" if flag == "auto" else flag
  return path if "://" in path else os.path.abspath(path)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  # Before JAX initialises a backend.
  cpu_flags.use_project_settings(devices=FLAGS.config.cpu_devices)
  if not FLAGS.library_logs:
    quiet_library_logs()
    # No TPU start-up errors on a CPU host; TensorFlow (which the metric
    # writers import) imported here without its start-up INFO lines.
    quiet_start.quiet_start()
  timeouts = job_timeouts(FLAGS.heartbeat_timeout_s,
                          FLAGS.initialization_timeout_s,
                          FLAGS.lost_host_timeout_s)
  multi_process = maybe_initialize_distributed(
      FLAGS.distributed,
      job=named_job(FLAGS.coordinator_address, FLAGS.num_processes,
                    FLAGS.process_id),
      timeouts=timeouts)
  if multi_process:
    peer_watch.start(FLAGS.lost_host_timeout_s,
                     FLAGS.initialization_timeout_s)
  cache_dir = compilation_cache_dir(
      FLAGS.compilation_cache_dir, FLAGS.workdir,
      gloo_job=multi_process and jax.default_backend() == "cpu")
  if cache_dir:
    jax.config.update("jax_compilation_cache_dir", cache_dir)
  # Imported here: the driver pulls in TensorFlow (through clu), which this
  # module's flags and multi-host set-up do not need.
  from train import loop  # pylint: disable=g-import-not-at-top
  from train.runtime import multihost  # pylint: disable=g-import-not-at-top
  from train.runtime import preemption  # pylint: disable=g-import-not-at-top
  multihost.BARRIER_TIMEOUT_MS = FLAGS.barrier_timeout_s * 1000
  logging.info("JAX process %d of %d; devices: %s", jax.process_index(),
               jax.process_count(), jax.devices())
  try:
    summary = loop.train_and_evaluate(FLAGS.config, FLAGS.workdir)
  except preemption.Preempted as e:
    peer_watch.end("preempted")
    print(e, flush=True)
    sys.stderr.flush()
    # Every process saved the same step; none waits for another now.
    os._exit(preemption.EXIT_STATUS)  # pylint: disable=protected-access
  except BaseException:  # pylint: disable=broad-except
    if jax.process_count() == 1:
      raise
    # A normal exit would wait at jax.distributed's shutdown barrier for
    # processes that are themselves waiting for this one in a collective:
    # tell them and leave at once, so the job's launcher sees the failure.
    peer_watch.exit_on_error()
  peer_watch.end("done")
  print("Report:", summary.get("plots"))


if __name__ == "__main__":
  app.run(main)
