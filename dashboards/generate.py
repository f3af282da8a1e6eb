"""Generates the Grafana dashboards in this directory from plain Python dicts.

Why generated: four dashboards share one set of template variables, one datasource
variable and one label filter; written by hand, the copies drift apart and a query
typed in one panel is fixed in only one place. Why plain dicts and not an SDK: no
new dependency, and the JSON a reviewer reads is exactly what the code says.

    python dashboards/generate.py            # rewrites dashboards/*.json
    python dashboards/generate.py --check    # exit 1 when the committed JSON is stale

``tests/integration/test_dashboards.py`` runs every query of every panel against a real
Prometheus scraping the sim exporter and the autoscaler, so a metric renamed in
``exporter/schema.py`` breaks a test, not a dashboard in production.

Conventions every panel follows:

- Every selector carries ``FILTER`` (cluster, node, vendor), written with ``=~`` so
  that "All" (``.*``) also matches series that lack the label: a single Prometheus
  usually has no ``cluster`` label at all, and the dashboards still work there.
- Per-device series join ``accel_device_info`` on ``uuid`` (unique per device and per
  partition, as docs/exporter/pods.md does) to get ``model``; the
  fleet-wide panels keep whole devices only (``parent=""``), so that a GPU and its
  MIG instances are not counted twice.
- The chargeback dashboard bills by the policy in its custom ``$policy`` variable:
  each policy is one expression (``POLICY_EXPRESSIONS``), and ``and on ()`` with a
  constant series that exists only when ``$policy`` names it keeps the chosen one,
  so one query serves every policy; the recording rules in
  ``rules/prometheus/accel-fleet.rules.yaml`` record the same three.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:  # run as a script: make the repo's packages importable
    sys.path.insert(0, str(HERE.parent))

from accel_common.names import GANG_LABEL, REMEDIATION_ANNOTATION  # noqa: E402

Json = dict[str, Any]
SCHEMA_VERSION = 39
DS: Json = {"type": "prometheus", "uid": "${datasource}"}

# The label filter that every device selector carries.
FILTER = 'cluster=~"$cluster", node=~"$node", vendor=~"$vendor"'
CLUSTER = 'cluster=~"$cluster"'


def whole_devices_model() -> str:
    """``model`` for whole devices (not partitions), for a ``group_left`` join."""
    return f'max by (uuid, model) (accel_device_info{{{FILTER}, parent=""}})'


def by_model(expr: str) -> str:
    """``expr`` (per-device series) with the device's ``model`` label added."""
    return f"{expr} * on (uuid) group_left (model) {whole_devices_model()}"


# --- template variables -------------------------------------------------------------


def datasource_variable() -> Json:
    return {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "options": [],
        "refresh": 1,
        "regex": "",
    }


def query_variable(
    name: str, label: str, query: str, *, include_all: bool = True, multi: bool = True
) -> Json:
    """A ``label_values(...)`` variable, refreshed when the time range changes.

    ``allValue`` is ``.*`` rather than Grafana's default alternation of every value,
    so that "All" also matches series without the label and stays short on a big
    fleet."""
    var: Json = {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "definition": query,
        # The classic string form: every Grafana since 7 reads it as written.
        "query": query,
        "current": {},
        "hide": 0,
        "includeAll": include_all,
        "multi": multi,
        "options": [],
        "refresh": 2,
        "regex": "",
        "sort": 1,
    }
    if include_all:
        var["allValue"] = ".*"
    return var


def variables(single_node: bool = False) -> list[Json]:
    """The four filters every dashboard has; Node detail picks exactly one node."""
    return [
        datasource_variable(),
        query_variable("cluster", "Cluster", "label_values(accel_up, cluster)"),
        query_variable(
            "node",
            "Node",
            f"label_values(accel_up{{{CLUSTER}}}, node)",
            include_all=not single_node,
            multi=not single_node,
        ),
        query_variable(
            "vendor", "Vendor", f'label_values(accel_up{{{CLUSTER}, node=~"$node"}}, vendor)'
        ),
        query_variable(
            "namespace",
            "Namespace",
            f"label_values(accel_device_pod_info{{{FILTER}}}, namespace)",
        ),
    ]


# --- panels -------------------------------------------------------------------------


