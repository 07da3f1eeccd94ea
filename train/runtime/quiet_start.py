"""Keeps the libraries' start-up lines off the console of a CPU run.

Two sources print at start-up whatever the Python log level:
  - libtpu, when installed (the preflight host, the test environment): JAX
    tries its TPU backend on every host, and on one without a TPU libtpu
    prints errors about the accelerator type and worker hostnames it could
    not find before JAX falls back to the CPU. `leave_out_absent_tpu` keeps
    JAX from trying it where no TPU chip is attached.
  - TensorFlow (imported by the metric writers): its C++ start-up logs INFO
    lines (oneDNN, CPU features) through absl before any log level applies.
    `import_quietly` imports it with those lines dropped.
`quiet_start` does both (train.main; `--library_logs` skips it).
"""

from __future__ import annotations

import contextlib
import glob
import importlib
import importlib.util
import os
import re
import sys
import tempfile
from typing import Iterator, MutableMapping

GOOGLE_PCI_VENDOR = "0x1ae0"
NVIDIA_DEVICE_FILES = ("/dev/nvidia0", "/dev/nvidiactl", "/dev/dxg")
# An absl / glog INFO line ("I0000 00:00:1796181183.215958 8732 port.cc:153]
# ..."), the lines that continue one, and absl's notice before its set-up.
INFO_LINE = re.compile(r"^I\d{4} \d\d:\d\d:[\d.]+\s+\d+ \S+:\d+\]")
# Lines that start a message of their own (a glog/absl line of another
# level, "WARNING: ...", a traceback, a Python warning's "path:line:").
NEW_MESSAGE = re.compile(r"^[A-Z]\d{4} |^[A-Z][A-Za-z]*:|^Traceback|^\S+:\d+: ")
ABSL_NOTICE = "WARNING: All log messages before absl::InitializeLog()"


def tpu_attached(pci_root: str = "/sys/bus/pci/devices") -> bool:
  """Whether a Google (TPU) PCI device is attached to this host."""
  for vendor in glob.glob(os.path.join(pci_root, "*", "vendor")):
    with open(vendor) as f:
      if f.read().strip() == GOOGLE_PCI_VENDOR:
        return True
  return False


def leave_out_absent_tpu(environ: MutableMapping[str, str] = os.environ,
                         pci_root: str = "/sys/bus/pci/devices") -> bool:
  """Sets JAX_PLATFORMS=cpu when libtpu is installed but no TPU chip (and no
  GPU) is attached and JAX_PLATFORMS is unset (an explicit choice wins).
  Call before JAX initialises a backend. Returns whether it set it."""
  if environ.get("JAX_PLATFORMS"):
    return False
  if importlib.util.find_spec("libtpu") is None:
    return False
  if tpu_attached(pci_root) or any(map(os.path.exists, NVIDIA_DEVICE_FILES)):
    return False
  environ["JAX_PLATFORMS"] = "cpu"
  return True


def drop_info_lines(text: str) -> str:
  """`text` (stderr output) without absl/glog INFO lines, the lines that
  continue one, and absl's pre-initialisation notice."""
  kept, in_info = [], False
  for line in text.splitlines(keepends=True):
    if INFO_LINE.match(line):
      in_info = True
      continue
    if line.startswith(ABSL_NOTICE):
      in_info = False
      continue
    # A message's continuation lines carry no prefix of their own.
    if in_info and not NEW_MESSAGE.match(line):
      continue
    in_info = False
    kept.append(line)
  return "".join(kept)


@contextlib.contextmanager
def _stderr_filtered() -> Iterator[None]:
  """Within: what is written to file descriptor 2 (C++ libraries included)
  is held, then written back to it without INFO lines."""
  sys.stderr.flush()
  saved = os.dup(2)
  with tempfile.TemporaryFile(mode="w+b") as held:
    os.dup2(held.fileno(), 2)
    try:
      yield
    finally:
      sys.stderr.flush()
      os.dup2(saved, 2)
      os.close(saved)
      held.seek(0)
      text = drop_info_lines(held.read().decode("utf-8", "replace"))
      if text:
        sys.stderr.write(text)
        sys.stderr.flush()


def import_quietly(name: str):
  """Imports module `name` with the INFO lines its start-up writes to
  stderr dropped (warnings and errors pass). Returns the module."""
  with _stderr_filtered():
    return importlib.import_module(name)


def quiet_start(environ: MutableMapping[str, str] = os.environ) -> None:
  """Both of the above, TensorFlow imported here: call before JAX
  initialises a backend and before anything imports TensorFlow."""
  leave_out_absent_tpu(environ)
  import_quietly("tensorflow")
