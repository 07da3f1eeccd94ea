"""The config field a run's seed data arrives in, and whether a directory
holds what the run's domain reads (genenv_jax/domains/seed_data.py).

  python -m train.tools.seed_data --config=CONFIG [--config.FIELD=VALUE ...]
      prints the field (e.g. `data.source_dir`, `task.data_dir`): the
      launchers set `--config.<field>=DIR` from their --seed_data
  python -m train.tools.seed_data --config=CONFIG --dir=DIR
  python -m train.tools.seed_data --config=CONFIG --listing=FILE --root=gs://B/D
      also checks the directory's file names: a local DIR, or the lines of a
      recursive listing (`gcloud storage ls --recursive gs://B/D`; FILE "-"
      reads standard input) of the bucket directory ROOT

Exit status: 0 (the field printed), 2 when the directory lacks what the
domain reads (the message names the field, the path and the files
expected), 4 when the domain reads no seed data (it draws or builds its
seeds: drop --seed_data), 1 on any other error.
"""

from __future__ import annotations

import sys

from absl import app
from absl import flags
from ml_collections import config_flags

from genenv_jax import domains
from genenv_jax.domains import seed_data
from genenv_jax.scoring import InputError

FLAGS = flags.FLAGS
NO_SEED_DATA = 4
BAD_DATA = 2


def field_of(config) -> str | None:
  """The dotted field under `config` the domain's seed data arrives in;
  None when the domain reads none."""
  spec = domains.registered(config.task.name).seed_data
  return spec.field if spec else None


def check(config, path: str, names) -> str | None:
  """None when the run's domain can read the files `names` found under
  `path`, else the message naming the field, the path and the files
  expected."""
  spec = domains.registered(config.task.name).seed_data
  if spec is None:
    return f"config.task.name={config.task.name} reads no seed data"
  return seed_data.problem(config, spec, path, names)


def main(argv) -> int:
  del argv
  config = FLAGS.config
  field = field_of(config)
  if field is None:
    print(f"seed_data: config.task.name={config.task.name} reads no seed "
          "files (its seeds are drawn or built by the domain): drop "
          "--seed_data", file=sys.stderr)
    return NO_SEED_DATA
  path, names = None, None
  try:
    if FLAGS.dir:
      path, names = FLAGS.dir, seed_data.local_names(FLAGS.dir)
    elif FLAGS.listing:
      if not FLAGS.root:
        raise InputError("--listing needs --root (the listed directory)")
      stream = sys.stdin if FLAGS.listing == "-" else open(FLAGS.listing)
      with stream:
        path = FLAGS.root
        names = seed_data.listed_names(stream.read().splitlines(), FLAGS.root)
  except (InputError, OSError) as e:
    print(f"seed_data: config.{field}: {e}", file=sys.stderr)
    return BAD_DATA
  if names is not None:
    message = check(config, path, names)
    if message:
      print(f"seed_data: {message}", file=sys.stderr)
      return BAD_DATA
  print(field)
  return 0


if __name__ == "__main__":
  config_flags.DEFINE_config_file("config", None, "The run's config file.",
                                  lock_config=True)
  flags.DEFINE_string("dir", "", "A local seed-data directory to check.")
  flags.DEFINE_string("listing", "", "A recursive listing of a bucket "
                      "directory to check (- for standard input).")
  flags.DEFINE_string("root", "", "The directory --listing lists.")
  flags.mark_flags_as_required(["config"])
  app.run(lambda argv: sys.exit(main(argv)))
