"""The controller's reads of Dynamic Resource Allocation (``resource.k8s.io/v1``):
ResourceClaims, ResourceClaimTemplates, DeviceClasses and ResourceSlices, listed
through the ``Kube`` protocol and turned into one ``accel_common.dra.DraState``.

Why a module of its own: the cluster-state collector reads them every cycle for the
whole cluster, and migrate_jobs and rebalance read them for the few namespaces of
the pods they weigh; both must degrade the same way. A cluster that does not serve
the API has no DRA; a controller that may not read it (403) says so once and
treats what claims hold as unknown, never as "no device".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from typing import Any

from accel_common.dra import EMPTY_STATE, DraState, pod_claims
from accel_common.logs import Once
from autoscaler.kube.errors import Forbidden, NotFound
from autoscaler.kube.protocol import Kube, Obj

log = logging.getLogger(__name__)

# DRA reads the controller could not make (403: the Role lacks the verbs; the API
# not served answers 404 and means "no DRA"), logged once each, not every cycle.
_DRA_REPORTED = Once()


async def read_dra(
    kube: Kube,
    pods: Sequence[Obj] = (),
    *,
    namespaces: Iterable[str] | None = None,
    slices: bool = True,
    classes: bool = True,
) -> DraState | None:
    """The cluster's DRA objects as one ``DraState``: ResourceClaims (of every
    namespace, or of ``namespaces``), DeviceClasses (unless ``classes`` is false:
    only unallocated claims need them), ResourceSlices (unless ``slices`` is false)
    and, only when one of ``pods`` waits for a claim still to be
    generated from a template, ResourceClaimTemplates. A cluster that does not serve
    ``resource.k8s.io/v1`` has no DRA: ``EMPTY_STATE``. None when the controller may
    not read them (403, logged once): what claims hold is then unknown, and their
    pods count as device pods. Other API errors propagate."""

    async def listed(what: str, call: Any) -> list[Obj] | None:
        try:
            result: list[Obj] = await call
        except NotFound:
            return []
        except Forbidden as e:
            if _DRA_REPORTED.first(what):
                log.warning(
                    "cannot list %s (%s): pods with ResourceClaims count as device pods, "
                    "their devices unknown; grant list on resource.k8s.io/%s (deploy/base/"
                    "rbac.yaml)",
                    what,
                    e,
                    what,
                )
            return None
        return result

    async def none() -> list[Obj]:
        return []

    if namespaces is None:
        claim_lists = [listed("resourceclaims", kube.list_resource_claims())]
    else:
        claim_lists = [
            listed("resourceclaims", kube.list_resource_claims(ns))
            for ns in sorted(set(namespaces))
        ]
    needs_templates = any(not r.claim for p in pods for r in pod_claims(p))
    found = await asyncio.gather(
        listed("deviceclasses", kube.list_device_classes()) if classes else none(),
        listed("resourceslices", kube.list_resource_slices()) if slices else none(),
        listed("resourceclaimtemplates", kube.list_resource_claim_templates())
        if needs_templates
        else none(),
        *claim_lists,
    )
    class_list, slice_list, templates, *claims = found
    if any(c is None for c in claims):
        return None
    everything = [c for listing in claims for c in listing or ()]
    if not (everything or slice_list or class_list or templates):
        return EMPTY_STATE
    return DraState.build(everything, templates or (), class_list or (), slice_list or ())


__all__ = ["read_dra"]
