"""Peak memory of loading an HF checkpoint onto the mesh: shard by shard
(models/hf_sharded.py) against the whole-file import (models/hf.py).

  python -m train.bench.load_rss [--preset=qwen2.5-1.5b] [--dir=DIR]
      [--devices=8] [--processes=1,2]

Writes a random bfloat16 checkpoint of the preset's shapes (HF names,
sharded safetensors, config.json) into --dir once (default
~/.cache/genenv_jax/bench/<preset>), then, each in fresh processes, loads it
as the run loads a player (float32 parameters laid out per
sharding.DEFAULT_RULES on a data x fsdp x tensor mesh of --devices CPU
devices, split over 1 or 2 JAX processes joined by jax.distributed) and
prints one line per (loader, processes): each process's peak RSS, the bytes
its devices hold, and the checkpoint's size on disk. On a CPU the devices'
arrays are the process's own memory, so `peak - held` is what the loading
costs beyond the result.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import time

from absl import app
from absl import flags

_PRESET = flags.DEFINE_string("preset", "qwen2.5-1.5b",
                              "A models.config preset (its shapes).")
_DIR = flags.DEFINE_string("dir", "", "Where the random checkpoint is kept.")
_DEVICES = flags.DEFINE_integer("devices", 8, "CPU devices in all.")
_PROCESSES = flags.DEFINE_list("processes", ["1", "2"], "Process counts.")
_LOADERS = ("sharded", "whole")


def _write_checkpoint(preset: str, out: str) -> int:
  """A random bf16 checkpoint of the preset's shapes in `out` (kept across
  runs); returns its size in bytes."""
  import ml_dtypes  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from safetensors.numpy import save_file  # pylint: disable=g-import-not-at-top
  from models import hf  # pylint: disable=g-import-not-at-top
  from models.config import get_preset  # pylint: disable=g-import-not-at-top
  done = os.path.join(out, "complete")
  if not os.path.exists(done):
    config = get_preset(preset)
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    weight_map, shard, shard_bytes, names = {}, {}, 0, []

    def flush():
      nonlocal shard, shard_bytes
      if shard:
        name = f"model-{len(names) + 1:05d}.safetensors"
        save_file(shard, os.path.join(out, name), metadata={"format": "pt"})
        weight_map.update({k: name for k in shard})
        names.append(name)
      shard, shard_bytes = {}, 0

    for rule in hf._tensor_rules(config):  # pylint: disable=protected-access
      values = (rng.standard_normal(rule.hf_shape, np.float32) * 0.02).astype(
          ml_dtypes.bfloat16)
      shard[rule.hf_name] = values
      shard_bytes += values.nbytes
      if shard_bytes > 1 << 30:
        flush()
    flush()
    with open(os.path.join(out, hf.SHARDED_INDEX_FILE), "w") as f:
      json.dump({"metadata": {}, "weight_map": weight_map}, f)
    with open(os.path.join(out, hf.CONFIG_FILE), "w") as f:
      json.dump(hf.config_to_hf(config, "qwen2"), f)
    open(done, "w").close()
  return sum(os.path.getsize(os.path.join(out, n)) for n in os.listdir(out)
             if n.endswith(".safetensors"))


def _load_in_this_process(hf_dir: str, loader: str, process: int,
                          processes: int, devices: int, port: int) -> dict:
  """Loads the checkpoint (run in a fresh process); returns its figures."""
  os.environ["XLA_FLAGS"] = (f"--xla_force_host_platform_device_count="
                             f"{devices // processes}")
  import functools  # pylint: disable=g-import-not-at-top
  import flax.linen as nn  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  if processes > 1:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}",
                               num_processes=processes, process_id=process)
  from genenv_jax import sharding  # pylint: disable=g-import-not-at-top
  from models import decoder, hf, hf_sharded  # pylint: disable=g-import-not-at-top
  config = hf.config_from_hf(hf.read_hf_config(hf_dir))
  mesh = sharding.make_mesh({"data": 1, "fsdp": -1, "tensor": 1})
  shardings = nn.unbox(sharding.shardings_from_boxed(
      jax.eval_shape(functools.partial(decoder.init_boxed, config),
                     jax.random.key(0)), mesh, sharding.DEFAULT_RULES))
  tick = time.perf_counter()
  if loader == "sharded":
    params = hf_sharded.load_sharded(hf_dir, config, shardings)
  else:
    weights, _ = hf.load_hf_params(hf_dir, config)
    params = jax.tree.map(
        lambda w, s: jax.make_array_from_callback(w.shape, s,
                                                  lambda i: w[i]),
        weights, shardings)
    del weights
  jax.block_until_ready(params)
  seconds = time.perf_counter() - tick
  held = sum(s.data.nbytes for x in jax.tree.leaves(params)
             for s in x.addressable_shards)
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
  return {"process": process, "seconds": seconds, "held_bytes": held,
          "peak_rss_bytes": peak}


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def main(argv):
  del argv
  hf_dir = _DIR.value or os.path.expanduser(
      f"~/.cache/genenv_jax/bench/{_PRESET.value}")
  size = _write_checkpoint(_PRESET.value, hf_dir)
  gib = lambda b: f"{b / 2**30:.2f}"
  print(f"checkpoint {hf_dir}: {gib(size)} GiB of bfloat16 safetensors "
        f"({size / 2:.3g} parameters); float32 on the mesh: "
        f"{gib(2 * size)} GiB")
  print("loader | processes | per process: peak_rss_gib held_gib "
        "peak-held_gib seconds")
  for processes in (int(p) for p in _PROCESSES.value):
    for loader in _LOADERS:
      port = _free_port()
      children = [subprocess.Popen(
          [sys.executable, "-m", "train.bench.load_rss", _CHILD,
           json.dumps([hf_dir, loader, i, processes, _DEVICES.value, port])],
          stdout=subprocess.PIPE, text=True) for i in range(processes)]
      results = []
      for child in children:
        out, _ = child.communicate()
        if child.returncode:
          raise RuntimeError(f"{loader} x {processes}: a loading process "
                             f"failed ({child.returncode}).")
        results.append(json.loads(out.strip().splitlines()[-1]))
      cells = "; ".join(
          f"p{r['process']}: {gib(r['peak_rss_bytes'])} {gib(r['held_bytes'])} "
          f"{gib(r['peak_rss_bytes'] - r['held_bytes'])} {r['seconds']:.1f}"
          for r in results)
      print(f"{loader} | {processes} | {cells}", flush=True)


# argv[1] of a loading process (started by main with its arguments as JSON).
_CHILD = "--load_child"

if __name__ == "__main__":
  if len(sys.argv) == 3 and sys.argv[1] == _CHILD:
    print(json.dumps(_load_in_this_process(*json.loads(sys.argv[2]))))
  else:
    app.run(main)
