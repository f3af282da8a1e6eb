"""An operator's copy of a vendor's machine-readable fault table, loaded at start
(``accel-exporter --fault-table VENDOR=FILE``), so that the codes of a new driver
need no release of the exporter.

Two formats, the ones the vendors publish:

* ``nvidia``: NVIDIA's Xid catalog workbook exported as CSV. The header row names
  the columns; the loader needs one named ``Code`` and one whose name contains
  ``Immediate Action`` (the "Resolution Bucket (Immediate Action)" column), and
  reads ``Mnemonic``/``Description`` for the name and ``Type`` (rows other than
  XID, e.g. SXid rows, are skipped) when present. The bucket's words become
  classes through ``NVIDIA_BUCKETS``.
* ``ascend``: MindCluster's fault-code JSON, either the device plugin's
  ``faultCode.json`` (one list of codes per level: ``"SeparateNPUCodes": [...]``)
  or a flat object of code to level (``{"80E18402": "SeparateNPU"}``). Levels
  become classes through ``exporter.faults.ascend.LEVEL_CLASSES``.

An entry replaces the built-in entry of the same code (the operator's table is the
newer word) or adds one; the severity follows from the class
(``SEVERITY_OF_CLASS``). A file that cannot be used stops the exporter at start
with its path and line and what is wrong (``FaultTableError``): a silently
half-loaded table would grade codes differently than the operator believes. The
file is read through the bounded reader (at most ``MAX_BYTES``), so a wrong path
such as a device node cannot hang or exhaust the start.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from accel_common.readfile import FieldError, NotUTF8, decode_utf8, read_bytes
from accel_common.remedies import UNKNOWN_CLASS, ActionClass
from exporter.faults.ascend import LEVEL_CLASSES
from exporter.faults.base import SEVERITY_OF_CLASS, FaultCode

# NVIDIA's Xid catalog is about 200 rows; MindCluster's faultCode.json about 15 KiB.
MAX_BYTES: Final = 4 * 1024 * 1024

# The immediate-action buckets of NVIDIA's Xid catalog. A WORKFLOW_* bucket needs a
# decision the exporter cannot make from the code alone (a payload, the other Xids
# around it): such a code keeps its built-in class, or gets UNKNOWN_CLASS when it
# has none. CONTACT_SUPPORT as the immediate action means the GPU goes back to
# NVIDIA: isolate.
NVIDIA_BUCKETS: Final[Mapping[str, ActionClass]] = MappingProxyType(
    {
        "IGNORE": "ignore",
        "NONE": "ignore",
        "RESTART_APP": "app",
        "CHECK_APP/CUDA": "app",
        "RESET_GPU": "reset",
        "RESTART_BM": "reboot",
        "RESTART_VM": "reboot",
        "CONTACT_SUPPORT": "isolate",
    }
)
WORKFLOW_PREFIXES: Final = ("WORKFLOW_", "XID_154")

FORMATS: Final = ("nvidia", "ascend")


class FaultTableError(ValueError):
    """A fault table that cannot be loaded; the message names the file and line."""


def load(vendor: str, path: Path, builtin: Mapping[str, FaultCode]) -> list[FaultCode]:
    """The entries of ``path`` as ``vendor``'s table gives them."""
    text = _read(path)
    if vendor == "nvidia":
        return list(_xid_csv(path, text, builtin))
    if vendor == "ascend":
        return list(_mindcluster_json(path, text))
    raise FaultTableError(
        f"--fault-table {vendor}={path}: no table format for vendor {vendor!r}; "
        f"use one of {', '.join(FORMATS)}"
    )


def _read(path: Path) -> str:
    try:
        return decode_utf8(read_bytes(path, MAX_BYTES))
    except FieldError as e:
        raise FaultTableError(f"{path}: cannot read the fault table: {e}") from e
    except NotUTF8 as e:
        raise FaultTableError(f"{path}:{e}") from e


def _entry(code: str, action: ActionClass, name: str, source: str) -> FaultCode:
    return FaultCode(
        code, SEVERITY_OF_CLASS[action], name or code, f"From {source}.", action, source
    )


def _columns(path: Path, header: list[str]) -> dict[str, int]:
    names = {h.strip().lower(): i for i, h in enumerate(header)}
    out: dict[str, int] = {k: names[k] for k in ("code", "mnemonic", "description") if k in names}
    # "Type (XID)" in NVIDIA's sheet.
    kind = [i for h, i in names.items() if h.startswith("type")]
    if kind:
        out["type"] = kind[0]
    immediate = [i for h, i in names.items() if "immediate action" in h]
    if "code" not in out or not immediate:
        raise FaultTableError(
            f"{path}:1: the header has no 'Code' column or no 'Immediate Action' column "
            "(export NVIDIA's Xid catalog sheet as CSV with its header row)"
        )
    out["action"] = immediate[0]
    return out


