"""Cluster state as metrics: the series the controller derives from the Kubernetes
API, so that every rule, including "this job ran past its timeout" and "this pool
has pending device requests", is one PromQL expression over one kind of data.

The controller exports these on its own ``/metrics`` (through its collector,
``autoscaler/metrics.py``) and feeds them to the built-in evaluator (``ingest``);
with the ``prometheus`` source, Prometheus scrapes them from the controller like
any other target. Their names, HELP and labels live in the controller's catalogue,
``autoscaler/metrics.py`` (``CATALOGUE`` here is its cluster-state part), as the
exporter's live in ``exporter/schema.py``.

``collect`` runs every evaluation cycle against clusters of a thousand nodes, so it
reads one list of nodes, one list of pods and the pools, and makes one pass over
each; the only other calls are one ``get_job`` per Job whose pods need its
``activeDeadlineSeconds`` (cached for the call).

What the series mean, and the simplifications chosen:

- A *device-using* pod requests (or limits) an accelerator resource: anything under
  ``nvidia.com/`` (``gpu``, ``mig-1g.10gb``, ``gpu.shared``) or ``amd.com/``
  (``gpu``, partition names), and ``gpu.intel.com/i915`` or ``gpu.intel.com/xe``
  (not Intel's ``millicores``/``memory.max``/``tiles``, which are shares of one
  device, not devices), ``habana.ai/gaudi``, ``huawei.com/Ascend*`` (chips and
  vNPUs, not HAMi's ``-memory`` shares) and ``google.com/tpu``
  (``accel_common.names.is_device_resource``). Its request per resource is the
  larger of the sum over its containers and the largest init container, as the
  scheduler counts it.
- A pod that uses a ResourceClaim (Dynamic Resource Allocation) is device-using
  too (``is_device_pod``): its devices are its claims' ``status.allocation``
  results, or what an unallocated claim (or its template) asks for, by the
  driver's vendor (``accel_common/dra.py``). ``collect`` reads the claims,
  DeviceClasses and ResourceSlices once per cycle (``autoscaler.kube.dra.read_dra``); a pod whose
  claims are all known and hold no accelerator (a network card's) is not a device
  pod, and one whose claims cannot be read is.
- ``accel_job_age_seconds``: running device-using pods, from ``status.startTime``.
  ``accel_job_timeout_seconds``: the pod's ``accel-fleet.io/timeout`` annotation (a
  duration, ``2h``), else its owner Job's ``activeDeadlineSeconds``; no series when
  neither is set. A bad annotation is logged (namespace/pod and what is wrong, once
  per value) and the Job's deadline is used instead. ``job`` is the owner Job's
  name, or empty.
- Gangs (``accel_common/gangs.py`` says what makes a pod a gang member, from its
  labels and ownerReferences alone, so no API call is made per pod):
  ``accel_gang_info{namespace, pod, node, gang, kind}`` is 1 for every running
  device-using gang member. ``accel_gang_checkpoint_pause_seconds{namespace, gang}``
  is the longest ``accel-fleet.io/checkpoint-pause`` any running member declares
  (no series when none does), and ``accel_job_checkpoint_pause_seconds{namespace,
  pod}`` is the pod's own, for every running device-using pod, members included.
  The same two series exist for ``accel-fleet.io/checkpoint-interval`` (the
  shortest over the members: ``accel_*_checkpoint_interval_seconds``) and for
  ``accel-fleet.io/last-checkpoint``, an RFC 3339 time (the latest over the
  members: ``accel_*_last_checkpoint_timestamp_seconds``, unix seconds). The stall
  rules wait out a declared pause before they call an idle job stalled, and call
  it stalled at once when no checkpoint can be under way (docs/rules.md). A bad
  annotation is logged once per pod and value and counts as not declared.
  What a job that declares nothing does is learned instead, from its utilization,
  by ``autoscaler/rhythm.py`` inside the evaluation cycle (not here: it needs the
  job's series, not the API): ``accel_gang_rhythm_*{namespace, gang}`` and
  ``accel_job_rhythm_*{namespace, pod}``, published with these rows on
  ``/metrics``; the declarations take precedence in the rules.
- A pool *can satisfy* a pending pod when one of the pool's registered nodes matches
  the pod's ``nodeSelector`` and required node affinity and offers at least the
  pod's request of every device resource it asks for (``allocatable``, plus the
  devices of its ResourceSlices when the controller reads DRA: a pod's claims and a
  node's slices count under the DRA driver's name, ``autoscaler/pools/capacity.py``),
  or when the pool's declared shape (its capacity annotations, with the
  ``kubernetes.io/os`` and ``kubernetes.io/arch`` labels every node has:
  ``capacity.template_labels``) would: that is how a pool at 0 nodes is scaled
  from zero. Taints and free capacity of registered nodes are not weighed (the pod
  is pending because the nodes are full); a declared shape's taints are, against
  the pod's tolerations. Pending means ``phase: Pending`` with no
  ``spec.nodeName``, not being deleted and without scheduling gates.
- ``accel_pool_pending_device_requests`` has a series, 0 or more, for every device
  resource that a pool's nodes or its declared shape offer, so ``== 0`` means
  "nothing waits".
- ``accel_pool_nodes{state}``: ``ready`` for the pool's registered nodes that are
  Ready *and* whose devices are allocatable, ``notready`` for the others (not
  Ready, missing, or past 15 minutes without the devices they should have),
  ``provisioning`` for capacity asked for and not usable yet: Machines not
  registered (see ``autoscaler/pools/clusterapi.py``) and nodes still waiting for
  their devices (``autoscaler/pools/capacity.py``). All three are always there,
  and they sum to the pool's size.
- ``accel_pool_devices_allocated_ratio``: device requests of the non-terminal pods
  on the pool's nodes over the device resources those nodes offer; no series for a
  pool that offers none.
- ``accel_node_ready{node}``: 1 for every listed node whose ``Ready`` condition is
  ``True``, 0 for the others (``False``, ``Unknown`` once the kubelet stopped
  reporting, or no condition), pools or none. The lost-node rule restarts a gang
  whose member's node went away (docs/rules.md, "Lost nodes of gangs") an
  evaluation after the node controller marks it, not at the pods' 300 s toleration.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from accel_common.clusterjson import ClusterValueError, annotations_of, number
from accel_common.dra import DraState, driver_counts, has_claims
from accel_common.durations import parse_duration
from accel_common.exposition import Exposition
from accel_common.gangs import gang_of
from accel_common.logs import Once
from accel_common.names import (
    CHECKPOINT_INTERVAL_ANNOTATION,
    CHECKPOINT_PAUSE_ANNOTATION,
    LAST_CHECKPOINT_ANNOTATION,
    TIMEOUT_ANNOTATION,
    is_device_resource,
)
from autoscaler import queues
from autoscaler.kube.dra import read_dra
from autoscaler.kube.errors import KubeError, NotFound
from autoscaler.kube.protocol import Kube, Obj
from autoscaler.metrics import (
    CLUSTER,
    GANG_CHECKPOINT_INTERVAL,
    GANG_CHECKPOINT_PAUSE,
    GANG_INFO,
    GANG_LAST_CHECKPOINT,
    JOB_AGE,
    JOB_CHECKPOINT_INTERVAL,
    JOB_CHECKPOINT_PAUSE,
    JOB_LAST_CHECKPOINT,
    JOB_TIMEOUT,
    NODE_POOL,
    NODE_READY,
    POOL_DEVICES_ALLOCATED,
    POOL_NODES,
    POOL_NODES_MAX,
    POOL_NODES_MIN,
    POOL_PENDING,
    ClusterMetric,
    Row,
)
from autoscaler.pools.base import NodePoolProvider, Pool
from autoscaler.pools.capacity import DraView, dra_requests, finished, node_ready, readiness
from autoscaler.pools.fit import NodeOffer, node_offer, pending, shape_offer
from autoscaler.promql.store import SeriesStore

log = logging.getLogger(__name__)


# The names, HELP and labels of these series live in the controller's catalogue
# (autoscaler/metrics.py), with its own series; CATALOGUE is this module's part.
CATALOGUE: tuple[ClusterMetric, ...] = CLUSTER

BY_NAME: dict[str, ClusterMetric] = {m.name: m for m in CATALOGUE}

# Where ``ingest`` files these series in the store: one scrape target, so a series
# that is not collected again (a pod that finished) ends with a stale marker.
INGEST_TARGET = "accel-autoscaler/clusterstate"


def _count(value: Any) -> int:
    """An extended resource quantity ("2"); those are whole numbers by definition.
    Anything else (a quantity with thousands of digits, "-3", an object) counts 0."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return 0
    digits = str(value).strip()
    return int(digits) if digits.isdigit() and len(digits) <= 6 else 0


