"""The partition layouts file: named layouts per device model, read once at agent start.

A node is labelled with a layout *name* (``accel-fleet.io/partition-layout``); what
the name means on the hardware lives here, on the node, because the controller need
not know MIG profiles or AMD partition modes to ask for "small slices". The shipped
file (``nodeagent/layouts.yaml``, package data) is the default; ``--layouts`` names
another. Every mistake in the file is reported at once as ``file:line:col``.

Format::

    layouts:
      h100-all-1g: {model: H100, mig: [1g.10gb x7]}   # seven 1g.10gb instances per GPU
      h100-half:   {model: H100, mig: [3g.40gb x2]}
      h100-whole:  {model: H100, mig: off}            # MIG mode off: whole GPUs
      mi300x-cpx:  {model: MI300X, compute: CPX, memory: NPS4}

``model`` is matched, case-insensitively, as a word inside the device's model name
("H100" matches "NVIDIA H100 80GB HBM3"). An NVIDIA layout has ``mig`` (a list of
``<profile>`` or ``<profile> x<count>``, or ``off``); an AMD layout has ``compute``
and optionally ``memory``.

A layout must fit its model (``nodeagent.budgets``: NVIDIA's MIG placements, amdgpu's
compute and memory mode pairs), or the file check refuses it at its position. A MIG
item is read by a scan that looks at each character once and a count is at most
three digits, so no file up to the reader's size limit costs more than a linear pass:
a count of thousands of digits once ended the check in a ValueError, and an item with
a megabyte of inner whitespace took minutes in a backtracking pattern.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from yaml.nodes import Node, ScalarNode

from accel_common.agentsupport import PartitionKind, partition_vendor
from accel_common.yamlread import ProblemsError, Reader
from nodeagent import budgets

# A layout name is a label value: the node's PARTITION_LAYOUT_LABEL carries it.
NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
# A MIG profile as nvidia-smi and NVML name it: 1g.10gb, 3g.40gb, 1g.10gb+me, 7g.80gb.
MIG_PROFILE = re.compile(r"^[1-8]g\.[0-9]+gb(\+me)?$")
_PROFILE_PREFIX = re.compile(r"[1-8]g\.[0-9]{1,4}gb(\+me)?")
_TIMES = "x×*"
# Enough digits for any count this file accepts (1 to MAX_INSTANCES), and a message
# that names the count without carrying it whole.
COUNT_DIGITS = 3
SHOWN = 40
COMPUTE_MODES = ("SPX", "DPX", "TPX", "QPX", "CPX")
MEMORY_MODES = ("NPS1", "NPS2", "NPS4", "NPS8")
MAX_INSTANCES = 8
KEYS = ("model", "mig", "compute", "memory")


class LayoutsError(ProblemsError):
    """The layouts file cannot be used; one ``file:line:col: message`` per problem."""


@dataclass(frozen=True)
class Layout:
    """One named layout. ``vendor`` is the vendor whose devices take its partition
    kinds (``accel_common.agentsupport``: ``mig`` NVIDIA's, ``compute`` and
    ``memory`` AMD's)."""

    name: str
    model: str
    vendor: str
    # NVIDIA: the GPU instance profiles, one entry per instance, in file order;
    # None means MIG mode off.
    mig: tuple[str, ...] | None = None
    # AMD: the compute partition mode, and the memory mode ("" leaves it as it is).
    compute: str = ""
    memory: str = ""

    @property
    def kinds(self) -> tuple[PartitionKind, ...]:
        """The partition kinds it sets (a MIG layout sets ``mig``, MIG off too)."""
        if self.compute:
            return ("compute", "memory") if self.memory else ("compute",)
        return ("mig",)

    def matches(self, model: str) -> bool:
        """Whether a device whose model name is ``model`` takes this layout."""
        return (
            re.search(rf"(?<![A-Za-z0-9]){re.escape(self.model)}(?![A-Za-z0-9])", model, re.I)
            is not None
        )

    def describe(self) -> str:
        if self.compute:
            return f"{self.compute}/{self.memory}" if self.memory else self.compute
        if self.mig is None:
            return "MIG off"
        return ", ".join(f"{n}x {p}" for p, n in count_profiles(self.mig))


def count_profiles(profiles: tuple[str, ...]) -> list[tuple[str, int]]:
    """``("1g.10gb", "1g.10gb", "3g.40gb")`` -> ``[("1g.10gb", 2), ("3g.40gb", 1)]``."""
    out: dict[str, int] = {}
    for p in profiles:
        out[p] = out.get(p, 0) + 1
    return list(out.items())


def default_path() -> Path:
    """The layouts file shipped with the package."""
    return Path(str(resources.files("nodeagent") / "layouts.yaml"))


def load(path: str | Path | None = None) -> dict[str, Layout]:
    """The layouts in ``path`` (the shipped file when None), by name; raises
    LayoutsError naming every problem."""
    r = Reader(path if path is not None else default_path())
    root = r.load(empty="an empty layouts file; expected 'layouts:' with at least one layout")
    layouts: dict[str, Layout] = {}
    if root is not None:
        top = r.mapping(root, "the layouts file", ("layouts",), required=("layouts",))
        if top is not None and "layouts" in top:
            entries = r.mapping(top["layouts"][1], "layouts", None)
            for name, (key, value) in (entries or {}).items():
                if not NAME.match(name):
                    r.problem(
                        key,
                        f"layout name {name!r} is not a label value (at most 63 letters, "
                        "digits, '-', '_' or '.', starting and ending with a letter or digit)",
                    )
                    continue
                layout = _layout(r, name, value)
                if layout is not None:
                    layouts[name] = layout
    if r.problems:
        raise LayoutsError(r.problems)
    return layouts


def _layout(r: Reader, name: str, node: Node) -> Layout | None:
    what = f"layout {name!r}"
    m = r.mapping(node, what, KEYS, required=("model",))
    if m is None or "model" not in m:
        return None
    model = r.written(m["model"][1], f"{what}: model (a word of the device model, e.g. H100)")
    if model is None:
        return None
    has_mig, has_amd = "mig" in m, "compute" in m or "memory" in m
    if has_mig == has_amd:
        r.problem(
            node,
            f"{what}: give either 'mig' (NVIDIA: a list of MIG profiles, or off) or "
            "'compute' (AMD: SPX, DPX, QPX or CPX, with 'memory' NPS1/NPS4 optional)",
        )
        return None
    if has_amd:
        if "compute" not in m:
            r.problem(node, f"{what}: 'memory' needs 'compute' (SPX, DPX, TPX, QPX or CPX)")
            return None
        compute = r.choice(m["compute"][1], f"{what}: compute", COMPUTE_MODES)
        memory = r.choice(m["memory"][1], f"{what}: memory", MEMORY_MODES) if "memory" in m else ""
        if compute is None or memory is None:
            return None
        refused = budgets.amd_problem(model, compute, memory)
        if refused:
            r.problem(m["memory"][1] if memory else m["compute"][1], f"{what}: {refused}")
            return None
        return Layout(name, model, partition_vendor("compute"), compute=compute, memory=memory)
    mig_node = m["mig"][1]
    if isinstance(mig_node, ScalarNode) and r.text(mig_node).lower() in ("off", "false"):
        return Layout(name, model, partition_vendor("mig"), mig=None)
    items = r.sequence(
        mig_node, f"{what}: mig", "a list of MIG profiles (e.g. [1g.10gb x7]) or off"
    )
    if items is None:
        return None
    profiles: list[str] = []
    for item in items:
        text = r.written(item, f"{what}: a MIG profile (e.g. 1g.10gb or 3g.40gb x2)")
        if text is None:
            continue
        parsed = mig_item(text)
        if isinstance(parsed, str):
            r.problem(item, f"{what}: {parsed}")
            continue
        profiles += [parsed[0]] * parsed[1]
    if not profiles:
        if not r.problems:
            r.problem(mig_node, f"{what}: mig lists no profile; write 'mig: off' for whole GPUs")
        return None
    if len(profiles) > MAX_INSTANCES:
        r.problem(
            mig_node, f"{what}: {len(profiles)} MIG instances; a GPU holds at most {MAX_INSTANCES}"
        )
        return None
    refused = budgets.mig_problem(model, profiles)
    if refused:
        shown = ", ".join(f"{n}x {p}" for p, n in count_profiles(tuple(profiles)))
        r.problem(mig_node, f"{what}: {shown} {refused}")
        return None
    return Layout(name, model, partition_vendor("mig"), mig=tuple(profiles))


def mig_item(text: str) -> tuple[str, int] | str:
    """One item of a ``mig`` list, ``<profile>`` or ``<profile> x<count>`` (also
    ``×`` or ``*``), as (profile, count); or what is wrong with it. Each character is
    looked at once: no pattern here can backtrack over the text."""
    item = text.strip()
    shown = repr(item if len(item) <= SHOWN else item[: SHOWN - 3] + "...")
    found = _PROFILE_PREFIX.match(item)
    if found is None:
        return f"{shown} is not a MIG profile (e.g. 1g.10gb, 3g.40gb x2)"
    profile = found.group(0)
    rest = item[found.end() :].lstrip()
    if not rest:
        return profile, 1
    if rest[0] not in _TIMES:
        return f"{shown} is not a MIG profile (e.g. 1g.10gb, 3g.40gb x2)"
    digits = rest[1:].lstrip()
    if not digits or not (digits.isascii() and digits.isdigit()):
        return f"{shown}: the count after {rest[0]!r} must be a whole number (e.g. {profile} x2)"
    if len(digits) > COUNT_DIGITS or not 1 <= int(digits) <= MAX_INSTANCES:
        if len(digits) > COUNT_DIGITS:
            return f"a count of {len(digits)} digits for {profile}; 1 to {MAX_INSTANCES}"
        return f"{int(digits)} instances of {profile}; 1 to {MAX_INSTANCES}"
    return profile, int(digits)
