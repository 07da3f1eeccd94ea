"""Faults of a two-process job started as a pod starts one (one train.main
per host, no launcher watching them; two local processes joined by
jax.distributed, their CPU collectives through gloo):

- SIGTERM to one process mid stage 2: JAX's preemption service makes both
  stop at the same step, saved, each exiting with status 75 (and the same
  agreement without the training, which a loaded machine can trip with
  gloo's 30 s rendezvous deadline at stage 2's first collectives);
- one process killed (SIGKILL, a lost host) mid stage 2, with
  launch/multiprocess.sh's settings (a 900 s heartbeat timeout, the default
  compilation cache setting): the other exits non-zero within seconds,
  naming the lost process (train/runtime/peer_watch.py);
- one process stopped (SIGSTOP, a hung host: no closed socket, as on a pod):
  the coordination service's heartbeat timeout ends the other, naming it;
- each rerun resumes; the last one ends with the metrics and parameters of
  the job never interrupted.
"""

import os
import re
import signal
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from train.checkpoints import state_checkpoint
from train.outputs import metrics_log
from train.runtime import preemption

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUM_STEPS = 12
# launch/multiprocess.sh's heartbeat timeout: on its own it would let a lost
# process go unnoticed for 15 minutes.
HEARTBEAT_TIMEOUT_S = 900
# A process killed mid step: its connection to process 0 closes at once
# (train/runtime/peer_watch.py); the bound leaves the survivor, which may be busy on
# this loaded machine, room to act on it.
DETECTION_BOUND_S = 60


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _start(workdir, tfds_dir):
  """The job's two train.main processes, their output in workdir/logs."""
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu",
             XLA_FLAGS="--xla_force_host_platform_device_count=8")
  env["XLA_FLAGS"] = subprocess.run(
      [sys.executable, "-m", "train.runtime.cpu_flags", "2"], env=env, cwd=ROOT,
      capture_output=True, text=True, check=True).stdout.strip()
  port = _free_port()
  os.makedirs(os.path.join(workdir, "logs"), exist_ok=True)
  processes = []
  for index in range(2):
    log = open(os.path.join(workdir, "logs", f"process_{index}.log"), "a")
    processes.append(subprocess.Popen(
        [sys.executable, "-m", "train.main",
         "--config=" + os.path.join(ROOT, "configs", "default.py") + ":smoke",
         # The default compilation cache setting, as the launcher's: none
         # in a multi-process CPU job, so that a rerun's processes compile
         # alike (train.main.compilation_cache_dir).
         f"--workdir={workdir}",
         f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2",
         f"--process_id={index}",
         f"--heartbeat_timeout_s={HEARTBEAT_TIMEOUT_S}",
         f"--config.data.tfds_dir={tfds_dir}",
         f"--config.coevolve.num_steps={NUM_STEPS}",
         "--config.checkpoint_every=4", "--config.eval.every_steps=4"],
        env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT))
  return processes


def _log(workdir, index):
  with open(os.path.join(workdir, "logs", f"process_{index}.log")) as f:
    return f.read()


def _wait(processes, workdir, timeout=2400):
  codes = [p.wait(timeout=timeout) for p in processes]
  return codes, [_log(workdir, i)[-4000:] for i in range(2)]


def _wait_for_step(workdir, step, processes, timeout=2400):
  path = os.path.join(workdir, metrics_log.METRICS_FILE)
  deadline = time.monotonic() + timeout
  while not any(r["step"] >= step and "agent/loss" in r
                for r in metrics_log.read_metrics(path)):
    assert all(p.poll() is None for p in processes), [
        _log(workdir, i)[-3000:] for i in range(2)]
    assert time.monotonic() < deadline
    time.sleep(0.2)


def _records(workdir):
  kept = [{k: v for k, v in r.items() if not k.startswith("perf/")
           and k not in ("steps_per_sec", "uptime")}
          for r in metrics_log.read_metrics(
              os.path.join(workdir, metrics_log.METRICS_FILE))]
  return [r for r in kept if len(r) > 1]


