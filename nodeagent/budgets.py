"""What a GPU can be split into: MIG placements for NVIDIA, partition modes for AMD.

The layouts file is checked with this before the agent starts, so a layout that no
GPU of its model can hold (``[7g.80gb, 1g.10gb]`` on an H100) is a ``file:line:col``
problem of the file, not a "failed" answer on every node that asks for it.

Why it is built this way:

* **NVIDIA: memory slices and placements, not just counts.** A100, H100, H200 and B200
  have 7 compute slices and 8 memory slices, and a GPU instance profile may start only
  at fixed memory slices (NVIDIA Multi-Instance GPU User Guide, "Supported MIG
  Profiles" and the placements that ``nvidia-smi mig -lgipp`` lists; NVML
  ``nvmlDeviceGetGpuInstancePossiblePlacements``: an instance occupies the memory
  slices of its placement, and one that would overlap another is refused). The
  placements are the same on these GPUs; the profile names differ with the memory
  size (1g.10gb on an H100 80GB is 1g.18gb on an H200 141GB). A layout fits when its
  instances can be placed without overlap, at most one with media extensions
  (``+me``); ``fits`` tries every placement (at most 7 instances: a few hundred
  tries).
* **A model word covers several products.** "H100" is an 80GB or a 94GB GPU, "A100"
  a 40GB or an 80GB one, with different profile names. A layout is accepted when it
  fits one product of its model that has all its profiles; a node with the other
  product fails it when it is applied, with the profiles that GPU has.
* **AMD: the driver's own rule.** amdgpu accepts a compute partition mode only with
  some memory modes (``__aqua_vanjaram_is_valid_mode`` in
  ``drivers/gpu/drm/amd/amdgpu/aqua_vanjaram.c``): on an MI300X (8 XCDs, NPS1, NPS2
  and NPS4) SPX needs NPS1; DPX any but NPS8; TPX needs an XCD count divisible by
  three, which 8 is not; QPX and CPX need NPS1 or NPS4. AMD's MI300X partitioning
  overview lists the same pairs (SPX/NPS1, DPX/NPS1 or NPS2, QPX/NPS1, CPX/NPS1 or
  NPS4).
* Models not named here are not checked by the file check: their GPUs refuse what
  they cannot hold when the layout is applied, as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MEMORY_SLICES = 8
COMPUTE_SLICES = 7


@dataclass(frozen=True)
class Shape:
    """How a GPU instance profile sits on the GPU: compute slices, memory slices and
    the memory slices it may start at."""

    compute: int
    memory: int
    starts: tuple[int, ...]
    media: bool = False  # "+me": the GPU's one set of media extensions


# The placements of NVIDIA's MIG user guide for the 8-memory-slice GPUs.
ONE = Shape(1, 1, (0, 1, 2, 3, 4, 5, 6))
ONE_ME = Shape(1, 1, (0, 1, 2, 3, 4, 5, 6), media=True)
ONE_WIDE = Shape(1, 2, (0, 2, 4, 6))  # 1g with twice the memory (1g.20gb on an H100)
TWO = Shape(2, 2, (0, 2, 4))
THREE = Shape(3, 4, (0, 4))
FOUR = Shape(4, 4, (0,))
SEVEN = Shape(7, 8, (0,))


def _profiles(one: str, wide: str, half: str, whole: str) -> dict[str, Shape]:
    """A product's profile names, by its memory sizes: one slice, two, four, eight."""
    return {
        f"1g.{one}gb": ONE,
        f"1g.{one}gb+me": ONE_ME,
        f"1g.{wide}gb": ONE_WIDE,
        f"2g.{wide}gb": TWO,
        f"3g.{half}gb": THREE,
        f"4g.{half}gb": FOUR,
        f"7g.{whole}gb": SEVEN,
    }


@dataclass(frozen=True)
class Product:
    name: str
    profiles: dict[str, Shape]


# NVIDIA's MIG user guide, "Supported MIG Profiles" (names per product); the A100 40GB
# has no 1g.10gb of one slice: its 1g.10gb is the wide 1g.
NVIDIA: dict[str, tuple[Product, ...]] = {
    "A100": (
        Product("A100 40GB", _profiles("5", "10", "20", "40")),
        Product("A100 80GB", _profiles("10", "20", "40", "80")),
    ),
    "H100": (
        Product("H100 80GB", _profiles("10", "20", "40", "80")),
        Product("H100 94GB", _profiles("12", "24", "47", "94")),
    ),
    "H200": (Product("H200 141GB", _profiles("18", "35", "71", "141")),),
    "B200": (Product("B200 180GB", _profiles("23", "45", "90", "180")),),
}


def products(model: str) -> tuple[Product, ...]:
    """The NVIDIA products a layout's ``model`` word names; () when unknown here."""
    return NVIDIA.get(model.upper(), ())


