"""A bounded, non-blocking reader of the kernel log (``/dev/kmsg``).

Why it is built this way:

* The NVLink Xid payloads are only in the kernel log (``linkpayload``); the
  exporter reads it beside NVML, never instead of it, so the reader must never be
  the reason a poll is slow or fails: the file is opened non-blocking, one poll
  hands over at most ``max_records`` records and makes at most one read() more
  than that (so a bounded number of bytes, garbage included), the lines of the
  last read that did not fit wait for the next poll, and a line longer than
  ``MAX_RECORD`` bytes is dropped.
* Only news: on open the reader seeks to the end where the file allows it
  (``/dev/kmsg`` and a regular file do); where it does not (a FIFO), a record
  whose kmsg timestamp is before the reader's start is dropped instead. The
  timestamp is not used where the seek worked: the kernel's record clock and
  CLOCK_MONOTONIC drift apart over a long uptime (NTP slews only the latter), and
  a fresh record must never look old. A record whose sequence number is not newer
  than the last one read is dropped either way, so a re-read hands over nothing.
* ``/dev/kmsg`` hands one record per read(); a regular file or a FIFO (the tests')
  hands bytes. Records are split on newlines either way, a partial line is kept
  (bounded) for the next poll, and a line longer than ``MAX_RECORD`` is skipped to
  its end. Continuation lines (`` KEY=value``) and anything without the kmsg
  header (``prio,seq,usec,flags;``) are ignored: a hostile or garbled line is
  dropped, never an exception.
* No ``/dev/kmsg``, or no right to read it (a container without CAP_SYSLOG, a
  restricted ``dmesg``): no payloads, said once in the log. The backend then
  grades NVLink Xids by the catalogue's default, as before.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

log = logging.getLogger("accel_exporter.nvidia")

DEFAULT_PATH: Final = Path("/dev/kmsg")
# A kernel record's text is at most 1 KiB (its header and dictionary a little more);
# anything longer is not a driver's Xid line.
MAX_RECORD: Final = 2048
# Records read in one poll: a boot-time flood or a hostile writer cannot hold a poll.
MAX_RECORDS: Final = 256
# /dev/kmsg needs a buffer that holds a whole record, else read() fails (EINVAL).
_READ_SIZE: Final = 8192


@dataclass(frozen=True)
class Record:
    """One kernel log record: its sequence number, its time since boot (µs) and its
    text."""

    seq: int
    usec: int
    message: str


def _now_usec() -> int:
    # The kmsg timestamp is the kernel's local clock since boot, which is what
    # CLOCK_MONOTONIC counts too (neither counts suspend).
    return time.monotonic_ns() // 1000


def parse_record(line: bytes) -> Record | None:
    """A kmsg record line (``prio,seq,usec,flags[,..];text``); None for anything
    else (a continuation line, garbage, a header that does not parse)."""
    head, sep, text = line.partition(b";")
    if not sep or len(head) > 64:
        return None
    fields = head.split(b",")
    if len(fields) < 4 or not all(f.isdigit() for f in fields[:3]):
        return None
    return Record(int(fields[1]), int(fields[2]), text.decode("utf-8", "replace"))


class KmsgReader:
    """Reads the kernel log records written since the reader was opened."""

    def __init__(
        self,
        path: Path = DEFAULT_PATH,
        max_records: int = MAX_RECORDS,
        clock: Callable[[], int] = _now_usec,
    ) -> None:
        self.path = path
        self.max_records = max_records
        self._clock = clock
        self._fd: int | None = None
        self._start = 0
        self._last_seq = -1
        self._partial = b""
        self._held: list[bytes] = []
        self._skipping = False  # inside an overlong line, up to its newline
        self._failed = False

    def open(self) -> bool:
        """Opens the log; False (said once) when there is none to read."""
        if self._fd is not None:
            return True
        if self._failed:
            return False
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as e:
            self._failed = True
            log.warning(
                "%s: cannot read the kernel log (%s); NVLink Xids keep their default "
                "class (give the exporter CAP_SYSLOG and the host's /dev/kmsg to "
                "decode their payloads)",
                self.path,
                e.strerror or type(e).__name__,
            )
            return False
        try:
            os.lseek(fd, 0, os.SEEK_END)
            self._start = 0  # only what is written from now on is read
        except OSError:  # a FIFO: the timestamps keep old records out
            self._start = self._clock()
        self._fd = fd
        return True

    def read(self) -> list[Record]:
        """The new records, at most ``max_records``; [] without a log."""
        if self._fd is None and not self.open():
            return []
        out: list[Record] = []
        # Lines left over from the previous poll's last chunk come first.
        lines, self._held = self._held, []
        for _ in range(self.max_records + 1):
            for i, line in enumerate(lines):
                if len(out) >= self.max_records:
                    # The bound holds; the rest of the chunk (at most one read's
                    # worth) waits for the next poll.
                    self._held = lines[i:]
                    return out
                rec = parse_record(line)
                if rec is not None and rec.usec >= self._start and rec.seq > self._last_seq:
                    self._last_seq = rec.seq
                    out.append(rec)
            chunk = self._read_chunk() if self._fd is not None else b""
            if not chunk:
                break
            lines = self._lines(chunk)
        return out

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _read_chunk(self) -> bytes:
        assert self._fd is not None
        for _ in range(3):  # EINTR and EPIPE are retried, a little
            try:
                return os.read(self._fd, _READ_SIZE)
            except BlockingIOError:
                return b""
            except InterruptedError:
                continue
            except OSError as e:
                if e.errno == errno.EPIPE:
                    # /dev/kmsg overwrote records before we read them: go on with
                    # the oldest that is still there.
                    log.debug("%s: kernel log records were overwritten", self.path)
                    continue
                # Not a log after all (a directory, a device that refuses): stop
                # reading it, said once, as for a log that cannot be opened.
                log.warning(
                    "%s: cannot read the kernel log (%s); NVLink Xids keep their default class",
                    self.path,
                    e.strerror or type(e).__name__,
                )
                self.close()
                self._failed = True
                return b""
        return b""

    def _lines(self, chunk: bytes) -> list[bytes]:
        """The complete lines in ``chunk`` after what was kept from the last one,
        each at most ``MAX_RECORD`` bytes; the rest is kept (bounded) or skipped."""
        data = self._partial + chunk
        self._partial = b""
        parts = data.split(b"\n")
        tail = parts.pop()
        lines: list[bytes] = []
        for part in parts:
            if self._skipping:
                self._skipping = False  # the overlong line ends here
            elif len(part) <= MAX_RECORD:
                lines.append(part)
        if self._skipping or len(tail) > MAX_RECORD:
            self._skipping = True
        else:
            self._partial = tail
        return lines
