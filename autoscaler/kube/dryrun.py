"""``DryRunKube``: the ``Kube`` of ``--dry-run``, around any other ``Kube``.

Why a module of its own: dry-run runs the same action code as a real run (the
descheduler's habit), so it is a wrapper at the ``Kube`` seam, not a flag the
actions test. Reads pass through; writes are recorded and logged, and answered
with what they would have produced (a patch: the object as the merge would leave
it). It knows nothing of the ``kubernetes`` client: when the inner ``Kube`` says
``dry_run`` (a ``ClientKube`` built with ``dry_run=True``) the writes also go to
the server with ``dryRun=All``, so its validation, conflicts and PDB refusals still
answer. Lease writes pass through for real: leader election is how replicas agree
who acts, and a dry-run replica must still hold the Lease.

Names are checked as ``ClientKube`` checks them (``autoscaler/kube/names.py``)
before a write is recorded, so a dry run never reports that it "would patch node
n1/status" when the real run would refuse it, whatever ``Kube`` is inside.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

from autoscaler.kube import names
from autoscaler.kube.jsonmerge import copy_obj, merge_patch
from autoscaler.kube.protocol import CountsRequests, Kube, Obj, PatchesStatus, ServerDryRun

log = logging.getLogger(__name__)


class DryRunKube:
    """Reads pass through to ``inner``; writes are recorded in ``writes`` as
    (method, arguments), logged, and answered with a plausible result (a patch: the
    object as the merge would leave it). When ``inner`` was built with
    ``dry_run=True`` the write also goes to the server with ``dryRun=All``, so the
    server's validation, conflicts and PDB refusals still answer. Lease writes pass
    through for real: leader election is not an action."""

    def __init__(self, inner: Kube) -> None:
        self.inner = inner
        self.writes: list[tuple[str, dict[str, Any]]] = []

    @property
    def request_counts(self) -> Counter[tuple[str, str, int]] | None:
        """The inner client's counts, for ``/metrics`` (None for a non-client inner)."""
        return self.inner.request_counts if isinstance(self.inner, CountsRequests) else None

    @property
    def _server_side(self) -> bool:
        return isinstance(self.inner, ServerDryRun) and self.inner.dry_run

    def _record(self, method: str, what: str, **args: Any) -> None:
        self.writes.append((method, args))
        log.info("dry-run: would %s", what)

    async def _patched(self, read: Callable[[], Any], patch: Obj, send: Callable[[], Any]) -> Obj:
        if self._server_side:
            result: Obj = await send()
            return result
        current = await read()
        patched: Obj = merge_patch(current, patch)
        return patched

    # -- reads

    async def get_node(self, name: str) -> Obj:
        return await self.inner.get_node(name)

    async def list_nodes(self, label_selector: str | None = None) -> list[Obj]:
        return await self.inner.list_nodes(label_selector)

    async def list_pods(
        self,
        *,
        namespace: str | None = None,
        node: str | None = None,
        label_selector: str | None = None,
    ) -> list[Obj]:
        return await self.inner.list_pods(
            namespace=namespace, node=node, label_selector=label_selector
        )

    async def get_pod(self, namespace: str, name: str) -> Obj:
        return await self.inner.get_pod(namespace, name)

    async def get_job(self, namespace: str, name: str) -> Obj:
        return await self.inner.get_job(namespace, name)

    async def get_lease(self, namespace: str, name: str) -> Obj:
        return await self.inner.get_lease(namespace, name)

    async def get_configmap(self, namespace: str, name: str) -> Obj:
        return await self.inner.get_configmap(namespace, name)

    async def get_custom(
        self, group: str, version: str, namespace: str, plural: str, name: str
    ) -> Obj:
        return await self.inner.get_custom(group, version, namespace, plural, name)

    async def list_custom(
        self,
        group: str,
        version: str,
        namespace: str,
        plural: str,
        label_selector: str | None = None,
    ) -> list[Obj]:
        return await self.inner.list_custom(group, version, namespace, plural, label_selector)

    async def get_scale(
        self, group: str, version: str, namespace: str, plural: str, name: str
    ) -> Obj:
        return await self.inner.get_scale(group, version, namespace, plural, name)

    async def list_resource_claims(self, namespace: str | None = None) -> list[Obj]:
        return await self.inner.list_resource_claims(namespace)

    async def get_resource_claim(self, namespace: str, name: str) -> Obj:
        return await self.inner.get_resource_claim(namespace, name)

    async def list_resource_claim_templates(self, namespace: str | None = None) -> list[Obj]:
        return await self.inner.list_resource_claim_templates(namespace)

    async def list_resource_slices(self, node: str | None = None) -> list[Obj]:
        return await self.inner.list_resource_slices(node)

    async def list_device_classes(self) -> list[Obj]:
        return await self.inner.list_device_classes()

    # -- writes

    async def patch_node(self, name: str, patch: Obj) -> Obj:
        names.check("node", name)
        self._record(
            "patch_node", f"patch node {name}: {json.dumps(patch)}", name=name, patch=patch
        )
        return await self._patched(
            lambda: self.inner.get_node(name), patch, lambda: self.inner.patch_node(name, patch)
        )

    async def patch_pod(self, namespace: str, name: str, patch: Obj) -> Obj:
        _named(namespace, "pod", name)
        self._record(
            "patch_pod",
            f"patch pod {namespace}/{name}: {json.dumps(patch)}",
            namespace=namespace,
            name=name,
            patch=patch,
        )
        return await self._patched(
            lambda: self.inner.get_pod(namespace, name),
            patch,
            lambda: self.inner.patch_pod(namespace, name, patch),
        )

    async def patch_job(self, namespace: str, name: str, patch: Obj) -> Obj:
        _named(namespace, "job", name)
        self._record(
            "patch_job",
            f"patch job {namespace}/{name}: {json.dumps(patch)}",
            namespace=namespace,
            name=name,
            patch=patch,
        )
        return await self._patched(
            lambda: self.inner.get_job(namespace, name),
            patch,
            lambda: self.inner.patch_job(namespace, name, patch),
        )

    async def patch_custom(
        self, group: str, version: str, namespace: str, plural: str, name: str, patch: Obj
    ) -> Obj:
        _named(namespace, plural.removesuffix("s"), name)
        self._record(
            "patch_custom",
            f"patch {plural}.{group} {namespace}/{name}: {json.dumps(patch)}",
            group=group,
            version=version,
            namespace=namespace,
            plural=plural,
            name=name,
            patch=patch,
        )
        return await self._patched(
            lambda: self.inner.get_custom(group, version, namespace, plural, name),
            patch,
            lambda: self.inner.patch_custom(group, version, namespace, plural, name, patch),
        )

    async def patch_custom_status(
        self, group: str, version: str, namespace: str, plural: str, name: str, patch: Obj
    ) -> Obj:
        _named(namespace, plural.removesuffix("s"), name)
        self._record(
            "patch_custom_status",
            f"patch {plural}.{group} {namespace}/{name} status: {json.dumps(patch)}",
            group=group,
            version=version,
            namespace=namespace,
            plural=plural,
            name=name,
            patch=patch,
        )
        inner = self.inner
        if self._server_side and isinstance(inner, PatchesStatus):
            sent: Obj = await inner.patch_custom_status(
                group, version, namespace, plural, name, patch
            )
            return sent
        patched: Obj = merge_patch(
            await inner.get_custom(group, version, namespace, plural, name), patch
        )
        return patched

    async def patch_scale(
        self, group: str, version: str, namespace: str, plural: str, name: str, replicas: int
    ) -> Obj:
        _named(namespace, plural.removesuffix("s"), name)
        self._record(
            "patch_scale",
            f"scale {plural}.{group} {namespace}/{name} to {replicas} replicas",
            group=group,
            version=version,
            namespace=namespace,
            plural=plural,
            name=name,
            replicas=replicas,
        )
        return await self._patched(
            lambda: self.inner.get_scale(group, version, namespace, plural, name),
            {"spec": {"replicas": replicas}},
            lambda: self.inner.patch_scale(group, version, namespace, plural, name, replicas),
        )

    async def create_pod(self, namespace: str, body: Obj) -> Obj:
        names.check("namespace", namespace)
        name = body.get("metadata", {}).get("name", "")
        self._record("create_pod", f"create pod {namespace}/{name}", namespace=namespace, body=body)
        if self._server_side:
            return await self.inner.create_pod(namespace, body)
        return _as_created(namespace, body)

    async def create_custom(
        self, group: str, version: str, namespace: str, plural: str, body: Obj
    ) -> Obj:
        names.check("namespace", namespace)
        name = body.get("metadata", {}).get("name", "")
        self._record(
            "create_custom",
            f"create {plural}.{group} {namespace}/{name}: {json.dumps(body, sort_keys=True)}",
            group=group,
            version=version,
            namespace=namespace,
            plural=plural,
            body=body,
        )
        if self._server_side:
            return await self.inner.create_custom(group, version, namespace, plural, body)
        return _as_created(namespace, body)

    async def delete_custom(
        self,
        group: str,
        version: str,
        namespace: str,
        plural: str,
        name: str,
        *,
        uid: str | None = None,
    ) -> None:
        _named(namespace, plural.removesuffix("s"), name)
        self._record(
            "delete_custom",
            f"delete {plural}.{group} {namespace}/{name}",
            group=group,
            version=version,
            namespace=namespace,
            plural=plural,
            name=name,
            uid=uid,
        )
        if self._server_side:
            await self.inner.delete_custom(group, version, namespace, plural, name, uid=uid)

    async def create_event(self, namespace: str, body: Obj) -> Obj:
        names.check("namespace", namespace)
        reason = body.get("reason", "")
        involved = body.get("involvedObject") or {}
        self._record(
            "create_event",
            f"record event {reason} on {involved.get('kind', '')} {involved.get('name', '')}",
            namespace=namespace,
            body=body,
        )
        if self._server_side:
            return await self.inner.create_event(namespace, body)
        return _as_created(namespace, body)

    async def create_configmap(self, namespace: str, body: Obj) -> Obj:
        name = body.get("metadata", {}).get("name", "")
        _named(namespace, "configmap", name)
        self._record(
            "create_configmap",
            f"create configmap {namespace}/{name}",
            namespace=namespace,
            body=body,
        )
        if self._server_side:
            return await self.inner.create_configmap(namespace, body)
        return _as_created(namespace, body)

    async def replace_configmap(self, namespace: str, name: str, body: Obj) -> Obj:
        _named(namespace, "configmap", name)
        self._record(
            "replace_configmap",
            f"replace configmap {namespace}/{name}",
            namespace=namespace,
            name=name,
            body=body,
        )
        if self._server_side:
            return await self.inner.replace_configmap(namespace, name, body)
        return _as_created(namespace, body)

    async def delete_pod(
        self,
        namespace: str,
        name: str,
        *,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
    ) -> None:
        _named(namespace, "pod", name)
        self._record(
            "delete_pod",
            f"delete pod {namespace}/{name}",
            namespace=namespace,
            name=name,
            grace_period_seconds=grace_period_seconds,
            uid=uid,
        )
        if self._server_side:
            await self.inner.delete_pod(
                namespace, name, grace_period_seconds=grace_period_seconds, uid=uid
            )

    async def evict_pod(
        self,
        namespace: str,
        name: str,
        *,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
    ) -> None:
        _named(namespace, "pod", name)
        self._record(
            "evict_pod",
            f"evict {namespace}/{name}",
            namespace=namespace,
            name=name,
            grace_period_seconds=grace_period_seconds,
            uid=uid,
        )
        if self._server_side:
            await self.inner.evict_pod(
                namespace, name, grace_period_seconds=grace_period_seconds, uid=uid
            )

    # -- leases: for real (see the class docstring)

    async def create_lease(self, namespace: str, body: Obj) -> Obj:
        return await self.inner.create_lease(namespace, body)

    async def replace_lease(self, namespace: str, name: str, body: Obj) -> Obj:
        return await self.inner.replace_lease(namespace, name, body)


def _named(namespace: str, kind: str, name: str) -> None:
    names.check("namespace", namespace)
    names.check(kind, name)


def _as_created(namespace: str, body: Obj) -> Obj:
    obj: Obj = copy_obj(body)
    meta = obj.setdefault("metadata", {})
    meta.setdefault("namespace", namespace)
    if not meta.get("name") and meta.get("generateName"):
        meta["name"] = meta["generateName"] + "dryrun"
    return obj


__all__ = ["DryRunKube"]
