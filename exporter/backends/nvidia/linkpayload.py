"""NVLink Xid payloads: the fields the driver prints with Xid 74 and 144–150, and the
action class they call for.

Why it is built this way:

* NVML's event data carries the Xid number only; the fields that tell a harmless,
  a sympathetic and a fatal NVLink event apart are in the kernel log line the driver
  writes for the same event (``NVRM: Xid (PCI:dddd:bb:dd): 74, ... link 4(0x..,
  ...)``). This module turns one such line into a class; reading the log is
  ``kmsg``'s job and joining a class to NVML's event is ``payloads``'.
* Xid 74 follows NVIDIA's Xid catalog workflow WORKFLOW_NVLINK_ERR: seven register
  fields, of which the first, third, fourth and fifth are defined on Hopper. Bits
  the workflow calls safe to ignore give ``ignore``; bits it calls sympathetic or
  secondary (the peer's view of its link partner's error), and the fifth
  register's ECC-threshold bits ("continue operation"), give ``watch``; every
  other bit, and any bit the workflow does not list, keeps the catalogue's default
  (``reset``). Sympathetic bits seen with other bits follow the others, as the
  workflow says. The workflow is defined for Hopper; on other GPUs the payload is
  not decoded.
* Xid 144–150 (Blackwell NVLink5, WORKFLOW_NVLINK5_ERR) print the unit's
  mnemonic, the driver's own ``Fatal``/``Nonfatal`` word and the intrInfo and
  errorStatus words. NVIDIA's per-unit table that maps intrInfo/errorStatus to
  ignorable and remote (sympathetic) cases is not built in; the driver's word is
  decoded: ``Fatal`` is ``reset``, ``Nonfatal`` ``watch`` (the catalogue's
  default). A peer's Fatal NVLink5 event is still graded by the driver's
  recovery action (Xid 154), which the backend reads with every Xid.
* A line that does not match, a field that does not parse, a register wider than
  32 bits: no decoding (None), so the catalogue's default class stands. Every
  repetition in the patterns is bounded and a message over ``MAX_MESSAGE`` is not
  looked at, so a hostile line costs little.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from accel_common.remedies import ActionClass, stronger
from exporter.faults.nvidia import NVLINK_PAYLOAD_CODES

# The Xid codes whose class a payload decides (the catalogue's list).
XID74: Final = "74"
PAYLOAD_CODES: Final = NVLINK_PAYLOAD_CODES
NVLINK5_CODES: Final = PAYLOAD_CODES - {XID74}

# The longest message this module looks at; ``kmsg`` bounds records before this.
MAX_MESSAGE: Final = 1024

# "NVRM: Xid (PCI:0000:3b:00): 74, rest" and the MIG form "(PCI:0000:3b:00 GPU-I:05)".
_XID = re.compile(
    r"NVRM: Xid \(PCI:([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?: [^()]{0,40})?\): "
    r"(\d{1,4}),(.*)",
    re.DOTALL,
)
# Xid 74: "link 4(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)".
_LINK74 = re.compile(r"\blink (\d{1,3})\(([0-9a-fA-Fx, ]{0,160})\)")
_HEX = re.compile(r"0x[0-9a-fA-F]{1,8}")
# Xid 144-150: "RLW_REMAP Nonfatal XC0 i0 Link 08 (0x004505c6 0x00000000 ...".
_NVLINK5 = re.compile(
    r"([A-Z][A-Z0-9_]{0,40}(?:/[A-Z][A-Z0-9_]{0,40})?) (Fatal|Nonfatal) XC[01] i\d{1,3} "
    r"Link (-?\d{1,3}) \((0x[0-9a-fA-F]{1,8}) (0x[0-9a-fA-F]{1,8})"
)


def _bits(*positions: int) -> int:
    mask = 0
    for p in positions:
        mask |= 1 << p
    return mask


# WORKFLOW_NVLINK_ERR, per register index (0 = the first field): the bits of each
# kind. A bit in no set is one the workflow gives a hardware resolution (or does not
# list): the default class.
_IGNORABLE: Final[Mapping[int, int]] = MappingProxyType({0: _bits(0, 23, 30)})
_SYMPATHETIC: Final[Mapping[int, int]] = MappingProxyType(
    {0: _bits(1, 20), 3: _bits(16, 17, 18), 4: _bits(20, 23, 26, 29)}
)
# The registers the workflow defines on Hopper; a bit set elsewhere is not decoded.
_DEFINED: Final = frozenset({0, 2, 3, 4})
_REGISTERS: Final = 7


@dataclass(frozen=True)
class XidLine:
    """One driver Xid line: the GPU's PCI address as the kernel writes it
    (``dddd:bb:dd``, lower case), the Xid code, and what follows the code."""

    bus: str
    code: str
    rest: str


@dataclass(frozen=True)
class Decoded:
    """A payload's class and what decided it, for the event's detail."""

    action: ActionClass
    why: str


def parse(message: str) -> XidLine | None:
    """The Xid line in a kernel message; None for any other message."""
    if len(message) > MAX_MESSAGE or "NVRM: Xid" not in message:
        return None
    m = _XID.search(message)
    if m is None:
        return None
    return XidLine(m.group(1).lower(), str(int(m.group(2))), m.group(3))


def registers(rest: str) -> tuple[int, tuple[int, ...]] | None:
    """Xid 74's link number and its seven register fields; None when the payload
    does not have exactly seven 32-bit hex fields."""
    m = _LINK74.search(rest)
    if m is None:
        return None
    fields = [f.strip() for f in m.group(2).split(",")]
    if len(fields) != _REGISTERS or not all(_HEX.fullmatch(f) for f in fields):
        return None
    return int(m.group(1)), tuple(int(f, 16) for f in fields)


def decode_xid74(regs: tuple[int, ...], hopper: bool) -> Decoded | None:
    """Xid 74's class by WORKFLOW_NVLINK_ERR; None where the workflow does not
    decide (not Hopper, a register it does not define, a bit with a hardware
    resolution or none listed: the default class stands)."""
    if not hopper or len(regs) != _REGISTERS:
        return None
    if any(v for i, v in enumerate(regs) if i not in _DEFINED):
        return None
    action: ActionClass | None = None
    for i in sorted(_DEFINED):
        value = regs[i]
        ignorable = value & _IGNORABLE.get(i, 0)
        sympathetic = value & _SYMPATHETIC.get(i, 0)
        if value & ~(ignorable | sympathetic):
            return None  # a fault bit: the sympathetic bits follow it
        if sympathetic:
            action = "watch" if action is None else stronger(action, "watch")
        elif ignorable and action is None:
            action = "ignore"
    if action is None:
        return None  # no bit set: nothing to decode
    word = "sympathetic or threshold" if action == "watch" else "ignorable"
    return Decoded(action, f"nvlink payload: {word} bits only")


def decode_nvlink5(rest: str) -> Decoded | None:
    """Xid 144-150's class from the driver's Fatal/Nonfatal word; None when the
    payload does not have the NVLink5 form."""
    m = _NVLINK5.search(rest)
    if m is None:
        return None
    unit, word = m.group(1), m.group(2)
    if word == "Fatal":
        return Decoded("reset", f"nvlink5 {unit} Fatal")
    return Decoded("watch", f"nvlink5 {unit} Nonfatal")


def decode(line: XidLine, hopper: bool) -> Decoded | None:
    """The class an NVLink Xid's payload calls for; None for other codes and for
    payloads that cannot be decoded."""
    if line.code == XID74:
        found = registers(line.rest)
        return None if found is None else decode_xid74(found[1], hopper)
    if line.code in NVLINK5_CODES:
        return decode_nvlink5(line.rest)
    return None


def is_hopper(model: str) -> bool:
    """Whether NVML's product name is a Hopper GPU (H100, H200, H800, H20, GH200),
    the architecture WORKFLOW_NVLINK_ERR is written for."""
    return re.search(r"\b(?:GH|H)(?:100|200|800|20)\b", model) is not None
