"""Renders a snapshot of every backend into Prometheus text exposition (0.0.4).

Rendering happens once per poll, in the poller, and the HTTP handler serves the
resulting bytes: no vendor call and no formatting ever happens on a scrape. The
text goes through the project's one writer (``accel_common.exposition``) rather
than prometheus_client's registry because it is produced from data we already
hold, once, and then cached with its gzip form.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from accel_common import exposition
from accel_common.exposition import Exposition
from exporter import dra, schema, topology
from exporter.model import DeviceInfo, Link, PodAssignment, Reading
from exporter.procmap import NO_OWNER, Assigned, Owner, owner_on
from exporter.schema import MetricSpec


@dataclass
class DeviceState:
    """What the renderer needs of one device: identity, the last reading, and the
    fault counters the poller accumulates (the exporter owns those totals)."""

    info: DeviceInfo
    reading: Reading
    # (severity, action class) -> count; the poller starts every pair the vendor's
    # catalogue can yield at 0 (``Catalogue.pairs``).
    faults: dict[tuple[str, str], int] = field(default_factory=dict)
    # (code, severity, action class) -> count
    fault_codes: dict[tuple[str, str, str], int] = field(default_factory=dict)
    # The reading's sample lines by metric name, formatted in the backend's poll
    # thread by reading_lines(), so the event loop never formats a device.
    lines: dict[str, list[str]] | None = None
    # The owner of each process in the reading, resolved by the poller in the
    # backend's thread (it reads /proc), so that rendering reads no file.
    owners: dict[int, Owner] = field(default_factory=dict)


@dataclass
class BackendStatus:
    name: str
    up: bool
    duration_seconds: float | None
    last_success: float | None


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    return exposition.label_text(pairs)


def _families(devices: Sequence[DeviceState]) -> Exposition:
    """An exposition with every family of the catalogue declared, so that families
    come out in catalogue order whatever order their samples arrive in; two HELP
    texts say where the devices' figures came from."""
    helps = {
        schema.MEMORY_BANDWIDTH.name: _bandwidth_help(devices),
        schema.DEVICE_INFO.name: _info_help(devices),
    }
    out = Exposition()
    for spec in schema.CATALOGUE:
        out.family(spec.name, spec.type, helps.get(spec.name, spec.help))
    return out


def _bandwidth_help(devices: Sequence[DeviceState]) -> str:
    """The HELP text names where each device's bandwidth figure came from, since
    NVML's memory utilization is a busy-time fraction, not a bandwidth fraction."""
    sources: dict[str, int] = defaultdict(int)
    for d in devices:
        r = d.reading
        if r.up and r.memory_bandwidth_utilization is not None:
            sources[r.memory_bandwidth_source or "unspecified"] += 1
    if not sources:
        return schema.MEMORY_BANDWIDTH.help
    parts = "; ".join(
        f"{src} on {n} device{'s' if n != 1 else ''}" for src, n in sorted(sources.items())
    )
    return f"{schema.MEMORY_BANDWIDTH.help} Source: {parts}."


def _info_help(devices: Sequence[DeviceState]) -> str:
    """The HELP text names where each device's telemetry came from, when its backend
    says: a device that exports its identity only must not look like an idle one."""
    sources: dict[str, int] = defaultdict(int)
    for d in devices:
        if d.reading.up and d.reading.telemetry_source:
            sources[d.reading.telemetry_source] += 1
    if not sources:
        return schema.DEVICE_INFO.help
    parts = "; ".join(
        f"{'none beyond identity and memory size' if src == 'none' else src} "
        f"on {n} device{'s' if n != 1 else ''}"
        for src, n in sorted(sources.items())
    )
    return f"{schema.DEVICE_INFO.help} Telemetry: {parts}."


def device_labels(info: DeviceInfo) -> str:
    return _labels((("device", info.device), ("vendor", info.vendor), ("uuid", info.uuid)))


