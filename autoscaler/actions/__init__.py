"""Actions: what a rule does to the cluster. The registry, one line per action, each
implemented in its own file with its parameters, defaults and validation beside it
(the descheduler's habit), so adding one touches nothing else but this list.

Each file holds both halves of its action: the parameters (validated when the rule
set loads, which is why the actions sit below the rule set and the engine in the
import layers) and ``execute``, which acts through the ``Kube`` wrapper only. The
parameter tables on the docs' actions page are generated from these specs.
"""

from __future__ import annotations

from autoscaler.actions import (
    cordon,
    drain,
    mark_for_return,
    migrate_jobs,
    rebalance,
    reboot_node,
    repartition,
    replace_machine,
    requeue_job,
    reset_devices,
    scale_node_pool,
    taint,
    uncordon,
)
from autoscaler.actions.base import ActionSpec, ParamProblem, from_params

ACTIONS: dict[str, ActionSpec] = {
    "cordon": cordon.SPEC,
    "taint": taint.SPEC,
    "drain": drain.SPEC,
    "migrate_jobs": migrate_jobs.SPEC,
    "requeue_job": requeue_job.SPEC,
    "rebalance": rebalance.SPEC,
    "scale_node_pool": scale_node_pool.SPEC,
    "replace_machine": replace_machine.SPEC,
    "repartition": repartition.SPEC,
    "reset_devices": reset_devices.SPEC,
    "reboot_node": reboot_node.SPEC,
    "mark_for_return": mark_for_return.SPEC,
    "uncordon": uncordon.SPEC,
}

__all__ = ["ACTIONS", "ActionSpec", "ParamProblem", "from_params"]
