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
"""

from __future__ import annotations

import os
from typing import Callable, Mapping

from absl import app
from absl import flags
from absl import logging
import jax
from ml_collections import config_flags

from train import cpu_flags

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
flags.mark_flags_as_required(["workdir"])

# Variables holding a comma-separated list of the job's hosts.
HOST_LIST_VARIABLES = ("TPU_WORKER_HOSTNAMES", "TPU_PROCESS_ADDRESSES")
COORDINATOR_VARIABLE = "JAX_COORDINATOR_ADDRESS"


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
    initialize: Callable[[], None] | None = None) -> bool:
  """Calls `initialize()` (default `jax.distributed.initialize`) for mode
  "true", or for "auto" on several hosts.

  Returns whether it did. Raises ValueError naming an unknown mode.
  """
  if mode not in ("auto", "true", "false"):
    raise ValueError(f"--distributed={mode!r}; expected auto, true or false.")
  reason = multi_host_reason(environ) if mode == "auto" else None
  if mode == "true" or reason:
    logging.info("Initialising multi-host JAX (%s).",
                 reason or "--distributed=true")
    (initialize or jax.distributed.initialize)()
    return True
  return False


def quiet_library_logs() -> None:
  """Warnings and errors only, from Python loggers (absl's verbosity sets the
  root logger's level) and from TensorFlow's C++ start-up (read when
  TensorFlow is first imported, so call this before)."""
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  logging.set_verbosity(logging.WARNING)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  cpu_flags.use_project_settings()  # before JAX initialises a backend
  if not FLAGS.library_logs:
    quiet_library_logs()
  maybe_initialize_distributed(FLAGS.distributed)
  # Imported here: the driver pulls in TensorFlow (through clu), which this
  # module's flags and multi-host set-up do not need.
  from train import loop  # pylint: disable=g-import-not-at-top
  logging.info("JAX process %d of %d; devices: %s", jax.process_index(),
               jax.process_count(), jax.devices())
  summary = loop.train_and_evaluate(FLAGS.config, FLAGS.workdir)
  print("Report:", summary.get("plots"))


if __name__ == "__main__":
  app.run(main)
