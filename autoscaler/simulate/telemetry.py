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
from autoscaler.simulate.poolshape import sort_nodes
from autoscaler.simulate.scenario import PoolSpec, device_name
from exporter import schema

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
Labels = tuple[tuple[str, str], ...]
ClusterRow = tuple[cs.ClusterMetric, dict[str, str], float]

Series = tuple[tuple[str, Labels], ...]
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
        # The same rows as the columns of ``_job_table``, in pod_rows' order: a new
        # pod's row is appended (at ``_job_at[pod]``), a gone pod's marked dead, so
        # that the pods that come and go every cycle (thousands in a large fleet)
        # cost no Python loop per scrape (``_job_columns``, cached until a change).
        self._job_at: dict[str, int] = {}
        self._job_n = 0  # rows in use, dead ones included
        self._job_table = np.zeros((0, 4))  # refs as floats: exact below 2**53
        self._job_live = np.zeros(0, dtype=np.bool_)
        self._job_arrays: tuple[I64, F64, F64] | None = None
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
        self._refs: dict[tuple[str, Labels], int] = {}
        """The refs of the cluster-state series by name and labels, while the
        store's ``generation`` is ``_refs_of`` (``_ref``)."""
        self._refs_of = -1
        # The pool series. Per pool: its registered nodes' slots, kept until one of
        # them comes or goes (``on``), and the refs of their accel_node_pool_info
        # rows as last written, taken again only after that or after the store
        # renumbered (the pools in ``_node_info_redo``): 2,000 nodes would
        # otherwise cost as many rows, and slots looked at, every scrape. The
        # refs of the other rows (accel_pool_*, Kueue's) as last written.
        self._registered: dict[str, list[Slot]] = {}
        self._node_info: dict[str, I64] = {}
        self._node_info_redo: set[str] = set()
        self.pool_prev: set[int] = set()
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
        if what in ("node_added", "node_removed"):
            # The pool's registered nodes change: listed again at the next scrape
            # (a slot lets its node go just after node_removed is heard).
            self._registered.pop(payload.pool.name, None)
            self._node_info_redo.add(payload.pool.name)
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
            row = (age, timeout, float(int(self.fleet.now)), job.timeout)
            self.pod_rows[job.pod] = row
            at = self._job_row(job.pod)
            self._job_table[at] = row
            self._job_live[at] = True
            self._job_arrays = None
        if self.gang_on and isinstance(job, Member):
            self.gangs_dirty.add((job.namespace, job.gang))

    def _job_row(self, pod: str) -> int:
        """``pod``'s row in ``_job_table``: its own while it is in ``pod_rows`` (which
        keeps its place when a row is replaced), else a new one after the last."""
        at = self._job_at.get(pod)
        if at is None:
            at = self._job_at[pod] = self._job_n
            self._job_n += 1
            if at == self._job_live.size:  # full: twice the room
                more = max(64, at)
                self._job_table = np.concatenate((self._job_table, np.zeros((more, 4))))
                self._job_live = np.concatenate((self._job_live, np.zeros(more, dtype=np.bool_)))
        return at

    def _job_columns(self) -> tuple[I64, F64, F64]:
        """The job series' refs (every age, then every timeout), starts and
        timeouts, in ``pod_rows``' order. The dead rows are dropped first once they
        are as many as the live ones: the live keep their order, pod_rows'."""
        n = self._job_n
        live = np.flatnonzero(self._job_live[:n])
        if n - live.size >= max(live.size, 64):
            k = live.size
            self._job_table[:k] = self._job_table[live]
            self._job_live[:k], self._job_live[k:n] = True, False
            self._job_at = dict(zip(self.pod_rows, range(k), strict=True))
            self._job_n = k
            live = np.arange(k)
        table = self._job_table[live]
        return table[:, :2].T.ravel().astype(np.int64), table[:, 2], table[:, 3]

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
                ref = self._ref(metric.name, labels)
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

    def gang_rows(self) -> list[ClusterRow]:
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
                self._job_live[self._job_at.pop(job.pod)] = False
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
            if self._job_arrays is None:  # a pod came or went
                self._job_arrays = self._job_columns()
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

    def node_rows(self) -> list[ClusterRow]:
        """``accel_node_ready`` of every node, with ``clusterstate.node_rows`` over
        the fleet's Node objects (what ``collect`` lists)."""
        return cs.node_rows(list(self.fleet.kube.nodes.values()))

    def _nodes(self, times: Sequence[float]) -> None:
        if self._node_arrays is None:
            rows = self.node_rows()
            refs = {labels["node"]: self._ref(metric.name, labels) for metric, labels, _ in rows}
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

    def _ref(self, name: str, labels: dict[str, str]) -> int:
        """``store.ref`` of a cluster-state series, kept until the store renumbers
        its series: the same rows come every scrape, and a lookup by the labels as
        they come costs less than the store's canonical form of them."""
        refs = self._kept_refs()
        key = (name, tuple(labels.items()))
        ref = refs.get(key)
        if ref is None:
            ref = refs[key] = self.store.ref({"__name__": name, **labels})
        return ref

    def _kept_refs(self) -> dict[tuple[str, Labels], int]:
        """The refs ``_ref`` keeps; emptied once the store has dropped or renumbered
        series (its ``generation`` changed), and every pool's node rows marked to
        take theirs again."""
        store = self.store
        if self._refs_of != store.generation:
            self._refs.clear()
            self._refs_of = store.generation
            self._node_info_redo.update(self._node_info)
        return self._refs

    def _registered_slots(self, pool: str) -> list[Slot]:
        """The slots of ``pool``'s registered nodes in slot order, as
        ``MachineSet.readiness`` lists them; kept until one comes or goes (``on``)."""
        slots = self._registered.get(pool)
        if slots is None:
            fleet = self.fleet
            found = (fleet.slots[i] for i in fleet.pool_slots[pool])
            slots = self._registered[pool] = [s for s in found if s.node is not None]
        return slots

    def _pool_sections(self) -> list[tuple[PoolSpec, list[ClusterRow], list[Slot]]]:
        """Per pool: its ``accel_pool_*`` rows (``pool_rows``) and the slots of its
        registered nodes."""
        fleet = self.fleet
        pools = fleet.scenario.pools
        nodes = {p.name: self._registered_slots(p.name) for p in pools}
        # MachineSet.readiness, over the lists kept here.
        sorted_nodes = {p.name: sort_nodes(p, nodes[p.name], fleet.now) for p in pools}
        pending = fleet.waiting_devices({p: int(n.offers) for p, n in sorted_nodes.items()})
        sections: list[tuple[PoolSpec, list[ClusterRow], list[Slot]]] = []
        for pool in pools:
            registered = nodes[pool.name]
            state_of = sorted_nodes[pool.name]
            provisioning = fleet.pool_machines[pool.name] - len(registered) + state_of.warming
            rows: list[ClusterRow] = [
                (cs.POOL_NODES, {"pool": pool.name, "state": state}, float(count))
                for state, count in (
                    ("ready", state_of.ready),
                    ("notready", state_of.notready),
                    ("provisioning", provisioning),
                )
            ]
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
            sections.append((pool, rows, registered))
        return sections

    def pool_rows(self, *, node_info: bool = True) -> list[ClusterRow]:
        """The ``accel_pool_*`` rows (and ``accel_node_pool_info`` with ``node_info``),
        as ``clusterstate.pool_rows`` computes them from the API: same labels, same
        values. A pool offers a pending pod a node when one of its nodes has its
        devices allocatable or its MachineDeployment declares the shape of one
        (scale from zero); a node still waiting for its devices is capacity on its
        way (``provisioning``), not capacity (``machines.MachineSet.readiness``)."""
        rows: list[ClusterRow] = []
        for pool, own, registered in self._pool_sections():
            rows += own
            if node_info:
                rows += [(cs.NODE_POOL, labels, 1.0) for labels in _node_pools(pool, registered)]
        return rows

    def _node_info_refs(self, pool: PoolSpec, registered: list[Slot], gone: set[int]) -> I64:
        """The refs of ``pool``'s ``accel_node_pool_info`` rows (``pool_rows``), as
        last written unless its nodes changed or the store renumbered since; the
        refs no longer among them go into ``gone``."""
        refs = self._node_info.get(pool.name)
        if refs is None or pool.name in self._node_info_redo:
            name = cs.NODE_POOL.name
            new = np.array(
                [self._ref(name, labels) for labels in _node_pools(pool, registered)],
                dtype=np.int64,
            )
            if refs is not None:
                gone.update(set(refs.tolist()) - set(new.tolist()))
            self._node_info[pool.name] = refs = new
            self._node_info_redo.discard(pool.name)
        return refs

    def _pools(self, times: Sequence[float]) -> None:
        """``pool_rows`` and Kueue's queue series, in that order, at each of
        ``times``, after stale markers for the rows gone since the last scrape. Only
        the handful of rows that are not a node's are made anew (``_node_info_refs``)."""
        wanted = self.wanted
        node_info = cs.NODE_POOL.name in wanted
        sections = self._pool_sections()
        kueue = self.fleet.job_controller.kueue
        # Kueue's queue series, by autoscaler/queues.py itself.
        queue_rows = [r for r in kueue.rows() if r[0].name in wanted] if kueue else []
        self._kept_refs()  # before the first ref: every pool's node refs retaken if stale
        parts: list[tuple[I64, npt.NDArray[np.float64]]] = []
        others: set[int] = set()  # the refs of the rows besides the nodes'
        gone: set[int] = set()
        for pool, own, registered in sections:
            parts.append(self._refs_values([r for r in own if r[0].name in wanted], others))
            if node_info:
                nodes = self._node_info_refs(pool, registered, gone)
                parts.append((nodes, np.ones(nodes.size)))
        parts.append(self._refs_values(queue_rows, others))
        gone |= self.pool_prev - others
        if gone:
            self.store.append_stale(np.array(sorted(gone), dtype=np.int64), times[0])
        self.pool_prev = others
        refs = np.concatenate([r for r, _ in parts])
        if refs.size:
            values = np.concatenate([v for _, v in parts])
            for t in times:
                self.store.append(refs, t, values)

    def _refs_values(
        self, rows: Sequence[cs.Row], seen: set[int]
    ) -> tuple[I64, npt.NDArray[np.float64]]:
        """The refs and values of ``rows`` as arrays; the refs added to ``seen``."""
        refs = [self._ref(m.name, labels) for m, labels, _ in rows]
        seen.update(refs)
        return np.array(refs, dtype=np.int64), np.array([v for _, _, v in rows], dtype=np.float64)


def _node_pools(pool: PoolSpec, registered: list[Slot]) -> list[dict[str, str]]:
    """The labels of ``pool``'s ``accel_node_pool_info`` rows: one per registered
    node, in slot order."""
    return [{"node": s.node, "pool": pool.name} for s in registered if s.node is not None]


__all__ = ["DEVICE_SERIES", "EVENTS", "OK", "Telemetry", "metric_names", "uuid_of"]
