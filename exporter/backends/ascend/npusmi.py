"""Ascend NPUs through Huawei's ``npu-smi`` tool, where the DCMI library cannot be
loaded: fixed command lines, a timeout, bounded output, and tolerant parsers.

Why it is built this way:

* **Fixed argv, no shell.** Only ``npu-smi info``, ``npu-smi info -t usages -i CARD``,
  ``npu-smi info -t health -i CARD -c CHIP`` and ``npu-smi info -t topo`` are run, as
  argument lists; nothing from the output ever becomes an argument except the card
  and chip numbers the table gave, re-formatted as integers.
* **Bounded in time and size.** Each run has a timeout and at most ``MAX_OUTPUT``
  bytes are read; the tool runs in its own session, so a hung tool and anything it
  started are killed together when time is up (``run``).
* **Parse failures are missing fields, never a crash.** The parsers take what they
  recognise and ignore the rest: a cell they cannot read leaves its field out (with
  the reason in ``missing``). Output with no ``npu-smi info`` table at all is a failed
  poll of every chip, not a lost chip; a chip is lost only when a table that parsed
  no longer lists it.
* **One table per poll.** ``npu-smi info`` reports every chip at once; it is run when
  the poll reads its first chip and served to the others, and the per-card usage
  report (HBM bandwidth) likewise once per card. The health detail (the active fault
  codes) is asked only for a chip the table does not call OK.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from exporter.backends.ascend.device import MIB, NPU_SMI_HEALTH, VENDOR, Npu, model_name
from exporter.backends.base import BackendOptions, MissingFields
from exporter.model import DeviceInfo, DeviceLostError, FaultEvent, Link, Reading
from exporter.pcitopo import cpu_affinity, numa_node

log = logging.getLogger("accel_exporter.ascend")

NPU_SMI_SOURCE = "npu-smi"
BANDWIDTH_SOURCE = "npu-smi info -t usages HBM Bandwidth Usage Rate(%)"
MAX_OUTPUT = 1 << 20
DEFAULT_TIMEOUT = 3.0
# Where the driver package installs the tool, when PATH does not name it.
CANDIDATES: tuple[str, ...] = ("/usr/local/sbin/npu-smi", "/usr/local/bin/npu-smi")
# What npu-smi cannot give, and so is never asked of it.
NOT_FROM_NPU_SMI = "not read through npu-smi (the DCMI library gives it)"
_UNREAD = ("ecc_errors", "retired_pages", "clocks_hz")

_VERSION = re.compile(r"Version:\s*(\S+)")
_ROW1 = re.compile(r"^(\d+)\s+(\S+)$")
_ROW2 = re.compile(r"^(\d+)(?:\s+\d+)?$")
_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
_VALUE = re.compile(r"(\S+)\s*/\s*(\S+)|(\S+)")
_HEX_CODE = re.compile(r"^(?:0x)?([0-9A-Fa-f]{8})$")
_TOPO_LINKS = {
    "HCCS": "hccs",
    "HCCS_SW": "hccs",
    "SIO": "hccs",
    "PIX": "pcie_switch",
    "PXB": "pcie_switch",
    "PHB": "pcie_hostbridge",
    "SYS": "system",
}


class NpuSmiError(Exception):
    """npu-smi could not be run, did not finish in time, or printed nothing usable."""


def find(candidates: Sequence[str] = CANDIDATES) -> str | None:
    """The npu-smi to run: the one on PATH, else the driver package's place."""
    found = shutil.which("npu-smi")
    if found:
        return found
    return next((c for c in candidates if os.access(c, os.X_OK)), None)


def run(path: str, args: Sequence[str], timeout: float) -> str:
    """Runs ``path args`` (no shell) and returns its standard output, decoded; raises
    NpuSmiError on a timeout (the tool and its session are killed), on more than
    ``MAX_OUTPUT`` bytes, or on a non-zero exit."""
    argv = [path, *args]
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as e:
        raise NpuSmiError(f"cannot run {path}: {e.strerror or e}") from e
    assert proc.stdout is not None
    what = " ".join(["npu-smi", *args])
    deadline = time.monotonic() + timeout
    out = bytearray()
    try:
        fd = proc.stdout.fileno()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise NpuSmiError(f"{what}: no answer within {timeout:g}s")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            out += chunk
            if len(out) > MAX_OUTPUT:
                raise NpuSmiError(f"{what}: more than {MAX_OUTPUT} bytes of output")
        try:
            code = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired as e:
            raise NpuSmiError(f"{what}: did not exit within {timeout:g}s") from e
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stdout.close()
    if code != 0:
        raise NpuSmiError(f"{what}: exit status {code}")
    return out.decode(errors="replace")


# -- parsers ------------------------------------------------------------------------


@dataclass
class ChipRow:
    """One chip of the ``npu-smi info`` table; values it could not read are absent."""

    card: int
    chip: int
    name: str
    health: str = ""
    bus_id: str = ""
    values: dict[str, float] = field(default_factory=dict)
    pairs: dict[str, tuple[float, float]] = field(default_factory=dict)


