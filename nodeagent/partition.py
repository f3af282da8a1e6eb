"""The partition task: brings the node's devices to the layout its label asks for.

The channel (docs/agent.md): PARTITION_LAYOUT_LABEL on the Node is the desired
layout's name; the agent answers in PARTITION_STATE_ANNOTATION (JSON: layout, state
applied/refused/failed, message, devices, at) and, once applied, with
PARTITION_APPLIED_LABEL=<layout>.

Why it is built this way:

* The hardware is compared with the layout before anything else. A node that
  already has the layout is "applied" even while pods run on it, and nothing is
  created, destroyed or written: applying the applied layout changes nothing.
* A node whose devices must change is refused while any container holds a device
  (the kubelet's PodResources), and the refusal names the pods: repartitioning under
  a running job would kill it. The task re-checks every round, so the layout is
  applied as soon as the last device pod has gone (the repartition action drains).
* A failure (a profile the GPU lacks, a mode left pending) is reported with its
  reason and retried only after ``retry_seconds``: destroying and rebuilding MIG
  instances every few seconds would not fix a pending mode, and would hide it.
* The task only returns a NodePatch when the answer differs from what the Node
  already says, so a steady node is never patched.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from accel_common import clusterjson
from accel_common.agentsupport import can_partition, partition_unsupported
from accel_common.names import (
    PARTITION_APPLIED_LABEL,
    PARTITION_LAYOUT_LABEL,
    PARTITION_STATE_ANNOTATION,
)
from nodeagent import amdpart, mig
from nodeagent.amdpart import Writer, write_sysfs
from nodeagent.channel import cut
from nodeagent.layouts import Layout
from nodeagent.mig import ApplyError
from nodeagent.tasks import AgentContext, NodePatch

log = logging.getLogger("accel_node_agent.partition")

APPLIED, REFUSED, FAILED = "applied", "refused", "failed"
RETRY_SECONDS = 300.0
MAX_NAMED_PODS = 5
# The state names a layout, a message and one line per device.
STATE_MAX_BYTES = 64 * 1024


def rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def read_state(node: Mapping[str, Any]) -> dict[str, Any]:
    """The node's PARTITION_STATE_ANNOTATION as a dict of its string fields; {} when
    absent or unreadable (``accel_common.clusterjson``: too deep, too large, not an
    object), which the next answer then replaces. Only strings are kept: the task
    compares ``layout``, ``state`` and ``message`` with its own, and a value of
    another type is as good as absent."""
    state = clusterjson.annotation_object(
        node, PARTITION_STATE_ANNOTATION, log=log, max_bytes=STATE_MAX_BYTES
    )
    if state is None:
        return {}
    return {k: v for k, v in state.items() if isinstance(v, str) or k == "devices"}


def label(node: Mapping[str, Any], key: str) -> str | None:
    """A label's value when it is a non-empty string of at most 63 characters (what
    the API server allows); None otherwise."""
    value = _labels(node).get(key)
    if not isinstance(value, str) or not value or len(value) > 63:
        return None
    return value


def _labels(node: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = node.get("metadata")
    found = meta.get("labels") if isinstance(meta, Mapping) else None
    return found if isinstance(found, Mapping) else {}


@dataclass
class PartitionTask:
    """The Task (nodeagent.tasks) that applies partition layouts."""

    layouts: dict[str, Layout]
    retry_seconds: float = RETRY_SECONDS
    writer: Writer = write_sysfs  # the amdgpu sysfs write; tests give a fake driver
    name: str = "partition"
    # (layout, state) of the last answer, for accel_partition_layout_info.
    last: tuple[str, str] | None = None
    _failed_at: dict[str, float] = field(default_factory=dict)

    def start(self, ctx: AgentContext) -> NodePatch:
        log.info("partition layouts known: %s", ", ".join(sorted(self.layouts)) or "none")
        return NodePatch()

    def reconcile(self, node: Mapping[str, Any], ctx: AgentContext) -> NodePatch:
        desired = label(node, PARTITION_LAYOUT_LABEL)
        state = read_state(node)
        if desired is None:
            applied = label(node, PARTITION_APPLIED_LABEL)
            self.last = (applied, APPLIED) if applied is not None else None
            return NodePatch()
        if state.get("layout") == desired and state.get("state") == FAILED:
            since = self._failed_at.get(desired)
            if since is not None and ctx.clock() - since < self.retry_seconds:
                self.last = (desired, FAILED)
                return NodePatch()
        layout = self.layouts.get(desired)
        if layout is None:
            known = ", ".join(sorted(self.layouts)) or "none"
            message = f"unknown layout {desired!r}: this agent's layouts file has {known}"
            return self._fail(node, ctx, desired, message)
        try:
            would_change = self._apply(layout, ctx, dry=True)[0]
            if would_change:
                refusal = self._refusal(ctx)
                if refusal:
                    return self._answer(node, ctx, desired, REFUSED, refusal)
            changed, devices = self._apply(layout, ctx, dry=False)
        except ApplyError as e:
            return self._fail(node, ctx, desired, str(e))
        except Exception as e:  # NVML errors, sysfs errors: the node keeps its agent
            log.exception("layout %s failed", desired)
            return self._fail(node, ctx, desired, f"{type(e).__name__}: {e}")
        self._failed_at.pop(desired, None)
        message = "layout applied" if changed else "layout already in place"
        if not changed and state.get("layout") == desired and state.get("state") == APPLIED:
            message = str(state.get("message") or message)  # nothing new to say
        return self._answer(node, ctx, desired, APPLIED, message, devices)

    # -- the parts ------------------------------------------------------------------

    def _apply(self, layout: Layout, ctx: AgentContext, dry: bool) -> tuple[bool, dict[str, str]]:
        # What the agent can partition is the vendor table's (accel_common.agentsupport),
        # which the controller's repartition reads too.
        refused = [k for k in layout.kinds if not can_partition(layout.vendor, k)]
        if refused:
            raise ApplyError(f"layout {layout.name}: {partition_unsupported(layout.vendor)}")
        if "compute" in layout.kinds:
            if dry:
                return amdpart.differs(ctx.sysfs_root, layout), {}
            return amdpart.apply(ctx.sysfs_root, layout, self.writer)
        if ctx.nvml is None:
            raise ApplyError(f"layout {layout.name} needs NVML, which this agent could not load")
        if dry:
            return mig.differs(ctx.nvml, layout), {}
        return mig.apply(ctx.nvml, layout)

    def _refusal(self, ctx: AgentContext) -> str:
        try:
            holders = ctx.holders()
        except Exception as e:
            return (
                f"cannot tell which pods hold devices ({type(e).__name__}: {e}); not repartitioning"
            )
        pods = sorted({f"{h.namespace}/{h.pod}" for h in holders})
        if not pods:
            return ""
        named = ", ".join(pods[:MAX_NAMED_PODS]) + (" ..." if len(pods) > MAX_NAMED_PODS else "")
        return (
            f"{len(pods)} pod(s) hold devices on this node ({named}); drain them (the "
            "repartition action does) and the layout is applied on the next round"
        )

    def _fail(
        self, node: Mapping[str, Any], ctx: AgentContext, layout: str, message: str
    ) -> NodePatch:
        self._failed_at[layout] = ctx.clock()
        patch = self._answer(node, ctx, layout, FAILED, message, force=True)
        # The devices may be half-way: the applied label would no longer be true.
        if _labels(node).get(PARTITION_APPLIED_LABEL) is not None:
            patch.labels[PARTITION_APPLIED_LABEL] = None
        return patch

    def _answer(
        self,
        node: Mapping[str, Any],
        ctx: AgentContext,
        layout: str,
        state: str,
        message: str,
        devices: dict[str, str] | None = None,
        *,
        force: bool = False,
    ) -> NodePatch:
        """The answer as a patch, empty when the Node already says it (``force``: a
        failure is said again with a new time, once per retry)."""
        self.last = (layout, state)
        if state != APPLIED:
            log.warning("layout %s %s: %s", layout, state, message)
        answer = {
            "layout": layout,
            "state": state,
            "message": cut(message),
            "devices": devices or {},
        }
        old = read_state(node)
        patch = NodePatch()
        if force or {k: old.get(k) for k in answer} != answer:
            answer["at"] = rfc3339(ctx.clock())
            patch.annotations[PARTITION_STATE_ANNOTATION] = json.dumps(answer, sort_keys=True)
        if state == APPLIED and _labels(node).get(PARTITION_APPLIED_LABEL) != layout:
            patch.labels[PARTITION_APPLIED_LABEL] = layout
        return patch
