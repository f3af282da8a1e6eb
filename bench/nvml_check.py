"""Checks the NVIDIA backend against real NVML on a machine with an NVIDIA GPU.

The unit tests run the backend against a fake NVML; only real hardware can say which
fields a given GPU, driver and permission set actually give. This script discovers the
GPUs, reads every device twice about a second apart (so that the rate fields, GPM
memory bandwidth and NVLink throughput, have two samples), and prints for each device
every catalogue field it found, with its value, and every field it did not find, with
NVML's reason as the backend recorded it. Then it times ``read()`` per device (the
median of ``--reads`` reads) and a whole poll of every device, and says where a read's
time goes: each NVML function the reads called, how often and for how long per read,
and the time spent outside NVML (sysfs, /proc, the backend's own work).

    python bench/nvml_check.py [--reads 20] [--gap 1.0] [--json]

Exit status 1, with one line saying why, when NVML (the driver) is missing or there is
no GPU. ``--fake h100`` runs the same report against the test fake, as a dry run on a
machine without a GPU.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from exporter.backends.base import BackendOptions  # noqa: E402 - after the sys.path line
from exporter.backends.nvidia import NvidiaBackend  # noqa: E402
from exporter.backends.nvidia.device import FIELDS  # noqa: E402
from exporter.model import (  # noqa: E402
    BackendUnavailableError,
    DeviceInfo,
    DeviceLostError,
    Reading,
)

# Unit shown after a value, by the field key's first part.
_UNITS = {
    "utilization": "ratio",
    "memory_used_bytes": "B",
    "memory_total_bytes": "B",
    "memory_bandwidth_utilization": "ratio",
    "ecc_errors": "errors",
    "retired_pages": "pages",
    "remapped_rows": "rows",
    "fault_events": "new events",
    "temperatures": "°C",
    "power_watts": "W",
    "power_limit_watts": "W",
    "energy_joules": "J",
    "clocks_hz": "Hz",
    "throttle": "",
    "pcie_bytes_per_second": "B/s",
    "link_bytes_per_second": "B/s (all links)",
    "link_errors": "errors (all links)",
}


class TimedNVML:
    """The NVML module with every ``nvml*`` function timed while ``on`` is set.

    Constants, structures and the NVMLError classes pass through untouched, so the
    backend sees the module it expects. A call made off the reading thread (the PCIe
    samples, taken on a pool) is named as such: its time overlaps the read's.
    """

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self.on = False
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._nvml, name)
        if not (name.startswith("nvml") and callable(value)):
            return value

        def timed(*args: Any, **kwargs: Any) -> Any:
            if not self.on:
                return value(*args, **kwargs)
            key = name
            if threading.current_thread() is not threading.main_thread():
                key += " (beside the read, on a pool thread)"
            start = time.perf_counter()
            try:
                return value(*args, **kwargs)
            finally:
                self.seconds[key] += time.perf_counter() - start
                self.calls[key] += 1

        return timed

    def take(self, reads: int) -> list[dict[str, Any]]:
        """Per-read calls and seconds of each function since the last take, slowest first."""
        out = [
            {"function": name, "calls": self.calls[name] / reads, "seconds": secs / reads}
            for name, secs in sorted(self.seconds.items(), key=lambda kv: -kv[1])
        ]
        self.seconds.clear()
        self.calls.clear()
        return out


def _read(backend: NvidiaBackend, device: DeviceInfo) -> Reading:
    try:
        return backend.read(device)
    except DeviceLostError as e:
        return Reading(up=False, down_reason=f"device lost: {e}")


def check(
    backend: NvidiaBackend,
    reads: int,
    gap: float,
    sleep: Callable[[float], None] = time.sleep,
    timed: TimedNVML | None = None,
) -> dict[str, Any]:
    devices = backend.discover()
    if not devices:
        raise BackendUnavailableError("NVML works but reports no GPU on this machine")
    links = backend.topology()
    for d in devices:
        _read(backend, d)
    sleep(gap)
    report: list[dict[str, Any]] = []
    for d in devices:
        r = _read(backend, d)
        found = backend.fields(d, r) if r.up else {}
        missing = backend.missing.get(d.device, {})
        report.append(
            {
                "info": asdict(d),
                "up": r.up,
                "down_reason": r.down_reason,
                "memory_bandwidth_source": r.memory_bandwidth_source,
                "found": {k: found[k] for k in FIELDS if k in found},
                "missing": {
                    k: missing.get(k, "no value and no reason recorded (a backend bug)")
                    for k in FIELDS
                    if k not in found
                },
            }
        )
    for entry, d in zip(report, devices, strict=True):
        seconds = []
        if timed is not None:
            timed.on = True
        for _ in range(reads):
            start = time.perf_counter()
            _read(backend, d)
            seconds.append(time.perf_counter() - start)
        if timed is not None:
            timed.on = False
            entry["nvml_calls"] = timed.take(reads)
            in_nvml = sum(c["seconds"] for c in entry["nvml_calls"] if "(" not in c["function"])
            entry["outside_nvml_seconds"] = max(0.0, statistics.mean(seconds) - in_nvml)
        entry["read_seconds"] = {
            "median": statistics.median(seconds),
            "min": min(seconds),
            "max": max(seconds),
            "reads": reads,
        }
    # A whole poll, every device in turn as the exporter reads them: what the PCIe
    # samples (taken for every GPU at once) and the rest add up to.
    polls = []
    for _ in range(reads):
        start = time.perf_counter()
        for d in devices:
            _read(backend, d)
        polls.append(time.perf_counter() - start)
    return {
        "devices": report,
        "topology": [asdict(link) for link in links],
        "poll_seconds_all_devices": statistics.median(polls),
    }


def _format(key: str, value: Any) -> str:
    unit = _UNITS.get(key.split(".", 1)[0], "")
    if isinstance(value, float):
        text = f"{value:.6g}" if abs(value) < 1e6 else f"{value:.4e}"
    else:
        text = str(value)
    return f"{text} {unit}".rstrip()


def print_report(result: dict[str, Any]) -> None:
    for entry in result["devices"]:
        info = entry["info"]
        title = f"{info['device']}  {info['model']}"
        if info["profile"]:
            title += f"  MIG {info['profile']} of {info['parent']}"
        print(title)
        print(
            f"  uuid {info['uuid']}  bus {info['pci_bus_id']}  numa {info['numa_node'] or '-'}"
            f"  driver {info['driver_version']}"
        )
        if not entry["up"]:
            print(f"  DOWN: {entry['down_reason']}")
        width = max(len(k) for k in FIELDS)
        for key, value in entry["found"].items():
            print(f"  found    {key:<{width}}  {_format(key, value)}")
        if entry["memory_bandwidth_source"]:
            print(f"  {'':8} {'(bandwidth source)':<{width}}  {entry['memory_bandwidth_source']}")
        for key, reason in entry["missing"].items():
            print(f"  missing  {key:<{width}}  {reason}")
        t = entry["read_seconds"]
        print(
            f"  read time: median {t['median'] * 1e3:.2f} ms over {t['reads']} reads "
            f"(min {t['min'] * 1e3:.2f}, max {t['max'] * 1e3:.2f})"
        )
        for c in entry.get("nvml_calls", [])[:12]:
            print(f"    {c['seconds'] * 1e3:7.2f} ms  {c['calls']:5.1f} calls  {c['function']}")
        if "outside_nvml_seconds" in entry:
            print(f"    {entry['outside_nvml_seconds'] * 1e3:7.2f} ms  outside NVML (mean read)")
        print()
    if result["topology"]:
        print("topology:")
        for link in result["topology"]:
            print(
                f"  {link['device']} -> {link['peer_device']}: {link['link_type']} x{link['links']}"
            )
    print(
        f"one poll of every device: {result['poll_seconds_all_devices'] * 1e3:.1f} ms "
        "(median of --reads polls)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reads", type=int, default=20, help="reads per device to time")
    parser.add_argument("--gap", type=float, default=1.0, help="seconds between the two reads")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--sysfs", type=Path, default=Path("/sys"), help="sysfs root")
    parser.add_argument(
        "--fake",
        choices=("h100", "v100"),
        help="dry run against the test fake (tests/support/fakes/nvml.py) instead of real NVML",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    nvml: Any = None
    sleep: Callable[[float], None] = time.sleep
    if not args.fake:
        try:
            import pynvml
        except ImportError as e:
            print(f"nvml_check: the pynvml module is missing ({e}): install accel-fleet[nvidia]")
            return 1
        nvml = pynvml
    else:
        from tests.support.fakes.nvml import FakeNVML

        fake = FakeNVML.h100_node() if args.fake == "h100" else FakeNVML.v100_pair()

        def sleep(seconds: float) -> None:
            # The fake's clock moves only when told: move it with the real one.
            time.sleep(seconds)
            fake.advance(seconds)

        nvml = fake
    timed = TimedNVML(nvml)
    backend = NvidiaBackend(BackendOptions(sysfs=args.sysfs), nvml=timed)
    try:
        result = check(backend, max(1, args.reads), args.gap, sleep, timed)
    except BackendUnavailableError as e:
        print(f"nvml_check: NVML is not usable here: {e}", file=sys.stderr)
        return 1
    finally:
        backend.close()
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        print_report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
