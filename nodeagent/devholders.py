"""Which processes of the host hold a GPU's device file open (``/dev/nvidiaN``), read
from procfs: what ``nvidia-smi --gpu-reset`` would call "in use".

Why it is built this way:

* nvidia-smi refuses a GPU that any process holds, monitoring clients included
  (DCGM's host engine, a second exporter), and its refusal answers the reset
  ``failed``, which moves the ladder to a reboot at once. NVML lists only the
  processes with a CUDA or graphics context; a monitoring client holds the device
  file without one. Looked at just before nvidia-smi runs (after this agent and the
  exporter let go of NVML), a holder found here makes the reset *refused*, named,
  and tried again next round, as a pod that holds the GPU does.
* **Bounded.** At most ``MAX_PROCESSES`` processes and ``MAX_FDS`` descriptors each
  are looked at; a process that ends while it is read, or whose descriptors this
  agent may not read, is skipped. Nothing found is not proof of nothing there (a
  procfs that is not the host's sees only its own container): nvidia-smi still
  has the last word.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from accel_common.readfile import FieldError, read_text

MAX_PROCESSES = 100_000
MAX_FDS = 100_000
_PID = re.compile(r"[0-9]{1,10}")
_DEVICE = re.compile(r"/dev/nvidia(\d{1,6})")


def holders(procfs: Path, minors: Iterable[int], own_pid: int) -> list[str]:
    """Each process other than ``own_pid`` that holds ``/dev/nvidiaN`` open for one of
    ``minors``, as "name (pid P): /dev/nvidiaN", in pid order."""
    wanted = set(minors)
    if not wanted:
        return []
    found: list[str] = []
    try:
        entries = sorted(int(e.name) for e in os.scandir(procfs) if _PID.fullmatch(e.name))
    except OSError:
        return []
    for pid in entries[:MAX_PROCESSES]:
        if pid == own_pid:
            continue
        held = _held(procfs / str(pid) / "fd", wanted)
        if held:
            found.append(f"{_name(procfs, pid)} (pid {pid}): {', '.join(sorted(held))}")
    return found


def _held(fd_dir: Path, wanted: set[int]) -> set[str]:
    held: set[str] = set()
    try:
        with os.scandir(fd_dir) as it:
            for n, entry in enumerate(it):
                if n >= MAX_FDS:
                    break
                try:
                    target = os.readlink(entry.path)
                except OSError:
                    continue
                m = _DEVICE.fullmatch(target)
                if m is not None and int(m.group(1)) in wanted:
                    held.add(target)
    except OSError:  # gone, or not ours to read
        return set()
    return held


def _name(procfs: Path, pid: int) -> str:
    try:
        return read_text(procfs / str(pid) / "comm", 256).strip() or "?"
    except FieldError:
        return "?"
