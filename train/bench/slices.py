"""Cloud TPU slices by the accelerator-type names `gcloud` uses, and each
generation's chip: HBM, peak bf16 FLOP/s, HBM and interconnect bandwidth.

Names: `v4-N` and `v5p-N` count TensorCores (N / 2 chips); `v5litepod-N` and
`v6e-N` count chips (one TensorCore each). A slice's topology is its chip grid
(`v4:2x2x2`), as `jax.experimental.topologies.get_topology_desc` takes it.

On v4 and v5p JAX runs the two TensorCores of a chip as one device
(megacore), so one device is one chip and holds the chip's whole HBM: the
presets assume this.
"""

from __future__ import annotations

import dataclasses
import re


@dataclasses.dataclass(frozen=True)
class Chip:
  """One TPU chip of a generation (vendor figures per chip).

  libtpu_name: the generation in a topology name ("v5e" for v5litepod).
  cores_per_name: TensorCores counted per chip by the accelerator-type name.
  hbm_gib: HBM per chip (GiB); peak_tflops: dense bf16 TFLOP/s per chip;
  hbm_gbps: HBM bandwidth per chip (GB/s); grid_dims: 3 (torus) or 2;
  ici_gbps: inter-chip interconnect bandwidth per chip, one direction (GB/s:
  the vendor's "interchip interconnect BW" in Gbit/s over 8, all of a chip's
  links at once; a collective over one mesh axis gets less).
  """
  libtpu_name: str
  cores_per_name: int
  hbm_gib: float
  peak_tflops: float
  hbm_gbps: float
  grid_dims: int
  ici_gbps: float


CHIPS = {
    "v4": Chip("v4", 2, 32.0, 275.0, 1228.0, 3, 300.0),
    "v5p": Chip("v5p", 2, 95.0, 459.0, 2765.0, 3, 600.0),
    "v5litepod": Chip("v5e", 1, 16.0, 197.0, 819.0, 2, 200.0),
    "v6e": Chip("v6e", 1, 32.0, 918.0, 1640.0, 2, 448.0),
}

# The chip grid gcloud gives a slice of this many chips.
GRIDS_3D = {4: (2, 2, 1), 8: (2, 2, 2), 16: (2, 2, 4), 32: (2, 4, 4),
            64: (4, 4, 4), 128: (4, 4, 8), 256: (4, 8, 8), 512: (8, 8, 8),
            1024: (8, 8, 16), 2048: (8, 16, 16)}
GRIDS_2D = {1: (1, 1), 4: (2, 2), 8: (2, 4), 16: (4, 4), 32: (4, 8),
            64: (8, 8), 128: (8, 16), 256: (16, 16)}


@dataclasses.dataclass(frozen=True)
class Slice:
  """A slice: its accelerator-type name, chip and chip grid."""
  name: str
  chip: Chip
  grid: tuple[int, ...]

  @property
  def num_chips(self) -> int:
    n = 1
    for d in self.grid:
      n *= d
    return n

  @property
  def topology_name(self) -> str:
    """e.g. "v4:2x4x4", the name get_topology_desc takes."""
    return f"{self.chip.libtpu_name}:{'x'.join(map(str, self.grid))}"


def parse_slice(name: str) -> Slice:
  """The slice of an accelerator-type name such as "v4-64" or "v5litepod-32".

  Raises ValueError naming the flag value and the known sizes.
  """
  match = re.fullmatch(r"(v4|v5p|v5litepod|v6e)-(\d+)", name)
  if not match:
    raise ValueError(
        f"--topology={name!r}: expected GENERATION-SIZE with GENERATION one of "
        f"{sorted(CHIPS)}, e.g. v4-64, v5p-64, v5litepod-32, v6e-8.")
  chip = CHIPS[match.group(1)]
  count = int(match.group(2))
  grids = GRIDS_3D if chip.grid_dims == 3 else GRIDS_2D
  chips, rest = divmod(count, chip.cores_per_name)
  if rest or chips not in grids:
    sizes = sorted(c * chip.cores_per_name for c in grids)
    raise ValueError(f"--topology={name!r}: {match.group(1)} slices come in "
                     f"sizes {sizes}.")
  return Slice(name, chip, grids[chips])
