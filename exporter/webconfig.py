"""The ``--web.config.file`` of the Prometheus exporter-toolkit: TLS, basic auth and
response headers, in the format node_exporter users already write.

Why it is built this way:

* **Everything fails at startup.** The file is parsed, every key checked, every
  certificate, key and CA loaded into the ``ssl.SSLContext`` here, in the loader, so
  a typo or an unreadable key stops the exporter with one line that names the file,
  the line and column, the key, what is wrong and what to do; it never surfaces as
  a failed handshake on the first scrape. The file is read by
  ``accel_common.yamlread``, as every YAML file of this project is (the same size
  limit, the same YAML error messages, the same positions); unlike the rule
  loaders, this one stops at the first problem, because each check builds on the
  ``SSLContext`` the previous ones made, and exporter-toolkit stops there too.
* **Same meaning as exporter-toolkit**: the same keys, defaults (TLS 1.2 to 1.3,
  server cipher preference), header whitelist, relative paths resolved against the
  config file's directory, bcrypt hashes for ``basic_auth_users`` (checked by
  ``exporter.basicauth``, with its cache of successes and its decoy).
* **Nothing named here can hang or exhaust the exporter**: the file and every PEM
  it names are read bounded and only if regular files (``accel_common.readfile``);
  an empty PEM file is named as such; a header value with a line break or another
  control character, which would break every response, is refused at its position.
* **Stricter where Python's ``ssl`` cannot follow Go**, refused with the reason
  rather than half-honoured: ``RequestClientCert``/``RequireAnyClientCert`` accept
  a client certificate without verifying it, which ``ssl`` cannot do; the verifying
  modes need a client CA (Go would fall back to the system roots, which would let
  any publicly trusted certificate in); ``curve_preferences`` takes one curve
  (``set_ecdh_curve``); ``client_allowed_sans`` and ``rate_limit`` are not
  implemented. Settings that only tune the transport are accepted: ``http2`` (the
  aiohttp server speaks HTTP/1.1, which every Prometheus speaks too) and TLS 1.3
  names in ``cipher_suites`` (as in Go, ``cipher_suites`` governs TLS 1.2 and
  below only).
* Secrets never appear in an error message: a ``basic_auth_users`` value that is
  not a bcrypt hash may be a plaintext password.
"""

from __future__ import annotations

import errno
import ssl
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from accel_common.readfile import FieldError, read_bytes
from accel_common.suggest import did_you_mean
from accel_common.yamlread import LIMITS, Entries, Position, Reader, is_null, kind
from exporter.basicauth import BCRYPT_HASH, BasicAuth
from exporter.pemload import EncryptedKeyError, load_cert_chain

TOP_KEYS = ("tls_server_config", "http_server_config", "basic_auth_users", "rate_limit")
TLS_KEYS = (
    "cert",
    "key",
    "client_ca",
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
    "client_allowed_sans",
    "min_version",
    "max_version",
    "cipher_suites",
    "prefer_server_cipher_suites",
    "curve_preferences",
)
HTTP_KEYS = ("http2", "headers")

CLIENT_AUTH_TYPES: dict[str, ssl.VerifyMode | None] = {
    "NoClientCert": ssl.CERT_NONE,
    # Go accepts a client certificate without verifying it in these two; OpenSSL
    # through Python's ssl verifies every certificate it asks for.
    "RequestClientCert": None,
    "RequireAnyClientCert": None,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
# exporter-toolkit still accepts this old spelling of RequireAnyClientCert.
_CLIENT_AUTH_ALIASES = {"RequireClientCert": "RequireAnyClientCert"}

TLS_VERSIONS: dict[str, ssl.TLSVersion] = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}

# Go's names (crypto/tls CipherSuites()) -> OpenSSL's. None: a TLS 1.3 suite, which
# neither Go nor OpenSSL lets a server configure, so Go ignores it and so do we.
CIPHER_SUITES: dict[str, str | None] = {
    "TLS_AES_128_GCM_SHA256": None,
    "TLS_AES_256_GCM_SHA384": None,
    "TLS_CHACHA20_POLY1305_SHA256": None,
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
}

CURVES = {
    "CurveP256": "prime256v1",
    "CurveP384": "secp384r1",
    "CurveP521": "secp521r1",
    "X25519": "X25519",
}

# The response headers exporter-toolkit lets a config set, with the values it
# accepts where the header is an enumeration (case-sensitive, as there).
HEADERS: dict[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}