def target(expr: str, legend: str = "", *, instant: bool = False, ref: str = "A") -> Json:
    return {
        "datasource": DS,
        "editorMode": "code",
        "expr": expr,
        "legendFormat": legend or "__auto",
        "range": not instant,
        "instant": instant,
        "format": "time_series",
        "refId": ref,
    }


def targets(*pairs: tuple[str, str], instant: bool = False) -> list[Json]:
    return [
        target(expr, legend, instant=instant, ref=chr(ord("A") + i))
        for i, (expr, legend) in enumerate(pairs)
    ]


def panel(kind: str, title: str, description: str, tgts: list[Json], **extra: Any) -> Json:
    """A panel without position; ``Layout`` places it."""
    unit = extra.pop("unit", None)
    defaults: Json = {}
    if unit:
        defaults["unit"] = unit
    for key in ("min", "max", "decimals", "thresholds", "mappings", "color", "custom"):
        if key in extra:
            defaults[key] = extra.pop(key)
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": tgts,
        "fieldConfig": {"defaults": defaults, "overrides": extra.pop("overrides", [])},
        "options": extra.pop("options", {}),
        **extra,
    }


def timeseries(title: str, description: str, tgts: list[Json], **extra: Any) -> Json:
    extra.setdefault("options", {"legend": {"displayMode": "table", "placement": "right"}})
    return panel("timeseries", title, description, tgts, **extra)


def stat(title: str, description: str, expr: str, **extra: Any) -> Json:
    extra.setdefault("options", {"reduceOptions": {"calcs": ["lastNotNull"]}})
    return panel("stat", title, description, [target(expr, instant=True)], **extra)


def as_table(tgts: list[Json]) -> list[Json]:
    """Table format: one row per series, one column per label."""
    for t in tgts:
        t["format"] = "table"
    return tgts


def table(title: str, description: str, tgts: list[Json], **extra: Any) -> Json:
    """An instant-query table; the ``Time`` column is hidden, series become rows."""
    as_table(tgts)
    transformations = extra.pop("transformations", [])
    hide = {"Time": True, "__name__": True, **extra.pop("hide", {})}
    transformations.append(
        {"id": "organize", "options": {"excludeByName": hide, "renameByName": {}}}
    )
    if len(tgts) > 1:
        transformations.insert(0, {"id": "merge", "options": {}})
    return panel("table", title, description, tgts, transformations=transformations, **extra)


RED_WHEN_ONE = {
    "mode": "absolute",
    "steps": [{"color": "green", "value": None}, {"color": "red", "value": 1}],
}


class Layout:
    """Places panels left to right in rows of 24 grid units, with row headers."""

    def __init__(self) -> None:
        self.panels: list[Json] = []
        self.x = 0
        self.y = 0
        self.row_h = 0

    def row(self, title: str) -> None:
        self._newline()
        self.panels.append(
            {
                "type": "row",
                "title": title,
                "collapsed": False,
                "panels": [],
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y},
            }
        )
        self.y += 1

    def add(self, p: Json, w: int = 12, h: int = 8) -> None:
        if self.x + w > 24:
            self._newline()
        p["gridPos"] = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.panels.append(p)
        self.x += w
        self.row_h = max(self.row_h, h)

    def _newline(self) -> None:
        if self.x:
            self.y += self.row_h
        self.x, self.row_h = 0, 0

    def numbered(self) -> list[Json]:
        for i, p in enumerate(self.panels, start=1):
            p["id"] = i
        return self.panels


def dashboard(uid: str, title: str, description: str, layout: Layout, **extra: Any) -> Json:
    more_variables: list[Json] = extra.pop("more_variables", [])
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["accel-fleet"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "time": {"from": extra.pop("time_from", "now-6h"), "to": "now"},
        "timepicker": {},
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "annotations": {"list": []},
        "links": [
            {
                "type": "dashboards",
                "tags": ["accel-fleet"],
                "asDropdown": True,
                "title": "accel-fleet",
                "includeVars": True,
                "keepTime": True,
            }
        ],
        "templating": {"list": variables(**extra) + more_variables},
        "panels": layout.numbered(),
    }


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


# --- Remediation --------------------------------------------------------------------


