"""Cluster API node pools: one pool per MachineDeployment in one namespace.

What cluster-autoscaler's Cluster API provider taught its users, kept here so
that a MachineDeployment behaves the same under either autoscaler:

- A MachineDeployment is autoscalable only when it carries both
  ``cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size`` and
  ``...-max-size``. There is no default: a pool without them is left alone, and
  the action that asks for it is refused with a message that names the missing
  annotation (``refusal``).
- The replica count is read and written through the ``scale`` subresource, the
  one thing on a MachineDeployment that RBAC can grant on its own.
- A scale-down never lets the MachineSet pick a victim: the drained node's Machine
  is marked with ``cluster.x-k8s.io/delete-machine`` first, and the MachineSet
  deletes marked Machines before any other when replicas drop.

How a pool's Machines are counted (``Pool`` fields):

- Machines being deleted (``metadata.deletionTimestamp``) are gone already.
- When there are more Machines than replicas, the MachineSet is about to delete the
  surplus, marked Machines first: up to that surplus, marked Machines are counted
  as gone too. So a scale-down that crashed after lowering replicas is not done
  twice, and ``nodes`` says what the pool will keep.
- ``nodes``: the Machines with ``status.nodeRef``; their nodes have registered.
- ``provisioning``: Machines without a nodeRef (a Machine in phase ``Failed`` or
  with a ``failureReason`` excepted: it will not come up by waiting), plus the
  replicas that no Machine backs yet. This is capacity on its way, which a
  scale-up must not ask for a second time. (A registered node still waiting for
  its devices is on its way too: ``autoscaler/pools/capacity.py``.)
- ``shape``: what a node of the pool offers, from the capacity annotations
  (``capacity.cluster-autoscaler.kubernetes.io/gpu-count``, ...) of the
  MachineDeployment, or, for a pool at 0 nodes that has none there, of its newest
  MachineSet that has them (``capacity.py`` reads them): scale from zero.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from accel_common.clusterjson import ClusterValueError, whole
from accel_common.names import CAPI_DELETE_MACHINE_ANNOTATION as DELETE_MACHINE
from accel_common.names import CAPI_DEPLOYMENT_LABEL as DEPLOYMENT_LABEL
from accel_common.names import CAPI_MAX_SIZE_ANNOTATION as MAX_SIZE
from accel_common.names import CAPI_MIN_SIZE_ANNOTATION as MIN_SIZE
from autoscaler.kube.protocol import (
    CAPI_GROUP,
    CAPI_VERSION,
    MACHINE_DEPLOYMENTS,
    MACHINE_SETS,
    MACHINES,
    Kube,
    Obj,
)
from autoscaler.pools.base import NodeShape, Pool
from autoscaler.pools.capacity import read_shape

API_VERSION = f"{CAPI_GROUP}/{CAPI_VERSION}"
log = logging.getLogger(__name__)


class PoolRefused(ValueError):
    """The provider will not do what was asked of a pool (not autoscalable, out of
    its bounds, no such node); the message says why and what to do."""


# Far above any pool of accelerator nodes: a larger bound is garbage, not a plan.
MAX_POOL_SIZE = 100_000


@dataclass(frozen=True)
class Bounds:
    min_size: int
    max_size: int


def read_bounds(md: Obj) -> Bounds | str:
    """A MachineDeployment's min/max, or why it is not autoscalable."""
    meta = md.get("metadata") or {}
    where = f"MachineDeployment {meta.get('namespace', '')}/{meta.get('name', '')}"
    annotations: Mapping[str, Any] = meta.get("annotations") or {}
    missing = [a for a in (MIN_SIZE, MAX_SIZE) if a not in annotations]
    if missing:
        return (
            f"{where} is not autoscalable: it has no {' and no '.join(missing)} annotation "
            f"(add both, e.g. kubectl annotate machinedeployment -n "
            f"{meta.get('namespace', '')} {meta.get('name', '')} {MIN_SIZE}=1 {MAX_SIZE}=4)"
        )
    values: dict[str, int] = {}
    for key in (MIN_SIZE, MAX_SIZE):
        raw = annotations[key]
        # Anyone who may patch the MachineDeployment writes these: a bounded,
        # small whole number or the pool is not autoscaled (said, not raised).
        digits = raw.strip() if isinstance(raw, str) and len(raw) <= 32 else None
        shown = repr(raw) if digits is not None else f"a value of type {type(raw).__name__}"
        if isinstance(raw, str) and len(raw) > 32:
            shown = f"{raw[:20]!r}... ({len(raw)} characters)"
        if digits is not None and digits.startswith("-") and digits[1:].isdigit():
            return f"{where}: annotation {key}={shown} must not be negative"
        if digits is None or not digits.isdigit():
            return f"{where}: annotation {key}={shown} is not a whole number"
        values[key] = int(digits)
        if values[key] > MAX_POOL_SIZE:
            return f"{where}: annotation {key}={shown} is above {MAX_POOL_SIZE} nodes"
    if values[MIN_SIZE] > values[MAX_SIZE]:
        return (
            f"{where}: annotation {MIN_SIZE}={values[MIN_SIZE]} is above "
            f"{MAX_SIZE}={values[MAX_SIZE]}"
        )
    return Bounds(values[MIN_SIZE], values[MAX_SIZE])


