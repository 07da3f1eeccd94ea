"""Test setup: an 8-device CPU mesh, created before jax is imported."""
import os
import sys

_FLAG = "--xla_force_host_platform_device_count=8"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = f"{_FLAG} {os.environ.get('XLA_FLAGS', '')}"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
