"""``migrate_jobs``: taint a node so that nothing new lands on it, then evict the
device-using pods, so that their controllers (Job, JobSet, training operators)
start them again elsewhere.

This is the answer to a device that has failed: its jobs are already broken or
about to be, and waiting helps nobody. Unlike ``drain`` it leaves pods that use no
accelerator where they are. With a ``device`` target and ``deviceOnly: true`` only
the pods that hold the failed device are evicted (an ECC burst on one GPU need not
stop the seven jobs beside it); the taint is still the node's, because Kubernetes
cannot taint a device. A rule's ``recover`` block removes the taint.

Targets: ``node``, ``device`` (acts on the device's node).

Parameters:

================  ===========================================  ===========================
``taint``         taint to set first (``key=value:Effect``)    ``accel-fleet.io/faulty=``
                                                               ``true:NoSchedule``
``drainTimeout``  how long to keep evicting (duration, > 0)    ``10m``
``deviceOnly``    evict only pods holding the target device;   ``false``
                  needs target ``device``
================  ===========================================  ===========================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autoscaler.actions.base import (
    ActionSpec,
    ParamProblem,
    ParamReader,
    param,
    param_keys,
    to_params,
)
from autoscaler.actions.drain import DEFAULT_DRAIN_TIMEOUT
from autoscaler.actions.taint import DEFAULT_TAINT, read_taint

NAME = "migrate_jobs"
TARGETS = ("node", "device")


@dataclass(frozen=True)
class MigrateJobsParams:
    taint: str = param("taint", DEFAULT_TAINT)
    drain_timeout: float = param("drainTimeout", DEFAULT_DRAIN_TIMEOUT)
    device_only: bool = param("deviceOnly", False)


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


SPEC = ActionSpec(
    NAME,
    TARGETS,
    reversible=True,
    params_type=MigrateJobsParams,
    validate=validate,
    check_target=check_target,
)
