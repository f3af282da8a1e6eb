"""The reboot task: reboots the node when the controller asks (``reboot_node``, method
``agent``) and says so on the Node, before and after.

The channel (docs/agent.md): REBOOT_REQUEST_ANNOTATION ``{"id", "requestedAt",
"by"}`` from the controller; REBOOT_STATUS_ANNOTATION ``{"id", "state": "rebooting" |
"done" | "failed", "bootID", "message", "at"}`` from this task.

Why it is built this way:

* **The boot id is the proof.** The agent writes "rebooting" with the current boot id
  (``/proc/sys/kernel/random/boot_id``, new at every boot) and reboots only once the
  Node shows it (the write succeeded). After the boot the agent starts again, finds "rebooting"
  with a boot id that is no longer the current one, and answers "done". Nothing else
  has to survive the reboot: the Node carries the state.
* **Once per id, claimed by one conditional write.** "done" and "failed" are final,
  whoever wrote them (the controller closes a request it gave up on with "failed").
  "rebooting" goes on the Node conditionally on the Node the agent read, so a request
  the controller closed meanwhile is a Conflict, read again and left alone; the
  reboot is asked for only after that write succeeded and the Node as written still
  shows it. "rebooting" with the *same* boot id means the host has not rebooted yet
  (an agent that restarted before it could reboot), so it is claimed again the same
  way and the reboot asked for again: that is not a second reboot, since none has
  happened. A host still on the same boot ``REBOOT_GRACE`` after the reboot was asked
  for answers "failed".
* **An unreadable request or status** (``nodeagent.channel``) is answered "failed"
  with ``"reason": "unreadable"``, and the node is not rebooted; the next request is
  served.
* **Production reboot** (``HostReboot``): ``systemctl reboot`` in the host's
  namespaces through ``nsenter -t 1`` (the agent's DaemonSet runs with hostPID and
  privileged), so systemd stops the node's services in order, the kubelet included,
  rather than a sysrq or ``reboot -f`` that would skip them. The call is bounded in
  time and its output in the message; systemd returns once the shutdown is queued.
"""

from __future__ import annotations

import json
import logging
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from accel_common.names import REBOOT_REQUEST_ANNOTATION, REBOOT_STATUS_ANNOTATION
from nodeagent.channel import (
    UNREADABLE,
    Request,
    Status,
    Unreadable,
    cut,
    read_request,
    read_status,
    unreadable_message,
)
from nodeagent.reset import FINAL, iso
from nodeagent.resetters import tail
from nodeagent.tasks import AgentContext, NodePatch, Work

log = logging.getLogger("accel_node_agent.reboot")

# How long after asking for the reboot the host may stay on the same boot.
REBOOT_GRACE = 600.0
HOST_REBOOT = (
    "nsenter",
    "--target",
    "1",
    "--mount",
    "--uts",
    "--ipc",
    "--net",
    "--pid",
    "--",
    "systemctl",
    "reboot",
)


class RebootError(RuntimeError):
    """The reboot could not be asked for; the message says why."""


class HostReboot:
    """The production ``ctx.reboot``: ``systemctl reboot`` on the host (module
    docstring). ``command`` replaces the whole command line (a test, or another init)."""

    def __init__(self, command: Sequence[str] = HOST_REBOOT, timeout: float = 60.0) -> None:
        self.command = tuple(command)
        self.timeout = timeout

    def __call__(self) -> None:
        shown = " ".join(self.command)
        try:
            done = subprocess.run(
                self.command,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=self.timeout,
                check=False,
            )
        except FileNotFoundError as e:
            raise RebootError(f"{self.command[0]} not found: {e}") from e
        except subprocess.TimeoutExpired as e:
            raise RebootError(f"{shown} did not return within {self.timeout:g}s") from e
        except OSError as e:
            raise RebootError(f"{shown} could not run: {e}") from e
        if done.returncode != 0:
            output = (done.stdout + done.stderr).decode("utf-8", "replace").strip()
            raise RebootError(f"{shown} exited {done.returncode}: {tail(output) or 'no output'}")


def read_boot_id(procfs: Path = Path("/proc")) -> str:
    """This boot's id, as the kernel gives it (the production ``ctx.boot_id``)."""
    return (procfs / "sys/kernel/random/boot_id").read_text().strip()


Answer = tuple[dict[str, Any], Work | None]
NOT_REBOOTING = "not rebooting"


