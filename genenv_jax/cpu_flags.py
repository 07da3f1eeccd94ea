"""XLA:CPU compiler flags this project runs with.

XLA's CPU backend can hand dots and reductions to its YNNPACK library fusions
instead of Eigen matmuls and its own emitted loops. On this project's
benchmarks (`python -m train.bench`, 2-core x86 CPU) that speeds up forward +
backward at both model presets and leaves sampling about where it was. The
third kind, elementwise fusions, is left off: with it XLA fails to compile
some of this project's programs ("unsupported layout in YNN fusion"). The flag
only changes how XLA:CPU compiles; other backends ignore it.
"""

from __future__ import annotations

import os
from typing import MutableMapping

YNN_FUSIONS = ("LIBRARY_FUSION_TYPE_DOT", "LIBRARY_FUSION_TYPE_REDUCE")
YNN_FLAG = "--xla_cpu_experimental_ynn_fusion_type"


def use_library_fusions(environ: MutableMapping[str, str] = os.environ
                        ) -> None:
  """Adds the YNNPACK fusion flag to environ["XLA_FLAGS"] unless XLA_FLAGS
  already sets it (an explicit choice wins). XLA reads XLA_FLAGS once, when
  JAX first initialises a backend: call this before any computation."""
  flags = environ.get("XLA_FLAGS", "")
  if YNN_FLAG in flags:
    return
  environ["XLA_FLAGS"] = f"{flags} {YNN_FLAG}={','.join(YNN_FUSIONS)}".strip()