def remediation() -> Json:
    lay = Layout()
    ctl = f"{{{CLUSTER}}}"
    lay.row("Controller")
    lay.add(
        stat(
            "Breaker open",
            "1 when the circuit breaker stopped new remediation (too many unhealthy "
            "nodes at once: more often a driver rollout or a broken exporter than "
            "failing hardware). See the AccelAutoscalerBreakerOpen alert's runbook.",
            f"max(accel_autoscaler_breaker_open{ctl})",
            thresholds=RED_WHEN_ONE,
            color={"mode": "thresholds"},
            mappings=[
                {
                    "type": "value",
                    "options": {"0": {"text": "closed"}, "1": {"text": "open"}},
                }
            ],
        ),
        w=6,
        h=4,
    )
    lay.add(
        stat(
            "Source up",
            "Whether the controller's source (Prometheus or its own scrapes) "
            "answered with data in its last cycle; when 0 every rule is unknown and "
            "nothing is remediated.",
            f"min(accel_autoscaler_source_up{ctl})",
            mappings=[{"type": "value", "options": {"0": {"text": "down"}, "1": {"text": "up"}}}],
        ),
        w=6,
        h=4,
    )
    lay.add(
        stat(
            "Leader",
            "The replica holding the Lease; only the leader acts.",
            f"max by (instance) (accel_autoscaler_leader{ctl}) == 1",
            options={"reduceOptions": {"calcs": ["lastNotNull"]}, "textMode": "name"},
        ),
        w=6,
        h=4,
    )
    lay.add(
        stat(
            "Nodes under remediation",
            f"Nodes carrying the {REMEDIATION_ANNOTATION} annotation now.",
            f"sum(max by (node) (accel_autoscaler_nodes_under_remediation"
            f'{{{CLUSTER}, node=~"$node"}}))',
        ),
        w=6,
        h=4,
    )
    lay.row("Decisions and actions")
    lay.add(
        timeseries(
            "Decisions by rule",
            "Decisions per second by rule, action and kind (act, recover); dry-run "
            "decisions are marked.",
            targets(
                (
                    "sum by (rule, action, kind, dry_run) "
                    f"(rate(accel_autoscaler_decisions_total{ctl}[$__rate_interval]))",
                    "{{rule}} {{action}} {{kind}} dry-run={{dry_run}}",
                )
            ),
            unit="ops",
        ),
        w=12,
    )
    lay.add(
        timeseries(
            "Actions by rule and status",
            "Actions the controller carried out per second, by rule, action and status "
            "(done, partial, skipped, failed).",
            targets(
                (
                    "sum by (rule, action, status) "
                    f"(rate(accel_autoscaler_actions_total{ctl}[$__rate_interval]))",
                    "{{rule}} {{action}} {{status}}",
                )
            ),
            unit="ops",
        ),
        w=12,
    )
    lay.add(
        table(
            "Decisions in range",
            "Decisions by rule, action and kind in the dashboard's time range.",
            [
                target(
                    "sum by (rule, action, kind, dry_run) "
                    f"(increase(accel_autoscaler_decisions_total{ctl}[$__range]))",
                    instant=True,
                )
            ],
            decimals=0,
        ),
        w=12,
    )
    lay.add(
        table(
            "Actions in range",
            "Actions by rule, action and status in the dashboard's time range; a "
            "failed or partial action is worth a look at the controller's log.",
            [
                target(
                    "sum by (rule, action, status) "
                    f"(increase(accel_autoscaler_actions_total{ctl}[$__range]))",
                    instant=True,
                )
            ],
            decimals=0,
        ),
        w=12,
    )
    lay.row("Rules")
    lay.add(
        timeseries(
            "Pending targets by rule",
            "Targets whose condition holds but whose 'for' has not yet passed.",
            targets((f"sum by (rule) (accel_autoscaler_pending_targets{ctl})", "{{rule}}")),
        ),
        w=8,
    )
    lay.add(
        timeseries(
            "Active targets by rule",
            "Targets under remediation by each rule (acted on, not yet recovered).",
            targets((f"sum by (rule) (accel_autoscaler_active_targets{ctl})", "{{rule}}")),
        ),
        w=8,
    )
    lay.add(
        timeseries(
            "Unknown evaluations by rule",
            "Evaluations per second whose result was unknown (failed, timed out or "
            "empty): an unknown never acts, so a rule that stays unknown is blind.",
            targets(
                (
                    "sum by (rule) "
                    f"(rate(accel_autoscaler_rule_unknown_total{ctl}[$__rate_interval]))",
                    "{{rule}}",
                )
            ),
            unit="ops",
        ),
        w=8,
    )
    lay.add(
        timeseries(
            "Source health",
            "1 when the source answered with data, by source and replica.",
            targets(
                (
                    f"accel_autoscaler_source_up{ctl}",
                    "{{instance}} {{source}}",
                )
            ),
            min=0,
            max=1,
        ),
        w=8,
    )
    lay.add(
        timeseries(
            "Evaluation cycle",
            "How long the last evaluation cycle took, and how long ago it ran.",
            targets(
                (f"accel_autoscaler_evaluation_duration_seconds{ctl}", "{{instance}} took"),
                (
                    f"time() - accel_autoscaler_last_evaluation_timestamp_seconds{ctl}",
                    "{{instance}} age",
                ),
            ),
            unit="s",
        ),
        w=8,
    )
    lay.add(
        timeseries(
            "Rules loaded",
            "Rules loaded, and whether the last reload succeeded (on 0 the last good "
            "rules still run; the controller's log says what is wrong, file:line:col).",
            targets(
                (f"accel_autoscaler_rules{ctl}", "{{instance}} rules"),
                (f"accel_autoscaler_rules_reload_success{ctl}", "{{instance}} reload ok"),
            ),
        ),
        w=8,
    )
    gangs(lay)
    lay.row("Nodes")
    lay.add(
        table(
            "Nodes under remediation",
            f"Nodes carrying the {REMEDIATION_ANNOTATION} annotation: which rule "
            "acts on them, with which action, and in which phase.",
            [
                target(
                    "max by (node, rule, action, phase) (accel_autoscaler_nodes_under_"
                    f'remediation{{{CLUSTER}, node=~"$node"}}) == 1',
                    instant=True,
                )
            ],
            hide={"Value": True},
        ),
        w=24,
    )
    return dashboard(
        "accel-remediation",
        "Accelerators / Remediation",
        "What accel-autoscaler decided and did, its circuit breaker, its source and "
        "the nodes it is remediating.",
        lay,
    )