def _container_devices(container: Obj) -> dict[str, int]:
    res = container.get("resources") or {}
    out: dict[str, int] = {}
    # Limits imply requests for extended resources; either may be written alone.
    for part in (res.get("limits") or {}, res.get("requests") or {}):
        for name, value in part.items():
            if is_device_resource(name):
                out[name] = max(out.get(name, 0), _count(value))
    return out


def device_requests(pod: Obj) -> dict[str, int]:
    """The pod's accelerator requests by resource, as the scheduler counts them: the
    larger of the containers' sum and the largest init container. Empty for a pod
    that uses no device."""
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    for c in spec.get("containers") or ():
        for name, n in _container_devices(c).items():
            total[name] = total.get(name, 0) + n
    for c in spec.get("initContainers") or ():
        for name, n in _container_devices(c).items():
            total[name] = max(total.get(name, 0), n)
    return {name: n for name, n in total.items() if n > 0}


def is_device_pod(pod: Obj, dra: DraState | None = None) -> bool:
    """Whether a pod uses accelerators: it requests a device resource, or it uses a
    ResourceClaim. With ``dra`` (the claims read this cycle) a pod whose claims are
    all known and hold or ask for no accelerator (only a network card, say) is not
    one; a claim not seen (not generated yet, deleted, not read) counts as one, as
    does every claim when DRA could not be read (``dra`` None)."""
    if device_requests(pod):
        return True
    if not has_claims(pod):
        return False
    return dra is None or bool(dra.requests(pod)) or bool(dra.unknown_claims(pod))


