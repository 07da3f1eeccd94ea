"""Entry point: python -m train.main --config=configs/default.py --workdir=DIR.

Config fields can be overridden on the command line, e.g.
  --config.curriculum.alpha=0.3 --config.coevolve.num_steps=50
Re-running the same command on an existing workdir resumes from its latest
checkpoint.
"""

from absl import app
from absl import flags
from absl import logging
import jax
from ml_collections import config_flags

from train import loop

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file(
    "config", "configs/default.py", "Path to an ml_collections config file.",
    lock_config=True)
flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics and "
                    "the report.")
flags.mark_flags_as_required(["workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  logging.info("JAX devices: %s", jax.devices())
  summary = loop.train_and_evaluate(FLAGS.config, FLAGS.workdir)
  print("Report:", summary.get("plots"))


if __name__ == "__main__":
  app.run(main)
