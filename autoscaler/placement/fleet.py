"""The fleet state the scorer reads, built from the metrics any Source serves.

Placement needs, per node: which devices exist (``accel_device_info``: vendor,
model), which answer (``accel_up``) and have had no fatal fault lately, which are
held by a pod (``accel_device_pod_info``, from the kubelet's PodResources API), how
busy they are (``accel_utilization_ratio``, ``accel_memory_*``) and how far apart
(``accel_topology_distance``). These are instant queries, so the same code reads
Prometheus in production and exporters directly through the scrape source.

The node is the ``node`` label that relabeling (or the scrape source's
``--targets``) attaches. Series without it are skipped and counted, not guessed.
Partitions (MIG instances, AMD compute partitions: ``parent`` set) are left out:
whole devices are what the extended resources hand out.

"No fatal fault lately" needs history, and both sources must give the same answer
for the same data. ``Q_FATAL`` finds a device whose fatal-fault counter rose in the
last 10 minutes. That needs a sample from 10 minutes ago; where there is none (a
one-shot ``place --source scrape``, a Prometheus or an exporter younger than 10
minutes) the counter cannot be dated, so ``Q_FATAL_UNDATED`` also refuses a device
whose counter is above 0 and has no sample 10 minutes back, with a warning that
says so. With the same samples, Prometheus and the scrape source refuse the same
devices; the scrape source keeps the history in its store across scrapes
(``keep_at_least``), so a long-running reader of it (the extender) dates faults
exactly as Prometheus does once it has scraped for 10 minutes.

A source that is down, or a device catalogue query that fails, is an error
(``FleetUnavailable``) and never an empty fleet: an empty fleet would reject every
node, and the extender's answer to "we do not know" is to let the scheduler go on
without us.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass

from autoscaler.placement.score import Device, FleetState, NodeDevices
from autoscaler.sources.base import Source
from autoscaler.sources.store import StoreSource
from autoscaler.types import QueryResult, Sample, Unknown, Vector

log = logging.getLogger("accel_autoscaler.placement.fleet")

Q_INFO = 'accel_device_info{parent=""}'
Q_UP = "accel_up"
Q_UTIL = "accel_utilization_ratio"
Q_MEM_USED = "accel_memory_used_bytes"
Q_MEM_TOTAL = "accel_memory_total_bytes"
Q_DISTANCE = "accel_topology_distance"
Q_PODS = "accel_device_pod_info"
# A device that had a fatal fault in the last 10 minutes is not offered, even if it
# answers again: the remediation rules decide when it is trusted again.
Q_FATAL = 'increase(accel_fault_events_total{severity="fatal"}[10m]) > 0'
# A fatal count with nothing 10 minutes back to compare it with: it may be recent.
Q_FATAL_UNDATED = (
    'accel_fault_events_total{severity="fatal"} > 0 '
    'unless accel_fault_events_total{severity="fatal"} offset 10m'
)
QUERIES = (
    Q_INFO,
    Q_UP,
    Q_UTIL,
    Q_MEM_USED,
    Q_MEM_TOTAL,
    Q_DISTANCE,
    Q_PODS,
    Q_FATAL,
    Q_FATAL_UNDATED,
)


_last_undated = ""


class FleetUnavailable(RuntimeError):
    """No trustworthy fleet state; the message says why."""


@dataclass(frozen=True)
class _Key:
    node: str
    device: str


def _key(s: Sample) -> _Key | None:
    node, device = s.get("node"), s.get("device")
    if not node or not device:
        return None
    return _Key(node, device)


def _values(result: QueryResult) -> dict[_Key, float]:
    out: dict[_Key, float] = {}
    if isinstance(result, Vector):
        for s in result.samples:
            k = _key(s)
            if k is not None:
                out[k] = s.value
    return out


async def _query(source: Source, expr: str, at: float) -> Vector | None:
    result = await source.query(expr, at)
    if isinstance(result, Unknown):
        log.warning("placement query %r is unknown: %s", expr, result.reason)
        return None
    return result if isinstance(result, Vector) else None


async def read_fleet(source: Source, at: float, *, refresh: bool = True) -> FleetState:
    """Refreshes ``source`` (unless told not to) and reads the fleet state at ``at``.
    Raises FleetUnavailable when the source is down or has no devices."""
    if isinstance(source, StoreSource):
        # Before the refresh stores anything: the history the queries look back on.
        source.keep_at_least(QUERIES)
    if refresh and not await source.refresh(at):
        raise FleetUnavailable(f"source {source.name} is down")
    info = await source.query(Q_INFO, at)
    if isinstance(info, Unknown):
        raise FleetUnavailable(f"{Q_INFO}: {info.reason}")
    if not isinstance(info, Vector) or not info.samples:
        raise FleetUnavailable(f"source {source.name} has no accel_device_info series")
    up = await _query(source, Q_UP, at)
    util = _values(await source.query(Q_UTIL, at))
    used = _values(await source.query(Q_MEM_USED, at))
    total = _values(await source.query(Q_MEM_TOTAL, at))
    fatal = await _fatal(source, at)
    pods = await _query(source, Q_PODS, at)
    dist = await _query(source, Q_DISTANCE, at)
    readings = _Readings(
        up=_values(up) if up is not None else {},
        utilization=util,
        memory_used=used,
        memory_total=total,
        fatal=fatal,
        holders=_holders(pods),
    )
    devices = _devices(info, readings)
    distances = _distances(dist)
    nodes = {
        node: NodeDevices(node, devs, distances.get(node, {})) for node, devs in devices.items()
    }
    if not nodes:
        raise FleetUnavailable("no accel_device_info series carries a node label")
    return FleetState(nodes, at)


@dataclass(frozen=True)
class _Readings:
    """Per device, what the queries besides the catalogue said."""

    up: dict[_Key, float]
    utilization: dict[_Key, float]
    memory_used: dict[_Key, float]
    memory_total: dict[_Key, float]
    fatal: dict[_Key, float]
    holders: dict[_Key, list[str]]


async def _fatal(source: Source, at: float) -> dict[_Key, float]:
    """The devices with a recent fatal fault, and those whose fault cannot be dated
    (no sample from 10 minutes ago), which are refused too and said so."""
    global _last_undated
    fatal = _values(await source.query(Q_FATAL, at))
    undated = {
        k: v for k, v in _values(await source.query(Q_FATAL_UNDATED, at)).items() if k not in fatal
    }
    if undated:
        order = sorted(undated.items(), key=lambda kv: (kv[0].node, kv[0].device))
        named = ", ".join(f"{k.node}/{k.device} ({v:g})" for k, v in order)
        message = (
            f"not offered: {named}: "
            f"fatal faults counted, and {source.name} has no sample from 10 minutes ago to "
            "tell whether they are recent (a single scrape has no history; Prometheus, or a "
            "scrape source that has run for 10 minutes, can tell)"
        )
        # A reader that refreshes every 15 s (the extender) says it once, not 40 times.
        log.log(logging.DEBUG if message == _last_undated else logging.WARNING, "%s", message)
        _last_undated = message
        fatal.update(undated)
    return fatal


def _holders(pods: Vector | None) -> dict[_Key, list[str]]:
    """The pods (namespace/name) that hold each device."""
    holders: dict[_Key, list[str]] = defaultdict(list)
    for s in pods.samples if pods is not None else ():
        k = _key(s)
        if k is not None:
            holders[k].append(f"{s.get('namespace')}/{s.get('pod')}")
    return holders


def _devices(info: Vector, readings: _Readings) -> dict[str, dict[str, Device]]:
    """The catalogue's devices by node; series without a node label are left out
    and counted in a warning, not guessed."""
    devices: dict[str, dict[str, Device]] = defaultdict(dict)
    skipped = 0
    for s in info.samples:
        k = _key(s)
        if k is None:
            skipped += 1
            continue
        mem: float | None = None
        total = readings.memory_total
        if total.get(k):
            mem = min(1.0, readings.memory_used.get(k, 0.0) / total[k])
        # No accel_up answer at all (a partial query failure) leaves the device
        # offered; an explicit 0 does not.
        healthy = readings.up.get(k, 1.0) == 1.0 and k not in readings.fatal
        devices[k.node][k.device] = Device(
            name=k.device,
            vendor=s.get("vendor"),
            model=s.get("model"),
            healthy=healthy,
            holders=tuple(sorted(set(readings.holders.get(k, ())))),
            utilization=readings.utilization.get(k),
            memory_used_ratio=mem,
        )
    if skipped:
        log.warning(
            "%d accel_device_info series have no node label and were left out "
            "(relabel the node name into `node`)",
            skipped,
        )
    return devices


def _distances(dist: Vector | None) -> dict[str, dict[tuple[str, str], float]]:
    """By node, the distance between each ordered pair of its devices."""
    distances: dict[str, dict[tuple[str, str], float]] = defaultdict(dict)
    for s in dist.samples if dist is not None else ():
        k = _key(s)
        peer = s.get("peer_device")
        if k is not None and peer:
            distances[k.node][(k.device, peer)] = s.value
    return distances