def all_device_requests(pod: Obj, dra: DraState | None) -> dict[str, int]:
    """``device_requests`` plus the devices the pod holds or asks for through its
    claims, each under its vendor's DRA driver name (``gpu.nvidia.com``:
    ``accel_common.dra.VENDOR_DRIVER``), so that they add up with
    ``dra_node_devices`` and never with a device plugin's resource."""
    total = device_requests(pod)
    if dra is not None:
        for resource, n in driver_counts(dra.requests(pod)).items():
            total[resource] = total.get(resource, 0) + n
    return total


def dra_node_devices(node: str, dra: DraState | None) -> dict[str, int]:
    """The devices a node's ResourceSlices offer, by DRA driver name."""
    return driver_counts(dra.offers.get(node) or {}) if dra is not None else {}


def _timestamp(value: Any) -> float | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value)).timestamp()
    except ValueError:
        return None


def _owner_job(pod: Obj) -> str:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("kind") == "Job" and str(ref.get("apiVersion", "")).startswith("batch/"):
            return str(ref.get("name", ""))
    return ""


def _annotated_timeout(pod: Obj) -> float | None:
    raw = annotations_of(pod).get(TIMEOUT_ANNOTATION)
    if raw is None:
        return None
    try:
        return parse_duration(_short(raw))
    except ValueError as e:
        _report(pod, TIMEOUT_ANNOTATION, raw, f"{e}; using its Job's activeDeadlineSeconds if any")
        return None


# The longest annotation value read as a duration or a time: longer is garbage.
# Times are plausible between 2000 and 2100 (year 9999 would keep a stall
# rule quiet for ever).
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC).timestamp()
LATEST = datetime(2100, 1, 1, tzinfo=UTC).timestamp()
_MAX_VALUE = 64


def _short(raw: Any) -> str:
    """``raw`` when it is a string short enough to be a duration or a time;
    ValueError saying what is wrong otherwise (without the whole value)."""
    if not isinstance(raw, str):
        raise ValueError(f"expected a string, got {type(raw).__name__}")
    if len(raw) > _MAX_VALUE:
        raise ValueError(f"a value of {len(raw)} characters (at most {_MAX_VALUE})")
    return raw


