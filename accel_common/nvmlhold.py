"""The node agent's request that the exporter let go of NVML for a GPU reset, and
the exporter's answer: two small JSON files in a directory both programs mount
(``/run/accel-fleet`` on the host by default, a tmpfs that a reboot empties).

Why it is built this way:

* ``nvidia-smi --gpu-reset`` refuses a GPU that any process holds open, monitoring
  clients included (its manual names "another instance of nvidia-smi"), and
  ``nvmlInit`` attaches every GPU of the host. An exporter that kept NVML open on
  every node would make every reset the agent runs fail "in use", and the ladder
  would reboot the node for it: the reset step would be worth nothing.
* **Files, not a socket.** The two programs run in different pods with no port
  between them; a hostPath directory is what a DaemonSet pair shares. Each file is
  written whole (a temporary file, then ``rename``), so a reader sees the old one or
  the new one, never half of one.
* **The hold expires.** It names when it ends (``until``), at most
  ``MAX_HOLD_SECONDS`` ahead; a hold past its end, or one that cannot be read, is no
  hold: an agent that died mid-reset, or a stray file, blinds the exporter for
  minutes at most, never for good.
* **Read within limits.** Both files are input from another process: read through
  the bounded reader (regular files only, ``MAX_BYTES``), parsed by the bounded JSON
  reader, and anything else is refused with the reason.

The hold: ``{"id": "<reset request id>", "until": <unix seconds>, "by": "..."}``.
The answer: ``{"id": "<the hold's id>", "at": <unix seconds>, "pid": <int>}``.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel_common import jsonread
from accel_common.readfile import FieldError, read_bytes

DEFAULT_DIR = Path("/run/accel-fleet")
HOLD = "nvml-hold.json"
RELEASED = "nvml-released.json"
# Longer than nvidia-smi's own limit in the agent (5 minutes) with room to spare.
MAX_HOLD_SECONDS = 900.0
MAX_BYTES = 4096
MAX_ID = 256


class HoldError(ValueError):
    """A hold or answer file that is there but not one: the message says why."""


@dataclass(frozen=True)
class Hold:
    id: str
    until: float


def read_hold(directory: Path, now: float) -> Hold | None:
    """The hold in force at ``now``; None when there is none or it has ended.
    HoldError when the file is there and is not a hold (the caller says so, and
    holds nothing)."""
    body = _read(directory / HOLD)
    if body is None:
        return None
    rid, until = body.get("id"), body.get("until")
    if not isinstance(rid, str) or not rid or len(rid) > MAX_ID:
        raise HoldError(f"{directory / HOLD}: 'id' must be a string of 1 to {MAX_ID} characters")
    if isinstance(until, bool) or not isinstance(until, int | float):
        raise HoldError(f"{directory / HOLD}: 'until' must be a number (unix seconds)")
    until = min(float(until), now + MAX_HOLD_SECONDS)
    return Hold(rid, until) if until > now else None


def read_released(directory: Path) -> str | None:
    """The id of the hold the exporter last let go of NVML for; None when none.
    HoldError when the file is there and is not an answer."""
    body = _read(directory / RELEASED)
    if body is None:
        return None
    rid = body.get("id")
    if not isinstance(rid, str) or len(rid) > MAX_ID:
        raise HoldError(f"{directory / RELEASED}: 'id' must be a string")
    return rid


def write_hold(directory: Path, hold: Hold, by: str) -> None:
    _write(directory / HOLD, {"id": hold.id, "until": hold.until, "by": by})


def write_released(directory: Path, rid: str, at: float) -> None:
    _write(directory / RELEASED, {"id": rid, "at": at, "pid": os.getpid()})


def clear_hold(directory: Path) -> None:
    """Ends the hold (the reset is over); no error when there is none."""
    (directory / HOLD).unlink(missing_ok=True)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        raw = read_bytes(path, MAX_BYTES)
    except FieldError as e:
        if e.absent:
            return None
        raise HoldError(f"{path}: {e.reason}") from None
    try:
        body = jsonread.loads(raw, max_bytes=MAX_BYTES, max_depth=4)
    except jsonread.JSONBodyError as e:
        raise HoldError(f"{path}: not JSON: {e}") from None
    if not isinstance(body, dict):
        raise HoldError(f"{path}: not a JSON object")
    return body


def _write(path: Path, body: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(body, f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