def reading_lines(info: DeviceInfo, r: Reading) -> dict[str, list[str]]:
    """Every sample of one device that depends only on its identity and its reading.
    Pure, so the poller runs it in the backend's thread."""
    out: dict[str, list[str]] = defaultdict(list)
    base = device_labels(info)

    def add(spec: MetricSpec, labels: str, value: float) -> None:
        out[spec.name].append(exposition.sample(spec.name, labels, value))

    def with_(*pairs: tuple[str, str]) -> str:
        return base + "," + _labels(pairs)

    add(
        schema.DEVICE_INFO,
        with_(
            ("model", info.model),
            ("pci_bus_id", info.pci_bus_id),
            ("driver_version", info.driver_version),
            ("numa_node", info.numa_node),
            ("cpu_affinity", info.cpu_affinity),
            ("parent", info.parent),
            ("profile", info.profile),
        ),
        1,
    )
    add(schema.UP, base, 1 if r.up else 0)
    if not r.up:
        return out

    def opt(spec: MetricSpec, value: float | None) -> None:
        if value is not None:
            add(spec, base, value)

    def each(spec: MetricSpec, label: str, values: Mapping[str, float]) -> None:
        for k, v in sorted(values.items()):
            add(spec, with_((label, k)), v)

    opt(schema.UTILIZATION, r.utilization)
    opt(schema.MEMORY_USED, r.memory_used_bytes)
    opt(schema.MEMORY_TOTAL, r.memory_total_bytes)
    opt(schema.MEMORY_BANDWIDTH, r.memory_bandwidth_utilization)
    if r.ecc_errors:
        # Both types are present once ECC is supported at all, so a rule's increase()
        # sees the first uncorrected error even if only corrected ones came before.
        for t in schema.ECC_TYPES:
            add(schema.ECC_ERRORS, with_(("type", t)), r.ecc_errors.get(t, 0))
    each(schema.RETIRED_PAGES, "cause", r.retired_pages)
    each(schema.REMAPPED_ROWS, "type", r.remapped_rows)
    each(schema.TEMPERATURE, "sensor", r.temperatures)
    opt(schema.POWER, r.power_watts)
    opt(schema.POWER_LIMIT, r.power_limit_watts)
    opt(schema.ENERGY, r.energy_joules)
    each(schema.CLOCK, "clock", r.clocks_hz)
    for reason, active in sorted(r.throttle.items()):
        add(schema.THROTTLE, with_(("reason", reason)), 1 if active else 0)
    each(schema.PCIE_THROUGHPUT, "direction", r.pcie_bytes_per_second)
    for (link, direction), v in sorted(r.link_bytes_per_second.items()):
        add(schema.LINK_THROUGHPUT, with_(("link", link), ("direction", direction)), v)
    for (link, typ), v in sorted(r.link_errors.items()):
        add(schema.LINK_ERRORS, with_(("link", link), ("type", typ)), v)
    return out


def _faults(fam: Exposition, d: DeviceState) -> None:
    # The exporter's own fault counters exist for every device, up or not, from the
    # first scrape, so that increase() sees the first fault.
    base = device_labels(d.info)
    for (sev, action), n in sorted(d.faults.items()):
        fam.add(schema.FAULT_EVENTS.name, f'{base},severity="{sev}",action="{action}"', n)
    for (code, sev, action), n in sorted(d.fault_codes.items()):
        labels = base + "," + _labels((("code", code), ("severity", sev), ("action", action)))
        fam.add(schema.FAULT_CODE_EVENTS.name, labels, n)


def normalise_device_id(value: str) -> str:
    """A device plugin ID in the form devices are indexed by: UUIDs as they are,
    PCI addresses lowercased with a 4-digit domain (kubelets report 0000:c1:00.0).
    The NVIDIA plugin's time-slicing replicas (``GPU-…::3``) are the device itself."""
    v = value.strip()
    base, sep, replica = v.rpartition("::")
    if sep and replica.isdigit():
        v = base
    parts = v.split(":")
    if len(parts) == 3 and "." in parts[2]:
        return f"{int(parts[0], 16):04x}:{parts[1].lower()}:{parts[2].lower()}"
    if len(parts) == 2 and "." in parts[1]:
        return f"0000:{parts[0].lower()}:{parts[1].lower()}"
    return v