def _report(pod: Obj, annotation: str, raw: Any, why: str) -> None:
    """Log a bad annotation once per pod and value (a hash of it: a value may be
    256 KiB), not every cycle; again only if it changes."""
    meta = pod.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    digest = hashlib.sha256(str(raw).encode("utf-8", "surrogatepass")).hexdigest()[:16]
    key = (
        str(meta.get("namespace", ""))[:253],
        str(meta.get("name", ""))[:253],
        annotation,
        digest,
    )
    if _REPORTED.first(key):
        log.warning("pod %s/%s: annotation %s: %s", key[0], key[1], annotation, why)


def _rfc3339(raw: str) -> float:
    """An RFC 3339 time (``2026-01-02T03:04:05Z``) as unix seconds; one without a
    time zone is refused, as its instant would be a guess."""
    try:
        at = datetime.fromisoformat(_short(raw))
    except ValueError as e:
        raise ValueError(f"not an RFC 3339 time: {str(e)[:120]}") from None
    if at.tzinfo is None:
        raise ValueError(f"no time zone in {raw!r} (end it with Z or +00:00)")
    t = at.timestamp()
    if not EARLIEST <= t <= LATEST:
        raise ValueError(f"{raw!r} is not a plausible time (2000..2100)")
    return t


@dataclass(frozen=True)
class _Declared:
    """One checkpointing annotation: how to read it, the per-pod series, and the
    per-gang series with how the members' values fold into one."""

    annotation: str
    parse: Callable[[str], float]
    job: ClusterMetric
    gang: ClusterMetric
    fold: Callable[[float, float], float]
    example: str


_DECLARED: tuple[_Declared, ...] = (
    # The longest pause: a checkpoint lasts as long as its slowest member's write.
    _Declared(
        CHECKPOINT_PAUSE_ANNOTATION,
        parse_duration,
        JOB_CHECKPOINT_PAUSE,
        GANG_CHECKPOINT_PAUSE,
        max,
        "a duration such as 2m",
    ),
    # The shortest interval: the next checkpoint may come as soon as any member's.
    _Declared(
        CHECKPOINT_INTERVAL_ANNOTATION,
        parse_duration,
        JOB_CHECKPOINT_INTERVAL,
        GANG_CHECKPOINT_INTERVAL,
        min,
        "a duration such as 30m",
    ),
    # The latest stamp: members stamp one checkpoint at nearly the same time.
    _Declared(
        LAST_CHECKPOINT_ANNOTATION,
        _rfc3339,
        JOB_LAST_CHECKPOINT,
        GANG_LAST_CHECKPOINT,
        max,
        "an RFC 3339 time such as 2026-01-02T03:04:05Z",
    ),
)

# (namespace, pod, annotation, value) of the annotations already reported as bad: a
# bad value is logged once, not every cycle, and again only if it changes.
_REPORTED = Once()


def _declared(pod: Obj, what: _Declared) -> float | None:
    """The pod's value of ``what``, or None when it declares none or declares
    something unreadable (logged once per pod and value; counts as undeclared)."""
    raw = annotations_of(pod).get(what.annotation)
    if raw is None:
        return None
    try:
        return what.parse(_short(raw))
    except ValueError as e:
        why = f"{e}; the stall rules treat it as not declared (write {what.example})"
        _report(pod, what.annotation, raw, why)
        return None


def checkpoint_declaration(pod: Obj, annotation: str) -> float | None:
    """The pod's value of one checkpointing annotation (a pause or interval in
    seconds, a last-checkpoint stamp in unix seconds), read as the stall series read
    it; None when undeclared or unreadable. rebalance weighs the same values."""
    for what in _DECLARED:
        if what.annotation == annotation:
            return _declared(pod, what)
    raise KeyError(annotation)


def start_time(pod: Obj) -> float | None:
    """The pod's ``status.startTime`` in unix seconds, None when unset or unreadable."""
    return _timestamp((pod.get("status") or {}).get("startTime"))