# --- Gangs (on the Remediation dashboard) -------------------------------------------

# Each gang member's utilization: the busiest device it holds, labelled with its gang
# (accel_gang_info comes from the controller's cluster state; max by drops the
# replica's instance so two replicas do not double a member).
GANG_MEMBER_UTILIZATION = (
    "max by (cluster, namespace, pod, gang) ("
    f"accel_device_pod_info{{{FILTER}}} * on (cluster, node, device) group_left () "
    f"accel_utilization_ratio{{{FILTER}}} "
    "* on (cluster, namespace, pod) group_left (gang) "
    f"max by (cluster, namespace, pod, gang) (accel_gang_info{{{CLUSTER}}}))"
)
# The stall rules' view: every member idle (at most 5%) for the last 3 minutes.
GANG_IDLE_3M = (
    "max by (cluster, namespace, gang) ("
    f"max by (cluster, node) (max_over_time(accel_utilization_ratio{{{FILTER}}}[3m])) "
    "* on (cluster, node) group_right () "
    f"max by (cluster, namespace, pod, node, gang) (accel_gang_info{{{CLUSTER}}})) <= 0.05"
)


def gangs(lay: Layout) -> None:
    """Multi-node training jobs as one thing each: how evenly their members work,
    and which gangs the stall rules would call stalled."""
    lay.row("Gangs")
    lay.add(
        timeseries(
            "Gang utilization, least and most busy member",
            "Per gang (JobSet, PyTorchJob, TrainJob, MPIJob, Volcano Job, or pods "
            f"sharing the {GANG_LABEL} label): the utilization of its least "
            "and its most busy member (each member's busiest device). A synchronous "
            "job's members move together; a checkpoint takes them all to 0 for its "
            "declared pause; a stall keeps them all at 0. One member far below the "
            "others is a straggler, not a stall.",
            targets(
                (
                    f"min by (namespace, gang) ({GANG_MEMBER_UTILIZATION})",
                    "{{namespace}}/{{gang}} min",
                ),
                (
                    f"max by (namespace, gang) ({GANG_MEMBER_UTILIZATION})",
                    "{{namespace}}/{{gang}} max",
                ),
            ),
            fieldConfig={"defaults": {"unit": "percentunit", "min": 0, "max": 1}},
        ),
        w=16,
    )
    lay.add(
        stat(
            "Gangs idle for 3 minutes",
            "Gangs whose every member has been idle (at most 5%) for the last three "
            "minutes: longer than any checkpoint pause of up to 2m30s, so the "
            "stalled-gang rule restarts them unless they declared a longer pause "
            "(docs/rules.md, the stall detector).",
            f"count({GANG_IDLE_3M}) or vector(0)",
            thresholds=RED_WHEN_ONE,
            color={"mode": "thresholds"},
        ),
        w=8,
    )
    lay.add(
        table(
            "Gang members (1: the gang has been idle for 3 minutes)",
            "Every gang member with its node, 1 when its whole gang is counted "
            "above: where to look for the faulty device or the hung rank.",
            [
                target(
                    f"max by (namespace, gang, pod, node) (accel_gang_info{{{CLUSTER}}} "
                    f"* on (cluster, namespace, gang) group_left () ({GANG_IDLE_3M})) "
                    f"or max by (namespace, gang, pod, node) (accel_gang_info{{{CLUSTER}}}) * 0",
                    instant=True,
                )
            ],
        ),
        w=24,
    )


