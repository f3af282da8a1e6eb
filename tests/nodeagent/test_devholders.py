"""``nodeagent.devholders``: the processes that hold a GPU's device file, read from a
procfs tree within limits (names that are no pid, descriptors that cannot be read,
the agent's own pid, a comm over its size)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodeagent import devholders
from nodeagent.devholders import holders


def proc(root: Path, pid: str, comm: bytes, targets: list[str]) -> None:
    fd = root / pid / "fd"
    fd.mkdir(parents=True)
    (root / pid / "comm").write_bytes(comm)
    for n, target in enumerate(targets):
        (fd / str(n)).symlink_to(target)


def test_the_holders_of_the_wanted_minors_only(tmp_path: Path) -> None:
    proc(tmp_path, "20", b"dcgm\n", ["/dev/nvidia2", "/dev/nvidia10", "/dev/nvidia2"])
    proc(tmp_path, "3", b"agent\n", ["/dev/nvidia2"])  # the agent itself
    proc(tmp_path, "4", b"x" * 1000, ["/dev/nvidia10"])  # a comm over its limit
    proc(tmp_path, "²", b"odd\n", ["/dev/nvidia2"])  # no pid
    proc(tmp_path, "5", b"long\n", ["/dev/nvidia" + "9" * 200])  # no minor
    proc(tmp_path, "6", b"uvm\n", ["/dev/nvidia-uvm", "/dev/nvidiactl", "/dev/nvidia2x"])
    (tmp_path / "7").mkdir()  # a process gone while it is read: no fd directory
    assert holders(tmp_path, {2, 10}, own_pid=3) == [
        "? (pid 4): /dev/nvidia10",
        "dcgm (pid 20): /dev/nvidia10, /dev/nvidia2",
    ]
    assert holders(tmp_path, set(), own_pid=3) == []
    assert holders(tmp_path / "missing", {2}, own_pid=3) == []


def test_the_descriptors_read_per_process_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc(tmp_path, "8", b"many\n", ["/dev/nvidia0"] * 3)
    monkeypatch.setattr(devholders, "MAX_FDS", 0)
    assert holders(tmp_path, {0}, own_pid=os.getpid()) == []
    monkeypatch.setattr(devholders, "MAX_FDS", 1)
    assert holders(tmp_path, {0}, own_pid=os.getpid()) == ["many (pid 8): /dev/nvidia0"]