def _gang_rows(
    pod: Obj, labels: Mapping[str, str], folded: dict[tuple[int, str, str], float]
) -> list[Row]:
    """``accel_gang_info`` and the ``accel_job_checkpoint_*`` series of one running
    device-using pod; a gang member's declarations are folded into ``folded`` (by
    declaration and gang) for the ``accel_gang_checkpoint_*`` series."""
    rows: list[Row] = []
    namespace, name = labels["namespace"], labels["pod"]
    gang = gang_of(pod)
    if gang is not None:
        info = {**labels, "gang": gang.name, "kind": gang.kind}
        info.pop("job", None)
        rows.append((GANG_INFO, info, 1.0))
    for i, what in enumerate(_DECLARED):
        value = _declared(pod, what)
        if value is None:
            continue
        rows.append((what.job, {"namespace": namespace, "pod": name}, value))
        if gang is not None:
            key = (i, namespace, gang.name)
            held = folded.get(key)
            folded[key] = value if held is None else what.fold(held, value)
    return rows


async def _job_deadlines(
    kube: Kube, jobs: Iterable[tuple[str, str]]
) -> dict[tuple[str, str], float]:
    """``activeDeadlineSeconds`` of each Job that has one. A Job that is gone has
    none; one that cannot be read is logged and has none this cycle."""

    async def one(key: tuple[str, str]) -> float | None:
        try:
            job = await kube.get_job(*key)
        except NotFound:
            return None
        except KubeError as e:
            log.warning("job %s/%s: cannot read activeDeadlineSeconds: %s", key[0], key[1], e)
            return None
        spec = job.get("spec")
        deadline = spec.get("activeDeadlineSeconds") if isinstance(spec, Mapping) else None
        if deadline is None:
            return None
        try:  # an int past float's range would raise OverflowError in float()
            return number(deadline, f"job {key[0]}/{key[1]} spec.activeDeadlineSeconds", lo=0)
        except ClusterValueError as e:
            log.warning("%s; the job has no deadline this cycle", e)
            return None

    keys = sorted(set(jobs))
    found = await asyncio.gather(*(one(k) for k in keys))
    return {k: v for k, v in zip(keys, found, strict=True) if v is not None}


async def job_rows(
    kube: Kube, pods: Sequence[Obj], now: float, dra: DraState | None = None
) -> list[Row]:
    """``accel_job_age_seconds`` and ``accel_job_timeout_seconds`` for running
    device-using pods (``is_device_pod``, claims judged by ``dra``), and the gang
    and checkpoint-pause series of the same pods."""
    running: list[tuple[dict[str, str], float, float | None, str]] = []
    gang_rows: list[Row] = []
    folded: dict[tuple[int, str, str], float] = {}
    for pod in pods:
        status = pod.get("status") or {}
        if status.get("phase") != "Running" or not is_device_pod(pod, dra):
            continue
        started = _timestamp(status.get("startTime"))
        if started is None:
            continue
        meta = pod.get("metadata") or {}
        job = _owner_job(pod)
        labels = {
            "namespace": str(meta.get("namespace", "")),
            "pod": str(meta.get("name", "")),
            "node": str((pod.get("spec") or {}).get("nodeName", "")),
            "job": job,
        }
        running.append((labels, now - started, _annotated_timeout(pod), job))
        gang_rows.extend(_gang_rows(pod, labels, folded))
    deadlines = await _job_deadlines(
        kube, ((lb["namespace"], job) for lb, _, t, job in running if t is None and job)
    )
    rows: list[Row] = []
    for labels, age, timeout, job in running:
        rows.append((JOB_AGE, labels, age))
        if timeout is None and job:
            timeout = deadlines.get((labels["namespace"], job))
        if timeout is not None:
            rows.append((JOB_TIMEOUT, dict(labels), timeout))
    rows.extend(gang_rows)
    for (i, namespace, gang), value in sorted(folded.items()):
        rows.append((_DECLARED[i].gang, {"namespace": namespace, "gang": gang}, value))
    return rows


def gang_rows(pods: Sequence[Obj]) -> list[Row]:
    """The gang and checkpoint series of ``pods``, running device-using pods as
    ``job_rows`` selects them: what ``job_rows`` adds besides the job series. The
    fleet simulator computes its gangs' series with this, so they cannot drift."""
    rows: list[Row] = []
    folded: dict[tuple[int, str, str], float] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = {
            "namespace": str(meta.get("namespace", "")),
            "pod": str(meta.get("name", "")),
            "node": str((pod.get("spec") or {}).get("nodeName", "")),
            "job": _owner_job(pod),
        }
        rows.extend(_gang_rows(pod, labels, folded))
    for (i, namespace, gang), value in sorted(folded.items()):
        rows.append((_DECLARED[i].gang, {"namespace": namespace, "gang": gang}, value))
    return rows


