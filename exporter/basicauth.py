"""Basic-auth checks of the exporter's web config: bcrypt, with the cache that keeps
valid scrapes off it.

bcrypt is slow on purpose (tens of milliseconds at cost 10), so the HTTP server must
never make a valid scrape wait on it. Why it is built this way:

* **Two steps.** ``cached`` answers on the event loop in microseconds: yes for a
  credential that already passed, no for one that cannot pass (no header, not
  ``Basic``, not base64, a password bcrypt refuses), and "don't know" for the rest.
  Only a "don't know" pays bcrypt, in ``check``, which the server runs in its own
  small, bounded pool (``exporter.server``), so a flood of wrong passwords queues
  behind itself, not in front of valid scrapes.
* **Only successes are cached**, as exporter-toolkit's cache is meant to be used:
  a wrong guess always pays full bcrypt cost, so guessing stays slow, and the
  cache cannot be filled by an attacker: every entry is a password that is right,
  so it holds at most one entry per user (and ``_MAX_CACHED`` whatever happens).
* **Keyed by a salted SHA-256** of the user, the user's hash and the password,
  with a salt drawn at start (exporter-toolkit keys on the same three): a wrong
  password can never meet a cached success, and the cache never holds a password
  or an unsalted digest that could be looked up in a table.
* **A decoy for unknown users**: their password is compared against a hash of the
  users' own cost, so the time taken does not tell which users exist.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import threading
from collections.abc import Mapping

import bcrypt

BCRYPT_HASH = re.compile(rb"^\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}$")

# A success is a right password, so the cache holds at most one entry per user; the
# bound only guards against what bcrypt's quirks might let through.
_MAX_CACHED = 1024
# bcrypt compares the first 72 bytes only; the Python binding refuses longer
# passwords rather than truncate them, and so do we, before any work.
_MAX_PASSWORD = 72


class BasicAuth:
    """The ``basic_auth_users`` of a web config (name -> bcrypt hash), checked.

    Thread-safe: ``cached`` runs on the event loop while ``check`` runs in a pool.
    """

    def __init__(self, users: Mapping[str, bytes]) -> None:
        self.users = dict(users)
        self._salt = os.urandom(16)
        self._passed: dict[bytes, None] = {}
        self._lock = threading.Lock()
        self._decoy: bytes | None = None

    def cached(self, authorization: str | None) -> bool | None:
        """True: let in (no users, or a credential that passed before). False:
        refuse without bcrypt (no usable credential). None: only ``check`` knows."""
        if not self.users:
            return True
        credentials = parse_basic(authorization)
        if credentials is None:
            return False
        user, password = credentials
        if len(password) > _MAX_PASSWORD:
            return False
        return True if self._key(user, password) in self._passed else None

    def check(self, authorization: str | None) -> bool:
        """The whole check; a cache miss costs one bcrypt comparison, so call this
        from a thread, not the event loop."""
        verdict = self.cached(authorization)
        if verdict is not None:
            return verdict
        credentials = parse_basic(authorization)
        assert credentials is not None  # cached() said it is well formed
        user, password = credentials
        hashed = self.users.get(user)
        # An unknown user is still compared, against a decoy of the same cost.
        ok = checkpw(password, hashed if hashed is not None else self._decoy_hash())
        if not ok or hashed is None:
            return False
        key = self._key(user, password)
        with self._lock:
            if len(self._passed) >= _MAX_CACHED:
                del self._passed[next(iter(self._passed))]
            self._passed[key] = None
        return True

    def _key(self, user: str, password: bytes) -> bytes:
        hashed = self.users.get(user, b"")
        digest = hmac.new(self._salt, digestmod=hashlib.sha256)
        for part in (user.encode(), hashed):
            # Length-prefixed, so that no two (user, hash, password) triples run
            # together into the same bytes.
            digest.update(len(part).to_bytes(4, "big") + part)
        digest.update(password)
        return digest.digest()

    def _decoy_hash(self) -> bytes:
        with self._lock:
            if self._decoy is None:
                cost = max(
                    (int(h[4:6]) for h in self.users.values() if BCRYPT_HASH.match(h)),
                    default=10,
                )
                self._decoy = bcrypt.hashpw(b"decoy password", bcrypt.gensalt(rounds=cost))
            return self._decoy


def parse_basic(authorization: str | None) -> tuple[str, bytes] | None:
    """(user, password) from ``Basic <base64 of user:password>``; None if malformed."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        raw = base64.b64decode(token.strip(), validate=True)
        user, sep, password = raw.partition(b":")
        return (user.decode("utf-8"), password) if sep else None
    except (binascii.Error, ValueError):  # UnicodeDecodeError is a ValueError
        return None


def checkpw(password: bytes, hashed: bytes) -> bool:
    try:
        return bcrypt.checkpw(password, hashed)
    except ValueError:
        # bcrypt refuses passwords over 72 bytes (and NUL bytes) rather than
        # truncate them.
        return False