def _failed(machine: Obj) -> bool:
    status = machine.get("status") or {}
    return status.get("phase") == "Failed" or bool(status.get("failureReason"))


def _node_of(machine: Obj) -> str | None:
    ref = (machine.get("status") or {}).get("nodeRef") or {}
    name = ref.get("name")
    return str(name) if name else None


def _marked(machine: Obj) -> bool:
    return DELETE_MACHINE in ((machine.get("metadata") or {}).get("annotations") or {})


def count_machines(replicas: int, machines: list[Obj]) -> tuple[tuple[str, ...], int]:
    """``(nodes, provisioning)`` of a pool from its desired replicas and Machines,
    by the rules in the module docstring."""
    live = [m for m in machines if not (m.get("metadata") or {}).get("deletionTimestamp")]
    surplus = max(0, len(live) - replicas)
    kept: list[Obj] = []
    for m in sorted(live, key=lambda m: not _marked(m)):
        if surplus and _marked(m):
            surplus -= 1
            continue
        kept.append(m)
    nodes = sorted(n for m in kept if (n := _node_of(m)) is not None)
    waiting = sum(1 for m in kept if _node_of(m) is None and not _failed(m))
    return tuple(nodes), waiting + max(0, replicas - len(live))


class ClusterAPIProvider:
    """``NodePoolProvider`` over the ``Kube`` protocol: MachineDeployments in
    ``namespace`` are the pools."""

    name = "clusterapi"

    def __init__(
        self, kube: Kube, namespace: str, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.clock = clock
        self._refusals: dict[str, str] = {}
        self._uids: dict[str, str] = {}
        self._bad_shapes: set[str] = set()

    async def pools(self) -> list[Pool]:
        """The autoscalable pools, by name. MachineDeployments without valid bounds
        are left out; ``refusal(name)`` says why."""
        mds, machines = await asyncio.gather(self._list(MACHINE_DEPLOYMENTS), self._list(MACHINES))
        by_deployment: dict[str, list[Obj]] = {}
        for m in machines:
            owner = ((m.get("metadata") or {}).get("labels") or {}).get(DEPLOYMENT_LABEL)
            if owner:
                by_deployment.setdefault(str(owner), []).append(m)
        refusals: dict[str, str] = {}
        scalable: list[tuple[str, Bounds]] = []
        for md in mds:
            meta = md.get("metadata") or {}
            name = str(meta.get("name", ""))
            self._uids[name] = str(meta.get("uid", ""))
            bounds = read_bounds(md)
            if isinstance(bounds, str):
                refusals[name] = bounds
                notes = meta.get("annotations") or {}
                if self._refusals.get(name) != bounds and MIN_SIZE in notes and MAX_SIZE in notes:
                    # Declared but unreadable: said once (again when it changes).
                    log.warning("%s; the pool is not autoscaled until it is fixed", bounds)
            else:
                scalable.append((name, bounds))
        self._refusals = refusals
        shapes = {str((md.get("metadata") or {}).get("name", "")): self._shape(md) for md in mds}
        read = await asyncio.gather(*(self._replicas(name) for name, _ in scalable))
        for (name, _), got in zip(scalable, read, strict=True):
            if isinstance(got, str):
                refusals[name] = got
        scales = [got for got in read if not isinstance(got, str)]
        scalable = [
            (name, b)
            for (name, b), got in zip(scalable, read, strict=True)
            if not isinstance(got, str)
        ]
        counted = {
            name: count_machines(replicas, by_deployment.get(name, []))
            for (name, _), replicas in zip(scalable, scales, strict=True)
        }
        # A pool at 0 nodes whose MachineDeployment declares no shape may declare it
        # on its MachineSet (the cluster-autoscaler reads either): one more list,
        # only then.
        if any(not counted[name][0] and shapes.get(name) is None for name, _ in scalable):
            shapes.update(await self._set_shapes(shapes))
        out: list[Pool] = []
        for (name, bounds), replicas in zip(scalable, scales, strict=True):
            nodes, provisioning = counted[name]
            out.append(
                Pool(
                    name,
                    bounds.min_size,
                    bounds.max_size,
                    replicas,
                    nodes,
                    provisioning,
                    shapes.get(name),
                )
            )
        return sorted(out, key=lambda p: p.name)

    def _shape(self, obj: Obj) -> NodeShape | None:
        """The object's declared node shape; an unreadable one is logged (once per
        object and problem) and counts as undeclared."""
        try:
            return read_shape(obj)
        except ValueError as e:
            if str(e) not in self._bad_shapes:
                if len(self._bad_shapes) >= 1000:  # bounded: a new problem logs again
                    self._bad_shapes.clear()
                self._bad_shapes.add(str(e))
                log.warning("%s; the pool cannot be scaled from zero until it is fixed", e)
            return None

    async def _set_shapes(self, known: Mapping[str, NodeShape | None]) -> dict[str, NodeShape]:
        """Shapes from the MachineSets of the pools that declare none themselves: the
        newest MachineSet of a pool that declares one."""
        found: dict[str, tuple[str, NodeShape]] = {}
        for ms in await self._list(MACHINE_SETS):
            meta = ms.get("metadata") or {}
            pool = str((meta.get("labels") or {}).get(DEPLOYMENT_LABEL) or "")
            if not pool or known.get(pool) is not None:
                continue
            shape = self._shape(ms)
            stamp = str(meta.get("creationTimestamp") or "")
            if shape is not None and (pool not in found or stamp > found[pool][0]):
                found[pool] = (stamp, shape)
        return {pool: shape for pool, (_, shape) in found.items()}

    def refusal(self, pool: str) -> str | None:
        """Why the last ``pools()`` left ``pool`` out (None if it did not see it)."""
        return self._refusals.get(pool)

    def event_object(self, pool: str) -> Obj:
        """The MachineDeployment as far as an Event about it needs (kind, apiVersion,
        namespace, name, and the uid the last ``pools()`` saw), without reading it."""
        meta: Obj = {"name": pool, "namespace": self.namespace}
        if self._uids.get(pool):
            meta["uid"] = self._uids[pool]
        return {"apiVersion": API_VERSION, "kind": "MachineDeployment", "metadata": meta}

    async def set_replicas(self, pool: str, replicas: int) -> None:
        """Sets the pool's replicas through the scale subresource, after checking
        the MachineDeployment's bounds once more (they may have changed since the
        caller read them): ``PoolRefused`` outside them."""
        bounds = await self._bounds(pool)
        if not bounds.min_size <= replicas <= bounds.max_size:
            raise PoolRefused(
                f"MachineDeployment {self.namespace}/{pool}: {replicas} replicas is outside "
                f"its bounds {bounds.min_size}..{bounds.max_size} ({MIN_SIZE}, {MAX_SIZE})"
            )
        await self.kube.patch_scale(
            CAPI_GROUP, CAPI_VERSION, self.namespace, MACHINE_DEPLOYMENTS, pool, replicas
        )

    async def mark_for_deletion(self, pool: str, node: str) -> None:
        """Annotates the Machine whose nodeRef is ``node`` with
        ``cluster.x-k8s.io/delete-machine`` (the time, RFC 3339), so that the next
        replica decrease removes that Machine and no other."""
        await self._bounds(pool)
        machines = await self._list(MACHINES, f"{DEPLOYMENT_LABEL}={pool}")
        for m in machines:
            if _node_of(m) == node:
                name = str((m.get("metadata") or {}).get("name", ""))
                stamp = datetime.fromtimestamp(self.clock(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                await self.kube.patch_custom(
                    CAPI_GROUP,
                    CAPI_VERSION,
                    self.namespace,
                    MACHINES,
                    name,
                    {"metadata": {"annotations": {DELETE_MACHINE: stamp}}},
                )
                return
        names = sorted(str((m.get("metadata") or {}).get("name")) for m in machines)
        raise PoolRefused(
            f"MachineDeployment {self.namespace}/{pool} has no Machine whose nodeRef is "
            f"node {node!r} (Machines labelled {DEPLOYMENT_LABEL}={pool}: "
            f"{', '.join(names) or 'none'})"
        )

    async def _bounds(self, pool: str) -> Bounds:
        md = await self.kube.get_custom(
            CAPI_GROUP, CAPI_VERSION, self.namespace, MACHINE_DEPLOYMENTS, pool
        )
        bounds = read_bounds(md)
        if isinstance(bounds, str):
            raise PoolRefused(bounds)
        return bounds

    async def _list(self, plural: str, selector: str | None = None) -> list[Obj]:
        return await self.kube.list_custom(
            CAPI_GROUP, CAPI_VERSION, self.namespace, plural, label_selector=selector
        )

    async def _replicas(self, pool: str) -> int | str:
        """The pool's replicas, or why they cannot be read (that pool only)."""
        scale = await self.kube.get_scale(
            CAPI_GROUP, CAPI_VERSION, self.namespace, MACHINE_DEPLOYMENTS, pool
        )
        spec = scale.get("spec")
        value = spec.get("replicas") if isinstance(spec, Mapping) else None
        try:
            return whole(value or 0, f"MachineDeployment {self.namespace}/{pool} scale replicas")
        except ClusterValueError as e:
            return f"{e}; a pool whose size is unknown is not scaled"


__all__ = [
    "DELETE_MACHINE",
    "DEPLOYMENT_LABEL",
    "MAX_SIZE",
    "MIN_SIZE",
    "Bounds",
    "ClusterAPIProvider",
    "PoolRefused",
    "count_machines",
    "read_bounds",
]