@dataclass
class InfoTable:
    version: str
    chips: list[ChipRow]


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _fill(row: ChipRow, header: list[str], cell: str) -> None:
    """The values of one data cell, named by the header cell above it ("1197 / 13553"
    is one paired value)."""
    for name, match in zip(header, _VALUE.finditer(cell), strict=False):
        if match.group(3) is not None:
            v = _number(match.group(3))
            if v is not None:
                row.values[name] = v
        else:
            a, b = _number(match.group(1)), _number(match.group(2))
            if a is not None and b is not None:
                row.pairs[name] = (a, b)


def parse_info(text: str) -> InfoTable:
    """The ``npu-smi info`` table: the driver version and one row per chip. Raises
    NpuSmiError when there is no table at all."""
    version = ""
    head1: list[str] | None = None
    head2: list[str] | None = None
    chips: list[ChipRow] = []
    pending: tuple[int, str, str, str] | None = None
    for line in text.splitlines():
        if not version and "npu-smi" in line and (m := _VERSION.search(line)):
            version = m.group(1)
            continue
        if not line.lstrip().startswith("|"):
            continue
        cells = _cells(line)
        if len(cells) < 3:
            continue
        first = cells[0]
        if first.startswith("NPU") and "Process" in cells[1]:
            break  # the process table follows the chips
        if first.startswith("NPU") and "Name" in first:
            head1 = cells[2].split()
            continue
        if first.startswith("Chip") and "Bus-Id" in cells[1]:
            head2 = cells[2].split()
            continue
        if head1 is None or head2 is None:
            continue
        m1 = _ROW1.match(first)
        m2 = _ROW2.match(first)
        if pending is None and m1 is not None and not _BUS_ID.match(cells[1]):
            pending = (int(m1.group(1)), m1.group(2), cells[1], cells[2])
        elif pending is not None and m2 is not None:
            card, name, health, cell1 = pending
            pending = None
            row = ChipRow(card, int(m2.group(1)), name, health)
            if _BUS_ID.match(cells[1]):
                row.bus_id = cells[1].lower()
            _fill(row, head1, cell1)
            _fill(row, head2, cells[2])
            chips.append(row)
        else:
            pending = None  # out of step: drop the half row rather than misread it
    if head1 is None or head2 is None:
        raise NpuSmiError("npu-smi info printed no chip table")
    return InfoTable(version, chips)


