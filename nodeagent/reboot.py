"""The reboot task: reboots the node when the controller asks (``reboot_node``, method
``agent``) and says so on the Node, before and after.

The channel (docs/agent.md): REBOOT_REQUEST_ANNOTATION ``{"id", "requestedAt",
"by"}`` from the controller; REBOOT_STATUS_ANNOTATION ``{"id", "state": "rebooting" |
"done" | "failed", "bootID", "message", "at"}`` from this task.

Why it is built this way:

* **The boot id is the proof.** The first round writes "rebooting" with the current
  boot id (``/proc/sys/kernel/random/boot_id``, new at every boot); a later round, once
  the Node shows it, reboots. After the boot the agent starts again, finds "rebooting"
  with a boot id that is no longer the current one, and answers "done". Nothing else
  has to survive the reboot: the Node carries the state.
* **Once per id.** "done" and "failed" are final. "rebooting" with the *same* boot id
  means the host has not rebooted yet (the round that wrote it, or an agent that
  restarted before it could reboot), so the reboot is asked for again: that is not a
  second reboot, since none has happened. A host still on the same boot
  ``REBOOT_GRACE`` after the reboot was asked for answers "failed".
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
from nodeagent.reset import FINAL, iso, json_annotation, loose_id, tail
from nodeagent.tasks import AgentContext, NodePatch

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
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        raw = annotations.get(REBOOT_REQUEST_ANNOTATION)
        if not raw:
            return NodePatch()
        status = json_annotation(node, REBOOT_STATUS_ANNOTATION)
        answer = self._answer(str(raw), status, ctx)
        if answer is None or _same(answer, status):
            return NodePatch()
        return NodePatch(annotations={REBOOT_STATUS_ANNOTATION: json.dumps(answer, sort_keys=True)})

    def _answer(
        self, raw: str, status: dict[str, Any] | None, ctx: AgentContext
    ) -> dict[str, Any] | None:
        rid = _request_id(raw)
        if not rid:
            return _status(
                loose_id(raw),
                "failed",
                "",
                f'unreadable {REBOOT_REQUEST_ANNOTATION}: it needs an "id" (a JSON object '
                'like {"id": "...", "requestedAt": "...", "by": "..."}); not rebooting',
                ctx,
            )
        if rid in self._final:
            return self._final[rid]
        try:
            boot = ctx.boot_id()
            if not boot:
                raise ValueError("empty boot id")
        except Exception as e:
            return self._finish(
                rid,
                _status(rid, "failed", "", f"cannot read this boot's id ({e}); not rebooting", ctx),
            )
        if status is None or status.get("id") != rid:
            # The boot id goes on the Node first: it is what proves the reboot later.
            return _status(rid, "rebooting", boot, f"rebooting node {ctx.node_name}", ctx)
        state = status.get("state")
        if state in FINAL:
            return None
        before = str(status.get("bootID") or "")
        if state != "rebooting" or not before:
            return self._finish(
                rid,
                _status(
                    rid, "failed", boot, f"unexpected {REBOOT_STATUS_ANNOTATION}: {status}", ctx
                ),
            )
        if before != boot:
            return self._finish(
                rid, _status(rid, "done", boot, f"rebooted: boot id {before} -> {boot}", ctx)
            )
        asked = self._asked.get(rid)
        if asked is None:
            self._asked[rid] = ctx.clock()
            log.warning("rebooting node %s for request %s", ctx.node_name, rid)
            try:
                ctx.reboot()
            except Exception as e:
                return self._finish(rid, _status(rid, "failed", boot, f"reboot failed: {e}", ctx))
            return None
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
            )
        return None

    def _finish(self, rid: str, answer: dict[str, Any]) -> dict[str, Any]:
        self._final[rid] = answer
        return answer


def _request_id(raw: str) -> str:
    try:
        data = json.loads(raw)
    except ValueError:
        return ""
    rid = data.get("id") if isinstance(data, dict) else None
    return rid if isinstance(rid, str) else ""


def _status(rid: str, state: str, boot: str, message: str, ctx: AgentContext) -> dict[str, Any]:
    return {"id": rid, "state": state, "bootID": boot, "message": message, "at": iso(ctx.clock())}


def _same(answer: Mapping[str, Any], status: Mapping[str, Any] | None) -> bool:
    if status is None:
        return False
    return all(answer.get(k) == status.get(k) for k in ("id", "state", "bootID", "message"))


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
