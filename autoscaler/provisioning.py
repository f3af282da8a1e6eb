"""ProvisioningRequests answered: the controller as a provisioning class for its
accelerator pools (Cluster API MachineDeployments).

Why: a gang needs all of its nodes at once. Kueue's provisioning admission check
(``kueue.x-k8s.io/provisioning-request``) holds a Workload's admission until a
ProvisioningRequest (``autoscaling.x-k8s.io/v1``) for its pods is ``Provisioned``;
growing a pool a node at a time for it would leave partial capacity that helps
nobody. ``Provisioner.reconcile`` answers the requests whose
``spec.provisioningClassName`` is ``CLASS`` (``accel-fleet.io/atomic-scale-up``),
once per evaluation cycle; what it does, step by step (Accepted, Provisioned,
Failed, BookingExpired and the release), is in docs/kueue.md ("ProvisioningRequests
answered"). The choices that shape this module:

- **All at once or not at all.** The gang's nodes (per pod set ``ceil(count / pods
  per node)``, its pods read from the Workload that owns the request) go to the
  pool its flavor selects in one replica change, or the request is ``Failed``
  (``MaxLimitReached``): never 1..N-1 nodes.
- **Crash-safe.** The scale-up is recorded on the MachineDeployment (annotation
  ``accel-fleet.io/provisioning``, by request uid) *before* replicas change, and
  replicas are set to the recorded value, not incremented: a controller killed
  between the scale-up and the condition update resumes from the record, with no
  second scale-up. A release records its nodes and target first, the same way.
- **Breaker, limits, ownership.** No scale-up starts while ``blocked()`` says why
  (the breaker); replicas go through ``ClusterAPIProvider.set_replicas``, which
  checks the pool's bounds once more; Events go on the request.
- **Someone else's input.** At most ``MAX_REQUESTS`` requests a cycle; a request
  or record that is not what its API says is skipped and counted (``skipped``),
  never raised; an API error stops one request's step (``errors``), and the next
  cycle resumes it. A request ``Accepted`` without a record (removed by hand) is
  left alone: a second scale-up is worse than none.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from accel_common.logs import Once
from accel_common.names import is_device_resource
from autoscaler.actions.context import ActionContext
from autoscaler.actions.ops.ownership import event
from autoscaler.clusterstate import device_requests
from autoscaler.kube.errors import KubeError, NotFound
from autoscaler.kube.kueue import is_true
from autoscaler.kube.protocol import (
    CAPI_GROUP,
    CAPI_VERSION,
    KUEUE_GROUP,
    KUEUE_VERSIONS,
    MACHINE_DEPLOYMENTS,
    RESOURCE_FLAVORS,
    WORKLOADS,
    Kube,
    Obj,
    PatchesStatus,
)
from autoscaler.pools.base import Pool
from autoscaler.pools.clusterapi import ClusterAPIProvider, PoolRefused
from autoscaler.queues import flavor_pools

log = logging.getLogger(__name__)

CLASS: Final = "accel-fleet.io/atomic-scale-up"
GROUP: Final = "autoscaling.x-k8s.io"
VERSION: Final = "v1"
PLURAL: Final = "provisioningrequests"
RECORD: Final = "accel-fleet.io/provisioning"
# The API's condition types, and the reasons written (cluster-autoscaler's own where
# it has one: provisioningrequest/conditions).
ACCEPTED, PROVISIONED, FAILED = "Accepted", "Provisioned", "Failed"
BOOKING_EXPIRED, CAPACITY_REVOKED = "BookingExpired", "CapacityRevoked"
BOOKING: Final = 600.0
TIMEOUT: Final = 900.0
MAX_REQUESTS: Final = 1_000
MAX_POD_SETS: Final = 32
MAX_COUNT: Final = 100_000
MAX_RECORDS: Final = 256
_REPORTED = Once()


class Malformed(Exception):
    """A request or record whose fields are not what the API says: skipped."""


class Unanswerable(Exception):
    """A request of our class that cannot be answered: Failed with this reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class Request:
    namespace: str
    name: str
    uid: str
    generation: int
    pod_sets: list[tuple[str, int]]  # (podTemplateRef.name, count)
    owner: str  # the Workload that owns it, or ""
    conditions: list[Obj]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def true(self, kind: str) -> bool:
        return is_true({"status": {"conditions": self.conditions}}, kind)

    def since(self, kind: str) -> float | None:
        for c in self.conditions:
            if c.get("type") == kind and c.get("status") == "True":
                return _parse_time(c.get("lastTransitionTime"))
        return None


