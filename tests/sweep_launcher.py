"""launch/sweep.py as a module, loaded once per test process: it defines
absl flags, which a second load would define again."""

import importlib.util
import os
import sys

_NAME = "launch_sweep"
_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))), "launch", "sweep.py")


def load():
  """The module of launch/sweep.py (the one already loaded, if any)."""
  if _NAME not in sys.modules:
    spec = importlib.util.spec_from_file_location(_NAME, _PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[_NAME] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
  return sys.modules[_NAME]