def _state(workdir, step):
  """Every array of checkpoint `step` as host numpy arrays (the two
  processes' devices saved it; this process has others): both players'
  parameters and optimiser states, the pools, the rng and the step."""
  return jax.tree.leaves(state_checkpoint.read_state(workdir, step)[1])


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
  """(tfds_dir, workdir of the uninterrupted job)."""
  tfds_dir = str(tmp_path_factory.mktemp("tfds"))
  workdir = str(tmp_path_factory.mktemp("uninterrupted"))
  codes, logs = _wait(_start(workdir, tfds_dir), workdir)
  assert codes == [0, 0], logs
  return tfds_dir, workdir


@pytest.mark.benchmark  # about 5 minutes idle (docs/robustness.md)
def test_preempted_then_lost_process_reruns_resume_bit_exact(shared,
                                                             tmp_path):
  tfds_dir, want = shared
  workdir = str(tmp_path)
  # 1. SIGTERM to process 1 alone, once step 1 is logged: both processes
  # save the same step and exit with status 75, naming it.
  processes = _start(workdir, tfds_dir)
  _wait_for_step(workdir, 1, processes)
  processes[1].send_signal(signal.SIGTERM)
  codes, logs = _wait(processes, workdir)
  assert codes == [preemption.EXIT_STATUS] * 2, logs
  saved = {int(re.search(r"Preempted: saved step (\d+) in ", log).group(1))
           for log in logs}
  assert len(saved) == 1, logs
  preempted_step = saved.pop()
  assert 1 <= preempted_step < NUM_STEPS
  assert str(preempted_step) in os.listdir(tmp_path / "checkpoints")

  # 2. The rerun resumes there; process 1 is killed (a lost host) once two
  # more steps are logged: process 0 exits non-zero within the bound,
  # naming process 1.
  processes = _start(workdir, tfds_dir)
  _wait_for_step(workdir, preempted_step + 2, processes)
  processes[1].send_signal(signal.SIGKILL)
  killed_at = time.monotonic()
  code = processes[0].wait(timeout=DETECTION_BOUND_S + 60)
  detection_s = time.monotonic() - killed_at
  processes[1].wait()
  log = _log(workdir, 0)
  print(f"lost process: process 0 exited {detection_s:.1f} s after the kill")
  assert code != 0, log[-3000:]
  assert detection_s <= DETECTION_BOUND_S, log[-3000:]
  assert "Process 0 of 2 stopped: the job lost process 1 of 2" in log, (
      log[-3000:])

  # 3. The last rerun resumes from the last checkpoint and finishes: the
  # job's metrics and parameters are those of the job never interrupted.
  codes, logs = _wait(_start(workdir, tfds_dir), workdir)
  assert codes == [0, 0], logs
  assert _records(workdir) == _records(want)
  got, expected = _state(workdir, NUM_STEPS), _state(want, NUM_STEPS)
  assert len(got) == len(expected)
  for a, b in zip(got, expected):
    np.testing.assert_array_equal(a, b)


def test_launcher_forwards_sigterm_and_returns_75_once_all_saved(tmp_path):
  """launch/multiprocess.sh: SIGTERM to it reaches every process; a process
  that exits 75 (preempted, saved) does not make it stop the others, which
  finish saving; it exits 75. Stand-in processes: on SIGTERM each records it
  and exits 75 after 1 s (process 0) or 3 s (process 1)."""
  fake = tmp_path / "python"
  fake.write_text(f"""#!/usr/bin/env bash
case "$*" in
  *--process_id=*)
    i=$(echo "$*" | sed -E 's/.*--process_id=([0-9]+).*/\\1/')
    trap "sleep $((1 + 2 * i)); echo saved > {tmp_path}/saved$i; exit 75" TERM
    echo started > {tmp_path}/started$i
    while true; do sleep 0.1; done ;;
  *) exec {sys.executable} "$@" ;;
esac
""")
  fake.chmod(0o755)
  env = dict(os.environ, GENENV_PYTHON=str(fake), PYTHONPATH=ROOT,
             XLA_FLAGS="--xla_force_host_platform_device_count=8")
  launcher = subprocess.Popen(
      [os.path.join(ROOT, "launch", "multiprocess.sh"), "2",
       f"--workdir={tmp_path}"], env=env, stderr=subprocess.PIPE, text=True)
  deadline = time.monotonic() + 120
  while not all((tmp_path / f"started{i}").exists() for i in range(2)):
    assert time.monotonic() < deadline and launcher.poll() is None
    time.sleep(0.1)
  launcher.send_signal(signal.SIGTERM)
  _, stderr = launcher.communicate(timeout=60)
  assert launcher.returncode == preemption.EXIT_STATUS, stderr
  assert all((tmp_path / f"saved{i}").exists() for i in range(2)), stderr
  assert "stopping the others" not in stderr