def _rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(value: Any) -> float | None:
    if not isinstance(value, str) or len(value) > 40:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 253:
        raise Malformed(f"{what}: expected a name")
    return value


def read_request(obj: Obj) -> Request | None:
    """The request, None when it is not of our class; ``Malformed`` otherwise."""
    meta, spec, status = (obj.get(k) for k in ("metadata", "spec", "status"))
    if not isinstance(meta, dict) or not isinstance(spec, dict):
        raise Malformed("metadata and spec: expected objects")
    if spec.get("provisioningClassName") != CLASS:
        return None
    sets = spec.get("podSets")
    if not isinstance(sets, list) or not 0 < len(sets) <= MAX_POD_SETS:
        raise Malformed(f"spec.podSets: expected a list of 1 to {MAX_POD_SETS}")
    pod_sets: list[tuple[str, int]] = []
    for ps in sets:
        ref = ps.get("podTemplateRef") if isinstance(ps, dict) else None
        count = ps.get("count") if isinstance(ps, dict) else None
        if not isinstance(ref, dict) or not isinstance(count, int) or isinstance(count, bool):
            raise Malformed("spec.podSets[]: expected podTemplateRef and a whole count")
        if not 0 < count <= MAX_COUNT:
            raise Malformed(f"spec.podSets[].count: expected 1 to {MAX_COUNT}")
        pod_sets.append((_name(ref.get("name"), "podTemplateRef.name"), count))
    owner = ""
    refs = meta.get("ownerReferences") or []
    if not isinstance(refs, list) or len(refs) > 64:
        raise Malformed("metadata.ownerReferences: expected a list of at most 64")
    for ref in refs:
        if isinstance(ref, dict) and ref.get("kind") == "Workload" and ref.get("controller"):
            owner = _name(ref.get("name"), "ownerReferences[].name")
    conds = (status or {}).get("conditions") if isinstance(status, dict) else None
    conditions = [c for c in conds[:16] if isinstance(c, dict)] if isinstance(conds, list) else []
    generation = meta.get("generation")
    return Request(
        _name(meta.get("namespace"), "metadata.namespace"),
        _name(meta.get("name"), "metadata.name"),
        _name(meta.get("uid"), "metadata.uid"),
        generation if isinstance(generation, int) and not isinstance(generation, bool) else 0,
        pod_sets,
        owner,
        conditions,
    )


@dataclass
class Booking:
    """One scale-up, as recorded on its MachineDeployment."""

    request: str  # namespace/name
    nodes: int
    replicas: int  # what the scale-up set
    at: float
    release: list[str] = field(default_factory=list)  # nodes being released
    release_to: int = -1  # the replicas the release sets
    # Released what was unused at the booking's end; the rest waits for the
    # request to go (its pods use it).
    held: bool = False
    unborn: int = 0  # replicas released whose node never registered

    def as_json(self) -> Obj:
        out: Obj = {"request": self.request, "nodes": self.nodes, "replicas": self.replicas}
        out["at"] = self.at
        if self.release_to >= 0:
            out["release"], out["releaseTo"] = self.release, self.release_to
            out["unborn"] = self.unborn
        if self.held:
            out["held"] = True
        return out


