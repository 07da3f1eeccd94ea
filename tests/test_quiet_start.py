"""train.runtime.quiet_start: a CPU run's console without libtpu's start-up errors
and TensorFlow's start-up INFO lines."""

import os
import subprocess
import sys

from train.runtime import quiet_start

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_info_lines_and_their_continuations_are_dropped():
  text = (
      "WARNING: All log messages before absl::InitializeLog() is called are "
      "written to STDERR\n"
      "I0000 00:00:1796181399.667613   11891 cpu_feature_guard.cc:227] This "
      "TensorFlow binary is optimized\n"
      "To enable the following instructions: AVX2 FMA, rebuild TensorFlow.\n"
      "W0000 00:00:1796181399.7   11891 gpu.cc:1] a warning stays\n"
      "I0000 00:00:1796181183.215958    8732 port.cc:153] oneDNN custom "
      "operations are on.\n"
      "/x/y.py:3: UserWarning: a Python warning stays\n"
      "E0000 00:00:1.0 1 common_lib.cc:554] an error stays\n")
  assert quiet_start.drop_info_lines(text) == (
      "W0000 00:00:1796181399.7   11891 gpu.cc:1] a warning stays\n"
      "/x/y.py:3: UserWarning: a Python warning stays\n"
      "E0000 00:00:1.0 1 common_lib.cc:554] an error stays\n")


def _pci(root, vendor):
  """A fake /sys/bus/pci/devices with one device of `vendor`."""
  device = root / "0000:00:04.0"
  device.mkdir(parents=True)
  (device / "vendor").write_text(vendor + "\n")
  return str(root)


def test_jax_leaves_out_the_tpu_only_where_none_is_attached(tmp_path,
                                                             monkeypatch):
  monkeypatch.setattr(quiet_start, "NVIDIA_DEVICE_FILES", ())
  no_tpu = _pci(tmp_path / "intel", "0x8086")
  with_tpu = _pci(tmp_path / "google", "0x1ae0")
  environ = {}
  assert quiet_start.leave_out_absent_tpu(environ, no_tpu)
  assert environ == {"JAX_PLATFORMS": "cpu"}
  environ = {}
  assert not quiet_start.leave_out_absent_tpu(environ, with_tpu)
  assert environ == {}
  environ = {"JAX_PLATFORMS": "tpu"}  # an explicit choice wins
  assert not quiet_start.leave_out_absent_tpu(environ, no_tpu)
  assert environ == {"JAX_PLATFORMS": "tpu"}


def test_a_cpu_run_starts_quietly_with_libtpu_installed():
  """What train.main runs first, then JAX's backends, on this (TPU-less)
  host with libtpu installed (requirements-test.txt) and JAX_PLATFORMS
  unset: nothing on stderr from libtpu or TensorFlow's start-up."""
  environ = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
  code = ("from train.runtime import quiet_start; quiet_start.quiet_start(); "
          "import jax; print(jax.devices()[0].platform)")
  result = subprocess.run([sys.executable, "-c", code], cwd=ROOT,
                          capture_output=True, text=True, timeout=600,
                          env=dict(environ, PYTHONPATH=ROOT))
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.strip() == "cpu"
  assert result.stderr == "", result.stderr[-3000:]
