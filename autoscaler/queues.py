"""Kueue's queues as cluster-state series: what Workloads wait for and hold, per
ClusterQueue and ResourceFlavor, the quotas they are held to, and the devices that
suspended Workloads wait for, by the node pool their flavor selects.

Why: under Kueue a job stays suspended, with no pods, until its Workload is
admitted, so the pool rules' pending pods (``accel_pool_pending_device_requests``)
never see it. ``collect`` reads Kueue's objects once per evaluation cycle
(``autoscaler/kube/kueue.py``; nothing at all where Kueue is not installed) and
``clusterstate.collect`` adds these rows to its own. What they mean, and the
simplifications chosen:

- A Workload counts when one of its pod sets asks for a device resource (as
  ``clusterstate.device_requests`` counts a pod, passed in as ``devices``); its
  devices are the sum over pod sets of ``count`` times each pod's request. A
  finished Workload, or one with ``spec.active: false``, is not counted.
- Its *state*: ``admitted`` (condition ``Admitted``), ``reserved`` (``QuotaReserved``
  without ``Admitted``: waiting for admission checks, such as a
  ProvisioningRequest), else ``pending``. An admitted or reserved Workload's flavor
  is the one its ``status.admission.podSetAssignments[].flavors`` names for the
  device resource. A pending one has none yet: it is given the one Kueue would
  give it, the first flavor of its ClusterQueue (found through its LocalQueue) that
  covers its device resources, whose node labels agree with the pod set's
  ``nodeSelector``, and whose quota has room; with no room anywhere, the first
  such flavor, and it does not fit. Pending Workloads are placed by priority, then
  age, each taking its room.
- Room: the nominal quota less what reserved and admitted Workloads (and pending
  ones placed before) use. In a cohort, as Kueue counts it: every ClusterQueue
  lends its ``lendingLimit`` (its whole nominal quota without one) to the cohort
  and keeps the rest; what it uses of its lendable part, or borrows, comes out of
  the cohort's lendable total, so what one ClusterQueue borrows no other can; and
  its use past its nominal quota is at most its ``borrowingLimit``. Counting
  another's unused quota as lendable to every member at once would queue more
  devices than the cohort can admit, and grow pools for them.
- ``accel_pool_queued_device_requests{pool,resource}`` is what more nodes would
  help: reserved Workloads and pending ones that fit, less the pods that the
  pool's free devices can take already (Ready, schedulable nodes' devices that no
  pod that is not done asks for; in the order Kueue admits, each pod on the first
  node with room: a Workload held back by ``waitForPodsReady``'s
  ``blockAdmission`` while its pool has room asks for no node). A pending
  Workload beyond every quota waits for quota, not nodes; an admitted one has
  pods, which the pod series count. Devices that pods hold through DRA claims
  are not seen here: such a node looks freer than it is, which only asks for
  fewer nodes. A reserved Workload whose ClusterQueue has a ProvisioningRequest
  admission check (an AdmissionCheck whose ``spec.controllerName`` is
  ``kueue.x-k8s.io/provisioning-request``) is left out too: its capacity comes
  through that ProvisioningRequest (``autoscaler/provisioning.py``), and
  ``pool-scale-up`` growing the pool for it as well would add its nodes twice.
  A flavor's pool is the one whose registered nodes, or declared node shape
  (scale from zero), carry all of the flavor's ``spec.nodeLabels`` and
  offer the resource; of several, the one with the most room below its maximum
  (as ``clusterstate.pool_rows`` chooses for a pending pod).
- Only device resources have quota series: CPU and memory quotas are left out.
- Everything read is someone else's input: an object whose fields are not what
  Kueue's API says (a quantity that is not a whole number, a list past the API's
  own bound) is left out and counted in ``accel_kueue_objects_skipped{kind}``, its
  problem logged once per object and problem; nothing read ends the cycle.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from accel_common.logs import Once
from accel_common.names import is_device_resource
from autoscaler.kube.kueue import (
    ADMITTED,
    FINISHED,
    PROVISIONING_CHECK_CONTROLLER,
    QUOTA_RESERVED,
    REQUEUED,
    KueueObjects,
    condition,
    is_true,
    read_kueue,
    rfc3339_seconds,
)
from autoscaler.kube.protocol import Kube, Obj
from autoscaler.metrics import (
    FLAVOR_POOL,
    KUEUE_SKIPPED,
    POOL_QUEUED,
    QUEUE_BORROWING_LIMIT,
    QUEUE_DEVICE_REQUESTS,
    QUEUE_INFO,
    QUEUE_NOMINAL_QUOTA,
    QUEUE_OLDEST_PENDING,
    QUEUE_WORKLOADS,
    Row,
)
from autoscaler.pools.base import Pool
from autoscaler.pools.capacity import finished, node_devices, node_ready, template_labels

log = logging.getLogger(__name__)

# A pod's device requests by resource (``clusterstate.device_requests``).
DeviceCount = Callable[[Obj], dict[str, int]]

STATES = ("pending", "reserved", "admitted")
KINDS = ("ClusterQueue", "LocalQueue", "ResourceFlavor", "Workload", "AdmissionCheck")
# The API's own bounds (kubebuilder MaxItems of Kueue's types), a little wider.
MAX_POD_SETS = 18
MAX_GROUPS = 16
MAX_FLAVORS_PER_GROUP = 64
MAX_RESOURCES = 64
MAX_LABELS = 64
MAX_COUNT = 1_000_000
_REPORTED = Once()


class _Malformed(Exception):
    """An object whose fields are not what Kueue's API says: left out, counted."""


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 253:
        raise _Malformed(f"{what}: expected a name, got {type(value).__name__}")
    return value


