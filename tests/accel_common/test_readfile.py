"""``accel_common.readfile``: the bounded sysfs/procfs reader refuses what is endless,
too big, not text or not a number, with one error type and a reason."""

from __future__ import annotations

import errno
import os
import resource
import socket
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accel_common.readfile import (
    BLOB_LIMIT,
    TEXT_LIMIT,
    FieldError,
    parse_int,
    read_bytes,
    read_int,
    read_text,
)

pytestmark = pytest.mark.timeout(30)


def test_a_regular_file_is_read_whole(tmp_path: Path) -> None:
    f = tmp_path / "gpu_busy_percent"
    f.write_text("42\n")
    assert read_text(f) == "42\n"
    assert read_bytes(f) == b"42\n"
    assert read_int(f) == 42
    exact = tmp_path / "exact"
    exact.write_bytes(b"x" * TEXT_LIMIT)
    assert len(read_text(exact)) == TEXT_LIMIT


def test_a_file_one_byte_over_the_cap_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "big"
    f.write_bytes(b"7" * (TEXT_LIMIT + 1))
    with pytest.raises(FieldError, match=f"larger than {TEXT_LIMIT} bytes"):
        read_text(f)
    assert len(read_bytes(f, BLOB_LIMIT)) == TEXT_LIMIT + 1
    with pytest.raises(FieldError, match="larger than 10 bytes"):
        read_bytes(f, 10)


def opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every path ``os.open`` is asked for from now on, and every ``os.read`` as
    ``read <bytes>``: what a reader touched, rather than how long it took."""
    calls: list[str] = []
    real_open, real_read = os.open, os.read

    def spy_open(path: Any, *args: Any, **kwargs: Any) -> int:
        calls.append(str(path))
        return real_open(path, *args, **kwargs)

    def spy_read(fd: int, n: int) -> bytes:
        data = real_read(fd, n)
        calls.append(f"read {len(data)}")
        return data

    monkeypatch.setattr(os, "open", spy_open)
    monkeypatch.setattr(os, "read", spy_read)
    return calls


def test_dev_zero_behind_a_link_is_refused_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    link = tmp_path / "gpu_metrics"
    link.symlink_to("/dev/zero")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    calls = opened(monkeypatch)
    with pytest.raises(FieldError) as e:
        read_bytes(link)
    assert e.value.reason == "a character device"
    assert e.value.path == link
    # At once: refused on its stat, never opened (opening a device can have effects)
    # and not one byte read.
    assert calls == []
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 64 * 1024  # KiB


def test_a_fifo_with_no_writer_never_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fifo = tmp_path / "properties"
    os.mkfifo(fifo)
    calls = opened(monkeypatch)
    with pytest.raises(FieldError, match="a FIFO"):
        read_text(fifo)
    assert calls == []  # refused on its stat: a blocking open is never reached


def test_a_fifo_swapped_in_after_the_check_never_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A FIFO that takes a regular file's place between the stat and the open (the
    stat is faked to say "regular file"): the open does not wait for a writer, and
    the fstat of what was opened refuses it."""
    fifo = tmp_path / "properties"
    os.mkfifo(fifo)
    regular = os.stat(__file__)
    real_stat = os.stat
    monkeypatch.setattr(
        os, "stat", lambda p, *a, **k: regular if str(p) == str(fifo) else real_stat(p, *a, **k)
    )
    calls = opened(monkeypatch)
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            read_text(fifo)
        except BaseException as e:  # handed to the test's thread
            outcome.append(e)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    # A generous bound, only so that a blocking open fails the test rather than
    # hanging it: a non-blocking open returns at once.
    reader.join(10.0)
    if reader.is_alive():  # blocked in open(): a writer end lets it go
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(10.0)
        pytest.fail("read_text blocked opening a FIFO with no writer")
    assert calls == [str(fifo)], calls  # opened, and refused before any read
    assert len(outcome) == 1 and isinstance(outcome[0], FieldError), outcome
    assert outcome[0].reason == "a FIFO"


def test_directories_and_sockets_are_not_fields(tmp_path: Path) -> None:
    with pytest.raises(FieldError, match="a directory"):
        read_text(tmp_path)
    sock_path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(sock_path))
        with pytest.raises(FieldError, match="a socket"):
            read_text(sock_path)


def test_absent_and_unreadable_files_keep_their_errno(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(FieldError) as e:
        read_text(tmp_path / "nope")
    assert e.value.absent and e.value.errno == errno.ENOENT
    with pytest.raises(FieldError) as e:
        read_text(tmp_path / "nope" / "deeper")
    assert e.value.absent
    secret = tmp_path / "energy_uj"
    secret.write_text("1\n")
    real = os.open

    def os_open(path: str | Path, *args: Any, **kwargs: Any) -> int:
        # What the kernel answers for RAPL's energy_uj to a non-root reader (and what
        # this test, which may run as root, cannot get from chmod).
        if str(path) == str(secret):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", os_open)
    with pytest.raises(FieldError) as e:
        read_text(secret)
    assert e.value.errno == errno.EACCES and not e.value.absent
    assert e.value.reason == "Permission denied"


def test_a_path_no_file_can_have_is_a_field_error(tmp_path: Path) -> None:
    with pytest.raises(FieldError) as e:
        read_text("a\x00b")
    assert e.value.reason == "a path with a NUL byte" and not e.value.absent
    with pytest.raises(FieldError) as e:
        read_text(tmp_path / ("9" * 5000))
    assert e.value.errno == errno.ENAMETOOLONG and e.value.reason == "File name too long"


def test_text_must_be_utf8(tmp_path: Path) -> None:
    f = tmp_path / "local_cpulist"
    f.write_bytes(b"0-3\xff\n")
    with pytest.raises(FieldError, match=r"not UTF-8 \(byte 0xff at 3\)") as e:
        read_text(f)
    assert str(e.value) == f"{f}: not UTF-8 (byte 0xff at 3)"
    assert read_bytes(f) == b"0-3\xff\n"


@pytest.mark.parametrize(
    ("text", "base", "value"),
    [("42\n", 10, 42), (" -1 ", 10, -1), ("0x74a1\n", 16, 0x74A1), ("0x10", 0, 16),
     ("18446744073709551615", 10, 2**64 - 1), ("-9223372036854775808", 10, -(2**63))],
)  # fmt: skip
def test_integers_a_kernel_can_hold(text: str, base: int, value: int) -> None:
    assert parse_int(text, base) == value


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("9" * 400, "number too long (400 digits)"),
        ("18446744073709551616", "number out of range: 18446744073709551616"),
        ("", "not a number: ''"),
        ("12abc", "not a number: '12abc'"),
        ("1e400", "not a number: '1e400'"),
    ],
)
def test_numbers_no_kernel_writes_are_refused(text: str, reason: str) -> None:
    with pytest.raises(FieldError) as e:
        parse_int(text)
    assert e.value.reason == reason
    assert e.value.path is None and str(e.value) == reason


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789abcdefxX+- \n_", max_size=60), st.sampled_from([0, 10, 16]))
def test_a_number_or_a_field_error_never_anything_else(text: str, base: int) -> None:
    try:
        value = parse_int(text, base)
    except FieldError as e:
        assert e.reason
    else:
        assert -(2**64) < value < 2**64