# A certificate chain or CA bundle is a few kilobytes; the system's whole CA bundle
# is about 200 KiB. More is not a PEM file someone meant to name.
PEM_LIMIT = 1024 * 1024
# aiohttp's, and most servers', limit on one request header line; a response
# header longer than this is refused by clients and proxies.
MAX_HEADER_VALUE = 8190
_HASH_HINT = "hash the password with `htpasswd -nBC 10 \"\" | tr -d ':\\n'`"


class WebConfigError(Exception):
    """A web config file that cannot be used. ``str()`` is one line:
    ``FILE[:LINE:COL]: KEY: what is wrong; what to do``."""

    def __init__(
        self, path: Path, where: str, problem: str, position: Position | None = None
    ) -> None:
        self.path = path
        at = position if position is not None and position.line > 0 else None
        self.line = at.line if at is not None else None
        self.column = at.col if at is not None else None
        location = f"{path}:{self.line}:{self.column}" if at is not None else str(path)
        message = f"{location}: {where}: {problem}" if where else f"{location}: {problem}"
        # One line, whatever a library's message brought with it.
        super().__init__(" ".join(message.split()))


@dataclass
class WebConfig:
    """What the HTTP server needs: a ready ``SSLContext`` (None: plain HTTP), the
    basic-auth users (name -> bcrypt hash; empty: no auth) and extra headers."""

    ssl_context: ssl.SSLContext | None = None
    users: dict[str, bytes] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    auth: BasicAuth = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.auth = BasicAuth(self.users)

    def check_basic_auth(self, authorization: str | None) -> bool:
        """Whether an ``Authorization`` header value lets the request in (True when
        no users are configured). A cache miss costs one bcrypt comparison: the
        server calls ``auth.cached`` on the loop and this only in its auth pool."""
        return self.auth.check(authorization)


def load_web_config(path: Path) -> WebConfig:
    """Reads and validates ``path``; raises ``WebConfigError`` on the first problem."""
    try:
        # Bounded, and only a regular file: a FIFO or /dev/zero named here must
        # not hang or exhaust the exporter before it has even started.
        data = read_bytes(path, LIMITS.max_bytes)
    except FieldError as e:
        if e.absent:
            problem = "no such file; check --web.config.file"
        elif e.errno in (errno.EACCES, errno.EPERM):
            problem = "cannot read: permission denied; make it readable by the exporter's user"
        elif e.errno is None:
            problem = f"{e.reason}; name a YAML file"
        else:
            problem = f"cannot read: {e.reason}"
        raise WebConfigError(path, "", problem) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        before = data[: e.start]
        line = before.count(b"\n") + 1
        column = len(before) - (before.rfind(b"\n") + 1) + 1
        raise WebConfigError(
            path, "", "not UTF-8 text; save it as UTF-8 YAML", Position(str(path), line, column)
        ) from None
    reader = Reader(path)
    root = reader.load(text)
    if reader.problems:
        first = reader.problems[0]
        hint = "; fix the syntax" if first.message.startswith("invalid YAML") else ""
        raise WebConfigError(path, "", first.message + hint, first.position)
    return _Loader(path).config(root)


_CA_KEYS = ("client_ca", "client_ca_file")


def _tls(key: str) -> str:
    return f"tls_server_config.{key}"


