"""The kernel log reader (``exporter.backends.nvidia.kmsg``) against a regular file
and a FIFO standing in for /dev/kmsg: only records newer than its start, at most N
a poll, every record bounded, hostile bytes dropped, and no log is no error."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.backends.nvidia.kmsg import MAX_RECORD, KmsgReader, parse_record

pytestmark = pytest.mark.timeout(60)


def now_usec() -> int:
    return time.monotonic_ns() // 1000


def record(seq: int, text: str, usec: int | None = None) -> bytes:
    """A record as /dev/kmsg hands it over."""
    return f"4,{seq},{now_usec() if usec is None else usec},-;{text}\n".encode()


@pytest.fixture
def log_file(tmp_path: Path) -> Path:
    path = tmp_path / "kmsg"
    path.write_bytes(record(1, "before the reader started"))
    return path


@pytest.fixture
def reader(log_file: Path) -> Iterator[KmsgReader]:
    r = KmsgReader(log_file, max_records=16)
    assert r.open()
    yield r
    r.close()


def append(path: Path, data: bytes) -> None:
    with path.open("ab") as f:
        f.write(data)


def test_only_records_written_after_the_start(reader: KmsgReader, log_file: Path) -> None:
    # The record written before the reader opened is behind its position; a new one
    # is read whatever its timestamp (the kernel's clock may lag CLOCK_MONOTONIC).
    append(log_file, record(2, "news with an old clock", usec=1) + record(3, "news"))
    assert [r.message for r in reader.read()] == ["news with an old clock", "news"]
    assert reader.read() == []  # read once
    append(log_file, record(3, "the same sequence again") + record(4, "more"))
    assert [(r.seq, r.message) for r in reader.read()] == [(4, "more")]


def test_hostile_lines_are_dropped_and_the_next_record_read(
    reader: KmsgReader, log_file: Path
) -> None:
    garbage = bytes(range(256)) * 40 + b"\n\xff\xfe;;;\n,,,;\n1,x,2,-;no\n SUBSYSTEM=pci\n"
    overlong = b"4,5," + str(now_usec()).encode() + b",-;" + b"A" * (1 << 20) + b"\n"
    append(log_file, garbage + overlong + record(6, "after the flood"))
    got: list[str] = []
    for _ in range(200):  # a megabyte at most 16 chunks a poll
        got += [r.message for r in reader.read()]
        if got:
            break
    assert got == ["after the flood"]


def test_a_line_just_within_the_bound_is_read(reader: KmsgReader, log_file: Path) -> None:
    head = f"4,7,{now_usec()},-;".encode()
    line = head + b"x" * (MAX_RECORD - len(head))
    append(log_file, line + b"\n" + head + b"y" * MAX_RECORD + b"\n")
    got = reader.read()
    assert [len(r.message) for r in got] == [MAX_RECORD - len(head)]


def test_a_partial_record_waits_for_its_end(reader: KmsgReader, log_file: Path) -> None:
    whole = record(8, "split in two")
    append(log_file, whole[:10])
    assert reader.read() == []
    append(log_file, whole[10:])
    assert [r.message for r in reader.read()] == ["split in two"]


def test_100000_lines_come_at_most_n_a_poll(reader: KmsgReader, log_file: Path) -> None:
    start = now_usec()
    append(log_file, b"".join(record(10 + i, f"line {i}", start + i) for i in range(100_000)))
    polls, seqs = 0, []
    began = time.process_time()
    while True:
        got = reader.read()
        assert len(got) <= 16
        if not got:
            break
        seqs += [r.seq for r in got]
        polls += 1
        assert polls < 10_000
    # Nothing lost: what a poll could not take waits for the next one.
    assert seqs == list(range(10, 10 + 100_000))
    assert time.process_time() - began < 20


def test_a_fifo_hands_over_records_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "kmsg.fifo"
    os.mkfifo(fifo)
    r = KmsgReader(fifo, max_records=4)
    assert r.open()
    try:
        assert r.read() == []  # no writer: nothing, and no wait
        wfd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        try:
            os.write(wfd, record(1, "old", usec=0) + b"\x00\x01garbage\n" + record(2, "new"))
            os.write(wfd, b"".join(record(3 + i, f"n{i}") for i in range(10)))
            assert [x.message for x in r.read()] == ["new", "n0", "n1", "n2"]
        finally:
            os.close(wfd)
    finally:
        r.close()


def test_no_log_is_no_payloads_said_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "accel_exporter.nvidia")
    missing = KmsgReader(tmp_path / "absent")
    assert missing.read() == [] and missing.read() == []
    directory = KmsgReader(tmp_path)  # opens, but read() fails (EISDIR)
    assert directory.read() == [] and directory.read() == []
    said = [r for r in caplog.records if "cannot read the kernel log" in r.getMessage()]
    assert len(said) == 2, [r.getMessage() for r in said]


@pytest.mark.parametrize(
    "line",
    [b"", b";", b"4,1,2;x", b"a,b,c,-;x", b"4,1,2,-" + b"9" * 100 + b";x", b"\xff,\xfe,1,-;x"],
)
def test_headers_that_do_not_parse_are_no_record(line: bytes) -> None:
    assert parse_record(line) is None


def test_a_record_keeps_its_text_after_the_first_semicolon() -> None:
    got = parse_record(b"6,339,5140900,-,caller=T1;NVRM: a; b \xff")
    assert got is not None
    assert (got.seq, got.usec, got.message) == (339, 5140900, "NVRM: a; b \ufffd")
