"""``migrate_jobs``: taint a node so that nothing new lands on it, then evict the
device-using pods, so that their controllers (Job, JobSet, training operators)
start them again elsewhere.

This is the answer to a device that has failed: its jobs are already broken or
about to be, and waiting helps nobody. Unlike ``drain`` it leaves pods that use no
accelerator where they are. With a ``device`` target and ``deviceOnly: true`` only
the pods that hold the failed device are evicted (an ECC burst on one GPU need not
stop the seven jobs beside it); the taint is still the node's, because Kubernetes
cannot taint a device. A rule's ``recover`` block removes the taint.

Execution: the taint goes on first, in the same conditional write as the
``accel-fleet.io/remediation`` entry (phase ``migrating``), so the scheduler
keeps replacements off the node from then on. Then the pods are evicted through
the Eviction API (PodDisruptionBudgets are honoured: a refusal is retried until
``drainTimeout``). A pod owned by a Job, JobSet, StatefulSet or ReplicaSet is
recreated elsewhere by its owner. A bare pod has no owner to do that, so it is
recreated here, and never runs twice: its spec is kept in the node annotation
``accel-fleet.io/bare-pods`` first, then it is evicted, and only once it is gone
is the replacement created (the same spec but for ``nodeName``, a required node
affinity that excludes the failed node, a name derived from the original's uid)
and the record removed. A refused eviction leaves the original as the one copy;
a controller that dies in between finishes from the record when it resumes
(``autoscaler/actions/ops/barepods.py`` walks through every cut point). A bare pod
whose spec would take the node's annotations past Kubernetes' 256 KiB is left in
place, and the outcome says so.

With ``deviceOnly`` the pods holding the device come from the exporter's
``accel_device_pod_info`` (the kubelet's assignment). When that is unknown (no
series for the device, a failed query, no source) nothing is evicted and nothing
is tainted: the outcome is ``skipped`` with ``unknown holders`` and the reason, as
missing data must never act more widely than known data would. Phase
``migrated`` (or ``migrate-incomplete``; it stays ``migrating``, to be resumed,
while a bare pod's replacement waits for its original to terminate). Events:
``MigrationStarted`` and ``Migrated``/``MigrationIncomplete`` on the node,
``Evicted`` on each pod, ``Recreated`` on each bare pod's replacement.

Dynamic Resource Allocation: a pod that got its devices through ResourceClaims is
a device pod like one that requests ``nvidia.com/gpu``: the node-wide migration
reads the claims of the node's pods (one list per namespace) and moves every pod
whose claims hold an accelerator, or whose claims cannot be read (their devices
are unknown, and the issue's rule is that a pod with claims uses devices); a pod
whose claims all hold something else (a network card) stays. With ``deviceOnly``
the exporter names the pods of a claim-allocated device as for any other
(``accel_device_pod_info{claim=...}``); a claim shared by several pods
(``status.reservedFor``) moves all of them, as all of them hold the device.

Gangs: a pod that belongs to a gang (a JobSet, TrainJob, PyTorchJob, MPIJob or
Volcano Job, or pods sharing ``accel-fleet.io/gang``) is never evicted alone. Once
the taint is on, each gang with a chosen member on the node restarts once, the way
its operator expects (``autoscaler/actions/ops/gangs.py``), and the rest of the pods
are evicted as above. A gang that cannot be restarted (a JobSet with no restart
left) stays, and the outcome is ``partial`` with the reason.

Targets: ``node``, ``device`` (acts on the device's node).

Parameters:

================  ===========================================  ===========================
``taint``         taint to set first (``key=value:Effect``)    ``accel-fleet.io/faulty=``
                                                               ``true:NoSchedule``
``drainTimeout``  how long to keep evicting (duration, > 0)    ``10m``
``deviceOnly``    evict only pods holding the target device;   ``false``
                  needs target ``device``; unknown holders
                  evict nothing
================  ===========================================  ===========================

The move itself is ``autoscaler/actions/ops/migrate.py``, where ``reset_devices`` and
``reboot_node`` find it too; this file is the action: its parameters and its undo.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autoscaler.actions.base import (
    ActionSpec,
    ParamProblem,
    ParamReader,
    param_keys,
    read_taint,
    to_params,
)
from autoscaler.actions.context import ActionContext, Outcome
from autoscaler.actions.ops.migrate import ACTION, MigrateJobsParams, migrate
from autoscaler.actions.ops.nodes import undo
from autoscaler.actions.ops.unknown import answering_unknown
from autoscaler.decision import Decision

# The name the work in ops/migrate.py gives its Events.
NAME = ACTION
TARGETS = ("node", "device")
DEFAULTS = MigrateJobsParams()


def validate(raw: Mapping[str, Any]) -> tuple[dict[str, Any], list[ParamProblem]]:
    r = ParamReader(NAME, raw, param_keys(MigrateJobsParams))
    params = MigrateJobsParams(
        taint=read_taint(r, "taint", DEFAULTS.taint),
        drain_timeout=r.duration("drainTimeout", DEFAULTS.drain_timeout, positive=True),
        device_only=r.boolean("deviceOnly", DEFAULTS.device_only),
    )
    return to_params(params), r.problems


def check_target(params: Mapping[str, Any], target: str) -> list[ParamProblem]:
    if params.get("deviceOnly") and target != "device":
        return [ParamProblem("deviceOnly", f"needs target device; this rule's target is {target}")]
    return []


async def execute(ctx: ActionContext, decision: Decision) -> Outcome:
    if decision.kind == "recover":
        return await undo(ctx, decision)
    return await migrate(ctx, decision)


SPEC = answering_unknown(
    ActionSpec(
        NAME,
        TARGETS,
        reversible=True,
        params_type=MigrateJobsParams,
        validate=validate,
        check_target=check_target,
        execute=execute,
    )
)
