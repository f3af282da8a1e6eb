"""Generates the Grafana dashboards in this directory from plain Python dicts.

Why generated: five dashboards share one set of template variables, one datasource
variable and one label filter; written by hand, the copies drift apart and a query
typed in one panel is fixed in only one place. Why plain dicts and not an SDK: no
new dependency, and the JSON a reviewer reads is exactly what the code says.

    python dashboards/generate.py            # rewrites dashboards/*.json
    python dashboards/generate.py --check    # exit 1 when the committed JSON is stale

``tests/integration/test_dashboards.py`` runs every query of every panel against a real
Prometheus scraping the sim exporter and the autoscaler, so a metric renamed in
``exporter/schema.py`` breaks a test, not a dashboard in production.

Where each part is: ``panels.py`` holds the template variables, the panel builders,
the layout and the conventions every panel follows; the Fleet overview and Node
detail dashboards are here, Remediation in ``remediation.py``, Chargeback (with
its billing policies) in ``chargeback.py`` and Queues (Kueue) in ``queues.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:  # run as a script: make the repo's packages importable
    sys.path.insert(0, str(HERE.parent))

from dashboards.chargeback import chargeback  # noqa: E402
from dashboards.panels import (  # noqa: E402
    CLUSTER,
    FILTER,
    RED_WHEN_ONE,
    Json,
    Layout,
    as_table,
    by_model,
    dashboard,
    panel,
    stat,
    table,
    target,
    targets,
    timeseries,
)
from dashboards.queues import queues  # noqa: E402
from dashboards.remediation import remediation  # noqa: E402

# --- Fleet overview -----------------------------------------------------------------


def fleet_overview() -> Json:
    lay = Layout()
    lay.row("Fleet")
    lay.add(
        stat(
            "Devices",
            "Whole devices (partitions not counted) that the exporters report.",
            f'count(accel_device_info{{{FILTER}, parent=""}})',
        ),
        w=6,
        h=4,
    )
    lay.add(
        stat(
            "Devices down",
            "Devices whose exporter answers but that did not answer their last poll "
            "(accel_up 0): fallen off the bus, hung driver, Xid 79. 0 is healthy. A "
            "node whose exporter is down is not counted here: its accel_up is absent.",
            f"sum(1 - accel_up{{{FILTER}}})",
            thresholds=RED_WHEN_ONE,
            color={"mode": "thresholds"},
        ),
        w=6,
        h=4,
    )
    lay.add(
        stat(
            "Fatal faults in range",
            "Fatal fault events (NVIDIA Xid 48/79/95..., AMD and Intel uncorrectable "
            "RAS) across the fleet in the dashboard's time range.",
            f'sum(increase(accel_fault_events_total{{{FILTER}, severity="fatal"}}[$__range]))',
            thresholds=RED_WHEN_ONE,
            color={"mode": "thresholds"},
            decimals=0,
        ),
        w=6,
        h=4,
    )
    lay.add(
        stat(
            "Exporter backends down",
            "Backends that report accel_exporter_backend_up 0, by node. A backend "
            "with no driver on a node (amd on an NVIDIA host) is also 0: Node detail's "
            "Exporter backends table tells them apart, and the AccelExporterBackendDown "
            "alert only counts backends that once worked.",
            f'sum(1 - accel_exporter_backend_up{{{CLUSTER}, node=~"$node"}})',
        ),
        w=6,
        h=4,
    )
    lay.row("Load by vendor and model")
    lay.add(
        timeseries(
            "Utilization by vendor and model",
            "Mean busy fraction of whole devices, by vendor and model.",
            targets(
                (
                    f"avg by (vendor, model) ({by_model(f'accel_utilization_ratio{{{FILTER}}}')})",
                    "{{vendor}} {{model}}",
                )
            ),
            unit="percentunit",
            min=0,
            max=1,
        ),
        w=8,
    )
    lay.add(
        timeseries(
            "Memory in use by vendor and model",
            "Device memory used over device memory in total, summed over whole "
            "devices of each vendor and model.",
            targets(
                (
                    f"sum by (vendor, model) ({by_model(f'accel_memory_used_bytes{{{FILTER}}}')})"
                    f" / sum by (vendor, model) "
                    f"({by_model(f'accel_memory_total_bytes{{{FILTER}}}')})",
                    "{{vendor}} {{model}}",
                )
            ),
            unit="percentunit",
            min=0,
            max=1,
        ),
        w=8,
    )
    lay.add(
        timeseries(
            "Memory bandwidth by vendor and model",
            "Mean fraction of peak memory bandwidth in use (NVIDIA GPM DRAM_BW_UTIL "
            "or NVML memory utilization, AMD UMC activity, Intel Sysman bandwidth).",
            targets(
                (
                    "avg by (vendor, model) ("
                    + by_model(f"accel_memory_bandwidth_utilization_ratio{{{FILTER}}}")
                    + ")",
                    "{{vendor}} {{model}}",
                )
            ),
            unit="percentunit",
            min=0,
            max=1,
        ),
        w=8,
    )
    lay.add(
        timeseries(
            "Memory used by vendor and model",
            "Device memory in use, in bytes, summed over whole devices.",
            targets(
                (
                    f"sum by (vendor, model) ({by_model(f'accel_memory_used_bytes{{{FILTER}}}')})",
                    "{{vendor}} {{model}}",
                )
            ),
            unit="bytes",
        ),
        w=12,
    )
    lay.add(
        timeseries(
            "Power by vendor",
            "Power drawn by whole devices, by vendor.",
            targets(
                (
                    f"sum by (vendor) ({by_model(f'accel_power_watts{{{FILTER}}}')})",
                    "{{vendor}}",
                )
            ),
            unit="watt",
        ),
        w=12,
    )
    lay.row("Faults and ECC")
    lay.add(
        timeseries(
            "Fault events by vendor and severity",
            "Vendor fault events per second (Xid, AMD RAS, Intel RAS), mapped to one "
            "severity catalogue (exporter/faults.py).",
            targets(
                (
                    "sum by (vendor, severity) "
                    f"(rate(accel_fault_events_total{{{FILTER}}}[$__rate_interval]))",
                    "{{vendor}} {{severity}}",
                )
            ),
            unit="ops",
        ),
        w=12,
    )
    lay.add(
        timeseries(
            "ECC errors by vendor and type",
            "Corrected and uncorrected ECC errors per second. Uncorrected errors in "
            "bursts are what the uncorrected-ecc-burst rule acts on.",
            targets(
                (
                    "sum by (vendor, type) "
                    f"(rate(accel_ecc_errors_total{{{FILTER}}}[$__rate_interval]))",
                    "{{vendor}} {{type}}",
                )
            ),
            unit="ops",
        ),
        w=12,
    )
    lay.add(
        table(
            "Devices with faults in range",
            "Fault events per device in the dashboard's time range, by severity; only "
            "devices with at least one event.",
            [
                target(
                    "sum by (node, device, vendor, severity) "
                    f"(increase(accel_fault_events_total{{{FILTER}}}[$__range])) > 0",
                    instant=True,
                )
            ],
        ),
        w=12,
    )
    lay.add(
        table(
            "Fault codes since the exporter started",
            "Vendor fault codes (Xid numbers, RAS event names) each device reported "
            "since its exporter started, with their severity.",
            [
                target(
                    "sum by (node, device, vendor, code, severity) "
                    f"(accel_fault_code_events_total{{{FILTER}}})",
                    instant=True,
                )
            ],
        ),
        w=12,
    )
    lay.add(
        table(
            "Devices down",
            "Devices that did not answer their last poll, with their model.",
            [
                target(
                    f"{by_model(f'accel_up{{{FILTER}}}')} == 0",
                    instant=True,
                )
            ],
            hide={"Value": True},
        ),
        w=12,
    )
    lay.add(
        table(
            "Uncorrected ECC errors in range",
            "Uncorrected ECC errors per device in the dashboard's time range.",
            [
                target(
                    "sum by (node, device, vendor) (increase(accel_ecc_errors_total"
                    f'{{{FILTER}, type="uncorrected"}}[$__range])) > 0',
                    instant=True,
                )
            ],
        ),
        w=12,
    )
    lay.row("Topology")
    lay.add(
        panel(
            "table",
            "Topology distance on $node",
            "The distance matrix of one node's devices (accel_topology_distance), one "
            "heat map per selected node: 0 the device itself, 10 NVLink/xGMI/Xe Link, "
            "20 PCIe switch, 30 host bridge, 40 same NUMA node, 50 across sockets. "
            "Rows are devices, columns their peers; the greener, the closer.",
            as_table(
                [
                    target(
                        f"max by (device, peer_device) (accel_topology_distance{{{FILTER}}})",
                        instant=True,
                    )
                ]
            ),
            repeat="node",
            repeatDirection="h",
            maxPerRow=2,
            transformations=[
                {
                    "id": "groupingToMatrix",
                    "options": {
                        "columnField": "peer_device",
                        "rowField": "device",
                        "valueField": "Value",
                        "emptyValue": "null",
                    },
                }
            ],
            custom={"cellOptions": {"type": "color-background"}, "align": "center"},
            color={"mode": "continuous-GrYlRd"},
            min=0,
            max=50,
        ),
        w=12,
        h=10,
    )
    return dashboard(
        "accel-fleet-overview",
        "Accelerators / Fleet overview",
        "Utilization, memory, faults and topology of every accelerator the "
        "accel-exporters report, by vendor and model.",
        lay,
    )


# --- Node detail --------------------------------------------------------------------


def node_detail() -> Json:
    lay = Layout()
    dev = f"{{{FILTER}}}"
    lay.row("Devices, partitions and pods")
    lay.add(
        table(
            "Devices",
            "Every device of the node, partitions included, with its identity.",
            [target(f"accel_device_info{dev}", instant=True)],
            hide={"Value": True, "job": True, "instance": True, "cluster": True},
        ),
        w=24,
        h=8,
    )
    lay.add(
        table(
            "Partitions",
            "MIG instances and AMD compute partitions: child devices with their parent "
            "and profile (e.g. 3g.40gb, DPX).",
            [target(f'accel_device_info{{{FILTER}, parent!=""}}', instant=True)],
            hide={"Value": True, "job": True, "instance": True, "cluster": True},
        ),
        w=12,
    )
    lay.add(
        table(
            "Pods on devices",
            "Containers the kubelet assigned each device to (PodResources API). A "
            "time-sliced device has one row per pod.",
            [
                target(
                    f'accel_device_pod_info{{{FILTER}, namespace=~"$namespace"}}',
                    instant=True,
                )
            ],
            hide={"Value": True, "job": True, "instance": True, "cluster": True},
        ),
        w=12,
    )
    lay.row("Load")
    per_device = [
        ("Utilization", "accel_utilization_ratio", "percentunit", "Busy fraction per device."),
        (
            "Memory bandwidth",
            "accel_memory_bandwidth_utilization_ratio",
            "percentunit",
            "Fraction of peak memory bandwidth per device.",
        ),
        ("Power", "accel_power_watts", "watt", "Power draw per device."),
    ]
    for title, metric, unit, desc in per_device:
        lay.add(
            timeseries(title, desc, targets((f"{metric}{dev}", "{{device}}")), unit=unit),
            w=8,
        )
    lay.add(
        timeseries(
            "Memory in use",
            "Device memory used over total, per device.",
            targets(
                (
                    f"accel_memory_used_bytes{dev} / accel_memory_total_bytes{dev}",
                    "{{device}}",
                )
            ),
            unit="percentunit",
            min=0,
            max=1,
        ),
        w=8,
    )
    lay.add(
        timeseries(
            "Temperature",
            "Temperature per device and sensor.",
            targets((f"accel_temperature_celsius{dev}", "{{device}} {{sensor}}")),
            unit="celsius",
        ),
        w=8,
    )
    lay.add(
        timeseries(
            "Clocks",
            "Clock frequency per device and clock domain.",
            targets((f"accel_clock_hertz{dev}", "{{device}} {{clock}}")),
            unit="hertz",
        ),
        w=8,
    )
    lay.row("Health")
    lay.add(
        timeseries(
            "Up",
            "1 when the device answered its last poll.",
            targets((f"accel_up{dev}", "{{device}}")),
            min=0,
            max=1,
        ),
        w=8,
    )
    lay.add(
        timeseries(
            "Fault events",
            "Fault events per second per device and severity.",
            targets(
                (
                    f"rate(accel_fault_events_total{dev}[$__rate_interval])",
                    "{{device}} {{severity}}",
                )
            ),
            unit="ops",
        ),
        w=8,
    )
    lay.add(
        timeseries(
            "ECC errors",
            "ECC errors per second per device and type.",
            targets(
                (
                    f"rate(accel_ecc_errors_total{dev}[$__rate_interval])",
                    "{{device}} {{type}}",
                )
            ),
            unit="ops",
        ),
        w=8,
    )
    lay.add(
        timeseries(
            "Throttle reasons active",
            "How many clock throttle reasons are active per device (0 is unthrottled); "
            "the Explore view of accel_throttle_active says which.",
            targets((f"sum by (device) (accel_throttle_active{dev})", "{{device}}")),
        ),
        w=8,
    )
    lay.add(
        timeseries(
            "PCIe throughput",
            "Host link throughput per device and direction.",
            targets((f"accel_pcie_throughput_bytes_per_second{dev}", "{{device}} {{direction}}")),
            unit="Bps",
        ),
        w=8,
    )
    lay.add(
        timeseries(
            "Interconnect throughput",
            "NVLink, xGMI and Xe Link throughput per device, summed over links.",
            targets(
                (
                    f"sum by (device, direction) (accel_link_throughput_bytes_per_second{dev})",
                    "{{device}} {{direction}}",
                )
            ),
            unit="Bps",
        ),
        w=8,
    )
    lay.add(
        table(
            "Exporter backends",
            "Each backend's health and last poll duration on this node.",
            [
                target(
                    f'accel_exporter_backend_up{{{CLUSTER}, node=~"$node"}}',
                    instant=True,
                    ref="A",
                ),
                target(
                    f'accel_exporter_poll_duration_seconds{{{CLUSTER}, node=~"$node"}}',
                    instant=True,
                    ref="B",
                ),
            ],
            hide={"job": True, "instance": True, "cluster": True},
        ),
        w=12,
    )
    return dashboard(
        "accel-node-detail",
        "Accelerators / Node detail",
        "One node's devices, partitions, pods, load and health.",
        lay,
        single_node=True,
    )


DASHBOARDS = {
    "fleet-overview.json": fleet_overview,
    "node-detail.json": node_detail,
    "remediation.json": remediation,
    "chargeback.json": chargeback,
    "queues.json": queues,
}


def render(board: Json) -> str:
    return json.dumps(board, indent=2, ensure_ascii=False) + "\n"


def build() -> dict[str, str]:
    """File name → JSON text, exactly as committed."""
    return {name: render(make()) for name, make in DASHBOARDS.items()}


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for name, text in build().items():
        path = HERE / name
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print(
            f"dashboards out of date: {', '.join(stale)}; run python dashboards/generate.py",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