def fits(shapes: Sequence[Shape]) -> bool:
    """Whether GPU instances of ``shapes`` can all be placed on one GPU at once."""
    if sum(s.compute for s in shapes) > COMPUTE_SLICES or sum(s.media for s in shapes) > 1:
        return False
    # Widest first: they have the fewest placements, so dead ends show early.
    todo = sorted(shapes, key=lambda s: (-s.memory, len(s.starts)))
    return _place(todo, 0, 0)


def _place(todo: list[Shape], at: int, used: int) -> bool:
    if at == len(todo):
        return True
    shape = todo[at]
    for start in shape.starts:
        mask = ((1 << shape.memory) - 1) << start
        if not used & mask and _place(todo, at + 1, used | mask):
            return True
    return False


def mig_problem(model: str, profiles: Sequence[str]) -> str:
    """Why no GPU of ``model`` can hold ``profiles`` (one instance each); "" when one
    can, or when the model is not known here."""
    known = products(model)
    if not known:
        return ""
    having = [p for p in known if all(name in p.profiles for name in profiles)]
    if not having:
        missing = sorted({n for n in profiles if not any(n in p.profiles for p in known)})
        shown = "; ".join(f"{p.name}: {', '.join(p.profiles)}" for p in known)
        if missing:
            return f"no {model} GPU has MIG profile {', '.join(missing)} ({shown})"
        return f"no single {model} product has all of {', '.join(sorted(set(profiles)))} ({shown})"
    for product in having:
        if fits([product.profiles[n] for n in profiles]):
            return ""
    product = having[0]
    shapes = [product.profiles[n] for n in profiles]
    compute = sum(s.compute for s in shapes)
    memory = sum(s.memory for s in shapes)
    media = sum(s.media for s in shapes)
    if media > 1:
        why = f"{media} instances with media extensions (+me); a GPU has one set"
    elif compute > COMPUTE_SLICES or memory > MEMORY_SLICES:
        why = (
            f"{compute} compute and {memory} memory slices asked; a GPU has "
            f"{COMPUTE_SLICES} and {MEMORY_SLICES}"
        )
    else:
        why = "the slices add up, but NVIDIA's fixed placements leave no room for them all"
    return f"does not fit one {product.name}: {why}"


# amdgpu's rule for an MI300-class GPU of ``xcds`` XCDs (module docstring).
@dataclass(frozen=True)
class AmdModel:
    name: str
    xcds: int
    memory_modes: tuple[str, ...]


AMD: dict[str, AmdModel] = {
    "MI300X": AmdModel("MI300X", 8, ("NPS1", "NPS2", "NPS4")),
    "MI325X": AmdModel("MI325X", 8, ("NPS1", "NPS2", "NPS4")),
}

_PARTITIONS = {"SPX": 1, "DPX": 2, "TPX": 3, "QPX": 4, "CPX": 8}


def _compute_ok(compute: str, xcds: int) -> bool:
    if compute == "SPX":
        return xcds > 0
    if compute == "DPX":
        return xcds % 4 == 0
    if compute == "TPX":
        return xcds % 3 == 0
    if compute == "QPX":
        return xcds // 4 >= 2
    return xcds > 1  # CPX


def _pair_ok(compute: str, memory: int, xcds: int) -> bool:
    if compute == "SPX":
        return memory == 1
    if compute == "DPX":
        return memory != 8
    if compute == "TPX":
        return memory in (1, 3)
    return memory in (1, 4) and xcds % memory == 0  # QPX, CPX


def amd_problem(model: str, compute: str, memory: str) -> str:
    """Why no GPU of ``model`` takes ``compute`` with ``memory`` ("" leaves the memory
    mode as it is); "" when it does, or when the model is not known here."""
    known = AMD.get(model.upper())
    if known is None:
        return ""
    if not _compute_ok(compute, known.xcds):
        return (
            f"an {known.name} ({known.xcds} XCDs) has no {compute} mode "
            f"({_PARTITIONS[compute]} partitions of its XCDs)"
        )
    if not memory:
        return ""
    if memory not in known.memory_modes:
        return f"an {known.name} has memory modes {', '.join(known.memory_modes)}, not {memory}"
    if not _pair_ok(compute, int(memory.removeprefix("NPS")), known.xcds):
        good = [m for m in known.memory_modes if _pair_ok(compute, int(m[3:]), known.xcds)]
        return (
            f"amdgpu refuses {compute} with {memory} on an {known.name}; {compute} takes "
            f"{' or '.join(good) or 'no memory mode'}"
        )
    return ""


__all__ = [
    "AMD",
    "COMPUTE_SLICES",
    "MEMORY_SLICES",
    "NVIDIA",
    "Shape",
    "amd_problem",
    "fits",
    "mig_problem",
    "products",
]