def _xid_csv(path: Path, text: str, builtin: Mapping[str, FaultCode]) -> Iterator[FaultCode]:
    rows = csv.reader(io.StringIO(text))
    try:
        header = next(rows)
    except StopIteration:
        raise FaultTableError(f"{path}:1: the file is empty") from None
    except csv.Error as e:
        raise FaultTableError(f"{path}:1: not CSV: {e}") from e
    cols = _columns(path, header)
    try:
        for row in rows:
            line = rows.line_num
            if not any(cell.strip() for cell in row):
                continue
            yield from _xid_row(path, line, row, cols, builtin)
    except csv.Error as e:
        raise FaultTableError(f"{path}:{rows.line_num}: not CSV: {e}") from e


def _cell(row: list[str], cols: dict[str, int], key: str) -> str:
    i = cols.get(key)
    return row[i].strip() if i is not None and i < len(row) else ""


def _xid_row(
    path: Path, line: int, row: list[str], cols: dict[str, int], builtin: Mapping[str, FaultCode]
) -> Iterator[FaultCode]:
    kind = _cell(row, cols, "type")
    if kind and not kind.upper().startswith("XID"):
        return
    code = _cell(row, cols, "code")
    if not code.isdigit():
        raise FaultTableError(f"{path}:{line}: Code {code!r} is not an Xid number")
    bucket = _cell(row, cols, "action").upper()
    name = _cell(row, cols, "description") or _cell(row, cols, "mnemonic")
    source = f"{path.name}: {bucket or 'no immediate action'}"
    if bucket.startswith(WORKFLOW_PREFIXES):
        known = builtin.get(str(int(code)))
        action = known.action if known is not None else UNKNOWN_CLASS
    elif bucket in NVIDIA_BUCKETS:
        action = NVIDIA_BUCKETS[bucket]
    else:
        raise FaultTableError(
            f"{path}:{line}: Xid {code}: unknown immediate action {bucket!r}; the loader "
            f"knows {', '.join(NVIDIA_BUCKETS)} and WORKFLOW_*"
        )
    yield _entry(str(int(code)), action, name, source)


def _ascend_code(path: Path, text: str, raw: Any) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise FaultTableError(
            f"{path}:{_line_of(text, str(raw))}: fault code {raw!r} is not a string"
        )
    s = raw.strip().upper().removeprefix("0X")
    try:
        value = int(s, 16)
    except ValueError:
        raise FaultTableError(
            f"{path}:{_line_of(text, raw)}: fault code {raw!r} is not hexadecimal"
        ) from None
    # DCMI's 32-bit codes as the ascend backend spells them; longer ones as given.
    return f"0x{value:08X}" if value <= 0xFFFFFFFF else f"0x{s}"


def _level(path: Path, text: str, level: str) -> ActionClass:
    name = level.removesuffix("Codes")
    if name not in LEVEL_CLASSES:
        raise FaultTableError(
            f"{path}:{_line_of(text, level)}: unknown MindCluster level {level!r}; the "
            f"loader knows {', '.join(LEVEL_CLASSES)}"
        )
    return LEVEL_CLASSES[name]


def _mindcluster_json(path: Path, text: str) -> Iterator[FaultCode]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise FaultTableError(f"{path}:{e.lineno}: not JSON: {e.msg}") from e
    if not isinstance(doc, dict):
        raise FaultTableError(f"{path}:1: expected an object of levels or of codes")
    for key, value in doc.items():
        if isinstance(value, list):
            action = _level(path, text, key)
            for raw in value:
                yield _entry(_ascend_code(path, text, raw), action, "", f"{path.name}: {key}")
        elif isinstance(value, str):
            action = _level(path, text, value)
            yield _entry(_ascend_code(path, text, key), action, "", f"{path.name}: {value}")
        else:
            raise FaultTableError(
                f"{path}:{_line_of(text, key)}: {key!r} must be a list of codes or a level name"
            )


def _line_of(text: str, needle: str) -> int:
    """The line of the first quoted ``needle`` in ``text`` (1 when not found): JSON's
    parser gives no line for a value it parsed, so the loader finds it again."""
    at = text.find(f'"{needle}"')
    return text.count("\n", 0, at) + 1 if at >= 0 else 1