def parse_keyed(text: str) -> dict[int, dict[str, str]]:
    """``Key : Value`` reports (``-t usages``, ``-t health``) per chip id. A chip's
    fields come before its ``Chip ID`` line; a report without one is chip 0's."""
    chips: dict[int, dict[str, str]] = {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "Chip ID":
            chip = _number(value)
            if chip is not None and chip >= 0:
                chips[int(chip)] = fields
            fields = {}
        elif key:
            fields[key] = value
    if fields and not chips:
        chips[0] = fields
    return chips


def parse_error_codes(value: str) -> list[int] | None:
    """The ``Error Code`` of a health report: hex codes, or NA for none; None when it
    is not that."""
    tokens = [t for t in re.split(r"[\s,;]+", value.strip()) if t]
    if not tokens or [t.upper() for t in tokens] == ["NA"]:
        return []
    codes = []
    for t in tokens:
        m = _HEX_CODE.match(t)
        if m is None:
            return None
        codes.append(int(m.group(1), 16))
    return codes


def parse_topo(text: str) -> dict[tuple[int, int], str]:
    """``npu-smi info -t topo``'s matrix: (row, column) index -> relation word."""
    out: dict[tuple[int, int], str] = {}
    columns: list[int] = []
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        if not columns and words[0].startswith("NPU") and words[0][3:].isdigit():
            columns = [int(w[3:]) for w in words if w.startswith("NPU") and w[3:].isdigit()]
            continue
        if columns and words[0].startswith("NPU") and words[0][3:].isdigit():
            row = int(words[0][3:])
            for col, word in zip(columns, words[1:], strict=False):
                out[(row, col)] = word
    return out


# -- the reader -----------------------------------------------------------------------


class NpuSmiReader:
    """The npu-smi source: discovery, one chip per read, and the topology matrix."""

    def __init__(
        self, path: str, options: BackendOptions, missing: MissingFields, timeout: float
    ) -> None:
        self.path = path
        self.options = options
        self.missing = missing
        self.timeout = timeout
        self._table: InfoTable | None = None
        self._table_error = ""
        self._usages: dict[int, dict[int, dict[str, str]] | str] = {}
        self._served: set[str] = set()

    def _run(self, *args: str) -> str:
        return run(self.path, args, self.timeout)

    def discover(self) -> list[Npu]:
        """The chips of the table, in (card, chip) order; raises NpuSmiError."""
        table = parse_info(self._run("info"))
        self._table, self._served = table, set()
        rows = sorted(table.chips, key=lambda r: (r.card, r.chip))
        return [
            Npu(self._identity(i, row, table.version), row.card, row.chip)
            for i, row in enumerate(rows)
        ]

    def _identity(self, index: int, row: ChipRow, version: str) -> DeviceInfo:
        pci = row.bus_id
        return DeviceInfo(
            device=f"{VENDOR}{index}",
            vendor=VENDOR,
            # npu-smi's table shows no die id: the PCI address is the chip's identity.
            uuid=pci or f"{VENDOR}-card{row.card}-chip{row.chip}",
            model=model_name("Ascend", row.name),
            pci_bus_id=pci,
            driver_version=version,
            numa_node=numa_node(self.options.sysfs, pci),
            cpu_affinity=cpu_affinity(self.options.sysfs, pci),
        )

    def _poll_table(self, npu: Npu) -> InfoTable | None:
        """The table of this poll: run again when this chip was already served from
        the current one (a new poll has begun)."""
        if npu.name in self._served or (self._table is None and not self._table_error):
            self._served, self._usages = set(), {}
            try:
                self._table, self._table_error = parse_info(self._run("info")), ""
            except NpuSmiError as e:
                self._table, self._table_error = None, str(e)
                self.missing.warn_once(("npu-smi", str(e)), "ascend: %s", e)
        self._served.add(npu.name)
        return self._table

    def read(self, npu: Npu) -> Reading:
        r = Reading(telemetry_source=NPU_SMI_SOURCE)
        self.missing.note(npu.name, _UNREAD, NOT_FROM_NPU_SMI)
        table = self._poll_table(npu)
        if table is None:
            self.missing.note(npu.name, _FIELDS_FROM_TABLE, self._table_error)
            return r
        row = next((c for c in table.chips if (c.card, c.chip) == (npu.card, npu.chip)), None)
        if row is None:
            reason = f"npu-smi info no longer lists card {npu.card} chip {npu.chip}"
            if npu.lost:
                raise DeviceLostError(reason)
            npu.lost = True
            return Reading(up=False, down_reason=reason, fault_events=[FaultEvent("lost", reason)])
        npu.lost = False
        aicore = row.values.get("AICore(%)")
        if aicore is not None and 0 <= aicore <= 100:
            r.utilization = aicore / 100
        # HBM where the chip has it; Memory-Usage is then the card's own DDR (0 / 0 on
        # 910B); a chip without HBM (310P) has only Memory-Usage.
        hbm = row.pairs.get("HBM-Usage(MB)")
        memory = hbm if hbm is not None and hbm[1] > 0 else row.pairs.get("Memory-Usage(MB)")
        if memory is not None and memory[1] > 0:
            r.memory_total_bytes = memory[1] * MIB
            if 0 <= memory[0] <= memory[1]:
                r.memory_used_bytes = memory[0] * MIB
        temp = row.values.get("Temp(C)")
        if temp is not None:
            r.temperatures["gpu"] = temp
        power = row.values.get("Power(W)")
        if power is not None and power >= 0:
            r.power_watts = power
        self._bandwidth(npu, r)
        health = NPU_SMI_HEALTH.get(row.health.lower())
        codes = self._error_codes(npu) if health else ([] if health == 0 else None)
        r.fault_events.extend(npu.alarms.observe(health, codes, NPU_SMI_SOURCE))
        return r

    def _bandwidth(self, npu: Npu, r: Reading) -> None:
        report = self._usages.get(npu.card)
        if report is None:
            try:
                report = parse_keyed(self._run("info", "-t", "usages", "-i", str(npu.card)))
            except NpuSmiError as e:
                report = str(e)
            self._usages[npu.card] = report
        if isinstance(report, str):
            self.missing.note(npu.name, ("memory_bandwidth_utilization",), report)
            return
        rate = _number(report.get(npu.chip, {}).get("HBM Bandwidth Usage Rate(%)", ""))
        if rate is not None and 0 <= rate <= 100:
            r.memory_bandwidth_utilization = rate / 100
            r.memory_bandwidth_source = BANDWIDTH_SOURCE

    def _error_codes(self, npu: Npu) -> list[int] | None:
        args = ("info", "-t", "health", "-i", str(npu.card), "-c", str(npu.chip))
        try:
            report = parse_keyed(self._run(*args)).get(0, {})
        except NpuSmiError as e:
            self.missing.warn_once((npu.name, "health", str(e)), "%s: %s", npu.name, e)
            return None
        return parse_error_codes(report.get("Error Code", ""))

    def topology(self, npus: Sequence[Npu]) -> list[Link]:
        """The ``-t topo`` matrix, whose NPU indexes follow the table's chip order."""
        try:
            matrix = parse_topo(self._run("info", "-t", "topo"))
        except NpuSmiError as e:
            log.info("ascend: no topology from npu-smi: %s", e)
            return []
        links: list[Link] = []
        for i, a in enumerate(npus):
            for j in range(i + 1, len(npus)):
                link_type = _TOPO_LINKS.get(matrix.get((i, j), "").upper())
                if link_type is not None:
                    links.append(Link(a.name, npus[j].name, link_type))
        return links


_FIELDS_FROM_TABLE = (
    "utilization",
    "memory_used_bytes",
    "memory_total_bytes",
    "memory_bandwidth_utilization",
    "temperatures",
    "power_watts",
)