def match_pods(
    devices: Sequence[DeviceState], pods: Sequence[PodAssignment]
) -> list[tuple[DeviceInfo, PodAssignment]]:
    """The kubelet's device IDs matched to our devices: by UUID (GPU or MIG
    instance) or by PCI address (AMD and Intel device plugins), so that a MIG
    instance's pod lands on the instance and a whole GPU's on the GPU. IDs that match
    no device (another plugin's, a device this exporter does not see) are dropped;
    a container listed twice for one device counts once. In the backends' order.
    A DRA device's driver name is first turned into one of these (``exporter.dra``)."""
    pods = dra.resolve([d.info for d in devices], pods)
    index: dict[str, DeviceInfo] = {}
    for d in devices:
        index[d.info.uuid] = d.info
        if d.info.pci_bus_id and not d.info.parent:
            index.setdefault(normalise_device_id(d.info.pci_bus_id), d.info)
    seen: set[tuple[str, str, str, str]] = set()
    out: list[tuple[DeviceInfo, PodAssignment]] = []
    for p in pods:
        info = index.get(p.device_id) or index.get(normalise_device_id(p.device_id))
        if info is None:
            continue
        key = (info.device, p.namespace, p.pod, p.container)
        if key not in seen:
            seen.add(key)
            out.append((info, p))
    return out


def _pods(fam: Exposition, matched: Sequence[tuple[DeviceInfo, PodAssignment]]) -> None:
    """accel_device_pod_info. A device shared by several pods (time-slicing, MPS)
    gets one series per pod and container; a device a ResourceClaim gave also has
    ``claim`` (left out, not empty, for a device plugin's: docs/exporter/pods.md)."""
    for info, p in matched:
        pairs = (("namespace", p.namespace), ("pod", p.pod), ("container", p.container))
        claim = (("claim", p.claim),) if p.claim else ()
        labels = device_labels(info) + "," + _labels(pairs + claim)
        fam.add(schema.DEVICE_POD.name, labels, 1)


def pod_usage(
    d: DeviceState, assigned: Sequence[Assigned]
) -> tuple[dict[tuple[str, str, str], float], dict[tuple[str, str, str], float]]:
    """(utilization, memory) per (namespace, pod, container) of one device, from its
    processes; both empty when its backend cannot list processes.

    Processes in no pod are summed under ("", "", ""), so that the parts add up to
    the device. A container that PodResources assigned the device to but that runs
    nothing on it gets 0, so that it is measured idle rather than unknown. Where the
    vendor gives no per-process utilization (NVML on a MIG instance), a device whose
    processes all belong to one container gives that container the device's own
    utilization, which is then exact; with several containers it gives none, and
    chargeback falls back to head count for that device."""
    r = d.reading
    if not r.up or not r.processes_listed:
        return {}, {}
    util: dict[tuple[str, str, str], float] = {}
    memory: dict[tuple[str, str, str], float] = {}
    measured = any(p.utilization is not None for p in r.processes)
    keys: set[tuple[str, str, str]] = set()
    for p in r.processes:
        key = owner_on(d.owners.get(p.pid, NO_OWNER), assigned)
        keys.add(key)
        if p.memory_used_bytes is not None:
            memory[key] = memory.get(key, 0.0) + p.memory_used_bytes
        if measured:
            util[key] = util.get(key, 0.0) + (p.utilization or 0.0)
    whole = not measured and len(keys) <= 1 and r.utilization is not None
    if whole and keys:
        util[next(iter(keys))] = r.utilization or 0.0
    for a in assigned:
        key = (a.namespace, a.pod, a.container)
        if key not in keys:
            memory.setdefault(key, 0.0)
            if measured or whole:
                util.setdefault(key, 0.0)
    return {k: min(v, 1.0) for k, v in util.items()}, memory