def _wants(pod: Obj, dra: DraView | None) -> dict[str, int]:
    """Device requests of a pod: extended resources, plus its claims' devices (by DRA
    driver name) when the controller reads DRA."""
    wants = device_requests(pod)
    for resource, n in dra_requests(pod, dra).items():
        wants[resource] = wants.get(resource, 0) + n
    return wants


def pool_rows(
    pools: Sequence[Pool],
    nodes: Sequence[Obj],
    pods: Sequence[Obj],
    now: float | None = None,
    dra: DraView | None = None,
) -> list[Row]:
    """The ``accel_pool_*`` series and ``accel_node_pool_info`` (module docstring).
    ``now`` (unix seconds, default the wall clock) dates the nodes still waiting for
    their devices; ``dra`` adds claims and ResourceSlices to requests and offers."""
    at = time.time() if now is None else now
    by_name = {str((n.get("metadata") or {}).get("name", "")): n for n in nodes}
    sorted_nodes = {p.name: readiness(p, by_name, at, dra=dra) for p in pools}
    offers: dict[str, list[NodeOffer]] = {}
    for p in pools:
        registered = [node_offer(by_name[n], dra) for n in p.nodes if n in by_name]
        offers[p.name] = [o for o in registered if o.devices]
        if p.shape is not None:
            offers[p.name].append(shape_offer(p.shape))
    pool_of = {n: p.name for p in pools for n in p.nodes}
    room = {p.name: p.max_size - len(p.nodes) - p.provisioning for p in pools}
    allocated: dict[str, int] = {p.name: 0 for p in pools}
    waiting: dict[str, dict[str, int]] = {p.name: {} for p in pools}
    for pod in pods:
        wants = _wants(pod, dra)
        if not wants:
            continue
        spec = pod.get("spec") or {}
        node = spec.get("nodeName")
        if node:
            pool = pool_of.get(str(node))
            if pool is not None and not finished(pod):
                allocated[pool] += sum(wants.values())
            continue
        if not pending(pod):
            continue
        fitting = [
            name for name, offered in offers.items() if any(o.fits(spec, wants) for o in offered)
        ]
        if not fitting:
            continue
        chosen = min(fitting, key=lambda name: (-room[name], name))
        for resource, n in wants.items():
            waiting[chosen][resource] = waiting[chosen].get(resource, 0) + n

    rows: list[Row] = []
    for p in pools:
        state = sorted_nodes[p.name]
        for name, count in (
            ("ready", len(state.ready)),
            ("notready", len(state.notready)),
            ("provisioning", p.provisioning + len(state.warming)),
        ):
            rows.append((POOL_NODES, {"pool": p.name, "state": name}, float(count)))
        rows.append((POOL_NODES_MIN, {"pool": p.name}, float(p.min_size)))
        rows.append((POOL_NODES_MAX, {"pool": p.name}, float(p.max_size)))
        capacity: dict[str, int] = {}
        offered = set(waiting[p.name])
        for o in offers[p.name]:
            offered |= set(o.devices)
            if not o.name:
                continue  # the declared shape: no node offers it yet
            for resource, n in o.devices.items():
                capacity[resource] = capacity.get(resource, 0) + n
        for resource in sorted(offered):
            labels = {"pool": p.name, "resource": resource}
            rows.append((POOL_PENDING, labels, float(waiting[p.name].get(resource, 0))))
        total = sum(capacity.values())
        if total > 0:
            rows.append((POOL_DEVICES_ALLOCATED, {"pool": p.name}, allocated[p.name] / total))
        for node in p.nodes:
            rows.append((NODE_POOL, {"node": node, "pool": p.name}, 1.0))
    return rows


def node_rows(nodes: Sequence[Obj]) -> list[Row]:
    """``accel_node_ready`` of every node in ``nodes`` (module docstring)."""
    return [
        (
            NODE_READY,
            {"node": str((n.get("metadata") or {}).get("name", ""))},
            1.0 if node_ready(n) else 0.0,
        )
        for n in nodes
    ]