def read_records(md: Obj) -> dict[str, Booking]:
    """The MachineDeployment's bookings by request uid; ``Malformed`` if the
    annotation is not what this controller writes."""
    raw = ((md.get("metadata") or {}).get("annotations") or {}).get(RECORD)
    if raw is None:
        return {}
    try:
        data = json.loads(raw) if isinstance(raw, str) and len(raw) < 65_536 else None
    except ValueError:
        data = None
    if not isinstance(data, dict) or len(data) > MAX_RECORDS:
        raise Malformed(f"annotation {RECORD}: expected a JSON object of bookings")
    out: dict[str, Booking] = {}
    for uid, b in data.items():
        raw_ints = [b.get(k) if isinstance(b, dict) else None for k in ("nodes", "replicas")]
        at = b.get("at") if isinstance(b, dict) else None
        ints = [v for v in raw_ints if isinstance(v, int) and 0 <= v <= MAX_COUNT]
        if len(ints) != 2:
            raise Malformed(f"annotation {RECORD}: booking {uid!r:.40} is not whole numbers")
        if not isinstance(at, int | float) or not math.isfinite(at):
            raise Malformed(f"annotation {RECORD}: booking {uid!r:.40} has no time")
        assert isinstance(b, dict)
        release = b.get("release") or []
        to = b.get("releaseTo", -1)
        if not isinstance(release, list) or not all(isinstance(n, str) for n in release):
            raise Malformed(f"annotation {RECORD}: booking {uid!r:.40} release is not names")
        out[str(uid)] = Booking(
            str(b.get("request", ""))[:507],
            ints[0],
            ints[1],
            float(at),
            release[:MAX_COUNT],
            to if isinstance(to, int) and not isinstance(to, bool) else -1,
            b.get("held") is True,
            _count(b.get("unborn", 0)),
        )
    return out