def _pod_usage(
    fam: Exposition,
    devices: Sequence[DeviceState],
    matched: Sequence[tuple[DeviceInfo, PodAssignment]],
) -> None:
    """accel_pod_utilization_ratio and accel_pod_memory_used_bytes."""
    assigned: dict[str, list[Assigned]] = defaultdict(list)
    for info, p in matched:
        assigned[info.device].append(Assigned(p.namespace, p.pod, p.container))
    for d in devices:
        util, memory = pod_usage(d, assigned.get(d.info.device, ()))
        base = device_labels(d.info)
        for spec, values in ((schema.POD_UTILIZATION, util), (schema.POD_MEMORY_USED, memory)):
            for (ns, pod, container), v in sorted(values.items()):
                labels = (
                    base
                    + ","
                    + _labels((("namespace", ns), ("pod", pod), ("container", container)))
                )
                fam.add(spec.name, labels, round(v, 6))


def pod_label_suffix(assignments: Sequence[PodAssignment]) -> str:
    """``,namespace="…",pod="…"`` for --pod-labels; empty for a device without pods.

    A shared device gets every pod, sorted, joined with "," position by position
    (``namespace="a,b",pod="x,y"`` is a/x and b/y), so that the series stays one
    series per device rather than being duplicated per pod."""
    pairs = sorted({(p.namespace, p.pod) for p in assignments})
    if not pairs:
        return ""
    namespaces = ",".join(ns for ns, _ in pairs)
    pod_names = ",".join(pod for _, pod in pairs)
    return "," + _labels((("namespace", namespaces), ("pod", pod_names)))


def _with_pod_labels(info: DeviceInfo, name: str, rows: list[str], suffix: str) -> list[str]:
    """Adds the pod labels to a device's gauges. Counters and accel_device_info are
    left alone: a counter whose labels change with every pod would restart as a new
    series, and increase() would miss the faults at the change; identity joins on
    accel_device_info must not depend on which pod runs."""
    spec = schema.BY_NAME.get(name)
    if not suffix or spec is None or spec.type != "gauge" or spec is schema.DEVICE_INFO:
        return rows
    head = "{" + device_labels(info)
    return [r.replace(head, head + suffix, 1) for r in rows]


def render(
    devices: Sequence[DeviceState],
    links: Sequence[Link],
    backends: Sequence[BackendStatus],
    pods: Sequence[PodAssignment] = (),
    pod_labels: bool = False,
) -> bytes:
    """The whole exposition for one snapshot. With ``pod_labels``, a device's gauges
    also carry the namespace and pod of the pods that hold it (--pod-labels)."""
    fam = _families(devices)
    by_name = {d.info.device: d.info for d in devices}
    matched = match_pods(devices, pods)
    by_device: dict[str, list[PodAssignment]] = defaultdict(list)
    for info, p in matched:
        by_device[info.device].append(p)
    for d in devices:
        lines = d.lines if d.lines is not None else reading_lines(d.info, d.reading)
        suffix = pod_label_suffix(by_device.get(d.info.device, ())) if pod_labels else ""
        for name, rows in lines.items():
            fam.extend(name, _with_pod_labels(d.info, name, rows, suffix))
        _faults(fam, d)
    for link in links:
        own = by_name.get(link.device)
        if own is None:
            continue
        fam.add(
            schema.TOPOLOGY_LINK.name,
            _labels(
                (
                    ("device", own.device),
                    ("vendor", own.vendor),
                    ("uuid", own.uuid),
                    ("peer_device", link.peer_device),
                    ("link_type", link.link_type),
                    ("links", str(link.links)),
                )
            ),
            1,
        )
    for name, peer, distance in topology.distances([d.info for d in devices], links):
        labels = device_labels(by_name[name]) + "," + _labels((("peer_device", peer),))
        fam.add(schema.TOPOLOGY_DISTANCE.name, labels, distance)
    _pods(fam, matched)
    _pod_usage(fam, devices, matched)
    for b in backends:
        lbl = _labels((("backend", b.name),))
        fam.add(schema.BACKEND_UP.name, lbl, 1 if b.up else 0)
        if b.duration_seconds is not None:
            fam.add(schema.POLL_DURATION.name, lbl, round(b.duration_seconds, 6))
        if b.last_success is not None:
            fam.add(schema.LAST_SUCCESS.name, lbl, round(b.last_success, 3))
    return fam.text().encode()
