"""Credentials: read from files, refused when empty, and kept out of every log line.

One home for both halves, because they fail the same way when each caller does it
its own way. A token file made by ``--from-literal=token="$TOKEN"`` with ``TOKEN``
unset holds nothing, or a newline; read with a bare ``.strip()`` it becomes the
empty token, and ``Authorization: Bearer `` then matches it. So every reader of a
token or a ``user:password`` file (the controller's API, the Prometheus source, the
command-line flags that check them at start) goes through ``read_token`` and
``read_basic_auth``, which refuse a secret that is empty or only whitespace.

A URL may carry its own credentials (``http://user:password@prometheus:9090``).
Whatever prints a URL or an error that may quote one (an HTTP client's exception
does) passes it through ``redact`` first, which keeps the user name, so the line
still says which account was used, and hides the password:
``http://user:***@prometheus:9090``.
"""

from __future__ import annotations

import re
from pathlib import Path

MASK = "***"

# scheme://userinfo@ ; userinfo runs to the last "@" before the host's end (as
# urllib splits it), and never across whitespace, a quote or a path.
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#\s'\"<>]*)@")


class SecretError(ValueError):
    """A secret file that cannot be used; the message names the file and why."""


def redact(text: str) -> str:
    """``text`` with the password of every URL in it replaced by ``***``; a URL
    with a user but no password (``https://TOKEN@host``, a common way to pass a
    token) has its whole userinfo replaced."""

    def mask(m: re.Match[str]) -> str:
        user, sep, _ = m["userinfo"].partition(":")
        return f"{m['scheme']}{user}:{MASK}@" if sep else f"{m['scheme']}{MASK}@"

    return _USERINFO.sub(mask, text)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        raise SecretError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from e


def read_token(path: Path) -> bytes:
    """The bearer token in ``path``, without its surrounding whitespace; raises
    SecretError when nothing is left."""
    text = _read(path)
    if not text:
        raise SecretError(f"{path} is empty or only whitespace; it must hold the token")
    if any(c.isspace() for c in text):
        raise SecretError(f"{path} holds whitespace inside the token; it must be one token")
    return text.encode()


def read_basic_auth(path: Path) -> tuple[bytes, bytes]:
    """``(user, password)`` from the one line ``user:password`` in ``path``; raises
    SecretError when the file is empty or either part is."""
    text = _read(path)
    if not text:
        raise SecretError(f"{path} is empty or only whitespace; it must hold user:password")
    if "\n" in text:
        raise SecretError(f"{path} holds more than one line; it must hold one user:password")
    user, sep, password = text.partition(":")
    if not sep or not user.strip() or not password.strip():
        raise SecretError(f"{path} does not hold user:password with a non-empty user and password")
    return user.encode(), password.encode()


__all__ = ["MASK", "SecretError", "read_basic_auth", "read_token", "redact"]