# --- Chargeback ---------------------------------------------------------------------

# Each pod's share of a device: 1 for a device it holds alone, 1/N for a device that
# N pods share (time-slicing, MPS), so that a shared device is billed once in total.
SHARE = (
    f'accel_device_pod_info{{{FILTER}, namespace=~"$namespace"}} / on (uuid) group_left '
    f"count by (uuid) (accel_device_pod_info{{{FILTER}}})"
)
SHARE_WITH_MODEL = (
    f"{SHARE} * on (uuid) group_left (model) max by (uuid, model) (accel_device_info{{{FILTER}}})"
)

# What a bill is summed over: one series per device and pod.
BILL_BY = "cluster, node, device, vendor, uuid, namespace, pod"
# The head count per pod and device: the ``held`` policy, and every policy's answer
# for a device without any measure of use.
HELD = f"sum by ({BILL_BY}) ({SHARE})"
# Devices whose exporter measures per-pod use (accel_pod_utilization_ratio exists
# for them: NVML process samples, AMD SMI engine time).
PER_POD = f"accel_pod_utilization_ratio{{{FILTER}}}"
# What each pod's processes used on those devices; pod="" (processes of no pod, the
# MPS server) is nobody's to pay.
MEASURED_USE = (
    f"sum by ({BILL_BY}) (accel_pod_utilization_ratio"
    f'{{{FILTER}, namespace=~"$namespace", pod!=""}})'
)
# Head count on the devices without a per-pod measure.
HEAD_COUNT = f"({HELD}) unless on (uuid) {PER_POD}"
# Those devices' own utilization, split 1/N between their N pods: a pod that holds a
# device alone is billed what the device did. Devices that report no utilization
# at all (an identity-only backend) stay on head count.
DEVICE_USE = (
    f"(({HEAD_COUNT}) * on (uuid) group_left () "
    f"max by (uuid) (accel_utilization_ratio{{{FILTER}}})) "
    f"or (({HEAD_COUNT}) unless on (uuid) accel_utilization_ratio{{{FILTER}}})"
)
# What no pod used of a measured device (idle time, host processes), split 1/N
# between the pods that hold it.
IDLE_SHARE = (
    f"(({HELD}) and on (uuid) {PER_POD}) * on (uuid) group_left () "
    f'clamp_min(1 - sum by (uuid) (accel_pod_utilization_ratio{{{FILTER}, pod!=""}}), 0)'
)

# The billing policies (docs/dashboards.md), each a pod's billed device-equivalents
# on each device it holds.
POLICY_EXPRESSIONS = {
    # Every pod pays its share of the device, used or not; a measured device's idle
    # time and host processes are split between its pods, so each device is billed
    # in full and shared devices are split by use.
    "measured-with-idle-split": (
        f"(({MEASURED_USE}) + ({IDLE_SHARE})) or ({MEASURED_USE}) or ({IDLE_SHARE}) "
        f"or ({HEAD_COUNT})"
    ),
    # Only use is billed: per-pod use where measured, else the device's use split
    # between its pods; idle time and host processes are billed to nobody.
    "measured": f"({MEASURED_USE}) or ({DEVICE_USE})",
    # Head count: 1 for a device held alone, 1/N of a device that N pods share.
    "held": HELD,
}
POLICIES = tuple(POLICY_EXPRESSIONS)
DEFAULT_POLICY = POLICIES[0]


