"""train/runtime/peer_watch.py: in a two-process job started as a pod starts one
(no launcher watching), with launch/multiprocess.sh's heartbeat timeout
(900 s, which alone would let a lost process go unnoticed for 15 minutes):

- process 1 killed (SIGKILL) while both run cross-process collectives
  (gloo): process 0 exits with status 1 within seconds, naming process 1;
- process 1 stopping on its own error: it prints its traceback and tells
  process 0, which stops too, naming it;
- processes that end on purpose (finished, or preempted after saving) a
  few seconds apart are not taken for lost ones.
"""

import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from train.runtime import peer_watch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A process that ends closes its connection at once; the bound leaves room
# for a loaded machine to schedule the survivor's watch thread.
DETECTION_BOUND_S = 30

# One process of the job: joined as train.main joins it (launcher's timeouts),
# then a workload per mode, ended as train.main ends a run.
JOB = """
import sys, time
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from train import main
from train.runtime import multihost, peer_watch
index, port, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
main.maybe_initialize_distributed(
    "true", job=main.named_job(f"127.0.0.1:{port}", 2, index),
    timeouts=main.job_timeouts(heartbeat_s=900, initialization_s=300))
peer_watch.start(60, 300)
try:
  if mode == "collective":
    mesh = Mesh(np.array(jax.devices()), ("d",))
    x = jax.make_array_from_callback(
        (8,), NamedSharding(mesh, P("d")), lambda i: np.arange(8.0)[i])
    total = jax.jit(lambda x: x.sum(),
                    out_shardings=NamedSharding(mesh, P()))
    print("running", float(total(x)), flush=True)
    while True:
      total(x).block_until_ready()
  elif mode == "error":
    print("running", flush=True)
    if index == 1:
      time.sleep(1)
      raise ValueError("a bad record in process 1's shard")
    multihost.barrier("never")  # process 1 never comes
  elif mode in ("done", "preempted"):
    print("running", flush=True)
    time.sleep(5 - 4 * index)  # process 1 ends 4 s before process 0
    if mode == "preempted":
      peer_watch.end("preempted")
      print("preempted", flush=True)
      import os; os._exit(75)
except BaseException:
  peer_watch.exit_on_error()
peer_watch.end("done")
print("done", flush=True)
"""


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _start(tmp_path, mode):
  """The job's two processes, once both print "running"; their logs."""
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu",
             XLA_FLAGS="--xla_force_host_platform_device_count=4")
  port = str(_free_port())
  logs = [tmp_path / f"process_{i}.log" for i in range(2)]
  processes = [subprocess.Popen(
      [sys.executable, "-c", JOB, str(i), port, mode], env=env, cwd=ROOT,
      stdout=open(logs[i], "w"), stderr=subprocess.STDOUT) for i in range(2)]
  deadline = time.monotonic() + 300
  while not all("running" in log.read_text() for log in logs):
    assert time.monotonic() < deadline, [log.read_text() for log in logs]
    assert all(p.poll() is None for p in processes), [
        log.read_text()[-2000:] for log in logs]
    time.sleep(0.2)
  return processes, logs


def test_a_killed_process_is_named_at_once_despite_a_long_heartbeat(
    tmp_path):
  processes, logs = _start(tmp_path, "collective")
  try:
    time.sleep(1)  # both in their loop of collectives
    processes[1].send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    code = processes[0].wait(timeout=120)
    detection_s = time.monotonic() - killed_at
  finally:
    for p in processes:
      p.kill()
      p.wait()
  log = logs[0].read_text()
  print(f"killed process: process 0 exited {detection_s:.1f} s after the "
        "kill")
  assert code == peer_watch.EXIT_STATUS, log[-3000:]
  assert detection_s <= DETECTION_BOUND_S, log[-3000:]
  assert re.search(r"Process 0 of 2 stopped: the job lost process 1 of 2 "
                   r"\(its connection closed", log), log[-3000:]
  assert "rerun the same command on each to resume" in log


def _run_to_end(tmp_path, how):
  """Runs the two-process stand-in job `how` to its end: (exit statuses,
  log texts), one each per process."""
  processes, logs = _start(tmp_path, how)
  try:
    codes = [p.wait(timeout=120) for p in processes]
  finally:
    for p in processes:
      p.kill()
  return codes, [log.read_text() for log in logs]


def test_a_process_stopping_on_its_error_stops_the_others_naming_it(
    tmp_path):
  codes, texts = _run_to_end(tmp_path, "error")
  assert codes == [peer_watch.EXIT_STATUS] * 2, texts
  assert "ValueError: a bad record in process 1's shard" in texts[1]
  assert "Process 1 of 2 stopped on the error above" in texts[1]
  assert ("Process 0 of 2 stopped: process 1 of 2 stopped on an error"
          in texts[0]), texts[0][-3000:]


@pytest.mark.parametrize("how, status", [("done", 0), ("preempted", 75)])
def test_processes_ending_on_purpose_at_different_times_are_not_lost(
    tmp_path, how, status):
  codes, texts = _run_to_end(tmp_path, how)
  assert codes == [status] * 2, texts
  assert all(how in text and "stopped" not in text for text in texts), texts


@pytest.mark.parametrize("timeout_s", [10, 60, 120, 601])
def test_keepalive_declares_a_silent_host_lost_within_the_timeout(timeout_s):
  options = peer_watch.keepalive_options(timeout_s)
  detect_s = (options["TCP_KEEPIDLE"]
              + options["TCP_KEEPCNT"] * options["TCP_KEEPINTVL"])
  assert timeout_s * 0.9 <= detect_s <= timeout_s
  assert options["TCP_USER_TIMEOUT"] == timeout_s * 1000
  assert min(options.values()) >= 1


def test_a_keepalive_too_short_for_its_probes_is_refused():
  with pytest.raises(ValueError, match="--lost_host_timeout_s=5"):
    peer_watch.keepalive_options(5)
