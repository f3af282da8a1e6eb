"""Checks the NVIDIA backend against real NVML on a machine with an NVIDIA GPU.

The unit tests run the backend against a fake NVML; only real hardware can say which
fields a given GPU, driver and permission set actually give. This script discovers the
GPUs, reads every device twice about a second apart (so that the rate fields, GPM
memory bandwidth and NVLink throughput, have two samples), and prints for each device
every catalogue field it found, with its value, and every field it did not find, with
NVML's reason as the backend recorded it. Then it times ``read()`` per device (the
median of ``--reads`` reads), which is what one poll costs per GPU.

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
import time
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
        for _ in range(reads):
            start = time.perf_counter()
            _read(backend, d)
            seconds.append(time.perf_counter() - start)
        entry["read_seconds"] = {
            "median": statistics.median(seconds),
            "min": min(seconds),
            "max": max(seconds),
            "reads": reads,
        }
    return {
        "devices": report,
        "topology": [asdict(link) for link in links],
        "poll_seconds_all_devices": sum(e["read_seconds"]["median"] for e in report),
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
        print()
    if result["topology"]:
        print("topology:")
        for link in result["topology"]:
            print(
                f"  {link['device']} -> {link['peer_device']}: {link['link_type']} x{link['links']}"
            )
    print(f"one poll of every device: {result['poll_seconds_all_devices'] * 1e3:.1f} ms")


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
    if args.fake:
        from tests.support.fakes.nvml import FakeNVML

        fake = FakeNVML.h100_node() if args.fake == "h100" else FakeNVML.v100_pair()

        def sleep(seconds: float) -> None:
            # The fake's clock moves only when told: move it with the real one.
            time.sleep(seconds)
            fake.advance(seconds)

        nvml = fake
    backend = NvidiaBackend(BackendOptions(sysfs=args.sysfs), nvml=nvml)
    try:
        result = check(backend, max(1, args.reads), args.gap, sleep)
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
