"""Sweep files: ml_collections configs that list the runs of an experiment.

A sweep file's `get_config()` returns a ConfigDict (built with `make_sweep`):
  base_config  the run config file, relative to the repository root
  base_arg     variants given to it before each run's arm ("" or e.g. "smoke")
  overrides    nested ConfigDict of fields set in every run
  runs         list of ConfigDicts: arm (a name in configs.default.ARMS),
               seed (config.seed), overrides (fields set in this run only;
               they win over the sweep's) and base_config (this run's config
               file when not the sweep's, "" otherwise: one sweep may run
               several domains' demos)
  share_warmstart  whether runs of one seed start stage 2 from one shared
               warm-start (config.warmstart.init_from) instead of each
               warm-starting alone: identical players, a fraction of the time;
               runs whose overrides set warmstart.simulator_start share one
               moved simulator per seed and start
`launch/sweep.py` expands it into one `python -m train.main` command per run.
"""

from __future__ import annotations

from typing import Iterable, Mapping

import ml_collections


def make_sweep(base_arg: str, overrides: Mapping,
               runs: Iterable[tuple],
               base_config: str = "configs/default.py",
               share_warmstart: bool = False) -> ml_collections.ConfigDict:
  """A sweep config. overrides: nested {section: {field: value}} set in every
  run; runs: (arm, seed, nested per-run overrides) triples, or quadruples
  whose fourth entry is the run's own config file."""
  sweep = ml_collections.ConfigDict()
  sweep.base_config = base_config
  sweep.base_arg = base_arg
  sweep.share_warmstart = share_warmstart
  sweep.overrides = ml_collections.ConfigDict(dict(overrides))
  sweep.runs = [
      ml_collections.ConfigDict(dict(
          arm=run[0], seed=run[1],
          overrides=ml_collections.ConfigDict(dict(run[2])),
          base_config=run[3] if len(run) > 3 else ""))
      for run in runs]
  if share_warmstart and any(spec.base_config for spec in sweep.runs):
    raise ValueError("make_sweep: runs with their own config file do not "
                     "share a warm-start (share_warmstart=False).")
  return sweep