def _list(value: Any, what: str, most: int) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > most:
        raise _Malformed(f"{what}: expected a list of at most {most}")
    return value


def _dict(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Malformed(f"{what}: expected an object")
    return value


def _whole(value: Any, what: str) -> int:
    """A whole-number quantity ("8" or 8): device counts and quotas are whole."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT:
        return value
    if isinstance(value, str) and value.isdigit() and len(value) <= 7:
        return min(int(value), MAX_COUNT)
    raise _Malformed(f"{what}: expected a whole number up to {MAX_COUNT}, got {value!r:.40}")


def _limit(value: Any, what: str) -> int | None:
    return None if value is None else _whole(value, what)


def _labels(value: Any, what: str) -> dict[str, str]:
    labels = _dict(value, what)
    if len(labels) > MAX_LABELS or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise _Malformed(f"{what}: expected at most {MAX_LABELS} string labels")
    return labels


@dataclass
class _Quota:
    nominal: int
    borrowing: int | None
    lending: int | None
    used: int = 0


@dataclass
class _Queue:
    name: str
    cohort: str
    # Per device resource, the flavors that cover it, in the ClusterQueue's order.
    order: dict[str, list[str]] = field(default_factory=dict)
    quota: dict[tuple[str, str], _Quota] = field(default_factory=dict)
    # The names of its admission checks (spec.admissionChecks, or v1beta1's
    # spec.admissionChecksStrategy.admissionChecks[].name).
    checks: tuple[str, ...] = ()
    # One of them is a ProvisioningRequest's: its reserved Workloads get capacity there.
    provisioned: bool = False


@dataclass
class _Demand:
    key: tuple[str, str]
    queue: str
    state: str
    devices: dict[str, int]
    flavor: str
    selector: dict[str, str]
    order: tuple[int, str]
    fits: bool = False
    # When it began to wait: its creation, or the last time Kueue requeued it.
    since: float | None = None
    # Its pods: (how many, each one's device requests), per pod set.
    pods: tuple[tuple[int, dict[str, int]], ...] = ()


def _queue(cq: Obj) -> _Queue:
    spec = _dict(cq.get("spec"), "spec")
    q = _Queue(_str(_dict(cq.get("metadata"), "metadata").get("name"), "metadata.name"), "")
    cohort = spec.get("cohort") or spec.get("cohortName")  # v1beta1, v1beta2
    q.cohort = _str(cohort, "spec.cohort") if cohort else ""
    for group in _list(spec.get("resourceGroups"), "spec.resourceGroups", MAX_GROUPS):
        flavors = _dict(group, "resourceGroups[]").get("flavors")
        for fq in _list(flavors, "resourceGroups[].flavors", MAX_FLAVORS_PER_GROUP):
            fq = _dict(fq, "flavors[]")
            flavor = _str(fq.get("name"), "flavors[].name")
            for rq in _list(fq.get("resources"), "flavors[].resources", MAX_RESOURCES):
                rq = _dict(rq, "resources[]")
                resource = _str(rq.get("name"), "resources[].name")
                if not is_device_resource(resource):
                    continue
                where = f"{flavor}/{resource}"
                q.quota[(flavor, resource)] = _Quota(
                    # v1beta2 leaves a nominal quota of 0 out.
                    _whole(rq.get("nominalQuota", 0), f"{where} nominalQuota"),
                    _limit(rq.get("borrowingLimit"), f"{where} borrowingLimit"),
                    _limit(rq.get("lendingLimit"), f"{where} lendingLimit"),
                )
                q.order.setdefault(resource, []).append(flavor)
    checks = [
        _str(c, "spec.admissionChecks[]")
        for c in _list(spec.get("admissionChecks"), "spec.admissionChecks", MAX_RESOURCES)
    ]
    strategy = _dict(spec.get("admissionChecksStrategy"), "spec.admissionChecksStrategy")
    for rule in _list(strategy.get("admissionChecks"), "admissionChecksStrategy", MAX_RESOURCES):
        checks.append(_str(_dict(rule, "admissionChecks[]").get("name"), "admissionChecks[].name"))
    q.checks = tuple(checks)
    return q


def _pod_sets(
    wl: Obj, devices: DeviceCount
) -> tuple[dict[str, int], dict[str, str], tuple[tuple[int, dict[str, int]], ...]]:
    """The Workload's device requests, its first pod set's nodeSelector, and its
    pods per pod set (how many, each one's device requests)."""
    total: dict[str, int] = {}
    pods: list[tuple[int, dict[str, int]]] = []
    selector: dict[str, str] | None = None
    spec = _dict(wl.get("spec"), "spec")
    for ps in _list(spec.get("podSets"), "spec.podSets", MAX_POD_SETS):
        ps = _dict(ps, "podSets[]")
        count = _whole(ps.get("count", 1), "podSets[].count")
        pod_spec = _dict(_dict(ps.get("template"), "podSets[].template").get("spec"), "spec")
        for part in ("containers", "initContainers"):
            for c in _list(pod_spec.get(part), f"template {part}", MAX_RESOURCES):
                if not isinstance(c, dict):
                    raise _Malformed(f"template {part}[]: expected an object")
                resources = _dict(c.get("resources"), "resources")
                for kind in ("limits", "requests"):
                    _dict(resources.get(kind), f"resources.{kind}")
        each = devices({"spec": pod_spec})
        for resource, n in each.items():
            total[resource] = min(total.get(resource, 0) + n * count, MAX_COUNT)
        if each and count:
            pods.append((count, each))
        if selector is None:
            selector = _labels(pod_spec.get("nodeSelector"), "template nodeSelector")
    return total, selector or {}, tuple(pods)


def _assigned_flavor(wl: Obj, resources: Iterable[str]) -> tuple[str, str]:
    """(ClusterQueue, flavor) of a Workload that holds quota."""
    admission = _dict(_dict(wl.get("status"), "status").get("admission"), "status.admission")
    queue = _str(admission.get("clusterQueue"), "admission.clusterQueue")
    wanted = set(resources)
    for psa in _list(admission.get("podSetAssignments"), "podSetAssignments", MAX_POD_SETS):
        flavors = _dict(_dict(psa, "podSetAssignments[]").get("flavors"), "flavors")
        for resource, flavor in flavors.items():
            if resource in wanted:
                return queue, _str(flavor, "podSetAssignments[].flavors")
    return queue, ""


def _demand(wl: Obj, devices: DeviceCount, local: Mapping[tuple[str, str], str]) -> _Demand | None:
    meta = _dict(wl.get("metadata"), "metadata")
    key = (str(meta.get("namespace", "")), _str(meta.get("name"), "metadata.name"))
    spec = _dict(wl.get("spec"), "spec")
    if is_true(wl, FINISHED) or spec.get("active") is False:
        return None
    wants, selector, pods = _pod_sets(wl, devices)
    if not wants:
        return None
    priority = spec.get("priority") or 0
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise _Malformed("spec.priority: expected a whole number")
    order = (-priority, str(meta.get("creationTimestamp", "")))
    if is_true(wl, QUOTA_RESERVED):
        queue, flavor = _assigned_flavor(wl, wants)
        state = "admitted" if is_true(wl, ADMITTED) else "reserved"
        return _Demand(key, queue, state, wants, flavor, selector, order, fits=True, pods=pods)
    queue = local.get((key[0], str(spec.get("queueName") or "")), "")
    since = rfc3339_seconds(meta.get("creationTimestamp"))
    requeued = condition(wl, REQUEUED)
    if requeued is not None and requeued.get("status") == "True":
        again = rfc3339_seconds(requeued.get("lastTransitionTime"))
        since = max(since or 0.0, again) if again is not None else since
    return _Demand(key, queue, "pending", wants, "", selector, order, since=since, pods=pods)


def _room(q: _Queue, peers: Sequence[_Queue], flavor: str, resource: str) -> int:
    """What ``q`` can still admit of the flavor's resource: its nominal quota left,
    or, in a cohort, what it keeps for itself (its nominal quota past its
    ``lendingLimit``) and has not used, plus what the cohort's lendable quota has
    left (every member's, ``lendingLimit`` or its whole nominal quota, less what
    each uses of its own lendable part or borrows), its use past its nominal
    quota at most its ``borrowingLimit``."""
    own = q.quota[(flavor, resource)]
    if not q.cohort:
        return own.nominal - own.used
    total = beyond = 0
    for member in (q, *peers):
        quota = member.quota.get((flavor, resource))
        if quota is not None:
            lend = _lendable(quota)
            total += lend
            beyond += max(0, quota.used - (quota.nominal - lend))
    room = max(0, own.nominal - _lendable(own) - own.used) + total - beyond
    if own.borrowing is not None:
        room = min(room, own.nominal + own.borrowing - own.used)
    return room


def _lendable(quota: _Quota) -> int:
    return quota.nominal if quota.lending is None else max(0, min(quota.lending, quota.nominal))


def _place(
    d: _Demand, q: _Queue, peers: Sequence[_Queue], flavors: Mapping[str, dict[str, str]]
) -> None:
    """Give a pending Workload the flavor Kueue would (module docstring)."""
    first = sorted(d.devices)[0]
    for flavor in q.order.get(first, []):
        labels = flavors.get(flavor) or {}
        if any(d.selector.get(k, v) != v for k, v in labels.items()):
            continue
        if not all((flavor, r) in q.quota for r in d.devices):
            continue
        if not d.flavor:
            d.flavor = flavor
        if all(_room(q, peers, flavor, r) >= n for r, n in d.devices.items()):
            d.flavor, d.fits = flavor, True
            for r, n in d.devices.items():
                q.quota[(flavor, r)].used += n
            return


@dataclass
class _Read:
    queues: dict[str, _Queue]
    flavors: dict[str, dict[str, str]]
    demands: list[_Demand]
    skipped: dict[str, int]


def _parsed(objs: KueueObjects, devices: DeviceCount) -> _Read:
    """Kueue's objects read into quotas, flavors and demands; what is malformed is
    left out and counted."""
    skipped = dict(objs.skipped)

    def each(kind: str, items: Iterable[Obj], read: Callable[[Obj], Any]) -> list[Any]:
        out = []
        for obj in items:
            try:
                out.append(read(obj))
            except _Malformed as e:
                skipped[kind] = skipped.get(kind, 0) + 1
                raw = obj.get("metadata")
                meta: dict[str, Any] = raw if isinstance(raw, dict) else {}
                where = f"{kind} {meta.get('namespace', '')}/{str(meta.get('name', ''))[:253]}"
                if _REPORTED.first((where, str(e))):
                    log.warning("%s left out of the queue series: %s", where, e)
        return out

    queues = {q.name: q for q in each("ClusterQueue", objs.cluster_queues, _queue)}

    def local(lq: Obj) -> tuple[tuple[str, str], str]:
        meta = _dict(lq.get("metadata"), "metadata")
        cq = _dict(lq.get("spec"), "spec").get("clusterQueue")
        key = (str(meta.get("namespace", "")), _str(meta.get("name"), "metadata.name"))
        return key, _str(cq, "spec.clusterQueue")

    def flavor(rf: Obj) -> tuple[str, dict[str, str]]:
        name = _str(_dict(rf.get("metadata"), "metadata").get("name"), "metadata.name")
        return name, _labels(_dict(rf.get("spec"), "spec").get("nodeLabels"), "nodeLabels")

    def check(ac: Obj) -> tuple[str, bool]:
        name = _str(_dict(ac.get("metadata"), "metadata").get("name"), "metadata.name")
        controller = _dict(ac.get("spec"), "spec").get("controllerName")
        return name, _str(controller, "spec.controllerName") == PROVISIONING_CHECK_CONTROLLER

    provisioning = {n for n, ours in each("AdmissionCheck", objs.admission_checks, check) if ours}
    for q in queues.values():
        q.provisioned = any(c in provisioning for c in q.checks)
    locals_ = dict(each("LocalQueue", objs.local_queues, local))
    flavors = dict(each("ResourceFlavor", objs.flavors, flavor))
    demands = [
        d
        for d in each("Workload", objs.workloads, lambda wl: _demand(wl, devices, locals_))
        if d is not None
    ]
    return _Read(queues, flavors, demands, skipped)


def flavor_pools(
    flavors: Mapping[str, dict[str, str]], pools: Sequence[Pool], nodes: Sequence[Obj]
) -> dict[str, list[tuple[Pool, set[str]]]]:
    """Per flavor, the pools that carry its node labels, with the device resources
    each offers there."""
    by_name = {str((n.get("metadata") or {}).get("name", "")): n for n in nodes}
    out: dict[str, list[tuple[Pool, set[str]]]] = {}
    for name, labels in flavors.items():
        for p in pools:
            offered: set[str] = set()
            for node_name in p.nodes:
                n = by_name.get(node_name) or {}
                have = (n.get("metadata") or {}).get("labels") or {}
                if all(have.get(k) == v for k, v in labels.items()):
                    alloc = (n.get("status") or {}).get("allocatable") or {}
                    offered |= {r for r in alloc if is_device_resource(str(r))}
            if p.shape is not None:
                have = template_labels(p.shape)
                if all(have.get(k) == v for k, v in labels.items()):
                    offered |= set(p.shape.devices)
            if offered:
                out.setdefault(name, []).append((p, offered))
    return out


def queue_rows(
    objs: KueueObjects,
    devices: DeviceCount,
    pools: Sequence[Pool],
    nodes: Sequence[Obj],
    pods: Sequence[Obj] = (),
) -> list[Row]:
    """The queue series of one read of Kueue's objects (module docstring); ``pods``
    say which devices of the pools' nodes are free."""
    read = _parsed(objs, devices)
    queues, flavors, demands = read.queues, read.flavors, read.demands
    for d in demands:
        q = queues.get(d.queue)
        if d.state != "pending" and q is not None:
            for r, n in d.devices.items():
                if (d.flavor, r) in q.quota:
                    q.quota[(d.flavor, r)].used += n
    cohorts: dict[str, list[_Queue]] = {}
    for q in queues.values():
        if q.cohort:
            cohorts.setdefault(q.cohort, []).append(q)
    for d in sorted((d for d in demands if d.state == "pending"), key=lambda d: (d.order, d.key)):
        q = queues.get(d.queue)
        if q is not None:
            peers = [p for p in cohorts.get(q.cohort, ()) if p is not q]
            _place(d, q, peers, flavors)
    rows: list[Row] = []
    workloads: dict[tuple[str, str, str], int] = {}
    requested: dict[tuple[str, str, str, str], int] = {}
    for q in queues.values():
        rows.append((QUEUE_INFO, {"cluster_queue": q.name, "cohort": q.cohort}, 1.0))
        for (flavor, resource), quota in sorted(q.quota.items()):
            labels = {"cluster_queue": q.name, "flavor": flavor, "resource": resource}
            rows.append((QUEUE_NOMINAL_QUOTA, labels, float(quota.nominal)))
            if quota.borrowing is not None:
                rows.append((QUEUE_BORROWING_LIMIT, labels, float(quota.borrowing)))
            for state in STATES:
                workloads.setdefault((q.name, flavor, state), 0)
                requested.setdefault((q.name, flavor, resource, state), 0)
    for d in demands:
        workloads[(d.queue, d.flavor, d.state)] = workloads.get((d.queue, d.flavor, d.state), 0) + 1
        for r, n in d.devices.items():
            key = (d.queue, d.flavor, r, d.state)
            requested[key] = requested.get(key, 0) + n
    oldest: dict[tuple[str, str], float] = {}
    for d in demands:
        if d.state == "pending" and d.since is not None:
            key2 = (d.queue, d.flavor)
            oldest[key2] = min(oldest.get(key2, d.since), d.since)
    for (cq, flavor), at in sorted(oldest.items()):
        rows.append((QUEUE_OLDEST_PENDING, {"cluster_queue": cq, "flavor": flavor}, at))
    for (cq, flavor, state), n in sorted(workloads.items()):
        labels = {"cluster_queue": cq, "flavor": flavor, "state": state}
        rows.append((QUEUE_WORKLOADS, labels, float(n)))
    for (cq, flavor, resource, state), n in sorted(requested.items()):
        labels = {"cluster_queue": cq, "flavor": flavor, "resource": resource, "state": state}
        rows.append((QUEUE_DEVICE_REQUESTS, labels, float(n)))
    booked = {q.name for q in queues.values() if q.provisioned}
    free = _free_nodes(pools, nodes, pods, devices)
    rows.extend(_pool_rows(demands, flavors, pools, nodes, booked, free))
    for kind in KINDS:
        rows.append((KUEUE_SKIPPED, {"kind": kind}, float(read.skipped.get(kind, 0))))
    return rows


def _free_nodes(
    pools: Sequence[Pool], nodes: Sequence[Obj], pods: Sequence[Obj], devices: DeviceCount
) -> dict[str, list[dict[str, int]]]:
    """Per pool, the devices free on each of its Ready, schedulable nodes: what the
    node offers less what its pods that are not done ask for."""
    held: dict[str, dict[str, int]] = {}
    for pod in pods:
        node = _part(pod, "spec").get("nodeName")
        if not isinstance(node, str) or not node or finished(pod):
            continue
        mine = held.setdefault(node, {})
        for resource, n in devices(pod).items():
            mine[resource] = mine.get(resource, 0) + n
    by_name = {str(_part(n, "metadata").get("name", "")): n for n in nodes}
    out: dict[str, list[dict[str, int]]] = {}
    for p in pools:
        for name in sorted(p.nodes):
            node_obj = by_name.get(name)
            if node_obj is None or not node_ready(node_obj):
                continue
            if _part(node_obj, "spec").get("unschedulable"):
                continue
            used = held.get(name, {})
            room = {r: n - used.get(r, 0) for r, n in node_devices(node_obj).items()}
            out.setdefault(p.name, []).append({r: n for r, n in room.items() if n > 0})
    return out


def _part(obj: Obj, key: str) -> dict[str, Any]:
    """``obj[key]`` where it is an object; else empty (nothing is read of it)."""
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, dict) else {}


def _unplaced(d: _Demand, free: list[dict[str, int]]) -> dict[str, int]:
    """The devices of ``d``'s pods that the free nodes cannot take, first fit; what
    they take is taken from ``free``. One pass over the nodes per pod set, however
    many pods it has."""
    left: dict[str, int] = {}
    for count, each in d.pods:
        wanted = {r: n for r, n in each.items() if n > 0}
        for node in free:
            if count <= 0 or not wanted:
                break
            took = min(min(node.get(r, 0) // n for r, n in wanted.items()), count)
            if took > 0:
                for r, n in wanted.items():
                    node[r] -= took * n
                count -= took
        if wanted:
            for r, n in wanted.items():
                left[r] = min(left.get(r, 0) + n * count, MAX_COUNT)
    return left


def _pool_rows(
    demands: Sequence[_Demand],
    flavors: Mapping[str, dict[str, str]],
    pools: Sequence[Pool],
    nodes: Sequence[Obj],
    booked: Collection[str] = (),
    free: Mapping[str, list[dict[str, int]]] | None = None,
) -> list[Row]:
    """``accel_flavor_pool_info`` and ``accel_pool_queued_device_requests``;
    reserved Workloads of the ``booked`` ClusterQueues (a ProvisioningRequest
    check) are left out of the latter, and so are the pods that the chosen pool's
    ``free`` devices can take already (in the order Kueue admits)."""
    free = {k: [dict(f) for f in v] for k, v in (free or {}).items()}
    matches = flavor_pools(flavors, pools, nodes)
    room = {p.name: p.max_size - len(p.nodes) - p.provisioning for p in pools}
    queued: dict[tuple[str, str], int] = {}
    rows: list[Row] = []
    for flavor, found in sorted(matches.items()):
        for p, offered in found:
            rows.append((FLAVOR_POOL, {"flavor": flavor, "pool": p.name}, 1.0))
            for r in offered:
                queued.setdefault((p.name, r), 0)
    for d in sorted(demands, key=lambda d: (d.order, d.key)):
        if d.state == "admitted" or not d.fits:
            continue
        if d.state == "reserved" and d.queue in booked:
            continue
        fitting = [
            p.name
            for p, offered in matches.get(d.flavor, ())
            if all(r in offered for r in d.devices)
        ]
        if not fitting:
            continue
        chosen = min(fitting, key=lambda name: (-room[name], name))
        for r, n in _unplaced(d, free.get(chosen, [])).items():
            queued[(chosen, r)] = queued.get((chosen, r), 0) + n
    for (pool, resource), n in sorted(queued.items()):
        rows.append((POOL_QUEUED, {"pool": pool, "resource": resource}, float(n)))
    return rows


async def collect(
    kube: Kube,
    devices: DeviceCount,
    pools: Sequence[Pool],
    nodes: Sequence[Obj],
    pods: Sequence[Obj] = (),
) -> list[Row]:
    """The queue series now; none where Kueue is not installed, has no
    ClusterQueue, or may not be read."""
    objs = await read_kueue(kube)
    if objs is None:
        return []
    return queue_rows(objs, devices, pools, nodes, pods)


__all__ = ["KINDS", "STATES", "DeviceCount", "collect", "flavor_pools", "queue_rows"]