HUNG = """
import sys, time
from train import main
from train.runtime import multihost
index, port = int(sys.argv[1]), sys.argv[2]
main.maybe_initialize_distributed(
    "true", job=main.named_job(f"127.0.0.1:{port}", 2, index),
    timeouts=main.job_timeouts(heartbeat_s=20, initialization_s=300))
print("joined", flush=True)
if index == 0:
  multihost.barrier("never")  # waits for process 1, which never comes
else:
  time.sleep(3600)  # stopped (SIGSTOP) meanwhile
"""


def test_a_hung_process_is_named_after_the_heartbeat_timeout(tmp_path):
  """A host that hangs keeps its sockets open, as every host of a pod does
  for the chips' collectives: only the coordination service's heartbeats
  tell. Process 1 is stopped (SIGSTOP); process 0, waiting for it, is ended
  by JAX within the heartbeat timeout (20 s here) and a margin, with a
  message naming process 1."""
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
  port = str(_free_port())
  logs = [open(tmp_path / f"process_{i}.log", "w") for i in range(2)]
  processes = [subprocess.Popen([sys.executable, "-c", HUNG, str(i), port],
                                env=env, cwd=ROOT, stdout=logs[i],
                                stderr=subprocess.STDOUT) for i in range(2)]
  try:
    deadline = time.monotonic() + 300
    while not all("joined" in (tmp_path / f"process_{i}.log").read_text()
                  for i in range(2)):
      assert time.monotonic() < deadline
      assert all(p.poll() is None for p in processes)
      time.sleep(0.2)
    processes[1].send_signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    code = processes[0].wait(timeout=180)
    detection_s = time.monotonic() - stopped_at
  finally:
    processes[1].kill()
    processes[1].wait()
  log = (tmp_path / "process_0.log").read_text()
  print(f"hung process: process 0 ended {detection_s:.1f} s after the stop")
  assert code != 0
  assert detection_s <= 20 + 60, log[-2000:]
  assert re.search(r"stopped sending heartbeats\):\s*1\b", log), log[-2000:]


AGREE = """
import sys, time
from train import main
from train.runtime import preemption
index, port = int(sys.argv[1]), sys.argv[2]
main.maybe_initialize_distributed(
    "true", job=main.named_job(f"127.0.0.1:{port}", 2, index),
    timeouts=main.job_timeouts(heartbeat_s=900, initialization_s=300))
with preemption.Watch():
  print("watching", flush=True)
  for call in range(1, 100000):
    if preemption.reached():
      print(f"stopped at call {call}", flush=True)
      sys.exit(preemption.EXIT_STATUS)
    time.sleep(0.01 * (1 + index))  # process 1 runs at half the pace
"""


def test_sigterm_to_one_process_stops_both_at_the_same_point(tmp_path):
  """train.runtime.preemption in a two-process job, without the training (whose
  first cross-process collectives a loaded machine can delay past gloo's
  30 s): SIGTERM to process 1 alone; both processes' `reached()` answer
  True at the same call, the one after the furthest either had made."""
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
  port = str(_free_port())
  logs = [tmp_path / f"process_{i}.log" for i in range(2)]
  processes = [subprocess.Popen([sys.executable, "-c", AGREE, str(i), port],
                                env=env, cwd=ROOT, stdout=open(logs[i], "w"),
                                stderr=subprocess.STDOUT) for i in range(2)]
  try:
    deadline = time.monotonic() + 300
    while not all("watching" in log.read_text() for log in logs):
      assert time.monotonic() < deadline
      assert all(p.poll() is None for p in processes)
      time.sleep(0.2)
    time.sleep(2)
    processes[1].send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    codes = [p.wait(timeout=300) for p in processes]
    stop_s = time.monotonic() - signalled
  finally:
    for p in processes:
      p.kill()
  texts = [log.read_text() for log in logs]
  print(f"preemption in two processes: both stopped {stop_s:.1f} s after "
        "the signal")
  assert codes == [preemption.EXIT_STATUS] * 2, [t[-2000:] for t in texts]
  calls = {int(re.search(r"stopped at call (\d+)", t).group(1))
           for t in texts}
  assert len(calls) == 1, texts
