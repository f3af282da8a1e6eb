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
- **Someone else's input** (read by ``autoscaler/provreq.py``, which never calls
  the API). At most ``MAX_REQUESTS`` requests a cycle; a request
  or record that is not what its API says is skipped and counted (``skipped``),
  never raised; an API error stops one request's step (``errors``), and the next
  cycle resumes it. A request ``Accepted`` without a record (removed by hand) is
  left alone: a second scale-up is worse than none.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from accel_common.logs import Once
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
from autoscaler.pools.capacity import finished
from autoscaler.pools.clusterapi import ClusterAPIProvider, PoolRefused
from autoscaler.provreq import (
    ACCEPTED,
    BOOKING,
    BOOKING_EXPIRED,
    CLASS,
    FAILED,
    GROUP,
    MAX_COUNT,
    MAX_POD_SETS,
    MAX_REQUESTS,
    PLURAL,
    PROVISIONED,
    RECORD,
    TIMEOUT,
    VERSION,
    Booking,
    Malformed,
    Request,
    Unanswerable,
    gang_of,
    node_devices,
    nodes_needed,
    read_records,
    read_request,
    rfc3339,
)
from autoscaler.queues import flavor_pools

log = logging.getLogger(__name__)
_REPORTED = Once()


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
        self._changed = False  # a pool's replicas changed in this pass

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
                step = self._follow(pools, pool_name, uid, b, requests.get(uid))
                await self._each(f"the booking of {b.request} on pool {pool_name}", step)

    async def _fresh(self, pools: dict[str, Pool]) -> None:
        """The pools as they are now, once this pass changed a pool's replicas: a
        second step on a pool must not start from the replicas the first changed."""
        if self._changed:
            self._changed = False
            pools.clear()
            pools.update({p.name: p for p in await self.provider.pools()})

    async def _set_replicas(self, pool: str, replicas: int) -> None:
        self._changed = True
        await self.provider.set_replicas(pool, replicas)

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

    async def _answer(self, r: Request, pools: dict[str, Pool]) -> None:
        """A new request: all of its nodes at once, or Failed with why."""
        why = self.blocked()
        if why:
            if _REPORTED.first(("blocked", r.uid)):
                log.info("ProvisioningRequest %s waits: %s", r.key, why)
            return
        await self._fresh(pools)
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
            await self._set_replicas(pool.name, b.replicas)
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

    async def _follow(
        self, pools: dict[str, Pool], name: str, uid: str, b: Booking, r: Request | None
    ) -> None:
        """A recorded scale-up: finish it, report it, and release what is unused."""
        await self._fresh(pools)
        pool = pools.get(name)
        if pool is None:  # no longer autoscalable: nothing to do until it is again
            return
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
                await self._set_replicas(pool.name, b.replicas)
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
            await self._set_replicas(pool.name, b.release_to)
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
            node = (pod.get("spec") or {}).get("nodeName")
            if node and not finished(pod) and device_requests(pod):
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
        node = node_devices(pool, nodes)
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
        now = rfc3339(self.clock())
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


__all__ = [
    "ACCEPTED",
    "BOOKING",
    "BOOKING_EXPIRED",
    "CLASS",
    "FAILED",
    "MAX_COUNT",
    "MAX_POD_SETS",
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
