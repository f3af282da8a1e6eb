"""The agent loop: read the Node, let every task reconcile, merge-patch the answer.

The loop is the only part that talks to the API server; tasks get the Node as a plain
dict and return a NodePatch. One bad task (a bug, a bad annotation it did not catch)
is logged and skipped for that round, never the end of the agent: an agent that exits
leaves a node whose requests nobody answers.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from nodeagent import reboot, reset
from nodeagent.tasks import AgentContext, NodePatch, Task

log = logging.getLogger(__name__)

# The tasks every agent runs, in order. RESET adds its tasks with one line each.
TASKS: list[Task] = [
    reset.TASK,
    reboot.TASK,
]


def start_tasks(tasks: list[Task], ctx: AgentContext) -> NodePatch:
    """Calls every task's ``start`` once; a task that raises is logged and skipped."""
    patch = NodePatch()
    for task in tasks:
        try:
            patch.update(task.start(ctx))
        except Exception:
            log.exception("task %s failed to start; it still reconciles", task.name)
    return patch


def reconcile_tasks(tasks: list[Task], node: Mapping[str, Any], ctx: AgentContext) -> NodePatch:
    """One round: every task's ``reconcile`` on the same Node, patches merged in order."""
    patch = NodePatch()
    for task in tasks:
        try:
            patch.update(task.reconcile(node, ctx))
        except Exception:
            log.exception("task %s failed this round; retrying next interval", task.name)
    return patch