def _count(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT:
        return value
    raise Malformed(f"annotation {RECORD}: expected a whole number, got {value!r:.40}")


def nodes_needed(
    per_pod: Sequence[Mapping[str, int]], counts: Sequence[int], node: Mapping[str, int]
) -> int:
    """Nodes for every pod set: ``ceil(count / pods per node)`` each, pods per node
    the fewest any device resource allows; ``Unanswerable`` when a pod fits no node."""
    total = 0
    for wants, count in zip(per_pod, counts, strict=True):
        fit = min((node.get(r, 0) // n for r, n in wants.items() if n > 0), default=0)
        if fit <= 0:
            raise Unanswerable(
                "NoFittingPool",
                f"a pod asks for {dict(wants)}, which a node of the pool ({dict(node)}) "
                "cannot hold",
            )
        total += math.ceil(count / fit)
    return total


class Provisioner:
    """Answers the ProvisioningRequests of ``CLASS`` with the pools of ``provider``
    (module docstring). ``blocked()`` says why no scale-up may start now (the
    breaker), or None."""

    def __init__(
        self,
        kube: Kube,
        provider: ClusterAPIProvider,
        *,
        blocked: Callable[[], str | None] = lambda: None,
        clock: Callable[[], float] = time.time,
        booking: float = BOOKING,
        timeout: float = TIMEOUT,
        controller: str = "accel-autoscaler",
    ) -> None:
        self.kube = kube
        self.provider = provider
        self.blocked = blocked
        self.clock = clock
        self.booking = booking
        self.timeout = timeout
        self.ctx = ActionContext(kube=kube, controller=controller, clock=clock)
        self.skipped: dict[str, int] = {}
        self.scale_ups = 0
        self.errors = 0

    def counts(self) -> dict[str, int]:
        """Outcomes so far, for ``accel_autoscaler_provisioning_total``."""
        return {
            "scale_up": self.scale_ups,
            "skipped": sum(self.skipped.values()),
            "error": self.errors,
        }

    def _skip(self, kind: str, where: str, why: str) -> None:
        self.skipped[kind] = self.skipped.get(kind, 0) + 1
        if _REPORTED.first((where, why)):
            log.warning("%s left alone: %s", where, why)

    async def reconcile(self) -> None:
        """One pass over the requests and the bookings (module docstring). Nothing
        is done where the ProvisioningRequest API is not served."""
        try:
            listed = await self.kube.list_custom(GROUP, VERSION, "", PLURAL)
        except NotFound:
            return
        requests: dict[str, Request] = {}
        for obj in listed[:MAX_REQUESTS]:
            meta = obj.get("metadata") if isinstance(obj, dict) else None
            where = f"ProvisioningRequest {str((meta or {}).get('name', ''))[:253]}"
            try:
                r = read_request(obj) if isinstance(obj, dict) else None
            except Malformed as e:
                self._skip("ProvisioningRequest", where, str(e))
                continue
            if r is not None:
                requests[r.uid] = r
        self.skipped["ProvisioningRequest"] = self.skipped.get("ProvisioningRequest", 0) + max(
            0, len(listed) - MAX_REQUESTS
        )
        pools = {p.name: p for p in await self.provider.pools()}
        bookings = await self._bookings(pools)
        booked = {uid for _, found in bookings.values() for uid in found}
        for uid, r in sorted(requests.items(), key=lambda kv: kv[1].key):
            # Accepted without a booking: its record is gone (removed by hand); a
            # second scale-up is worse than none, so it is left as it is.
            answered = r.true(FAILED) or r.true(PROVISIONED) or r.true(ACCEPTED)
            if uid not in booked and not answered:
                await self._each(f"ProvisioningRequest {r.key}", self._answer(r, pools))
        for pool_name, (_, found) in sorted(bookings.items()):
            for uid, b in sorted(found.items()):
                step = self._follow(pools[pool_name], uid, b, requests.get(uid))
                await self._each(f"the booking of {b.request} on pool {pool_name}", step)

    async def _each(self, what: str, step: Awaitable[None]) -> None:
        """One request's or booking's step: an API error or a refusal stops that
        one (counted in ``errors``, logged once), not the pass; the next cycle
        resumes it from the cluster."""
        try:
            await step
        except (KubeError, ValueError) as e:
            self.errors += 1
            if _REPORTED.first((what, str(e)[:200])):
                log.warning("%s: %s; tried again next cycle", what, e)

    async def _bookings(
        self, pools: Mapping[str, Pool]
    ) -> dict[str, tuple[Obj, dict[str, Booking]]]:
        out: dict[str, tuple[Obj, dict[str, Booking]]] = {}
        for md in await self.kube.list_custom(
            CAPI_GROUP, CAPI_VERSION, self.provider.namespace, MACHINE_DEPLOYMENTS
        ):
            name = str((md.get("metadata") or {}).get("name", ""))
            if name not in pools:
                continue
            try:
                found = read_records(md)
            except Malformed as e:
                self._skip("MachineDeployment", f"MachineDeployment {name}", str(e))
                continue
            if found:
                out[name] = (md, found)
        return out

    async def _answer(self, r: Request, pools: Mapping[str, Pool]) -> None:
        """A new request: all of its nodes at once, or Failed with why."""
        why = self.blocked()
        if why:
            if _REPORTED.first(("blocked", r.uid)):
                log.info("ProvisioningRequest %s waits: %s", r.key, why)
            return
        try:
            pool, nodes = await self._gang(r, pools)
            if pool.replicas + nodes > pool.max_size:
                raise Unanswerable(
                    "MaxLimitReached",
                    f"the gang needs {nodes} nodes at once, pool {pool.name} has "
                    f"{pool.replicas} of at most {pool.max_size}: none added, never part of a gang",
                )
        except Unanswerable as e:
            await self._conditions(r, {FAILED: (True, e.reason, str(e))})
            await self._event(r, "ProvisioningFailed", str(e), warning=True)
            return
        b = Booking(r.key, nodes, pool.replicas + nodes, self.clock())
        await self._record(pool.name, {r.uid: b.as_json()})
        try:
            await self.provider.set_replicas(pool.name, b.replicas)
        except PoolRefused as e:
            await self._record(pool.name, {r.uid: None})
            await self._conditions(r, {FAILED: (True, "MaxLimitReached", str(e))})
            return
        self.scale_ups += 1
        message = (
            f"pool {pool.name}: {pool.replicas} -> {b.replicas} replicas ({nodes} nodes at once)"
        )
        await self._conditions(r, {ACCEPTED: (True, "Accepted", message)})
        await self._event(r, "ScaledUp", message)

    async def _follow(self, pool: Pool, uid: str, b: Booking, r: Request | None) -> None:
        """A recorded scale-up: finish it, report it, and release what is unused."""
        now = self.clock()
        if b.release_to >= 0:
            await self._release(pool, uid, b, r)
            return
        if b.held:
            if r is None:
                await self._release(pool, uid, b, r)
            return
        if r is None or r.true(FAILED) or r.true(BOOKING_EXPIRED):
            await self._release(pool, uid, b, r)
            return
        if r.true(PROVISIONED):
            since = r.since(PROVISIONED)
            if since is not None and now - since >= self.booking:
                message = f"booked for {self.booking:.0f} s since Provisioned"
                await self._conditions(
                    r, {BOOKING_EXPIRED: (True, "CapacityReservationTimeExpired", message)}
                )
                await self._release(pool, uid, b, r)
            return
        if pool.replicas < b.replicas and not r.true(ACCEPTED):
            # Killed between the record and the scale (or the condition): the record
            # says what was asked; asking for the same replicas again adds nothing.
            try:
                await self.provider.set_replicas(pool.name, b.replicas)
            except PoolRefused as e:  # its bounds changed meanwhile
                await self._conditions(r, {FAILED: (True, "MaxLimitReached", str(e))})
                await self._record(pool.name, {uid: None})
                return
            self.scale_ups += 1
            await self._conditions(
                r, {ACCEPTED: (True, "Accepted", f"pool {pool.name}: {b.replicas} replicas")}
            )
        elif not r.true(ACCEPTED):
            await self._conditions(
                r, {ACCEPTED: (True, "Accepted", f"pool {pool.name}: {b.replicas} replicas")}
            )
        ready = await self._ready(pool)
        if pool.provisioning == 0 and ready >= b.replicas:
            message = f"{b.nodes} nodes of pool {pool.name} are Ready"
            await self._conditions(r, {PROVISIONED: (True, "CapacityIsProvisioned", message)})
            await self._event(r, "Provisioned", message)
        elif now - b.at >= self.timeout:
            message = (
                f"pool {pool.name} has {ready} Ready nodes of {b.replicas} after "
                f"{self.timeout:.0f} s"
            )
            await self._conditions(r, {FAILED: (True, "CapacityIsNotFound", message)})
            await self._event(r, "ProvisioningFailed", message, warning=True)

    async def _ready(self, pool: Pool) -> int:
        nodes = {
            str((n.get("metadata") or {}).get("name")): n for n in await self.kube.list_nodes()
        }
        return sum(1 for name in pool.nodes if is_true(nodes.get(name) or {}, "Ready"))

    async def _release(self, pool: Pool, uid: str, b: Booking, r: Request | None) -> None:
        """The booking's nodes that no pod uses go: recorded, cordoned, their
        Machines marked, then replicas lowered; the record goes last. Replicas
        whose node never registered (``Pool.provisioning``) go too: Cluster API
        deletes a Machine without a nodeRef before any node that has one."""
        if b.release_to < 0:
            idle = await self._idle(pool)
            room = max(0, pool.replicas - pool.min_size)
            b.unborn = min(pool.provisioning, b.nodes, room)
            b.release = idle[: max(0, min(b.nodes, room) - b.unborn)]
            b.release_to = pool.replicas - len(b.release) - b.unborn
            if b.release or b.unborn:
                await self._record(pool.name, {uid: b.as_json()})
        for node in b.release:
            if node in pool.nodes:
                await self.kube.patch_node(node, {"spec": {"unschedulable": True}})
                await self.provider.mark_for_deletion(pool.name, node)
        if (b.release or b.unborn) and pool.replicas > b.release_to:
            await self.provider.set_replicas(pool.name, b.release_to)
            message = (
                f"pool {pool.name}: released {len(b.release)} unused nodes "
                f"({', '.join(b.release) or 'none registered'}) and {b.unborn} that never came"
            )
            if r is not None:
                await self._event(r, "CapacityReleased", message)
            else:
                log.info("%s (ProvisioningRequest %s is gone)", message, b.request)
        kept = b.nodes - len(b.release) - b.unborn
        if r is None or kept <= 0:
            await self._record(pool.name, {uid: None})
        else:  # what pods use stays booked until the request is gone
            held = Booking(b.request, kept, b.replicas, b.at, held=True)
            await self._record(pool.name, {uid: held.as_json()})

    async def _idle(self, pool: Pool) -> list[str]:
        busy: set[str] = set()
        for pod in await self.kube.list_pods():
            phase = (pod.get("status") or {}).get("phase")
            node = (pod.get("spec") or {}).get("nodeName")
            if node and phase not in ("Succeeded", "Failed") and device_requests(pod):
                busy.add(str(node))
        return sorted((n for n in pool.nodes if n not in busy), reverse=True)

    async def _gang(self, r: Request, pools: Mapping[str, Pool]) -> tuple[Pool, int]:
        """The pool the request's pods go to and the nodes they need."""
        if not r.owner:
            raise Unanswerable(
                "NoWorkload",
                "no Kueue Workload owns this ProvisioningRequest: its pods are read from the "
                "Workload (create it through Kueue's provisioning admission check)",
            )
        wl, version = await self._workload(r)
        per_pod, flavor = gang_of(wl, r)
        counts = [count for _, count in r.pod_sets]
        resources = {res for wants in per_pod for res in wants}
        labels = await self._flavor_labels(flavor, version)
        nodes = await self.kube.list_nodes()
        found = flavor_pools({flavor: labels}, list(pools.values()), nodes).get(flavor, [])
        fitting = [p for p, offered in found if resources <= offered]
        if not fitting:
            raise Unanswerable(
                "NoFittingPool", f"no pool carries flavor {flavor}'s node labels {labels}"
            )
        pool = max(fitting, key=lambda p: (p.max_size - p.replicas, p.name))
        node = _node_devices(pool, nodes)
        return pool, nodes_needed(per_pod, counts, node)

    async def _workload(self, r: Request) -> tuple[Obj, str]:
        for version in KUEUE_VERSIONS:
            try:
                return await self.kube.get_custom(
                    KUEUE_GROUP, version, r.namespace, WORKLOADS, r.owner
                ), version
            except NotFound:
                continue
        raise Unanswerable("NoWorkload", f"Workload {r.namespace}/{r.owner} is not found")

    async def _flavor_labels(self, flavor: str, version: str) -> dict[str, str]:
        # Cluster-scoped: listed (get_custom names a namespace).
        listed = await self.kube.list_custom(KUEUE_GROUP, version, "", RESOURCE_FLAVORS)
        rf = next((f for f in listed if (f.get("metadata") or {}).get("name") == flavor), None)
        if rf is None:
            raise Unanswerable("NoFittingPool", f"ResourceFlavor {flavor} is not found")
        labels = (rf.get("spec") or {}).get("nodeLabels") or {}
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            raise Unanswerable(
                "NoFittingPool", f"ResourceFlavor {flavor}'s nodeLabels are not labels"
            )
        return {str(k): v for k, v in labels.items()}

    async def _record(self, pool: str, changes: Mapping[str, Obj | None]) -> None:
        """Merges ``changes`` (None removes) into the pool's record annotation."""
        md = await self.kube.get_custom(
            CAPI_GROUP, CAPI_VERSION, self.provider.namespace, MACHINE_DEPLOYMENTS, pool
        )
        current = {uid: b.as_json() for uid, b in read_records(md).items()}
        for uid, value in changes.items():
            if value is None:
                current.pop(uid, None)
            else:
                current[uid] = value
        body = json.dumps(current, sort_keys=True) if current else None
        patch: Obj = {"metadata": {"annotations": {RECORD: body}}}
        rv = (md.get("metadata") or {}).get("resourceVersion")
        if rv:
            patch["metadata"]["resourceVersion"] = (
                rv  # another writer: a conflict, retried next cycle
            )
        await self.kube.patch_custom(
            CAPI_GROUP, CAPI_VERSION, self.provider.namespace, MACHINE_DEPLOYMENTS, pool, patch
        )

    async def _conditions(self, r: Request, changes: Mapping[str, tuple[bool, str, str]]) -> None:
        now = _rfc3339(self.clock())
        conds = [c for c in r.conditions if c.get("type") not in changes]
        for kind, (status, reason, message) in changes.items():
            conds.append(
                {
                    "type": kind,
                    "status": "True" if status else "False",
                    "reason": reason,
                    "message": message[:1000],
                    "lastTransitionTime": now,
                    "observedGeneration": r.generation,
                }
            )
        r.conditions = conds
        if not isinstance(self.kube, PatchesStatus):
            log.info("ProvisioningRequest %s: %s (no status writer)", r.key, dict(changes))
            return
        await self.kube.patch_custom_status(
            GROUP, VERSION, r.namespace, PLURAL, r.name, {"status": {"conditions": conds}}
        )

    async def _event(self, r: Request, reason: str, message: str, *, warning: bool = False) -> None:
        obj: Obj = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ProvisioningRequest",
            "metadata": {"name": r.name, "namespace": r.namespace, "uid": r.uid},
        }
        try:
            await event(self.ctx, obj, reason, message, warning=warning, action="provisioning")
        except KubeError as e:  # the change it reports happened already
            log.warning("cannot record an Event on %s: %s", r.key, e)


def _obj(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def gang_of(wl: Obj, r: Request) -> tuple[list[dict[str, int]], str]:
    """Per pod set of the request, each pod's device requests, read from the
    Workload's pod set it was made from (``ppt-<request>-<pod set>``), and the one
    flavor ``status.admission`` assigned to them; ``Unanswerable`` otherwise."""
    listed = _obj(wl.get("spec")).get("podSets")
    listed = listed[:MAX_POD_SETS] if isinstance(listed, list) else []
    sets = {str(ps.get("name")): ps for ps in listed if isinstance(ps, dict)}
    admission = _obj(_obj(wl.get("status")).get("admission"))
    assigned: dict[str, str] = {}
    psas = admission.get("podSetAssignments")
    for psa in psas[:MAX_POD_SETS] if isinstance(psas, list) else []:
        if isinstance(psa, dict) and isinstance(psa.get("flavors"), dict):
            assigned.update({str(k): str(v) for k, v in list(psa["flavors"].items())[:64]})
    per_pod: list[dict[str, int]] = []
    ordered = list(sets.values())
    for i, (ref, _) in enumerate(r.pod_sets):
        # Kueue shortens a name past 253 characters with a hash: then by position.
        ps = next((p for n, p in sets.items() if ref.endswith(f"-{n}")), None)
        if ps is None and len(ordered) == len(r.pod_sets):
            ps = ordered[i]
        pod_spec = _obj(_obj((ps or {}).get("template")).get("spec"))
        if not pod_spec:
            raise Unanswerable("NoPodSet", f"Workload {r.owner} has no pod set for {ref}")
        try:
            per_pod.append(device_requests({"spec": pod_spec}))
        except (TypeError, AttributeError, ValueError) as e:
            raise Unanswerable(
                "NoPodSet", f"Workload {r.owner}'s pod set for {ref} is not a pod template: {e}"
            ) from None
    resources = {res for wants in per_pod for res in wants}
    flavors = {assigned[res] for res in resources if res in assigned}
    if not resources or len(flavors) != 1:
        raise Unanswerable(
            "NoFittingPool",
            f"Workload {r.owner}'s pods ask for {sorted(resources) or 'no devices'} in "
            f"flavors {sorted(flavors) or 'none assigned'}: one device flavor is needed",
        )
    return per_pod, flavors.pop()


def _node_devices(pool: Pool, nodes: Sequence[Obj]) -> dict[str, int]:
    """What a node of the pool offers: its declared shape, else a registered node's
    allocatable devices."""
    if pool.shape is not None and pool.shape.devices:
        return dict(pool.shape.devices)
    by_name = {str((n.get("metadata") or {}).get("name")): n for n in nodes}
    for name in pool.nodes:
        alloc = ((by_name.get(name) or {}).get("status") or {}).get("allocatable") or {}
        found = {
            str(r): int(v)
            for r, v in alloc.items()
            if is_device_resource(str(r)) and str(v).isdigit()
        }
        if found:
            return found
    return {}


__all__ = [
    "ACCEPTED",
    "BOOKING",
    "BOOKING_EXPIRED",
    "CAPACITY_REVOKED",
    "CLASS",
    "FAILED",
    "PROVISIONED",
    "RECORD",
    "TIMEOUT",
    "Booking",
    "Malformed",
    "Provisioner",
    "Request",
    "Unanswerable",
    "gang_of",
    "nodes_needed",
    "read_records",
    "read_request",
]
