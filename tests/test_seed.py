"""One seed: config.seed alone moves every random draw of a run (seed data,
initialisation, warm-start, co-evolution sampling), and a run is repeatable
for a seed on one machine."""

import os

import jax
import numpy as np
import pytest

from configs import default
from genenv_jax.domains.arithmetic import data as datasets
from train import loop
from train.outputs import metrics_log
from train.checkpoints import state_checkpoint


def _run(root, seed: int, name: str):
  config = default.get_config("smoke")
  config.seed = seed
  config.coevolve.num_steps = 2
  config.data.tfds_dir = os.path.join(root, f"tfds_{name}")
  workdir = os.path.join(root, name)
  loop.train_and_evaluate(config, workdir)
  records = [{k: v for k, v in r.items()
              if not k.startswith("perf/") and k not in ("steps_per_sec",
                                                         "uptime")}
             for r in metrics_log.read_metrics(
                 os.path.join(workdir, metrics_log.METRICS_FILE))]
  test = datasets.load_split(datasets.builder_config_from(config), "test",
                             config.data.tfds_dir)
  _, parts = state_checkpoint.read_parts(
      workdir, 2, ["agent.params", "simulator.params", "pool", "rng"])
  params = {player: jax.tree.leaves(parts[f"{player}.params"])
            for player in ("agent", "simulator")}
  return config, [r for r in records if len(r) > 1], test, params, parts


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("seeds"))
  return {name: _run(root, seed, name)
          for name, seed in (("a", 0), ("b", 0), ("c", 1))}


def test_the_data_seed_follows_the_run_seed_unless_set():
  config = default.get_config()
  config.seed = 7
  assert config.data.seed == 7
  config.data.seed = 3
  assert (config.seed, config.data.seed) == (7, 3)


def test_one_seed_twice_is_the_same_run(runs):
  _, records_a, test_a, params_a, raw_a = runs["a"]
  _, records_b, test_b, params_b, raw_b = runs["b"]
  assert records_a == records_b
  np.testing.assert_array_equal(test_a["task"], test_b["task"])
  for player in params_a:
    for x, y in zip(params_a[player], params_b[player]):
      np.testing.assert_array_equal(x, y)
  np.testing.assert_array_equal(np.asarray(raw_a["pool"]["tasks"]),
                                np.asarray(raw_b["pool"]["tasks"]))
  np.testing.assert_array_equal(raw_a["rng"], raw_b["rng"])


def test_another_seed_changes_every_draw(runs):
  config_a, records_a, test_a, params_a, raw_a = runs["a"]
  config_c, records_c, test_c, params_c, raw_c = runs["c"]
  assert (config_a.data.seed, config_c.data.seed) == (0, 1)
  # The seed data: another held-out set, other base rows in D_train.
  assert not np.array_equal(test_a["task"], test_c["task"])
  assert not np.array_equal(np.asarray(raw_a["pool"]["tasks"]),
                            np.asarray(raw_c["pool"]["tasks"]))
  # Initialisation and warm-start: other step-0 losses and other players.
  step0_a, step0_c = records_a[0], records_c[0]
  assert step0_a["step"] == step0_c["step"] == 0
  assert step0_a["warmstart/agent_loss"] != step0_c["warmstart/agent_loss"]
  for player in params_a:
    assert not any(np.array_equal(x, y)
                   for x, y in zip(params_a[player], params_c[player]))
  # Co-evolution's own stream.
  assert not np.array_equal(np.asarray(raw_a["rng"]), np.asarray(raw_c["rng"]))