class RebootTask:
    """See the module docstring."""

    name = "reboot"

    def __init__(self) -> None:
        # id -> ctx.clock() when this process asked for the reboot.
        self._asked: dict[str, float] = {}
        self._final: dict[str, dict[str, Any]] = {}

    def start(self, ctx: AgentContext) -> NodePatch:
        return NodePatch()

    def reconcile(self, node: Mapping[str, Any], ctx: AgentContext) -> NodePatch:
        request = read_request(node, REBOOT_REQUEST_ANNOTATION)
        if request is None:
            return NodePatch()
        status = read_status(node, REBOOT_STATUS_ANNOTATION)
        answered = self._answer(request, status, ctx)
        if answered is None:
            return NodePatch()
        answer, work = answered
        if work is None and _same(answer, status):
            return NodePatch()
        patch = NodePatch(
            annotations={REBOOT_STATUS_ANNOTATION: json.dumps(answer, sort_keys=True)}
        )
        if work is not None:
            patch.after.append(work)
        return patch

    def _answer(
        self, request: Request | Unreadable, status: Status | Unreadable | None, ctx: AgentContext
    ) -> Answer | None:
        if isinstance(request, Unreadable):
            if isinstance(status, Status) and status.id == request.id and status.state in FINAL:
                return None  # answered already, or closed by the controller
            return _unreadable(request.id, request, ctx), None
        rid = request.id
        if rid in self._final:
            return self._final[rid], None
        if isinstance(status, Unreadable):
            return self._finish(rid, _unreadable(rid, status, ctx)), None
        try:
            boot = ctx.boot_id()
            if not boot:
                raise ValueError("empty boot id")
        except Exception as e:
            failed = _status(
                rid, "failed", "", f"cannot read this boot's id ({e}); {NOT_REBOOTING}", ctx
            )
            return self._finish(rid, failed), None
        if status is None or status.id != rid:
            # The boot id goes on the Node first: it is what proves the reboot later.
            return self._claim(request, boot, f"rebooting node {ctx.node_name}", ctx)
        if status.state in FINAL:
            return None  # answered, or closed by the controller: never carried out
        before = status.boot_id
        if status.state != "rebooting" or not before:
            unexpected = (
                f"unexpected {REBOOT_STATUS_ANNOTATION}: state {status.state!r}, bootID {before!r}"
            )
            return self._finish(rid, _status(rid, "failed", boot, unexpected, ctx)), None
        if before != boot:
            return self._finish(
                rid, _status(rid, "done", boot, f"rebooted: boot id {before} -> {boot}", ctx)
            ), None
        asked = self._asked.get(rid)
        if asked is None:
            return self._claim(
                request,
                boot,
                f"rebooting node {ctx.node_name} (asked again by a restarted agent: boot "
                f"{boot} is still the one the reboot was asked on)",
                ctx,
            )
        if ctx.clock() - asked > REBOOT_GRACE:
            return self._finish(
                rid,
                _status(
                    rid,
                    "failed",
                    boot,
                    f"the host was asked to reboot {ctx.clock() - asked:.0f}s ago and is still "
                    f"on boot {boot}",
                    ctx,
                ),
            ), None
        return None

    def _claim(self, request: Request, boot: str, message: str, ctx: AgentContext) -> Answer:
        """ "rebooting" with this boot's id, and the reboot to run once it is on the Node."""
        claim = _status(request.id, "rebooting", boot, message, ctx)
        return claim, lambda written: self._claimed(written, request.id, boot, ctx)

    def _claimed(
        self, written: Mapping[str, Any], rid: str, boot: str, ctx: AgentContext
    ) -> NodePatch:
        """The work after "rebooting" is on the Node: look at the Node as written once
        more, then reboot (or say why not)."""
        now = read_request(written, REBOOT_REQUEST_ANNOTATION)
        status = read_status(written, REBOOT_STATUS_ANNOTATION)
        if not (
            isinstance(now, Request)
            and now.id == rid
            and isinstance(status, Status)
            and (status.id, status.state, status.boot_id) == (rid, "rebooting", boot)
        ):
            log.warning(
                "reboot %s: the Node no longer shows this agent's claim; not rebooting", rid
            )
            return NodePatch()
        self._asked[rid] = ctx.clock()
        log.warning("rebooting node %s for request %s", ctx.node_name, rid)
        try:
            ctx.reboot()
        except Exception as e:
            failed = self._finish(rid, _status(rid, "failed", boot, f"reboot failed: {e}", ctx))
            return NodePatch(
                annotations={REBOOT_STATUS_ANNOTATION: json.dumps(failed, sort_keys=True)}
            )
        return NodePatch()

    def _finish(self, rid: str, answer: dict[str, Any]) -> dict[str, Any]:
        self._final[rid] = answer
        return answer


def _status(rid: str, state: str, boot: str, message: str, ctx: AgentContext) -> dict[str, Any]:
    return {
        "id": rid,
        "state": state,
        "bootID": boot,
        "message": cut(message),
        "at": iso(ctx.clock()),
    }


def _unreadable(rid: str, what: Unreadable, ctx: AgentContext) -> dict[str, Any]:
    """The documented answer to an unreadable request or status (docs/agent.md)."""
    answer = _status(rid, "failed", "", unreadable_message(what, NOT_REBOOTING), ctx)
    answer["reason"] = UNREADABLE
    return answer


def _same(answer: Mapping[str, Any], status: Status | Unreadable | None) -> bool:
    if not isinstance(status, Status):
        return False
    said = (status.id, status.state, status.boot_id, status.message)
    return said == tuple(answer.get(k) for k in ("id", "state", "bootID", "message"))


TASK = RebootTask()

__all__ = [
    "HOST_REBOOT",
    "REBOOT_GRACE",
    "TASK",
    "HostReboot",
    "RebootError",
    "RebootTask",
    "read_boot_id",
]