async def collect(kube: Kube, pools: NodePoolProvider | None, now: float) -> list[Row]:
    """Every cluster-state series at ``now`` (unix seconds): the job series for
    running device-using pods, every node's readiness and, with a pool provider,
    the pool series, and Kueue's queue series where it is installed. API
    errors from the node, pod and pool lists propagate (the caller keeps nothing
    half-made); an unreadable Job only loses that Job's timeout, and says so."""

    async def no_pools() -> list[Pool]:
        return []

    nodes, pods, pool_list = await asyncio.gather(
        kube.list_nodes(),
        kube.list_pods(),
        pools.pools() if pools is not None else no_pools(),
    )
    # DRA: claims say which pods hold devices; slices what nodes offer (read_dra).
    dra = await read_dra(kube, pods)
    rows = await job_rows(kube, pods, now, dra)
    pool_dra = None if dra is None else DraView(dra.offers, dra.requests)
    rows.extend(pool_rows(pool_list, nodes, pods, now, dra=pool_dra))
    rows.extend(node_rows(nodes))
    # Kueue's queues, where it is installed (autoscaler/queues.py).
    rows.extend(await queues.collect(kube, device_requests, pool_list, nodes, pods))
    return rows


def render(rows: Sequence[Row]) -> str:
    """The rows in the Prometheus text format (0.0.4), families in catalogue order,
    each with its HELP and TYPE, labels in each metric's label order; a family
    without rows is left out. This is the built-in evaluator's feed (``ingest``),
    written every cycle with the exporter's cached writer: for 30,000 job rows it
    took a third of ``prometheus_client.generate_latest``'s time. ``/metrics`` shows
    the same rows through the controller's collector (``autoscaler/metrics.py``);
    ``tests/autoscaler/controller/test_metrics_endpoint.py`` holds both to the same
    samples."""
    out = Exposition()
    for metric in CATALOGUE:
        out.family(metric.name, metric.type, metric.help)
    for metric, labels, value in rows:
        out.add(metric.name, [(k, labels.get(k, "")) for k in metric.labels], value)
    return out.text()


def ingest(store: SeriesStore, rows: Sequence[Row], at: float) -> int:
    """Stores the rows as one scrape at ``at`` in the built-in evaluator's store: a
    series that was in the previous call and is not in this one (a pod that
    finished, a node that left) gets a stale marker, as Prometheus does for a
    scraped target, so a rule stops seeing it at once rather than for the five
    minutes of lookback. The rows go in as ``render`` would list them (families in
    catalogue order, each metric's labels in its order), as data: rendering and
    parsing thousands of rows a cycle cost more than the rules that read them.
    Returns the number of samples stored."""
    ordered = sorted(rows, key=lambda row: _CATALOGUE_ORDER[row[0].name])
    return store.ingest_samples(
        (
            (metric.name, [(k, labels.get(k, "")) for k in metric.labels], value)
            for metric, labels, value in ordered
        ),
        at,
        target=INGEST_TARGET,
    )


_CATALOGUE_ORDER = {metric.name: i for i, metric in enumerate(CATALOGUE)}


# The cluster-state catalogue entries are re-exported: callers know them as
# clusterstate.JOB_AGE and so on.
__all__ = [
    "BY_NAME",
    "CATALOGUE",
    "EARLIEST",
    "GANG_CHECKPOINT_INTERVAL",
    "GANG_CHECKPOINT_PAUSE",
    "GANG_INFO",
    "GANG_LAST_CHECKPOINT",
    "INGEST_TARGET",
    "JOB_AGE",
    "JOB_CHECKPOINT_INTERVAL",
    "JOB_CHECKPOINT_PAUSE",
    "JOB_LAST_CHECKPOINT",
    "JOB_TIMEOUT",
    "LATEST",
    "NODE_POOL",
    "NODE_READY",
    "POOL_DEVICES_ALLOCATED",
    "POOL_NODES",
    "POOL_NODES_MAX",
    "POOL_NODES_MIN",
    "POOL_PENDING",
    "ClusterMetric",
    "Row",
    "all_device_requests",
    "checkpoint_declaration",
    "collect",
    "device_requests",
    "dra_node_devices",
    "gang_rows",
    "ingest",
    "is_device_pod",
    "job_rows",
    "node_rows",
    "pool_rows",
    "render",
    "start_time",
]
