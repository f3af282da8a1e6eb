"""The one bounded reader of sysfs and procfs files.

The exporter reads hundreds of small kernel files on every poll, and any of them may
be hostile or broken: a ``gpu_metrics`` linked to ``/dev/zero`` or a FIFO never ends,
a corrupted ``local_cpulist`` is not UTF-8, a driver bug writes a 400-digit number.
A plain ``Path.read_text()`` reads until memory runs out, blocks forever on a FIFO,
raises ``UnicodeDecodeError`` where callers expect ``OSError``, and ``int()`` turns
400 digits into a number that overflows the first ``float()`` it meets, far from the
file it came from. So every such read goes through here.

Why it is built this way:

* **Only regular files.** sysfs attributes and procfs tables are regular files
  (sysfs says 4096 bytes, procfs 0, whatever they hold); a character device, FIFO,
  socket or directory is refused before it is read. The file is opened with
  ``O_NONBLOCK`` so that a FIFO swapped in between the check and the open cannot
  block the poller's thread, and checked again with ``fstat`` on what was opened.
* **A cap per call.** At most ``limit`` bytes are read; one byte more and the file is
  refused, never truncated into a value that looks valid. The defaults are sized to
  what the kernel can write: ``TEXT_LIMIT`` (64 KiB) is a sysfs attribute's
  ``PAGE_SIZE`` buffer on the largest page size Linux uses (arm64 with 64 KiB
  pages); ``BLOB_LIMIT`` (256 KiB) is for binary attributes such as amdgpu's
  ``gpu_metrics`` (under 4 KiB in every revision to date); ``TABLE_LIMIT`` (32 MiB)
  is for procfs tables that grow with the host, ``/proc/cpuinfo`` and ``/proc/stat``
  on an 8,192-CPU machine included.
* **Strict UTF-8** for text: bytes that do not decode are a bad field, not
  replacement characters in a label.
* **Bounded integers.** ``parse_int`` takes what a kernel attribute can hold (a 64-bit
  value, at most ``INT_DIGITS`` digits), so a bad number is refused where it is read.
* **One error type.** Every way a file can fail to give a value (absent, unreadable,
  not a regular file, too big, not UTF-8, not a number) is ``FieldError`` with a short
  reason for the ``missing`` bookkeeping and the log; ``errno`` keeps the OS error's
  number, so a caller can still tell "this device is gone" (ENODEV) from "this file
  failed", and ``absent`` says the file is simply not there (an unsupported field).
"""

from __future__ import annotations

import errno as errnos
import os
import stat
from pathlib import Path

TEXT_LIMIT = 64 * 1024
BLOB_LIMIT = 256 * 1024
TABLE_LIMIT = 32 * 1024 * 1024
# Digits of the largest 64-bit value (2**64 - 1 has 20), plus room for a sign.
INT_DIGITS = 20
INT_BOUND = 2**64

_CHUNK = 64 * 1024
_KINDS = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)
_ABSENT = frozenset({errnos.ENOENT, errnos.ENOTDIR})


class FieldError(Exception):
    """A sysfs/procfs file that gave no usable value, and why (``reason``)."""

    def __init__(self, reason: str, path: Path | str | None = None, errno: int | None = None):
        super().__init__(reason)
        self.reason = reason
        self.path = None if path is None else Path(path)
        self.errno = errno

    @property
    def absent(self) -> bool:
        """The file is not there: the field is unsupported, nothing is wrong."""
        return self.errno in _ABSENT

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}" if self.path is not None else self.reason


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def _os_error(path: Path, e: OSError) -> FieldError:
    reason = os.strerror(e.errno) if e.errno else str(e)
    return FieldError(reason, path, e.errno)


def read_bytes(path: Path | str, limit: int = BLOB_LIMIT) -> bytes:
    """The whole of a regular file, at most ``limit`` bytes; ``FieldError`` when it
    is absent, unreadable, not a regular file or larger than ``limit``."""
    path = Path(path)
    try:
        # Refuse a device or FIFO before opening it: opening some devices has effects.
        before = os.stat(path)
    except OSError as e:
        raise _os_error(path, e) from None
    except ValueError:
        # No file has such a name: the OS calls refuse it before the kernel sees it.
        raise FieldError("a path with a NUL byte", path) from None
    if not stat.S_ISREG(before.st_mode):
        raise FieldError(_kind(before.st_mode), path)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise _os_error(path, e) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise FieldError(_kind(mode), path)
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(_CHUNK, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as e:
        raise _os_error(path, e) from None
    finally:
        os.close(fd)
    if size > limit:
        raise FieldError(f"larger than {limit} bytes", path)
    return b"".join(chunks)


class NotUTF8(ValueError):
    """Bytes that are not UTF-8: where the first bad byte is (1-based line, and
    1-based column counted in characters), and its value, for the caller's message
    (``file:line:col: byte 0x.. is not UTF-8``)."""

    def __init__(self, line: int, column: int, byte: int) -> None:
        super().__init__(f"{line}:{column}: byte 0x{byte:02x} is not UTF-8")
        self.line = line
        self.column = column
        self.byte = byte


def decode_utf8(data: bytes) -> str:
    """``data`` as strict UTF-8, or NotUTF8 saying where the first bad byte is. The
    one place that works out that position, for every reader of text that must be
    UTF-8 (YAML files, expositions, OpenMetrics files)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        start = data.rfind(b"\n", 0, e.start) + 1
        column = len(data[start : e.start].decode("utf-8", errors="replace")) + 1
        raise NotUTF8(data.count(b"\n", 0, e.start) + 1, column, data[e.start]) from None


def read_text(path: Path | str, limit: int = TEXT_LIMIT) -> str:
    """A regular file as strict UTF-8 text, at most ``limit`` bytes; ``FieldError``
    as ``read_bytes``, and when the bytes are not UTF-8."""
    data = read_bytes(path, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FieldError(f"not UTF-8 (byte 0x{data[e.start]:02x} at {e.start})", path) from None


def parse_int(text: str, base: int = 10, path: Path | str | None = None) -> int:
    """``text`` (surrounding space allowed) as an integer a kernel attribute can hold:
    at most ``INT_DIGITS`` digits and within ±2**64; ``FieldError`` otherwise. ``base``
    is ``int()``'s (0 accepts a ``0x`` prefix)."""
    s = text.strip()
    digits = s[1:] if s[:1] in "+-" else s
    if digits[:2].lower() in ("0x", "0o", "0b"):
        digits = digits[2:]
    if len(digits) > INT_DIGITS:
        raise FieldError(f"number too long ({len(digits)} digits)", path)
    try:
        value = int(s, base)
    except ValueError:
        raise FieldError(f"not a number: {s[:40]!r}", path) from None
    if not -INT_BOUND < value < INT_BOUND:
        raise FieldError(f"number out of range: {s}", path)
    return value


def read_int(path: Path | str, base: int = 10) -> int:
    """A file holding one integer (``parse_int``); ``FieldError`` when it cannot."""
    return parse_int(read_text(path), base, path)
