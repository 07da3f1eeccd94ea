"""A compiled program's cost per device, read from its optimized HLO text,
every loop counted as many times as it runs.

  python -m train.bench.hlo_cost FILE.hlo --devices=N [--topology=SLICE] \
      [--top=K] [--sort=hbm|flops|collective|time]

prints a saved program's totals and its costliest sources (compile_check
--hlo_dir=DIR saves them); with the slice, in modeled seconds too.

XLA's own cost analysis (`compiled.cost_analysis()`) counts a while loop's
body once, so a decode loop, a layer scan or a scan over GRPO minibatches
shows one trip of work. This reads the HLO module `compiled.as_text()`
prints and adds each computation's cost times the number of times it runs:
a while loop's body its trip count (XLA's `known_trip_count`, else from
its condition's bound, its induction's start and the step its body adds),
a conditional its costliest branch, a fusion or call its callee once.

What is counted, per device:
  - flops: 2 per multiply-add of every dot and convolution (elementwise work
    is left out: on a TPU it runs beside the matrix units); a Pallas kernel
    (custom call) counts the flops of the cost estimate it carries.
  - hbm_bytes: the bytes each top-level operation (a fusion, a dot, a copy,
    a collective, ...) reads and writes: its operands and its result. A
    slice counts the slice's bytes, and so does an operand a fusion only
    slices, directly, through a bitcast or in a nested fusion (a scanned
    layer reads its own weights, and its KV cache, from the stacked ones); an
    update in place (a dynamic-update-slice, or a fusion whose root is one)
    counts the update, not the buffer. Operations inside a fusion stay on the
    chip and count nothing, and so does an array libtpu placed in on-chip
    memory (a layout with a memory space `S(n)`, n > 0: the buffers its
    memory-space assignment prefetches into with `copy-start`); such a
    prefetch counts the bytes it reads from HBM, not those it writes on chip.
  - roofline_flops (given the chip's FLOPs per HBM byte): per operation its
    FLOPs or its bytes' worth of FLOPs, whichever is more: each operation
    bound by its own compute or its own memory traffic, none overlapping
    another.
  - collectives: per kind (all-gather, all-reduce, reduce-scatter,
    all-to-all, collective-permute) how many run and the bytes each device
    sends: (n - 1) / n of the gathered or scattered array for all-gather and
    reduce-scatter, twice that for all-reduce, the array for a permute, n
    the size of its replica group.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import re

from absl import app
from absl import flags

from train.bench import slices

DTYPE_BYTES = {
    "pred": 1, "s2": 0.25, "u2": 0.25, "s4": 0.5, "u4": 0.5, "s8": 1, "u8": 1,
    "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4,
    "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16, "f8e4m3fn": 1,
    "f8e5m2": 1, "f8e4m3b11fnuz": 1, "f8e4m3fnuz": 1, "f8e5m2fnuz": 1,
    "f8e4m3": 1, "f8e3m4": 1, "f4e2m1fn": 0.5, "f8e8m0fnu": 1,
}
ARRAY = re.compile(r"\b(" + "|".join(sorted(DTYPE_BYTES, key=len, reverse=True))
                   + r")\[([^\]]*)\](\{[^}]*\})?")
# A layout's memory space: S(0) (the default) is HBM; S(1) on-chip memory,
# S(2) sync flags, S(5) host memory, S(6) scalar memory.
MEMORY_SPACE = re.compile(r"S\((\d+)\)")
# Operations that move no bytes of their own (bookkeeping, or counted where
# their work is: a loop's body, an async pair's start).
NO_TRAFFIC = {
    "parameter", "constant", "get-tuple-element", "tuple", "bitcast",
    "while", "conditional", "call", "after-all", "partition-id", "replica-id",
    "opt-barrier", "add-dependency", "domain", "all-gather-done",
    "all-reduce-done", "collective-permute-done", "copy-done", "async-done",
    "async-update", "send-done", "recv-done", "iota",
}
COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all",
               "collective-permute", "ragged-all-to-all")
SLICING = {"dynamic-slice", "slice", "gather"}


@dataclasses.dataclass
class Cost:
  """Per-device cost: flops, HBM bytes, and per collective kind its count
  and the bytes each device sends. roofline_flops: the sum over operations
  of max(flops, flops_per_byte x HBM bytes) (`Module`'s flops_per_byte, the
  chip's peak FLOP/s over its HBM bytes/s): divided by the peak, the
  seconds of a program whose every operation runs at its own roofline, one
  after another."""
  flops: float = 0.0
  hbm_bytes: float = 0.0
  collectives: dict = dataclasses.field(default_factory=dict)
  unknown_loops: int = 0  # while loops whose trip count was not found (x1)
  roofline_flops: float = 0.0

  @property
  def collective_bytes(self) -> float:
    return sum(b for _, b in self.collectives.values())

  def add(self, other: "Cost", times: float = 1.0) -> None:
    self.flops += times * other.flops
    self.hbm_bytes += times * other.hbm_bytes
    self.roofline_flops += times * other.roofline_flops
    for kind, (count, sent) in other.collectives.items():
      c, b = self.collectives.get(kind, (0.0, 0.0))
      self.collectives[kind] = (c + times * count, b + times * sent)
    self.unknown_loops += other.unknown_loops

  def add_collective(self, kind: str, sent: float) -> None:
    count, total = self.collectives.get(kind, (0.0, 0.0))
    self.collectives[kind] = (count + 1, total + sent)


@dataclasses.dataclass
class Instruction:
  name: str
  type: str          # result type text, e.g. "bf16[8,128]{1,0}" or a tuple
  opcode: str
  operands: list     # operand names
  args: str          # the text inside the parentheses ("0" of parameter(0))
  attributes: str    # the text after them
  root: bool = False


def array_shapes(type_text: str) -> list[tuple[str, tuple[int, ...]]]:
  """(dtype, dims) of every array in an HLO type (a tuple's leaves)."""
  return [(dtype, sizes) for dtype, sizes, _ in _arrays(type_text)]


def _arrays(type_text: str) -> list[tuple[str, tuple[int, ...], int]]:
  """(dtype, dims, memory space) of every array in an HLO type."""
  out = []
  for dtype, dims, layout in ARRAY.findall(type_text):
    sizes = tuple(int(d.lstrip("<=")) for d in dims.split(",") if d.strip())
    space = MEMORY_SPACE.search(layout)
    out.append((dtype, sizes, int(space.group(1)) if space else 0))
  return out


def _hbm_bytes(arrays) -> float:
  """Bytes of those of `_arrays`' arrays that lie in HBM (memory space 0)."""
  return sum(DTYPE_BYTES[dtype] * math.prod(dims)
             for dtype, dims, space in arrays if space == 0)


def type_bytes(type_text: str) -> float:
  """Bytes of every array in an HLO type."""
  return sum(DTYPE_BYTES[dtype] * math.prod(dims)
             for dtype, dims in array_shapes(type_text))


def hbm_type_bytes(type_text: str) -> float:
  """Bytes of the arrays of an HLO type that lie in HBM (memory space 0)."""
  return _hbm_bytes(_arrays(type_text))


def _closing(text: str, start: int, open_: str = "(", close: str = ")") -> int:
  """Index of the bracket closing the one at text[start]."""
  depth = 0
  for i in range(start, len(text)):
    if text[i] == open_:
      depth += 1
    elif text[i] == close:
      depth -= 1
      if depth == 0:
        return i
  raise ValueError(f"unbalanced {open_!r} in HLO line: {text[:200]}")


INSTRUCTION = re.compile(r"^\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*")
HEADER = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*(\(.*\))?\s*(->.*)?\{\s*$")
OPERAND = re.compile(r"%([\w.\-]+)")


def parse_instruction(line: str) -> Instruction | None:
  match = INSTRUCTION.match(line)
  if not match:
    return None
  rest = line[match.end():]
  if rest.startswith("("):
    end = _closing(rest, 0)
    type_text, rest = rest[:end + 1], rest[end + 1:].lstrip()
  else:
    type_text, _, rest = rest.partition(" ")
  opcode_match = re.match(r"([\w\-]+)\(", rest)
  if not opcode_match:
    return None
  start = opcode_match.end() - 1
  end = _closing(rest, start)
  operands = OPERAND.findall(rest[start + 1:end])
  return Instruction(match.group(2), type_text, opcode_match.group(1),
                     operands, rest[start + 1:end], rest[end + 1:],
                     bool(match.group(1)))


def parse_module(text: str) -> tuple[dict[str, list[Instruction]], str]:
  """({computation name: its instructions}, the entry computation's name)."""
  computations, entry, current = {}, "", None
  for line in text.splitlines():
    if current is None:
      if line.startswith((" ", "\t", "HloModule", "//")) or "=" in line.split(
          "(")[0]:
        continue
      header = HEADER.match(line)
      if header:
        current = header.group(2)
        computations[current] = []
        if header.group(1):
          entry = current
      continue
    if line.strip() == "}":
      current = None
      continue
    instruction = parse_instruction(line)
    if instruction is not None:
      computations[current].append(instruction)
  if not entry:
    raise ValueError("HLO text has no ENTRY computation.")
  return computations, entry


def _called(attributes: str, key: str) -> list[str]:
  """Computation names an attribute names: key=%a or key={%a, %b}."""
  match = re.search(r"\b" + key + r"=(\{[^}]*\}|%?[\w.\-]+)", attributes)
  if not match:
    return []
  return [n.lstrip("%") for n in re.findall(r"%?[\w.\-]+", match.group(1))]


def _group_size(attributes: str, num_devices: int) -> int:
  """Devices in each replica group of a collective."""
  match = re.search(r"replica_groups=\[(\d+),(\d+)\]<=", attributes)
  if match:
    return int(match.group(2))
  match = re.search(r"replica_groups=\{\{([\d,]*)\}", attributes)
  if match and match.group(1):
    return len(match.group(1).split(","))
  match = re.search(r"source_target_pairs=\{", attributes)
  if match:
    return 2
  return num_devices


def _dims(attributes: str, key: str) -> list[int]:
  match = re.search(key + r"=\{([\d,]*)\}", attributes)
  return [int(d) for d in match.group(1).split(",") if d] if match else []


class Module:
  """An HLO module's costs (see the module doc)."""

  def __init__(self, text: str, num_devices: int = 1,
               flops_per_byte: float = 0.0):
    self.computations, self.entry = parse_module(text)
    self.num_devices = num_devices
    self.flops_per_byte = flops_per_byte
    self._shapes = {}
    self._by_name: dict[str, Instruction] = {}
    for instructions in self.computations.values():
      for i in instructions:
        self._shapes[i.name] = i.type
        self._by_name[i.name] = i
    self._costs: dict[str, Cost] = {}

  def cost(self) -> Cost:
    return self._computation(self.entry)

  def by_source(self) -> list[tuple[str, Cost]]:
    """The module's cost split by the JAX operation each top-level
    instruction came from (its `op_name` metadata, else its opcode), every
    loop's trips counted, costliest HBM bytes first: where the bytes go."""
    totals: dict[str, Cost] = collections.defaultdict(Cost)

    def walk(name: str, times: float) -> None:
      for i in self.computations.get(name, []):
        callees = self._control_callees(i)
        if callees is not None:
          for callee, trips in callees:
            walk(callee, times * trips)
          continue
        source = re.search(r'op_name="([^"]*)"', i.attributes)
        totals[source.group(1) if source else i.opcode].add(
            self._instruction(i), times)
    walk(self.entry, 1.0)
    return sorted(totals.items(), key=lambda item: -item[1].hbm_bytes)

  def _control_callees(self, i: Instruction) -> list[tuple[str, int]] | None:
    """(computation, times it runs) of a control instruction (a loop, a
    branch, a call), None for any other: the computations `_instruction`
    adds up for it."""
    if i.opcode == "while":
      trips = self._trip_count(i)
      return [(body, 1 if trips is None else trips)
              for body in _called(i.attributes, "body")]
    if i.opcode == "conditional":
      branches = (_called(i.attributes, "branch_computations")
                  or _called(i.attributes, "true_computation")
                  + _called(i.attributes, "false_computation"))
      if not branches:
        return []
      costliest = max(branches, key=lambda b: (self._computation(b).flops,
                                               self._computation(b).hbm_bytes))
      return [(costliest, 1)]
    if i.opcode == "call":
      return [(c, 1) for c in _called(i.attributes, "to_apply")]
    if i.opcode in ("async-start", "call-start"):
      return [(c, 1) for c in _called(i.attributes, "calls")]
    return None

  # -------------------------------------------------------------- computations

  def _computation(self, name: str) -> Cost:
    if name not in self._costs:
      total = Cost()
      for instruction in self.computations.get(name, []):
        total.add(self._instruction(instruction))
      self._costs[name] = total
    return self._costs[name]

  def _flops_only(self, name: str) -> float:
    """FLOPs of a fused computation (nested fusions included)."""
    total = 0.0
    for i in self.computations.get(name, []):
      total += self._own_flops(i)
      if i.opcode == "fusion":
        total += sum(self._flops_only(c) for c in _called(i.attributes, "calls"))
    return total

  def _own_flops(self, i: Instruction) -> float:
    if i.opcode == "dot":
      out = array_shapes(i.type)
      lhs = array_shapes(self._shapes.get(i.operands[0], ""))
      if not out or not lhs:
        return 0.0
      contracted = math.prod(lhs[0][1][d]
                             for d in _dims(i.attributes, "lhs_contracting_dims"))
      return 2.0 * math.prod(out[0][1]) * contracted
    if i.opcode == "convolution":
      return self._convolution_flops(i)
    if i.opcode == "custom-call":
      estimate = re.search(r'"flops"\s*:\s*"?([\d.e+]+)', i.attributes)
      return float(estimate.group(1)) if estimate else 0.0
    return 0.0

  def _convolution_flops(self, i: Instruction) -> float:
    """2 per multiply-add that meets an input element: a window position
    on padding or on a hole of a dilated input counts nothing (XLA writes
    batched matmuls as convolutions over dilated batch dimensions)."""
    labels = re.search(r"dim_labels=(\w+)_(\w+)->(\w+)", i.attributes)
    shapes = [array_shapes(self._shapes.get(o, "")) for o in i.operands[:2]]
    out = array_shapes(i.type)
    if not labels or not all(shapes) or not out:
      return 0.0
    lhs_labels, rhs_labels, out_labels = labels.groups()
    lhs, rhs, result = shapes[0][0][1], shapes[1][0][1], out[0][1]
    window = re.search(r"window=\{([^}]*)\}", i.attributes)
    fields = dict(re.findall(r"(\w+)=([\w_]+)", window.group(1))) if window else {}
    spatial = sorted(c for c in out_labels if c.isdigit())

    def per_dim(name, default):
      values = fields.get(name)
      return [default] * len(spatial) if values is None else values.split("x")
    sizes = [int(v) for v in per_dim("size", "1")]
    strides = [int(v) for v in per_dim("stride", "1")]
    pads = [int(v.split("_")[0]) for v in per_dim("pad", "0_0")]
    lhs_dilation = [int(v) for v in per_dim("lhs_dilate", "1")]
    rhs_dilation = [int(v) for v in per_dim("rhs_dilate", "1")]
    macs = (result[out_labels.index("b")] * result[out_labels.index("f")]
            * rhs[rhs_labels.index("i")])
    for d, label in enumerate(spatial):
      size_in = lhs[lhs_labels.index(label)]
      size_out = result[out_labels.index(label)]
      extent = (size_in - 1) * lhs_dilation[d]
      valid = 0
      for o in range(size_out):
        for k in range(sizes[d]):
          p = o * strides[d] + k * rhs_dilation[d] - pads[d]
          valid += 0 <= p <= extent and p % lhs_dilation[d] == 0
      macs *= valid
    return 2.0 * macs

  # -------------------------------------------------------------- instructions

  def _instruction(self, i: Instruction) -> Cost:
    cost = Cost()
    op = i.opcode
    callees = self._control_callees(i)
    if callees is not None:
      if op == "while" and self._trip_count(i) is None:
        cost.unknown_loops += 1
      for callee, times in callees:
        cost.add(self._computation(callee), times)
      return cost
    kind = op[:-len("-start")] if op.endswith("-start") else op
    if kind in COLLECTIVES:
      cost.add_collective(kind, self._sent_bytes(kind, i))
    if op == "fusion":
      callees = _called(i.attributes, "calls")
      cost.flops += sum(self._flops_only(c) for c in callees)
      cost.hbm_bytes += self._fusion_bytes(i, callees[0] if callees else "")
      return self._at_roofline(cost)
    cost.flops += self._own_flops(i)
    if op in SLICING:
      # Reads the slice (and any indices), writes it.
      cost.hbm_bytes += (self._in_hbm(i.operands[0]) * type_bytes(i.type)
                         + hbm_type_bytes(i.type) + sum(
                             self._operand_bytes(o) for o in i.operands[1:]
                             if op == "gather"))
    elif op == "dynamic-update-slice":
      # In place: reads the update, writes it into the buffer.
      cost.hbm_bytes += (self._operand_bytes(i.operands[1])
                         + self._in_hbm(i.operands[0])
                         * type_bytes(self._shapes.get(i.operands[1], "")))
    elif op == "copy-start":
      # (destination, source alias, context): reads the source, writes the
      # destination.
      cost.hbm_bytes += (sum(self._operand_bytes(o) for o in i.operands)
                         + _hbm_bytes(_arrays(i.type)[:1]))
    elif op not in NO_TRAFFIC:
      cost.hbm_bytes += hbm_type_bytes(i.type) + sum(
          self._operand_bytes(o) for o in i.operands)
    return self._at_roofline(cost)

  def _at_roofline(self, cost: Cost) -> Cost:
    """`cost` of one operation with its roofline_flops set."""
    cost.roofline_flops = max(cost.flops, self.flops_per_byte * cost.hbm_bytes)
    return cost

  def _operand_bytes(self, name: str) -> float:
    """The HBM bytes of reading value `name` whole."""
    return hbm_type_bytes(self._shapes.get(name, ""))

  def _in_hbm(self, name: str) -> bool:
    """Whether value `name` lies in HBM (not in on-chip memory)."""
    arrays = _arrays(self._shapes.get(name, ""))
    return any(space == 0 for _, _, space in arrays)

  def _sent_bytes(self, kind: str, i: Instruction) -> float:
    """Bytes one device sends for collective `i`."""
    n = _group_size(i.attributes, self.num_devices)
    sizes = [type_bytes(self._shapes.get(o, "")) for o in i.operands]
    operand = sum(sizes)
    result = max((DTYPE_BYTES[d] * math.prod(s)
                  for d, s in array_shapes(i.type)), default=0.0)
    share = (n - 1) / n if n > 1 else 0.0
    if kind == "all-gather":
      return share * result
    if kind == "reduce-scatter":
      return share * operand
    if kind == "all-reduce":
      return 2 * share * operand
    if kind in ("all-to-all", "ragged-all-to-all"):
      return share * operand
    return operand  # collective-permute

  def _fusion_bytes(self, i: Instruction, callee: str) -> float:
    """A fusion's operand and result bytes, slicing and in-place updates
    counted as the module doc says."""
    body = self.computations.get(callee, [])
    param_index = {}
    root = None
    for inner in body:
      if inner.opcode == "parameter":
        param_index[int(inner.args)] = inner
      if inner.root:
        root = inner
    in_place = set()
    result = hbm_type_bytes(i.type)
    roots = [root] if root is not None else []
    if root is not None and root.opcode == "tuple":
      by_name = {inner.name: inner for inner in body}
      roots = [by_name[o] for o in root.operands if o in by_name]
    if roots and any(r.opcode == "dynamic-update-slice" for r in roots):
      # Each output's memory space, in the roots' order.
      spaces = [space for _, _, space in _arrays(i.type)]
      if len(spaces) != len(roots):
        spaces = [0] * len(roots)
      result = 0.0
      for r, space in zip(roots, spaces):
        if space:
          continue
        if r.opcode == "dynamic-update-slice":
          in_place.add(r.operands[0])
          result += 2 * type_bytes(self._shapes.get(r.operands[1], ""))
        else:
          result += type_bytes(r.type)
    total = result
    for number, operand in enumerate(i.operands):
      param = param_index.get(number)
      full = self._operand_bytes(operand)
      if param is None or not full:
        total += full
        continue
      if param.name in in_place:
        continue
      sliced = self._sliced_bytes(callee, param.name)
      total += full if sliced is None else min(full, sliced)
    return total

  def _sliced_bytes(self, computation: str, value: str) -> float | None:
    """The bytes read of `value` (a parameter or bitcast in `computation`)
    when every use only slices it: a slice, a bitcast that is then only
    sliced, or a nested fusion whose own parameter is only sliced. None when
    some use reads it whole."""
    uses = [u for u in self.computations.get(computation, [])
            if value in u.operands]
    if not uses:
      return None
    total = 0.0
    for u in uses:
      if u.opcode in SLICING and u.operands[0] == value:
        total += type_bytes(u.type)
        continue
      inner = None
      if u.opcode == "bitcast":
        inner = self._sliced_bytes(computation, u.name)
      elif u.opcode == "fusion":
        callees = _called(u.attributes, "calls")
        params = {int(p.args): p.name for p in
                  self.computations.get(callees[0] if callees else "", [])
                  if p.opcode == "parameter"}
        numbers = [n for n, o in enumerate(u.operands) if o == value]
        parts = [self._sliced_bytes(callees[0], params[n])
                 if n in params else None for n in numbers]
        inner = None if None in parts else sum(parts)
      if inner is None:
        return None
      total += inner
    return total

  def _trip_count(self, i: Instruction) -> int | None:
    known = re.search(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)',
                      i.attributes)
    if known:
      return int(known.group(1))
    # The condition `induction < bound`: the induction is a tuple element of
    # the loop state, its start that element of the while's operand, its
    # step what the body adds to it (a loop XLA unrolled, such as a windowed
    # einsum's, adds 2 or more). A start or step not found is 0 or 1.
    for cond in _called(i.attributes, "condition"):
      body = self.computations.get(cond, [])
      named = {c.name: c for c in body}
      for c in body:
        if c.opcode != "compare" or "direction=LT" not in c.attributes:
          continue
        bound = self._constant(named.get(c.operands[-1]))
        if bound is None:
          continue
        index = self._tuple_index(named.get(c.operands[0]))
        if index is None:
          return bound
        start = self._loop_start(i, index) or 0
        step = self._loop_step(i, index) or 1
        return max(0, -(-(bound - start) // step))
    return None

  @staticmethod
  def _constant(i: Instruction | None) -> int | None:
    """The integer a scalar constant holds (None for anything else)."""
    if i is None or i.opcode != "constant" or not re.fullmatch(r"-?\d+",
                                                               i.args):
      return None
    return int(i.args)

  @staticmethod
  def _tuple_index(i: Instruction | None) -> int | None:
    """The element a get-tuple-element reads (None for anything else)."""
    if i is None or i.opcode != "get-tuple-element":
      return None
    index = re.search(r"\bindex=(\d+)", i.attributes)
    return int(index.group(1)) if index else None

  def _loop_start(self, loop: Instruction, index: int) -> int | None:
    """Element `index` of a while's initial state, when a constant (or a
    copy of one)."""
    state = self._by_name.get(loop.operands[0]) if loop.operands else None
    if state is None or state.opcode != "tuple" or index >= len(state.operands):
      return None
    value = self._by_name.get(state.operands[index])
    while value is not None and value.opcode == "copy":
      value = self._by_name.get(value.operands[0])
    return self._constant(value)

  def _loop_step(self, loop: Instruction, index: int) -> int | None:
    """What a while's body adds to element `index` of its state each trip,
    when `element + constant`."""
    for body in _called(loop.attributes, "body"):
      instructions = self.computations.get(body, [])
      named = {b.name: b for b in instructions}
      root = next((b for b in instructions if b.root), None)
      if root is None or root.opcode != "tuple" or index >= len(root.operands):
        return None
      update = named.get(root.operands[index])
      if update is None or update.opcode != "add":
        return None
      parts = [named.get(o) for o in update.operands]
      if any(self._tuple_index(p) == index for p in parts):
        steps = [c for c in map(self._constant, parts) if c]
        return steps[0] if steps else None
    return None


def analyse(compiled, num_devices: int, flops_per_byte: float = 0.0) -> Cost:
  """The per-device `Cost` of a compiled jax program."""
  return Module(compiled.as_text(), num_devices, flops_per_byte).cost()


def collectives_json(cost: Cost) -> dict:
  """{kind: {"count": n, "bytes": b}} for a report line."""
  return {kind: {"count": int(round(count)), "bytes": sent}
          for kind, (count, sent) in sorted(cost.collectives.items())}


def dumps(record: dict) -> str:
  return json.dumps(record, sort_keys=False)


SORT_KEYS = ("hbm", "flops", "collective", "time")


def report(text: str, num_devices: int, top: int = 20, sort: str = "hbm",
           chip: slices.Chip | None = None) -> str:
  """The module's cost per device, then its `top` costliest sources by
  `sort` (hbm, flops, collective or, with a chip, time): one line each.
  With the chip (one device per chip), each also in modeled seconds: its
  per-operation roofline plus its collectives at the chip's ICI bandwidth,
  as compile_check's modeled_s."""
  if sort not in SORT_KEYS or (sort == "time" and chip is None):
    raise ValueError(f"sort={sort!r}: expected one of {SORT_KEYS} ('time' "
                     "with a chip).")
  peak = chip.peak_tflops * 1e12 if chip else 0.0
  module = Module(text, num_devices,
                  peak / (chip.hbm_gbps * 1e9) if chip else 0.0)
  seconds = lambda c: (c.roofline_flops / peak
                       + c.collective_bytes / (chip.ici_gbps * 1e9))
  key = {"hbm": lambda c: c.hbm_bytes, "flops": lambda c: c.flops,
         "collective": lambda c: c.collective_bytes, "time": seconds}[sort]
  total = module.cost()
  lines = [f"total: {total.flops / 1e12:.2f} TFLOP, "
           f"{total.hbm_bytes / 1e9:.1f} GB HBM, "
           f"{total.collective_bytes / 1e9:.1f} GB sent "
           f"{collectives_json(total)}, unknown loops {total.unknown_loops}"
           + (f", modeled {seconds(total):.4g} s (roofline "
              f"{total.roofline_flops / peak:.4g} s)" if chip else "")]
  sources = sorted(module.by_source(), key=lambda item: -key(item[1]))
  for source, cost in sources[:top]:
    lines.append((f"{seconds(cost):9.4g} s " if chip else "")
                 + f"{cost.hbm_bytes / 1e9:10.1f} GB {cost.flops / 1e12:9.2f} "
                 f"TFLOP {cost.collective_bytes / 1e9:8.1f} GB sent  {source}")
  return "\n".join(lines)


def main(argv):
  if len(argv) != 2:
    raise SystemExit("usage: python -m train.bench.hlo_cost FILE.hlo "
                     "--devices=N [--topology=SLICE] [--top=K] "
                     "[--sort=hbm|flops|collective|time]")
  with open(argv[1]) as f:
    text = f.read()
  topology = flags.FLAGS.topology
  print(report(text, flags.FLAGS.devices, flags.FLAGS.top, flags.FLAGS.sort,
               slices.parse_slice(topology).chip if topology else None))


if __name__ == "__main__":
  flags.DEFINE_integer("devices", 1, "Devices the program was compiled for "
                       "(the size of a collective's group when it names none).")
  flags.DEFINE_integer("top", 20, "Sources to list.")
  flags.DEFINE_string("topology", None, "The slice it was compiled for "
                      "(e.g. v5p-64): adds modeled seconds, and --sort=time.")
  flags.DEFINE_enum("sort", "hbm", list(SORT_KEYS), "Order of the sources.")
  app.run(main)