def policy_chosen(name: str) -> str:
    """One sample when the dashboard's ``$policy`` is ``name``, none otherwise:
    ``and on ()`` with it keeps only the chosen policy's expression."""
    return (
        'label_replace(vector(1), "policy", "$policy", "", "") and on (policy) '
        f'label_replace(vector(1), "policy", "{name}", "", "")'
    )


BILLED = " or ".join(
    f"(({expr}) and on () ({policy_chosen(name)}))" for name, expr in POLICY_EXPRESSIONS.items()
)
BILLED_WITH_MODEL = (
    f"({BILLED}) * on (uuid) group_left (model) "
    f"max by (uuid, model) (accel_device_info{{{FILTER}}})"
)
# Devices held by pods, by whether the exporter measures each pod's use of them.
MEASURED_DEVICES = f"count(count by (uuid) ({PER_POD}))"
HEAD_COUNT_DEVICES = (
    f"count(count by (uuid) (accel_device_pod_info{{{FILTER}}}) unless on (uuid) {PER_POD})"
)
# The policy in force, as a series whose ``policy`` label a stat panel shows.
POLICY_IN_FORCE = 'label_replace(vector(1), "policy", "$policy", "", "")'

POLICY_HOW = (
    "The billing policy is the dashboard's $policy variable (default "
    f"{DEFAULT_POLICY}; docs/dashboards.md). measured-with-idle-split: each pod pays "
    "what its processes used of a device plus an equal share of what no pod used "
    "(idle time, host processes), so every held device is billed in full and a "
    "shared device is split by use. measured: each pod pays what it used, and idle "
    "time is billed to nobody; a pod holding an idle GPU alone pays its (small) use. "
    "held: head count, 1 for a device held alone and 1/N of a device N pods share. "
    "Where the exporter has no per-pod measure for a device (no "
    "accel_pod_utilization_ratio: other vendors, a MIG instance shared by several "
    "containers), measured bills the device's own utilization split 1/N, and the "
    "other two bill head count."
)
DEVICE_HOURS_HOW = (
    "Device-hours = Σ over the range of (the pod's billed share of the device) × time, "
    "under the billing policy in force. "
    + POLICY_HOW
    + " The subquery samples the share every $__interval "
    "(range [$__range:$__interval]); sum_over_time adds the samples, × "
    "$__interval_ms / 3 600 000 turns samples into hours. A MIG instance or AMD "
    "partition counts as one device (its own uuid)."
)


def device_hours(by: str = "") -> str:
    """Device-hours in the dashboard's range, summed ``by`` these labels (or all)."""
    grouping = f"sum by ({by})" if by else "sum"
    return (
        f"{grouping} (sum_over_time(({BILLED_WITH_MODEL})[$__range:$__interval]))"
        " * $__interval_ms / 3600000"
    )


def policy_variable() -> Json:
    """The billing policy: a fixed list, the default first (docs/dashboards.md)."""
    return {
        "name": "policy",
        "label": "Billing policy",
        "description": POLICY_HOW,
        "type": "custom",
        "query": ",".join(POLICIES),
        "current": {"selected": True, "text": DEFAULT_POLICY, "value": DEFAULT_POLICY},
        "options": [
            {"selected": name == DEFAULT_POLICY, "text": name, "value": name} for name in POLICIES
        ],
        "hide": 0,
        "includeAll": False,
        "multi": False,
    }


