"""A server certificate and key loaded from PEM bytes already read, for
``exporter.webconfig``.

Why its own module: ``ssl.SSLContext.load_cert_chain`` reads only paths, and the
PEM was read once, bounded, and checked (``accel_common.readfile``); loading it
by path again could load something else. So the bytes go to a memfd (or, without
one, a private temporary directory), and an encrypted key fails at once instead
of OpenSSL prompting on the terminal, which would hang a service.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile
from collections.abc import Iterator
from pathlib import Path


def load_cert_chain(ctx: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """Loads the certificate and key into ``ctx``; raises ``EncryptedKeyError`` for
    an encrypted key and ``ssl.SSLError`` for what OpenSSL refuses."""
    with _pem_file(cert_pem) as cert_path, _pem_file(key_pem) as key_path:
        ctx.load_cert_chain(cert_path, key_path, password=_no_passphrase)


class EncryptedKeyError(Exception):
    """The key is encrypted; the exporter has no one to ask for its passphrase."""


def _no_passphrase() -> bytes:
    # Without a callback OpenSSL prompts on the terminal, which hangs a service.
    raise EncryptedKeyError


@contextlib.contextmanager
def _pem_file(data: bytes) -> Iterator[str]:
    """A path that holds ``data``, for ``load_cert_chain``, which only reads files.

    PEM that was read once is loaded from memory (a memfd) rather than by opening
    the path again: what was checked is what is loaded, and an inline key never
    touches the disk. Without memfd, a private temporary directory does."""
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fd = os.memfd_create("accel-exporter-pem", os.MFD_CLOEXEC)
        try:
            with os.fdopen(os.dup(fd), "wb") as f:
                f.write(data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "pem"
        path.touch(mode=0o600)
        path.write_bytes(data)
        yield str(path)
