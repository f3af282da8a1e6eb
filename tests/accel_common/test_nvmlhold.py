"""The hold file the node agent writes for a GPU reset and the exporter's answer
(``accel_common.nvmlhold``): what counts as a hold, what ends one, and the limits on
reading them (both are input from another process)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from accel_common import nvmlhold
from accel_common.nvmlhold import (
    HOLD,
    MAX_HOLD_SECONDS,
    RELEASED,
    Hold,
    HoldError,
    clear_hold,
    read_hold,
    read_released,
    write_hold,
    write_released,
)

NOW = 1_800_000_000.0


def test_a_written_hold_is_read_back_until_it_ends(tmp_path: Path) -> None:
    assert read_hold(tmp_path, NOW) is None  # no file: no hold
    write_hold(tmp_path, Hold("r1", NOW + 60), by="agent")
    assert read_hold(tmp_path, NOW) == Hold("r1", NOW + 60)
    assert read_hold(tmp_path, NOW + 60) is None  # ended
    clear_hold(tmp_path)
    clear_hold(tmp_path)  # twice: no error
    assert not (tmp_path / HOLD).exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # no temporary file left


def test_a_hold_lasts_at_most_the_cap(tmp_path: Path) -> None:
    write_hold(tmp_path, Hold("r1", NOW + 10 * MAX_HOLD_SECONDS), by="agent")
    assert read_hold(tmp_path, NOW) == Hold("r1", NOW + MAX_HOLD_SECONDS)


def test_the_answer_names_the_hold(tmp_path: Path) -> None:
    assert read_released(tmp_path) is None
    write_released(tmp_path, "r1", NOW)
    assert read_released(tmp_path) == "r1"
    body = json.loads((tmp_path / RELEASED).read_text())
    assert body == {"id": "r1", "at": NOW, "pid": os.getpid()}


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"{", "not JSON"),
        (b"[]", "not a JSON object"),
        (b'{"until": 1e12}', "'id' must be a string"),
        (b'{"id": "", "until": 1e12}', "'id' must be a string"),
        (b'{"id": "r", "until": "soon"}', "'until' must be a number"),
        (b'{"id": "r", "until": true}', "'until' must be a number"),
        (b'{"id": "r", "until": NaN}', "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b" " * (nvmlhold.MAX_BYTES + 1), "larger than"),
    ],
)
def test_a_file_that_is_not_a_hold_says_why(tmp_path: Path, content: bytes, why: str) -> None:
    (tmp_path / HOLD).write_bytes(content)
    with pytest.raises(HoldError, match=why):
        read_hold(tmp_path, NOW)


def test_only_a_regular_file_is_read(tmp_path: Path) -> None:
    (tmp_path / HOLD).mkdir()
    with pytest.raises(HoldError, match=HOLD):
        read_hold(tmp_path, NOW)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / RELEASED).symlink_to(fifo)
    with pytest.raises(HoldError):  # never blocks on the FIFO
        read_released(tmp_path)