def chargeback() -> Json:
    lay = Layout()
    lay.row("Device-hours in the time range, billed by policy $policy")
    lay.add(
        stat(
            "Billing policy",
            POLICY_HOW,
            POLICY_IN_FORCE,
            options={
                "reduceOptions": {"calcs": ["lastNotNull"]},
                "textMode": "name",
                "colorMode": "none",
            },
        )
        | {"targets": [target(POLICY_IN_FORCE, "{{policy}}", instant=True)]},
        w=6,
        h=4,
    )
    lay.add(
        stat(
            "Device-hours, all namespaces ($policy)",
            DEVICE_HOURS_HOW,
            device_hours(),
            decimals=2,
        ),
        w=18,
        h=4,
    )
    lay.add(
        panel(
            "bargauge",
            "Device-hours by namespace ($policy)",
            DEVICE_HOURS_HOW,
            [target(device_hours("namespace"), "{{namespace}}", instant=True)],
            options={
                "orientation": "horizontal",
                "displayMode": "gradient",
                "reduceOptions": {"calcs": ["lastNotNull"], "values": False},
            },
            decimals=2,
            unit="h",
        ),
        w=24,
        h=8,
    )
    lay.add(
        table(
            "Device-hours by namespace, vendor and model ($policy)",
            DEVICE_HOURS_HOW,
            [target(device_hours("namespace, vendor, model"), instant=True)],
            decimals=2,
        ),
        w=24,
    )
    lay.add(
        stat(
            "Devices with per-pod use",
            "Devices held by pods whose exporter measures each pod's use "
            "(accel_pod_utilization_ratio): measured and measured-with-idle-split bill "
            "their pods by it.",
            MEASURED_DEVICES,
        ),
        w=12,
        h=4,
    )
    lay.add(
        stat(
            "Devices without per-pod use",
            "Devices held by pods without a per-pod measure (no "
            "accel_pod_utilization_ratio for the device): measured bills the device's "
            "utilization split 1/N between its N pods, the other policies 1/N of it.",
            HEAD_COUNT_DEVICES,
        ),
        w=12,
        h=4,
    )
    lay.row("Devices held now")
    lay.add(
        timeseries(
            "Devices held by namespace",
            "Device-equivalents that each namespace's pods hold (a shared device "
            "split 1/N between its pods): what the held policy bills.",
            targets((f"sum by (namespace) ({SHARE})", "{{namespace}}")),
            custom={"drawStyle": "line", "fillOpacity": 20, "stacking": {"mode": "normal"}},
        ),
        w=12,
    )
    lay.add(
        timeseries(
            "Devices held by vendor and model",
            "Device-equivalents held by pods, by vendor and model.",
            targets((f"sum by (vendor, model) ({SHARE_WITH_MODEL})", "{{vendor}} {{model}}")),
            custom={"drawStyle": "line", "fillOpacity": 20, "stacking": {"mode": "normal"}},
        ),
        w=12,
    )
    lay.add(
        timeseries(
            "Billed by namespace ($policy)",
            "Device-equivalents that each namespace's pods are billed now under the "
            "policy in force; the area under this curve is the device-hours above. " + POLICY_HOW,
            targets((f"sum by (namespace) ({BILLED})", "{{namespace}}")),
            custom={"drawStyle": "line", "fillOpacity": 20, "stacking": {"mode": "normal"}},
        ),
        w=12,
    )
    lay.add(
        timeseries(
            "Measured use by namespace",
            "Device-equivalents that each namespace's processes keep busy, on the "
            "devices whose exporter measures per-pod use (accel_pod_utilization_ratio); "
            "the gap to 'Devices held' is idle capacity, which held and "
            "measured-with-idle-split bill and measured does not.",
            targets((f"sum by (namespace) ({MEASURED_USE})", "{{namespace}}")),
            custom={"drawStyle": "line", "fillOpacity": 20, "stacking": {"mode": "normal"}},
        ),
        w=12,
    )
    lay.add(
        table(
            "Pods and their devices ($policy)",
            "Which pod holds which device now, and its billed share of it under the "
            "policy in force. " + POLICY_HOW,
            [target(f"{BILLED_WITH_MODEL}", instant=True)],
            hide={"job": True, "instance": True, "cluster": True},
        ),
        w=24,
    )
    return dashboard(
        "accel-chargeback",
        "Accelerators / Chargeback",
        "Device-hours by namespace, vendor and model, billed by the policy chosen in "
        f"$policy (default {DEFAULT_POLICY}): per-pod use "
        "(accel_pod_utilization_ratio) where the exporter has it, the device's use or "
        "head count (accel_device_pod_info, 1/N of a shared device) where it does not.",
        lay,
        time_from="now-7d",
        more_variables=[policy_variable()],
    )


DASHBOARDS = {
    "fleet-overview.json": fleet_overview,
    "node-detail.json": node_detail,
    "remediation.json": remediation,
    "chargeback.json": chargeback,
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
