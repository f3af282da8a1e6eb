"""What the controller would scrape from the simulated fleet, straight into the
built-in evaluator's store.

In production (``--source scrape``) the controller scrapes every node's exporter
and ingests the text with the node's name as the ``node`` label, then ingests the
cluster-state rows (``autoscaler/clusterstate.py``). Here the same series, with
the same names and labels, go into the same ``SeriesStore`` through its columnar
API (one ``append`` of refs and a numpy array per family), because rendering and
parsing text for 8,000 devices every cycle would cost more than the rest of the
simulation. ``tests/autoscaler/simulate/test_simulate.py`` checks that the
cluster-state series equal what ``clusterstate.collect`` reads from the same in-memory cluster.

Device series follow the exporter's semantics (``exporter/schema.py``): every
device has ``accel_up``; counters exist at 0 from the first scrape
(``accel_fault_events_total{severity, action}`` for every pair the scenario's
faults can publish, ``classes.event_keys``; ``accel_ecc_errors_total{type}``); a
busy device's ``accel_utilization_ratio`` is its job's load with a little jitter,
as the ``sim`` backend's wave has, and a stalled job's devices read exactly 0; a
lost device reads ``accel_up 0`` and its fault events (its loss is one, class
``reboot``), nothing else; ``accel_remapped_rows{type="pending"}`` is 1 while a
remap waits for a reset, ``{type="failure"}`` after a row could not be remapped;
``accel_device_pod_info`` names the pod holding a device;
``accel_link_throughput_bytes_per_second`` follows the job's load over its device
links (``links.py``: none for a one-device job, 0 while it is hung in a collective
though its utilization stays up). ``accel_node_ready`` follows each Node's Ready
condition (``clusterstate.node_rows`` over the same objects), recomputed when a
node comes, goes, fails or returns. A node that is down (or
deleted) is a failed scrape: its series get stale markers, as Prometheus writes
them.

Only the families the rules read, and those their actions query themselves
(``wiring.ACTION_READS``: ``accel_device_info`` for ``reset_devices``' UUIDs,
``accel_device_pod_info`` for the holders of a device), are stored (the store
would hold the others unread), and the store keeps the history the rules need
(``support.required_retention``), as ``ScrapeSource.retain`` does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import promql_parser as pp

from accel_common.names import VENDOR_RESOURCE
from accel_common.remedies import ACTION_CLASSES
from autoscaler import clusterstate as cs
from autoscaler.promql.matchers import Matcher
from autoscaler.promql.store import SeriesStore
from autoscaler.simulate.fleet import Fleet
from autoscaler.simulate.hostio import HostIO
from autoscaler.simulate.jobstate import Job, Member
from autoscaler.simulate.links import LINK_BYTES_PER_SECOND
from autoscaler.simulate.machines import OK, Slot
from autoscaler.simulate.scenario import device_name
from exporter import schema

I64 = npt.NDArray[np.int64]

Series = tuple[tuple[str, tuple[tuple[str, str], ...]], ...]
# (family, extra labels) of each per-device series, in a fixed order; the
# fault-event series (``accel_fault_events_total{severity, action}``, one per pair
# the scenario's faults can publish: ``classes.event_keys``) follow them.
DEVICE_SERIES: Series = (
    (schema.UP.name, ()),
    (schema.UTILIZATION.name, ()),
    (schema.ECC_ERRORS.name, (("type", "corrected"),)),
    (schema.ECC_ERRORS.name, (("type", "uncorrected"),)),
    # Identity, with the pool's model; read by actions (reset_devices' UUIDs).
    (schema.DEVICE_INFO.name, ()),
    # A row remap waiting for a reset (a ``remap_pending`` fault): 1 until one; a
    # row that could not be remapped (``remap_failure``): 1 until replacement.
    (schema.REMAPPED_ROWS.name, (("type", "pending"),)),
    (schema.REMAPPED_ROWS.name, (("type", "failure"),)),
    # Device-link traffic (links.py), on NVIDIA and AMD devices only (the vendors
    # whose backends publish it): one link per device, which carries here what
    # each of its links carries (a ring spreads its traffic over them evenly).
    (schema.LINK_THROUGHPUT.name, (("link", "0"), ("direction", "rx"))),
    (schema.LINK_THROUGHPUT.name, (("link", "0"), ("direction", "tx"))),
)
UP, UTIL, ECC_CORRECTED, ECC_UNCORRECTED, IDENTITY, REMAP_PENDING, REMAP_FAILURE = range(7)
LINK_RX, LINK_TX = 7, 8
EVENTS = len(DEVICE_SERIES)  # the first fault-event series
_PENDING = ACTION_CLASSES.index("reset_when_idle")
JITTER = 0.04

_NAME = re.compile(r"accel_[a-z_]+")


def metric_names(exprs: Iterable[str]) -> set[str]:
    """The accel_* metric names the expressions mention."""
    out: set[str] = set()
    for e in exprs:
        out.update(_NAME.findall(e))
    return out


DEVICE_LABELS = frozenset({"device", "vendor", "uuid", "node"})


def selected(exprs: Iterable[str], name: str, fixed: dict[str, str]) -> bool:
    """Whether any selector in the expressions can select a series of ``name`` whose
    labels besides the device's own are ``fixed``: ``accel_fault_events_total
    {severity="fatal"}`` never reads the ``severity="info"`` series, so those need
    not be stored. Matchers on the device labels are taken to match some device."""
    found = False

    def visit(e: pp.Expr) -> bool:
        nonlocal found
        if isinstance(e, (pp.VectorSelector, pp.MatrixSelector)):
            sel = e if isinstance(e, pp.VectorSelector) else e.vector_selector
            matchers = [Matcher.from_parser(m) for m in sel.matchers.matchers]
            names = {sel.name} if sel.name else set()
            names |= {m.value for m in matchers if m.name == "__name__" and m.type.value == "="}
            if name not in names and not any(
                m.name == "__name__" and m.matches(name) for m in matchers
            ):
                return True
            if all(
                m.name in ("__name__", *DEVICE_LABELS) or m.matches(fixed.get(m.name, ""))
                for m in matchers
            ):
                found = True
        return True

    for expr in exprs:
        pp.walk(pp.parse(expr), visit)
    return found


def uuid_of(node: str, device: str) -> str:
    return f"SIM-{node}-{device}"


class Telemetry:
    """Feeds ``store`` with the fleet's series at each scrape (``scrape(t)``)."""

    def __init__(self, fleet: Fleet, store: SeriesStore, exprs: list[str], seed: int) -> None:
        self.fleet = fleet
        self.store = store
        wanted = metric_names(exprs)
        self.wanted = wanted
        self.rng = np.random.default_rng(np.random.SeedSequence([seed, 7]))
        # The nodes' own traffic, as node_exporter publishes it (hostio.py).
        self.hostio = HostIO(fleet.machines, store, seed)
        g = fleet.device_count
        events: Series = tuple(
            (schema.FAULT_EVENTS.name, (("severity", severity), ("action", action)))
            for severity, action in fleet.event_keys
        )
        self.series = DEVICE_SERIES + events
        self.refs = np.full((len(self.series), g), -1, dtype=np.int64)
        self.series_on = [
            name in wanted and selected(exprs, name, dict(extra)) for name, extra in self.series
        ]
        self.pod_info_on = schema.DEVICE_POD.name in wanted
        self.dev_pod_ref = np.full(g, -1, dtype=np.int64)
        self.scraped = np.zeros(g, dtype=np.bool_)  # node up, series live
        # Series that went away, to mark stale at the next write: the exporters'
        # (at their next scrape) and the cluster state's (at the controller's next).
        self._stale: list[int] = []
        self._stale_cluster: list[int] = []
        # Running pods' job series: ref of age, ref of timeout, start, timeout.
        self.job_on = cs.JOB_AGE.name in wanted or cs.JOB_TIMEOUT.name in wanted
        self.pod_rows: dict[str, tuple[int, int, float, float]] = {}
        self._job_arrays: tuple[I64, npt.NDArray[np.float64], npt.NDArray[np.float64]] | None
        self._job_arrays = None
        # Gang series: the running members' (ref -> value), and per gang the pause
        # series' ref and how many running members declare it.
        self.gang_on = bool(
            {m.name for m in cs.CATALOGUE if "gang" in m.name or "checkpoint" in m.name} & wanted
        )
        # The gangs' series by (namespace, gang): ref -> value; those to redo.
        self.gang_refs: dict[tuple[str, str], dict[int, float]] = {}
        self.gangs_dirty: set[tuple[str, str]] = set()
        self.constant: dict[int, float] = {}  # ref -> value of every such series
        self.constant_rows: dict[int, tuple[cs.ClusterMetric, dict[str, str]]] = {}
        self._constant_arrays: tuple[I64, npt.NDArray[np.float64]] | None = None
        self.pool_prev: set[int] = set()
        self._pool_refs: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
        """The refs of the pool series by name and labels, while the store's
        ``generation`` is ``_pool_refs_of`` (a node's pool row each, every scrape)."""
        self._pool_refs_of = -1
        # Node readiness (accel_node_ready): per node its ref, recomputed from the
        # Node objects only after a node came, went, failed or returned.
        self.node_ready_on = cs.NODE_READY.name in wanted
        self.node_refs: dict[str, int] = {}
        self._node_arrays: tuple[I64, npt.NDArray[np.float64]] | None = None
        fleet.listeners.append(self.on)

    # -- reacting to the fleet ---------------------------------------------------

    def on(self, what: str, payload: Any) -> None:
        if what in ("node_added", "node_up", "node_removed", "node_down"):
            self._node_arrays = None
        if what in ("node_added", "node_up"):
            self._node_up(payload)
            self.hostio.node_up(payload)
        elif what in ("node_removed", "node_down"):
            self._node_gone(payload, forget=what == "node_removed")
            self.hostio.node_gone(payload, forget=what == "node_removed")
        elif what == "pod_bound":
            self._pod_bound(payload)
        elif what == "pod_unbound":
            self._pod_unbound(payload)
        elif what == "checkpoint" and self.gang_on:
            self.gangs_dirty.add((payload.namespace, payload.name))

    def _device_range(self, slot: Slot) -> slice:
        return slice(slot.base, slot.base + slot.pool.devices_per_node)

    def _node_up(self, slot: Slot) -> None:
        assert slot.node is not None
        r = self._device_range(slot)
        # Taken again each time: a node that was down longer than the retention had
        # its series dropped, and its old refs with them.
        pool = slot.pool
        for i in range(pool.devices_per_node):
            dev = device_name(pool.vendor, i)
            base = {
                "device": dev,
                "vendor": pool.vendor,
                "uuid": uuid_of(slot.node, dev),
                "node": slot.node,
            }
            linked = LINK_BYTES_PER_SECOND.get(pool.vendor, 0.0) > 0
            for k, (name, extra) in enumerate(self.series):
                if self.series_on[k] and (linked or k not in (LINK_RX, LINK_TX)):
                    more = {"model": pool.model} if k == IDENTITY else dict(extra)
                    self.refs[k, r.start + i] = self.store.ref({"__name__": name, **base, **more})
        self.scraped[r] = True

    def _node_gone(self, slot: Slot, *, forget: bool) -> None:
        r = self._device_range(slot)
        if self.scraped[r.start]:
            refs = self.refs[:, r].ravel()
            self._stale.extend(int(x) for x in refs[refs >= 0])
            pods = self.dev_pod_ref[r]
            self._stale.extend(int(x) for x in pods[pods >= 0])
        self.scraped[r] = False
        if forget:
            self.refs[:, r] = -1

    def _pod_bound(self, job: Job | Member) -> None:
        assert job.pod is not None
        slot = self.fleet.slots[job.slot]
        node = slot.node or ""
        if self.pod_info_on:
            for g in job.devices:
                dev = device_name(slot.pool.vendor, g - slot.base)
                self.dev_pod_ref[g] = self.store.ref(
                    {
                        "__name__": schema.DEVICE_POD.name,
                        "device": dev,
                        "vendor": slot.pool.vendor,
                        "uuid": uuid_of(node, dev),
                        "namespace": job.namespace,
                        "pod": job.pod,
                        "container": "main",
                        "node": node,
                    }
                )
        if self.job_on:
            labels = {"namespace": job.namespace, "pod": job.pod, "node": node, "job": job.name}
            age = self.store.ref({"__name__": cs.JOB_AGE.name, **labels})
            timeout = self.store.ref({"__name__": cs.JOB_TIMEOUT.name, **labels})
            # The API's startTime has whole seconds.
            self.pod_rows[job.pod] = (age, timeout, float(int(self.fleet.now)), job.timeout)
            self._job_arrays = None
        if self.gang_on and isinstance(job, Member):
            self.gangs_dirty.add((job.namespace, job.gang))

    def _gang_series(self) -> None:
        """Recomputes the gang and checkpoint series of the gangs whose members
        came, went or saved a checkpoint, with ``clusterstate.gang_rows`` over
        their running member pods (what ``collect`` reads from the API)."""
        kube = self.fleet.kube
        for key in sorted(self.gangs_dirty):
            ns, name = key
            g = self.fleet.gangs.gangs.get(name)
            pods = [
                kube.pods[(ns, m.pod)]
                for m in (g.members if g is not None else ())
                if m.slot >= 0 and m.pod is not None
            ]
            refs: dict[int, float] = {}
            for metric, labels, value in cs.gang_rows(pods):
                ref = self.store.ref({"__name__": metric.name, **labels})
                refs[ref] = value
                self.constant_rows[ref] = (metric, labels)
            for ref in self.gang_refs.pop(key, {}).keys() - refs.keys():
                self.constant.pop(ref, None)
                self.constant_rows.pop(ref, None)
                self._stale_cluster.append(ref)
            self.constant.update(refs)
            if refs:
                self.gang_refs[key] = refs
        self.gangs_dirty.clear()
        self._constant_arrays = None

    def gang_rows(self) -> list[tuple[cs.ClusterMetric, dict[str, str], float]]:
        """The gang series now, as rows (what ``clusterstate.collect`` returns)."""
        self._gang_series()
        return [
            (metric, dict(labels), self.constant[ref])
            for ref, (metric, labels) in self.constant_rows.items()
        ]

    def _pod_unbound(self, job: Job | Member) -> None:
        for g in job.devices:
            ref = int(self.dev_pod_ref[g])
            if ref >= 0:
                if self.scraped[g]:
                    self._stale.append(ref)
                self.dev_pod_ref[g] = -1
        if job.pod is not None:
            row = self.pod_rows.pop(job.pod, None)
            if row is not None:
                self._stale_cluster.extend((row[0], row[1]))
                self._job_arrays = None
        if self.gang_on and isinstance(job, Member):
            self.gangs_dirty.add((job.namespace, job.gang))

    # -- one scrape --------------------------------------------------------------

    def scrape(self, t: float) -> None:
        """Everything at once at ``t``: the exporters' series and the cluster state
        (the pipeline, ``pipeline.py``, writes the two at their own times)."""
        self.scrape_devices(t)
        self.scrape_cluster(t)

    def scrape_devices(self, t: float) -> None:
        """The exporters' series as the fleet is now (what a poll sees), stamped
        ``t`` (the scrape that returns that poll)."""
        fleet, store = self.fleet, self.store
        if self._stale:
            store.append_stale(np.array(self._stale, dtype=np.int64), t)
            self._stale = []
        live = np.flatnonzero(self.scraped)
        state = fleet.dev_state[live]
        up = (state != 2).astype(np.float64)  # a lost device does not answer
        answering = live[up > 0]
        values: list[npt.NDArray[np.float64] | None] = [None] * len(self.series)
        values[UP] = up
        if self.series_on[UTIL]:
            base = fleet.dev_util[answering]
            busy = base > 0
            jitter = (self.rng.random(answering.size) - 0.5) * 2 * JITTER
            values[UTIL] = np.where(busy, np.clip(base + jitter, 0.0, 1.0), 0.0)
        values[ECC_CORRECTED] = np.zeros(answering.size)
        values[ECC_UNCORRECTED] = fleet.dev_ecc_uncorrected[answering]
        values[IDENTITY] = np.ones(answering.size)
        values[REMAP_PENDING] = (fleet.dev_class[answering] == _PENDING).astype(np.float64)
        values[REMAP_FAILURE] = fleet.dev_remap_failed[answering].astype(np.float64)
        if self.series_on[LINK_RX] or self.series_on[LINK_TX]:
            # In proportion to the reported load of a job that talks over its links.
            util = values[UTIL] if values[UTIL] is not None else fleet.dev_util[answering]
            link = util * fleet.job_controller.links.now[answering]
            values[LINK_RX] = values[LINK_TX] = link
        for k in range(EVENTS, len(self.series)):
            if self.series_on[k]:
                values[k] = fleet.dev_events[k - EVENTS, live]
        lost = live[up == 0]
        for k in range(len(self.series)):
            if not self.series_on[k]:
                continue
            v = values[k]
            assert v is not None
            # A device that stopped answering exposes accel_up and its fault events
            # (its loss is one: code "lost"), nothing else.
            rows = live if k == UP or k >= EVENTS else answering
            if k in (LINK_RX, LINK_TX):  # no such series on a vendor without links
                has = self.refs[k, rows] >= 0
                rows, v, gone = rows[has], v[has], lost[self.refs[k, lost] >= 0]
            else:
                gone = lost
            store.append(self.refs[k, rows], t, v)
            if k != UP and k < EVENTS and gone.size:
                store.append_stale(self.refs[k, gone], t)
        self.hostio.scrape(t)
        if self.pod_info_on:
            held = self.dev_pod_ref[answering]
            held = held[held >= 0]
            if held.size:
                store.append(held, t, np.ones(held.size))

    def scrape_cluster(self, now: float, stamps: Sequence[float] | None = None) -> None:
        """The cluster-state series as the controller reads them from the API at
        ``now``, stamped ``now`` (its own store), or at each of ``stamps``
        (Prometheus's scrapes of its ``/metrics`` until its next read)."""
        times = (now,) if stamps is None else tuple(stamps)
        if not times:
            return
        store = self.store
        if self._stale_cluster:
            store.append_stale(np.array(self._stale_cluster, dtype=np.int64), times[0])
            self._stale_cluster = []
        if self.job_on and self.pod_rows:
            # Rebuilt only when a pod came or went: thousands of member pods would
            # otherwise cost a Python loop per scrape.
            if self._job_arrays is None:
                rows_ = list(self.pod_rows.values())
                refs = np.array([r[0] for r in rows_] + [r[1] for r in rows_], dtype=np.int64)
                starts = np.array([r[2] for r in rows_], dtype=np.float64)
                timeouts = np.array([r[3] for r in rows_], dtype=np.float64)
                self._job_arrays = (refs, starts, timeouts)
            refs, starts, timeouts = self._job_arrays
            ages = np.concatenate((now - starts, timeouts))
            for t in times:
                store.append(refs, t, ages)
        if self.gangs_dirty:
            self._gang_series()
        if self.constant:
            if self._constant_arrays is None:
                self._constant_arrays = (
                    np.fromiter(self.constant.keys(), dtype=np.int64, count=len(self.constant)),
                    np.fromiter(self.constant.values(), dtype=np.float64, count=len(self.constant)),
                )
            for t in times:
                store.append(self._constant_arrays[0], t, self._constant_arrays[1])
        self._pools(times)
        if self.node_ready_on:
            self._nodes(times)

    def node_rows(self) -> list[tuple[cs.ClusterMetric, dict[str, str], float]]:
        """``accel_node_ready`` of every node, with ``clusterstate.node_rows`` over
        the fleet's Node objects (what ``collect`` lists)."""
        return cs.node_rows(list(self.fleet.kube.nodes.values()))

    def _nodes(self, times: Sequence[float]) -> None:
        if self._node_arrays is None:
            rows = self.node_rows()
            refs = {
                labels["node"]: self.store.ref({"__name__": metric.name, **labels})
                for metric, labels, _ in rows
            }
            gone = [ref for node, ref in self.node_refs.items() if node not in refs]
            if gone:
                self.store.append_stale(np.array(gone, dtype=np.int64), times[0])
            self.node_refs = refs
            self._node_arrays = (
                np.array([refs[labels["node"]] for _, labels, _ in rows], dtype=np.int64),
                np.array([value for _, _, value in rows], dtype=np.float64),
            )
        for t in times:
            self.store.append(self._node_arrays[0], t, self._node_arrays[1])

    def pool_rows(
        self, *, node_info: bool = True
    ) -> list[tuple[cs.ClusterMetric, dict[str, str], float]]:
        """The ``accel_pool_*`` rows (and ``accel_node_pool_info`` with ``node_info``),
        as ``clusterstate.pool_rows`` computes them from the API: same labels, same
        values. A pool offers a pending pod a node when one of its nodes has its
        devices allocatable or its MachineDeployment declares the shape of one
        (scale from zero); a node still waiting for its devices is capacity on its
        way (``provisioning``), not capacity (``machines.MachineSet.readiness``)."""
        fleet = self.fleet
        rows: list[tuple[cs.ClusterMetric, dict[str, str], float]] = []
        nodes = {
            pool.name: [s for s in (fleet.slots[i] for i in ids) if s.node is not None]
            for pool in fleet.scenario.pools
            for ids in (fleet.pool_slots[pool.name],)
        }
        sorted_nodes = {
            p.name: fleet.machines.readiness(p.name, fleet.now) for p in fleet.scenario.pools
        }
        pending = fleet.waiting_devices({p: int(n.offers) for p, n in sorted_nodes.items()})
        for pool in fleet.scenario.pools:
            registered = nodes[pool.name]
            state_of = sorted_nodes[pool.name]
            provisioning = fleet.pool_machines[pool.name] - len(registered) + state_of.warming
            for state, count in (
                ("ready", state_of.ready),
                ("notready", state_of.notready),
                ("provisioning", provisioning),
            ):
                rows.append((cs.POOL_NODES, {"pool": pool.name, "state": state}, float(count)))
            rows.append((cs.POOL_NODES_MIN, {"pool": pool.name}, float(pool.min)))
            rows.append((cs.POOL_NODES_MAX, {"pool": pool.name}, float(pool.max)))
            resource = VENDOR_RESOURCE[pool.vendor]
            if state_of.offers:
                waiting = float(pending[pool.name])
                rows.append((cs.POOL_PENDING, {"pool": pool.name, "resource": resource}, waiting))
            if state_of.with_devices:
                allocated = fleet.pool_alloc[pool.name]
                rows.append(
                    (
                        cs.POOL_DEVICES_ALLOCATED,
                        {"pool": pool.name},
                        allocated / (state_of.with_devices * pool.devices_per_node),
                    )
                )
            for s in registered if node_info else ():
                assert s.node is not None
                rows.append((cs.NODE_POOL, {"node": s.node, "pool": pool.name}, 1.0))
        return rows

    def _pool_ref(self, name: str, labels: dict[str, str]) -> int:
        """``store.ref`` of a pool series, kept until the store renumbers its
        series: the same rows come every scrape."""
        store = self.store
        if self._pool_refs_of != store.generation:
            self._pool_refs.clear()
            self._pool_refs_of = store.generation
        key = (name, tuple(labels.items()))
        ref = self._pool_refs.get(key)
        if ref is None:
            ref = self._pool_refs[key] = store.ref({"__name__": name, **labels})
        return ref

    def _pools(self, times: Sequence[float]) -> None:
        rows = self.pool_rows(node_info=cs.NODE_POOL.name in self.wanted)
        kueue = self.fleet.job_controller.kueue
        if kueue is not None:  # Kueue's queue series, by autoscaler/queues.py itself
            rows += kueue.rows()
        rows = [r for r in rows if r[0].name in self.wanted]
        refs = [self._pool_ref(m.name, labels) for m, labels, _ in rows]
        now = set(refs)
        gone = self.pool_prev - now
        if gone:
            self.store.append_stale(np.array(sorted(gone), dtype=np.int64), times[0])
        self.pool_prev = now
        if refs:
            ref_array = np.array(refs, dtype=np.int64)
            values = np.array([v for _, _, v in rows], dtype=np.float64)
            for t in times:
                self.store.append(ref_array, t, values)


__all__ = ["DEVICE_SERIES", "EVENTS", "OK", "Telemetry", "metric_names", "uuid_of"]