class _Loader:
    def __init__(self, path: Path) -> None:
        self.path = path
        # exporter-toolkit resolves relative paths against the config file's directory.
        self.base = path.parent
        self.reader = Reader(path)

    def fail(self, node: Node | None, where: str, problem: str) -> NoReturn:
        raise WebConfigError(self.path, where, problem, self.reader.pos(node) if node else None)

    def unknown(
        self, node: Node, where: str, what: str, word: str, known: Iterable[str]
    ) -> NoReturn:
        """Fails with ``what`` and the closest of ``known`` (or all of them)."""
        self.fail(node, where, what + did_you_mean(word, known, or_list=True))

    # -- YAML shapes -------------------------------------------------------------

    def mapping(self, node: Node | None, where: str, allowed: Sequence[str] | None) -> Entries:
        """A mapping's entries by key; ``allowed`` None takes any key. Null or
        absent is an empty mapping, as in exporter-toolkit."""
        if node is None or is_null(node):
            return {}
        if not isinstance(node, MappingNode):
            expected = f"a mapping of {', '.join(allowed)}" if allowed else "a mapping"
            self.fail(node, where, f"expected {expected}, got {self.reader.describe(node)}")
        out: Entries = {}
        for key, value in node.value:
            if not isinstance(key, ScalarNode):
                self.fail(key, where, f"a key must be a plain string, got {kind(key)}")
            name = key.value
            at = f"{where}.{name}" if where else name
            if allowed is not None and name not in allowed:
                self.unknown(key, at, "unknown key", name, allowed)
            if name in out:
                first = out[name][0].start_mark.line + 1
                self.fail(key, at, f"duplicate key (first set on line {first}); keep one")
            out[name] = (key, value)
        return out

    def string(self, node: Node, where: str) -> str | None:
        """A scalar as written (``0`` stays "0"); None for null or an empty string."""
        if is_null(node):
            return None
        if not isinstance(node, ScalarNode):
            self.fail(node, where, f"expected a string, got {kind(node)}")
        return node.value or None

    def boolean(self, node: Node, where: str) -> bool | None:
        if is_null(node):
            return None
        # YAML 1.1's booleans (true, yes, on, ...), as the shared reader constructs them.
        value = self.reader.value(node) if isinstance(node, ScalarNode) else None
        if not isinstance(value, bool):
            self.fail(node, where, f"expected true or false, got {self.reader.describe(node)}")
        return value

    def strings(self, node: Node, where: str) -> list[tuple[ScalarNode, str]]:
        if is_null(node):
            return []
        if not isinstance(node, SequenceNode):
            self.fail(node, where, f"expected a list of strings, got {kind(node)}")
        out = []
        for item in node.value:
            if not isinstance(item, ScalarNode) or is_null(item):
                self.fail(item, where, f"expected a string, got {self.reader.describe(item)}")
            out.append((item, item.value))
        return out

    def choice(self, node: Node, where: str, choices: Sequence[str]) -> str | None:
        value = self.string(node, where)
        if value is not None and value not in choices:
            self.unknown(node, where, f"unknown value '{value}'", value, choices)
        return value

    def pem(self, node: Node, where: str) -> tuple[bytes, str] | None:
        """(contents, how to name it in a message) of a ``*_file`` key."""
        name = self.string(node, where)
        if name is None:
            return None
        if "\0" in name:
            self.fail(node, where, "a file name cannot hold a NUL character; name a PEM file")
        try:
            p = Path(name).expanduser()
        except RuntimeError:  # ~user of no such user
            self.fail(node, where, f"cannot expand '{name}': no such user's home directory")
        if not p.is_absolute():
            p = self.base / p
        try:
            data = read_bytes(p, PEM_LIMIT)
        except FieldError as e:
            if e.absent:
                self.fail(
                    node,
                    where,
                    f"no such file '{name}' (looked for {p}); relative paths are resolved "
                    "against the directory of this config file",
                )
            if e.errno in (errno.EACCES, errno.EPERM):
                self.fail(
                    node,
                    where,
                    f"cannot read '{name}': permission denied; make it readable by the "
                    "exporter's user",
                )
            if e.errno is None:
                # Not a regular file (a directory, a device, a FIFO) or too large.
                self.fail(node, where, f"'{name}' is {e.reason}; name a PEM file")
            self.fail(node, where, f"cannot read '{name}': {e.reason}")
        if not data.strip():
            self.fail(node, where, f"'{name}' is empty; name a PEM file")
        return data, f"'{name}'"

    # -- sections ----------------------------------------------------------------

    def config(self, root: Node | None) -> WebConfig:
        top = self.mapping(root, "", TOP_KEYS)
        if "rate_limit" in top and not is_null(top["rate_limit"][1]):
            self.fail(
                top["rate_limit"][0],
                "rate_limit",
                "not supported by accel-exporter (a scrape is served from bytes rendered "
                "once per poll, so scrapes are cheap); remove it",
            )
        tls = top.get("tls_server_config")
        http = top.get("http_server_config")
        users = top.get("basic_auth_users")
        return WebConfig(
            ssl_context=self.tls(tls[1]) if tls else None,
            users=self.users(users[1]) if users else {},
            headers=self.http(http[1]) if http else {},
        )

    def users(self, node: Node) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for name, (_, value) in self.mapping(node, "basic_auth_users", None).items():
            where = f"basic_auth_users.{name}"
            # The value is never echoed: it may be a plaintext password.
            if not isinstance(value, ScalarNode) or is_null(value):
                self.fail(value, where, f"expected a bcrypt hash, got {kind(value)}; {_HASH_HINT}")
            hashed = value.value.encode()
            if not BCRYPT_HASH.match(hashed):
                self.fail(
                    value,
                    where,
                    "not a bcrypt hash (expected $2a$, $2b$ or $2y$, a cost of 04-31 "
                    f"and 53 characters of salt and hash); {_HASH_HINT}",
                )
            out[name] = hashed
        return out

    def http(self, node: Node) -> dict[str, str]:
        fields = self.mapping(node, "http_server_config", HTTP_KEYS)
        if "http2" in fields:
            # Accepted for compatibility; the aiohttp server speaks HTTP/1.1 only.
            self.boolean(fields["http2"][1], "http_server_config.http2")
        if "headers" not in fields:
            return {}
        out: dict[str, str] = {}
        entries = self.mapping(fields["headers"][1], "http_server_config.headers", None)
        for name, (key, value) in entries.items():
            where = f"http_server_config.headers.{name}"
            if name not in HEADERS:
                self.unknown(key, where, "this header cannot be set", name, HEADERS)
            if not isinstance(value, ScalarNode):
                self.fail(value, where, f"expected a string, got {kind(value)}")
            text = self.string(value, where)
            if text is None:
                continue  # "Unset if blank", as exporter-toolkit documents
            self.header_value(value, where, text)
            allowed = HEADERS[name]
            if allowed and text not in allowed:
                self.fail(value, where, f"'{text}' is not allowed; use one of {', '.join(allowed)}")
            out[name] = text
        return out

    def header_value(self, node: Node, where: str, text: str) -> None:
        """Refuses what would break every response or smuggle a header of its own:
        a line break, another control character, non-ASCII, or a size no client
        accepts. Go's net/http drops such a header silently; this says so at start."""
        for index, char in enumerate(text):
            if char != "\t" and not " " <= char <= "~":
                what = (
                    "a line break"
                    if char in "\r\n"
                    else ("a control character" if char.isascii() else "a non-ASCII character")
                )
                self.fail(
                    node,
                    where,
                    f"the value has {what} (U+{ord(char):04X}) at character {index + 1}; "
                    "a header value is one line of printable ASCII (for a long value, "
                    "use a folded YAML scalar, >-, which joins lines with spaces)",
                )
        if len(text) > MAX_HEADER_VALUE:
            self.fail(
                node,
                where,
                f"the value is {len(text)} characters long; clients refuse header values "
                f"over {MAX_HEADER_VALUE}, shorten it",
            )

    def tls(self, node: Node) -> ssl.SSLContext | None:
        fields: Entries = {
            k: kv
            for k, kv in self.mapping(node, "tls_server_config", TLS_KEYS).items()
            if not is_null(kv[1])
        }
        if not fields:
            return None
        self.tls_refusals(fields)
        auth_name, verify_mode = self.client_auth(fields)
        minimum, maximum = self.versions(fields)
        ciphers = self.ciphers(fields)
        curve = self.curve(fields)
        prefer_server = True
        if "prefer_server_cipher_suites" in fields:
            chosen = self.boolean(
                fields["prefer_server_cipher_suites"][1], _tls("prefer_server_cipher_suites")
            )
            prefer_server = True if chosen is None else chosen
        cert_key, cert, key_key, key = self.key_pair(fields)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with warnings.catch_warnings():
            # Setting TLS 1.0/1.1 warns that they are deprecated; the file asked for
            # them explicitly, and the warning would only be noise at startup.
            warnings.simplefilter("ignore", DeprecationWarning)
            ctx.minimum_version = minimum
            ctx.maximum_version = maximum
        if prefer_server:
            ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
        else:
            ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
        self.key_exchange(ctx, fields, ciphers, curve)
        self.load_chain(
            ctx,
            (fields[cert_key][1], _tls(cert_key), cert),
            (fields[key_key][1], _tls(key_key), key),
        )
        self.client_ca(ctx, fields, auth_name, verify_mode)
        return ctx

    def tls_refusals(self, fields: Entries) -> None:
        """What is refused before anything is built: a key not implemented, and a
        PEM set both inline and as a file."""
        if "client_allowed_sans" in fields:
            self.fail(
                fields["client_allowed_sans"][0],
                _tls("client_allowed_sans"),
                "not supported by accel-exporter; use client_auth_type "
                "RequireAndVerifyClientCert with a client_ca_file that signs only the "
                "clients you allow",
            )
        # Inline PEM and *_file name the same thing; exporter-toolkit silently
        # prefers the file, which hides a mistake.
        for inline, file_key in (("cert", "cert_file"), ("key", "key_file"), _CA_KEYS):
            if inline in fields and file_key in fields:
                self.fail(fields[inline][0], _tls(inline), f"set {inline} or {file_key}, not both")

    def key_pair(self, fields: Entries) -> tuple[str, tuple[bytes, str], str, tuple[bytes, str]]:
        """The certificate and its key (each key written, and its PEM); both or
        neither is a mistake to say, never plain HTTP served instead."""
        cert_key, cert = self.source(fields, "cert", "cert_file")
        key_key, key = self.source(fields, "key", "key_file")
        if cert is None and key is None:
            # Serving plain HTTP when TLS settings are present would hide the mistake.
            self.fail(
                next(iter(fields.values()))[0],
                "tls_server_config",
                "TLS settings without a certificate; add cert_file and key_file "
                "(or remove tls_server_config to serve plain HTTP)",
            )
        if key is None:
            self.fail(
                fields[cert_key][0],
                _tls(cert_key),
                "set without key_file; add key_file, the certificate's private key",
            )
        if cert is None:
            self.fail(
                fields[key_key][0],
                _tls(key_key),
                "set without cert_file; add cert_file, the certificate of this key",
            )
        return cert_key, cert, key_key, key

    def key_exchange(
        self, ctx: ssl.SSLContext, fields: Entries, ciphers: list[str], curve: str | None
    ) -> None:
        """The cipher suites and the curve, refused where this OpenSSL lacks them."""
        if ciphers:
            try:
                ctx.set_ciphers(":".join(ciphers))
            except ssl.SSLError:
                self.fail(
                    fields["cipher_suites"][1],
                    _tls("cipher_suites"),
                    "none of these cipher suites is available in this OpenSSL; choose others",
                )
        if curve is not None:
            try:
                ctx.set_ecdh_curve(curve)
            except (ssl.SSLError, ValueError):
                self.fail(
                    fields["curve_preferences"][1],
                    _tls("curve_preferences"),
                    "this curve is not available in this OpenSSL; choose another",
                )

    def client_auth(self, fields: Entries) -> tuple[str, ssl.VerifyMode]:
        if "client_auth_type" not in fields:
            return "NoClientCert", ssl.CERT_NONE
        node = fields["client_auth_type"][1]
        written = self.choice(
            node, _tls("client_auth_type"), [*CLIENT_AUTH_TYPES, *_CLIENT_AUTH_ALIASES]
        )
        name = _CLIENT_AUTH_ALIASES.get(written or "", written or "NoClientCert")
        mode = CLIENT_AUTH_TYPES[name]
        if mode is None:
            self.fail(
                node,
                _tls("client_auth_type"),
                f"{name} accepts a client certificate without verifying it, which "
                "Python's ssl cannot do; use RequireAndVerifyClientCert (or "
                "VerifyClientCertIfGiven) with client_ca_file",
            )
        return name, mode

    def versions(self, fields: Entries) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
        # exporter-toolkit's defaults: TLS 1.2 to TLS 1.3.
        chosen = {"min_version": "TLS12", "max_version": "TLS13"}
        for bound in chosen:
            if bound in fields:
                written = self.choice(fields[bound][1], _tls(bound), list(TLS_VERSIONS))
                chosen[bound] = written or chosen[bound]
        minimum, maximum = chosen["min_version"], chosen["max_version"]
        if TLS_VERSIONS[minimum] > TLS_VERSIONS[maximum]:
            bound = "min_version" if "min_version" in fields else "max_version"
            self.fail(
                fields[bound][1],
                _tls(bound),
                f"min_version {minimum} is above max_version {maximum}; "
                "lower min_version or raise max_version",
            )
        return TLS_VERSIONS[minimum], TLS_VERSIONS[maximum]

    def ciphers(self, fields: Entries) -> list[str]:
        """OpenSSL names of the TLS 1.2-and-below suites asked for."""
        if "cipher_suites" not in fields:
            return []
        out: list[str] = []
        for item, name in self.strings(fields["cipher_suites"][1], _tls("cipher_suites")):
            if name not in CIPHER_SUITES:
                what = f"unknown cipher suite '{name}'"
                self.unknown(item, _tls("cipher_suites"), what, name, CIPHER_SUITES)
            openssl_name = CIPHER_SUITES[name]
            if openssl_name is not None:
                out.append(openssl_name)
        return out

    def curve(self, fields: Entries) -> str | None:
        if "curve_preferences" not in fields:
            return None
        node = fields["curve_preferences"][1]
        curves = self.strings(node, _tls("curve_preferences"))
        for item, name in curves:
            if name not in CURVES:
                what = f"unknown curve '{name}'"
                self.unknown(item, _tls("curve_preferences"), what, name, CURVES)
        if len(curves) > 1:
            self.fail(node, _tls("curve_preferences"), "Python's ssl sets a single curve; list one")
        return CURVES[curves[0][1]] if curves else None

    def client_ca(
        self, ctx: ssl.SSLContext, fields: Entries, auth_name: str, verify_mode: ssl.VerifyMode
    ) -> None:
        ca_key, ca = self.source(fields, *_CA_KEYS)
        if ca is not None and verify_mode == ssl.CERT_NONE:
            # exporter-toolkit refuses this too: a CA that is never asked for is a
            # config that believes it authenticates clients and does not.
            self.fail(
                fields[ca_key][0],
                _tls(ca_key),
                "a client CA without client_auth_type; set client_auth_type "
                "RequireAndVerifyClientCert (or remove the CA)",
            )
        if ca is None and verify_mode != ssl.CERT_NONE:
            self.fail(
                fields["client_auth_type"][1],
                _tls("client_auth_type"),
                f"{auth_name} needs client_ca_file, the CA that signs client certificates",
            )
        if ca is not None:
            try:
                # PEM is ASCII; ssl refuses a str with anything else (TypeError).
                ctx.load_verify_locations(cadata=ca[0].decode("ascii"))
            except (ssl.SSLError, ValueError, TypeError):
                self.fail(
                    fields[ca_key][1],
                    _tls(ca_key),
                    f"no PEM certificate in {ca[1]}; name a CA file",
                )
        ctx.verify_mode = verify_mode

    def source(
        self, fields: Entries, inline: str, file_key: str
    ) -> tuple[str, tuple[bytes, str] | None]:
        """Which key gives this PEM, and its (bytes, how to name it in a message)."""
        if file_key in fields:
            return file_key, self.pem(fields[file_key][1], _tls(file_key))
        if inline in fields:
            text = self.string(fields[inline][1], _tls(inline))
            return inline, ((text.encode(), f"the inline {inline}") if text else None)
        return file_key, None

    def load_chain(
        self,
        ctx: ssl.SSLContext,
        cert: tuple[Node, str, tuple[bytes, str]],
        key: tuple[Node, str, tuple[bytes, str]],
    ) -> None:
        """Loads the server certificate and key; each argument is (node, key path,
        (PEM, how to name it))."""
        cert_node, cert_where, (cert_pem, cert_name) = cert
        key_node, key_where, (key_pem, key_name) = key
        # Try the certificate alone first, so that a bad certificate and a bad key
        # get different messages (load_cert_chain says "PEM lib" for both).
        try:
            probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            probe.load_verify_locations(cadata=cert_pem.decode("ascii"))
        except (ssl.SSLError, ValueError, TypeError):  # UnicodeDecodeError: not ASCII
            self.fail(
                cert_node,
                cert_where,
                f"no PEM certificate in {cert_name}; name the server's certificate (PEM)",
            )
        try:
            load_cert_chain(ctx, cert_pem, key_pem)
        except EncryptedKeyError:
            self.fail(
                key_node,
                key_where,
                f"{key_name} is encrypted and the exporter cannot prompt for a passphrase; "
                "decrypt it (openssl pkey -in KEY -out KEY)",
            )
        except ssl.SSLError as e:
            if "KEY_VALUES_MISMATCH" in str(e) or "key values mismatch" in str(e):
                self.fail(
                    key_node,
                    key_where,
                    f"{key_name} is not the private key of {cert_name}; pair them correctly",
                )
            self.fail(
                key_node,
                key_where,
                f"no usable PEM private key in {key_name}"
                + (f" ({e.reason})" if e.reason and e.reason != "PEM lib" else "")
                + "; name the certificate's private key (PEM)",
            )
