"""The exporter-toolkit web config: every refusal names file:line:col and the key,
a valid TLS config gives an SSLContext that really handshakes (client certificates
included), and basic auth accepts the right password only. Certificates are made
here with `cryptography`; bcrypt runs at cost 4 to stay fast."""

from __future__ import annotations

import base64
import contextlib
import errno
import os
import ssl
import textwrap
import warnings
from collections.abc import Callable
from pathlib import Path

import bcrypt
import pytest

from accel_common import readfile
from accel_common.readfile import FieldError
from exporter import basicauth, webconfig
from exporter.webconfig import WebConfig, WebConfigError, load_web_config
from tests.support.pki import Pki

# -- helpers -------------------------------------------------------------------------


def write(directory: Path, text: str, name: str = "web.yml") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def refusal(path: Path) -> WebConfigError:
    with pytest.raises(WebConfigError) as info:
        load_web_config(path)
    message = str(info.value)
    assert "\n" not in message
    return info.value


def handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext) -> ssl.SSLObject:
    """A real TLS handshake between two contexts over memory BIOs; returns the
    server side. Raises the SSLError of whichever side refuses."""
    s_in, s_out, c_in, c_out = (ssl.MemoryBIO() for _ in range(4))
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname="localhost")
    done: set[str] = set()
    for _ in range(10):
        for name, side in (("client", client), ("server", server)):
            if name not in done:
                try:
                    side.do_handshake()
                    done.add(name)
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if len(done) == 2:
            # TLS 1.3 servers judge the client's certificate after the client is
            # done; one more read lets a refusal surface.
            with contextlib.suppress(ssl.SSLWantReadError):
                server.read(1)
            return server
    raise AssertionError("handshake did not finish")


def client_context(pki: Pki, cert: str | None = None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cadata=pki.server_pem.decode())
    if cert is not None:
        ctx.load_cert_chain(pki.dir / f"{cert}.crt", pki.dir / f"{cert}.key")
    return ctx


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def bcrypt_hash(password: str, prefix: bytes = b"$2b$") -> str:
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4))
    return (prefix + hashed[4:]).decode()


# -- valid configs -------------------------------------------------------------------


def test_empty_file_is_plain_http_without_auth(tmp_path: Path) -> None:
    cfg = load_web_config(write(tmp_path, ""))
    assert cfg.ssl_context is None and cfg.users == {} and cfg.headers == {}
    assert cfg.check_basic_auth(None)


def test_tls_context_serves(pki: Pki, tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""
        tls_server_config:
          cert_file: {pki.dir}/server.crt
          key_file: {pki.dir}/server.key
        """,
    )
    ctx = load_web_config(path).ssl_context
    assert isinstance(ctx, ssl.SSLContext)
    assert ctx.verify_mode == ssl.CERT_NONE
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert ctx.maximum_version == ssl.TLSVersion.TLSv1_3
    assert ctx.options & ssl.OP_CIPHER_SERVER_PREFERENCE
    server = handshake(ctx, client_context(pki))
    assert server.version() == "TLSv1.3"


def test_relative_paths_resolve_against_the_config_directory(
    pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    etc = tmp_path / "etc"
    (etc / "certs").mkdir(parents=True)
    for name in ("server.crt", "server.key", "ca.crt"):
        (etc / "certs" / name).write_bytes((pki.dir / name).read_bytes())
    path = write(
        etc,
        """
        tls_server_config:
          cert_file: certs/server.crt
          key_file: certs/server.key
          client_ca_file: certs/ca.crt
          client_auth_type: RequireAndVerifyClientCert
        """,
    )
    monkeypatch.chdir(tmp_path)  # anywhere but etc/
    assert load_web_config(path).ssl_context is not None


def test_require_and_verify_client_cert(pki: Pki, tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""
        tls_server_config:
          cert_file: {pki.dir}/server.crt
          key_file: {pki.dir}/server.key
          client_auth_type: RequireAndVerifyClientCert
          client_ca_file: {pki.dir}/ca.crt
        """,
    )
    ctx = load_web_config(path).ssl_context
    assert ctx is not None and ctx.verify_mode == ssl.CERT_REQUIRED
    server = handshake(ctx, client_context(pki, "client"))
    peer = server.getpeercert()
    assert peer is not None and peer["subject"] == ((("commonName", "prometheus"),),)
    with pytest.raises(ssl.SSLError):
        handshake(ctx, client_context(pki))  # no certificate
    with pytest.raises(ssl.SSLError):
        handshake(ctx, client_context(pki, "rogue"))  # not signed by the CA


def test_verify_client_cert_if_given(pki: Pki, tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""
        tls_server_config:
          cert_file: {pki.dir}/server.crt
          key_file: {pki.dir}/server.key
          client_auth_type: VerifyClientCertIfGiven
          client_ca_file: {pki.dir}/ca.crt
        """,
    )
    ctx = load_web_config(path).ssl_context
    assert ctx is not None and ctx.verify_mode == ssl.CERT_OPTIONAL
    handshake(ctx, client_context(pki))
    with pytest.raises(ssl.SSLError):
        handshake(ctx, client_context(pki, "rogue"))


def test_inline_pem(pki: Pki, tmp_path: Path) -> None:
    path = tmp_path / "web.yml"
    path.write_text(
        "tls_server_config:\n"
        "  client_auth_type: RequireAndVerifyClientCert\n"
        + "".join(
            f"  {key}: |\n" + textwrap.indent(pem.decode(), "    ")
            for key, pem in (
                ("cert", pki.server_pem),
                ("key", pki.key_pem),
                ("client_ca", pki.ca_pem),
            )
        )
    )
    ctx = load_web_config(path).ssl_context
    assert ctx is not None
    handshake(ctx, client_context(pki, "client"))


def test_tls_tuning(pki: Pki, tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""
        tls_server_config:
          cert_file: {pki.dir}/server.crt
          key_file: {pki.dir}/server.key
          min_version: TLS10
          max_version: TLS12
          cipher_suites:
            - TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
            - TLS_AES_128_GCM_SHA256
          curve_preferences: [CurveP256]
          prefer_server_cipher_suites: false
        http_server_config:
          http2: false
        """,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # choosing TLS 1.0 explicitly is not noise
        ctx = load_web_config(path).ssl_context
    assert ctx is not None
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1
    assert ctx.maximum_version == ssl.TLSVersion.TLSv1_2
    assert not ctx.options & ssl.OP_CIPHER_SERVER_PREFERENCE
    names = {c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"}
    assert names == {"ECDHE-ECDSA-AES128-GCM-SHA256"}
    server = handshake(ctx, client_context(pki))
    assert server.version() == "TLSv1.2"
    cipher = server.cipher()
    assert cipher is not None and cipher[0] == "ECDHE-ECDSA-AES128-GCM-SHA256"


def test_headers(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        http_server_config:
          headers:
            X-Frame-Options: deny
            X-Content-Type-Options: nosniff
            X-XSS-Protection: 0
            Strict-Transport-Security: max-age=31536000; includeSubDomains
            Content-Security-Policy: ""
        """,
    )
    assert load_web_config(path).headers == {
        "X-Frame-Options": "deny",
        "X-Content-Type-Options": "nosniff",
        # Written as YAML's integer 0: the header value is the text as written.
        "X-XSS-Protection": "0",
        "Strict-Transport-Security": "max-age=31536000; includeSubDomains",
    }


# -- refusals --------------------------------------------------------------------------

# (name, YAML with {d} for the PKI directory, line, column, key, part of the message)
REFUSALS: list[tuple[str, str, int, int, str, str]] = [
    (
        "unknown top-level key",
        "tls_server_confg:\n  cert_file: x\n",
        1,
        1,
        "tls_server_confg",
        "unknown key; did you mean 'tls_server_config'?",
    ),
    (
        "unknown tls key",
        "tls_server_config:\n  cert_fle: {d}/server.crt\n",
        2,
        3,
        "tls_server_config.cert_fle",
        "did you mean 'cert_file'?",
    ),
    (
        "cert_file without key_file",
        "tls_server_config:\n  cert_file: {d}/server.crt\n",
        2,
        3,
        "tls_server_config.cert_file",
        "set without key_file",
    ),
    (
        "key_file without cert_file",
        "tls_server_config:\n  key_file: {d}/server.key\n",
        2,
        3,
        "tls_server_config.key_file",
        "set without cert_file",
    ),
    (
        "missing cert file",
        "tls_server_config:\n  cert_file: x.crt\n  key_file: {d}/server.key\n",
        2,
        14,
        "tls_server_config.cert_file",
        "no such file 'x.crt'",
    ),
    (
        "missing key file",
        "tls_server_config:\n  cert_file: {d}/server.crt\n  key_file: nope.key\n",
        3,
        13,
        "tls_server_config.key_file",
        "no such file 'nope.key'",
    ),
    (
        "cert file is a directory",
        "tls_server_config:\n  cert_file: {d}\n  key_file: {d}/server.key\n",
        2,
        14,
        "tls_server_config.cert_file",
        "is a directory",
    ),
    (
        "cert that does not load",
        "tls_server_config:\n  cert_file: {d}/garbage.pem\n  key_file: {d}/server.key\n",
        2,
        14,
        "tls_server_config.cert_file",
        "no PEM certificate",
    ),
    (
        "key that does not load",
        "tls_server_config:\n  cert_file: {d}/server.crt\n  key_file: {d}/garbage.pem\n",
        3,
        13,
        "tls_server_config.key_file",
        "no usable PEM private key",
    ),
    (
        "key of another certificate",
        "tls_server_config:\n  cert_file: {d}/server.crt\n  key_file: {d}/other.key\n",
        3,
        13,
        "tls_server_config.key_file",
        "is not the private key of",
    ),
    (
        "encrypted key",
        "tls_server_config:\n  cert_file: {d}/server.crt\n  key_file: {d}/encrypted.key\n",
        3,
        13,
        "tls_server_config.key_file",
        "encrypted",
    ),
    (
        "cert and cert_file",
        "tls_server_config:\n  cert: x\n  cert_file: {d}/server.crt\n  key_file: {d}/server.key\n",
        2,
        3,
        "tls_server_config.cert",
        "set cert or cert_file, not both",
    ),
    (
        "TLS settings without a certificate",
        "tls_server_config:\n  min_version: TLS13\n",
        2,
        3,
        "tls_server_config",
        "without a certificate",
    ),
    (
        "misspelt client_auth_type",
        "tls_server_config:\n  cert_file: {d}/server.crt\n  key_file: {d}/server.key\n"
        "  client_auth_type: RequireAndVerifyClientCerts\n",
        4,
        21,
        "tls_server_config.client_auth_type",
        "unknown value 'RequireAndVerifyClientCerts'; did you mean 'RequireAndVerifyClientCert'?",
    ),
    (
        "unverified client certificates",
        "tls_server_config:\n  cert_file: {d}/server.crt\n  key_file: {d}/server.key\n"
        "  client_auth_type: RequireAnyClientCert\n",
        4,
        21,
        "tls_server_config.client_auth_type",
        "without verifying it",
    ),
    (
        "verifying without a CA",
        "tls_server_config:\n  cert_file: {d}/server.crt\n  key_file: {d}/server.key\n"
        "  client_auth_type: RequireAndVerifyClientCert\n",
        4,
        21,
        "tls_server_config.client_auth_type",
        "needs client_ca_file",
    ),
    (
        "CA without client_auth_type",
        "tls_server_config:\n  cert_file: {d}/server.crt\n  key_file: {d}/server.key\n"
        "  client_ca_file: {d}/ca.crt\n",
        4,
        3,
        "tls_server_config.client_ca_file",
        "without client_auth_type",
    ),
    (
        "missing CA file",
        "tls_server_config:\n  cert_file: {d}/server.crt\n  key_file: {d}/server.key\n"
        "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n",
        5,
        19,
        "tls_server_config.client_ca_file",
        "no such file 'ca.pem'",
    ),
    (
        "CA file without a certificate",
        "tls_server_config:\n  cert_file: {d}/server.crt\n  key_file: {d}/server.key\n"
        "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {d}/garbage.pem\n",
        5,
        19,
        "tls_server_config.client_ca_file",
        "no PEM certificate",
    ),
    (
        "bad min_version",
        "tls_server_config:\n  cert_file: {d}/server.crt\n  key_file: {d}/server.key\n"
        "  min_version: TLS1.2\n",
        4,
        16,
        "tls_server_config.min_version",
        "unknown value 'TLS1.2'",
    ),
    (
        "min_version above max_version",
        "tls_server_config:\n  cert_file: {d}/server.crt\n  key_file: {d}/server.key\n"
        "  max_version: TLS11\n",
        4,
        16,
        "tls_server_config.max_version",
        "min_version TLS12 is above max_version TLS11",
    ),
    (
        "unknown cipher suite",
        "tls_server_config:\n  cert_file: {d}/server.crt\n  key_file: {d}/server.key\n"
        "  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA384]\n",
        4,
        19,
        "tls_server_config.cipher_suites",
        "did you mean",
    ),
    (
        "two curves",
        "tls_server_config:\n  cert_file: {d}/server.crt\n  key_file: {d}/server.key\n"
        "  curve_preferences: [X25519, CurveP256]\n",
        4,
        22,
        "tls_server_config.curve_preferences",
        "a single curve",
    ),
    (
        "client_allowed_sans",
        "tls_server_config:\n  client_allowed_sans: [prometheus]\n",
        2,
        3,
        "tls_server_config.client_allowed_sans",
        "not supported",
    ),
    (
        "plaintext password",
        "basic_auth_users:\n  alice: hunter2\n",
        2,
        10,
        "basic_auth_users.alice",
        "not a bcrypt hash",
    ),
    (
        "unknown bcrypt variant",
        "basic_auth_users:\n  alice: $2x$04$" + "a" * 53 + "\n",
        2,
        10,
        "basic_auth_users.alice",
        "not a bcrypt hash",
    ),
    (
        "user without a hash",
        "basic_auth_users:\n  alice:\n",
        2,
        9,
        "basic_auth_users.alice",
        "expected a bcrypt hash, got nothing",
    ),
    (
        "header value that is not a string",
        "http_server_config:\n  headers:\n    X-Frame-Options: [deny]\n",
        3,
        22,
        "http_server_config.headers.X-Frame-Options",
        "expected a string, got a list",
    ),
    (
        "header that cannot be set",
        "http_server_config:\n  headers:\n    X-Frame-Option: deny\n",
        3,
        5,
        "http_server_config.headers.X-Frame-Option",
        "did you mean 'X-Frame-Options'?",
    ),
    (
        "header value outside its enumeration",
        "http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
        3,
        22,
        "http_server_config.headers.X-Frame-Options",
        "use one of deny, sameorigin",
    ),
    (
        "headers that are not a mapping",
        "http_server_config:\n  headers: nosniff\n",
        2,
        12,
        "http_server_config.headers",
        "expected a mapping",
    ),
    (
        "http2 that is not a boolean",
        "http_server_config:\n  http2: maybe\n",
        2,
        10,
        "http_server_config.http2",
        "expected true or false, got 'maybe'",
    ),
    (
        "rate_limit",
        "rate_limit:\n  interval: 1s\n  burst: 20\n",
        1,
        1,
        "rate_limit",
        "not supported",
    ),
    (
        "duplicate key",
        "basic_auth_users: {{}}\nbasic_auth_users: {{}}\n",
        2,
        1,
        "basic_auth_users",
        "duplicate key (first set on line 1)",
    ),
]


@pytest.mark.parametrize(
    ("yaml_text", "line", "column", "key", "problem"),
    [r[1:] for r in REFUSALS],
    ids=[r[0] for r in REFUSALS],
)
def test_refusal(
    pki: Pki, tmp_path: Path, yaml_text: str, line: int, column: int, key: str, problem: str
) -> None:
    path = write(tmp_path, yaml_text.format(d=pki.dir))
    err = refusal(path)
    assert str(err).startswith(f"{path}:{line}:{column}: {key}: "), str(err)
    assert problem in str(err)
    assert (err.line, err.column) == (line, column)


def test_refusal_never_echoes_a_password(tmp_path: Path) -> None:
    err = refusal(write(tmp_path, "basic_auth_users:\n  alice: correct-horse-battery\n"))
    assert "correct-horse-battery" not in str(err)
    assert "htpasswd" in str(err)  # says how to make a hash


def test_unreadable_key(pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = tmp_path / "locked.key"
    key.write_bytes(pki.key_pem)
    key.chmod(0)
    if os.geteuid() == 0:
        # root reads a mode-0 file; make it fail the way it fails for everyone else.
        real = readfile.read_bytes

        def read_bytes(path: Path, limit: int) -> bytes:
            if path == key:
                raise FieldError("Permission denied", path, errno.EACCES)
            return real(path, limit)

        monkeypatch.setattr(webconfig, "read_bytes", read_bytes)
    path = write(
        tmp_path, f"tls_server_config:\n  cert_file: {pki.dir}/server.crt\n  key_file: {key}\n"
    )
    err = refusal(path)
    assert str(err).startswith(f"{path}:3:13: tls_server_config.key_file: cannot read")
    assert "permission denied" in str(err)


@pytest.mark.parametrize(
    ("text", "position", "problem"),
    [
        ("tls_server_config: [\n", ":2:1: ", "invalid YAML"),
        ("- tls_server_config\n", ":1:1: ", "expected a mapping of tls_server_config"),
        ("a: 1\n---\nb: 2\n", ":2:1: ", "invalid YAML"),
    ],
    ids=["syntax", "not a mapping", "two documents"],
)
def test_refusal_of_the_whole_file(tmp_path: Path, text: str, position: str, problem: str) -> None:
    path = write(tmp_path, text)
    err = str(refusal(path))
    assert err.startswith(f"{path}{position}"), err
    assert problem in err


def test_missing_config_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yml"
    err = refusal(path)
    assert str(err) == f"{path}: no such file; check --web.config.file"
    assert err.line is None


# -- basic auth ------------------------------------------------------------------------


@pytest.fixture
def users(tmp_path: Path) -> WebConfig:
    path = write(
        tmp_path,
        f"""
        basic_auth_users:
          alice: {bcrypt_hash("wonderland")}
          bob: {bcrypt_hash("builder", prefix=b"$2y$")}
        """,
    )
    return load_web_config(path)


def test_basic_auth_accepts_the_right_password(users: WebConfig) -> None:
    assert users.check_basic_auth(basic("alice", "wonderland"))
    assert users.check_basic_auth(basic("bob", "builder"))  # an htpasswd ($2y$) hash
    # The scheme is case-insensitive (RFC 7617).
    assert users.check_basic_auth(basic("alice", "wonderland").replace("Basic", "basic"))


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        basic("alice", "wrong"),
        basic("alice", "wonderland "),
        basic("bob", "wonderland"),
        basic("mallory", "wonderland"),
        basic("alice", "x" * 100),  # bcrypt refuses passwords over 72 bytes
        "Bearer abc",
        "Basic",
        "Basic !!!not-base64!!!",
        "Basic " + base64.b64encode(b"alice").decode(),  # no colon
        "Basic " + base64.b64encode(b"\xff\xfe:wonderland").decode(),  # not UTF-8
    ],
    ids=[
        "none",
        "empty",
        "wrong password",
        "trailing space",
        "another user's password",
        "unknown user",
        "too long",
        "other scheme",
        "no credentials",
        "bad base64",
        "no colon",
        "not utf-8",
    ],
)
def test_basic_auth_rejects(users: WebConfig, header: str | None) -> None:
    assert not users.check_basic_auth(header)


def test_basic_auth_caches_successes_only(
    users: WebConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[bytes] = []
    real: Callable[[bytes, bytes], bool] = basicauth.checkpw

    def counting(password: bytes, hashed: bytes) -> bool:
        calls.append(hashed)
        return real(password, hashed)

    monkeypatch.setattr(basicauth, "checkpw", counting)
    for _ in range(3):
        assert users.check_basic_auth(basic("alice", "wonderland"))
    assert len(calls) == 1
    for _ in range(2):
        assert not users.check_basic_auth(basic("alice", "wrong"))
    assert len(calls) == 3  # a wrong guess always pays bcrypt
    assert not users.check_basic_auth(basic("mallory", "wonderland"))
    # An unknown user is compared too, against a decoy of the users' cost.
    assert len(calls) == 4
    decoy = calls[-1]
    assert decoy not in users.users.values() and decoy[4:6] == b"04"


def test_no_users_lets_everyone_in(tmp_path: Path) -> None:
    cfg = load_web_config(write(tmp_path, "basic_auth_users:\n"))
    assert cfg.users == {}
    assert cfg.check_basic_auth(None)
    assert cfg.check_basic_auth("Basic garbage")


# -- hostile input -----------------------------------------------------------------------


def _tls_with(pki: Pki, **files: str) -> str:
    """A tls_server_config whose keys default to the PKI's and take ``files``'s."""
    keys = {"cert_file": f"{pki.dir}/server.crt", "key_file": f"{pki.dir}/server.key", **files}
    return "tls_server_config:\n" + "".join(f"  {k}: {v}\n" for k, v in keys.items())


@pytest.mark.parametrize("content", ["", "\n  \n"], ids=["empty", "blank"])
@pytest.mark.parametrize(
    ("key", "line", "extra"),
    [
        ("cert_file", 2, {}),
        ("key_file", 3, {}),
        ("client_ca_file", 5, {"client_auth_type": "RequireAndVerifyClientCert"}),
    ],
)
def test_an_empty_pem_file_is_named(
    pki: Pki, tmp_path: Path, content: str, key: str, line: int, extra: dict[str, str]
) -> None:
    empty = tmp_path / "empty.pem"
    empty.write_text(content)
    path = write(tmp_path, _tls_with(pki, **extra, **{key: str(empty)}))
    err = refusal(path)
    assert str(err) == (
        f"{path}:{line}:{len(key) + 5}: tls_server_config.{key}: "
        f"'{empty}' is empty; name a PEM file"
    )


def test_special_files_are_refused_without_reading(pki: Pki, tmp_path: Path) -> None:
    fifo = tmp_path / "cert.fifo"
    os.mkfifo(fifo)
    # A FIFO nobody writes to would block a plain open() forever.
    err = refusal(write(tmp_path, _tls_with(pki, cert_file=str(fifo))))
    assert f"'{fifo}' is a FIFO; name a PEM file" in str(err)
    err = refusal(write(tmp_path, _tls_with(pki, key_file="/dev/zero")))
    assert "'/dev/zero' is a character device; name a PEM file" in str(err)
    err = refusal(write(tmp_path, _tls_with(pki, cert_file=str(tmp_path))))
    assert "is a directory; name a PEM file" in str(err)


def test_an_oversized_pem_file_is_refused(pki: Pki, tmp_path: Path) -> None:
    big = tmp_path / "big.crt"
    big.write_bytes(pki.server_pem * (webconfig.PEM_LIMIT // len(pki.server_pem) + 1))
    err = refusal(write(tmp_path, _tls_with(pki, cert_file=str(big))))
    assert f"is larger than {webconfig.PEM_LIMIT} bytes; name a PEM file" in str(err)


def test_the_config_file_itself_is_read_bounded(tmp_path: Path) -> None:
    fifo = tmp_path / "web.fifo"
    os.mkfifo(fifo)
    assert str(refusal(fifo)) == f"{fifo}: a FIFO; name a YAML file"
    assert str(refusal(Path("/dev/zero"))) == "/dev/zero: a character device; name a YAML file"
    latin1 = tmp_path / "latin1.yml"
    latin1.write_bytes(b"http_server_config:\n  headers: {X-Frame-Options: d\xe9ny}\n")
    err = refusal(latin1)
    assert str(err) == f"{latin1}:2:31: not UTF-8 text; save it as UTF-8 YAML"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("\"default-src 'self'\\r\\nSet-Cookie: a=b\"", "a line break (U+000D) at character 19"),
        ('"nosniff\\n"', "a line break (U+000A) at character 8"),
        ("|\n      default-src 'self'\n      script-src 'none'", "a line break (U+000A)"),
        ('"a\\x01b"', "a control character (U+0001) at character 2"),
        ('"a\\x7fb"', "a control character (U+007F) at character 2"),
        ('"caf\\u00e9"', "a non-ASCII character (U+00E9) at character 4"),
    ],
    ids=["CRLF", "LF", "literal block", "SOH", "DEL", "non-ASCII"],
)
def test_a_header_value_that_would_break_responses_is_refused(
    tmp_path: Path, value: str, problem: str
) -> None:
    path = write(tmp_path, "http_server_config:\n  headers:\n    Content-Security-Policy: X\n")
    path.write_text(path.read_text().replace("X", value))
    err = refusal(path)
    assert str(err).startswith(
        f"{path}:3:30: http_server_config.headers.Content-Security-Policy: the value has "
    ), str(err)
    assert problem in str(err)
    assert "one line of printable ASCII" in str(err)


def test_header_values_that_are_one_line_still_load(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        http_server_config:
          headers:
            Content-Security-Policy: >-
              default-src 'self';
              script-src 'none'
            Strict-Transport-Security: "max-age=1;\\tpreload"
        """,
    )
    assert load_web_config(path).headers == {
        "Content-Security-Policy": "default-src 'self'; script-src 'none'",
        "Strict-Transport-Security": "max-age=1;\tpreload",
    }


def test_an_overlong_header_value_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "http_server_config:\n  headers:\n    Content-Security-Policy: X\n")
    path.write_text(path.read_text().replace("X", "a" * 9000))
    err = refusal(path)
    assert "the value is 9000 characters long" in str(err)


def test_the_cache_is_keyed_so_a_wrong_password_never_hits(users: WebConfig) -> None:
    auth = users.auth
    assert auth.cached(basic("alice", "wonderland")) is None  # nothing cached yet
    assert users.check_basic_auth(basic("alice", "wonderland"))
    assert auth.cached(basic("alice", "wonderland")) is True
    # Near misses are unknown to the cache, and so go to bcrypt, which refuses them.
    for header in (basic("alice", "wonderlanD"), basic("bob", "wonderland")):
        assert auth.cached(header) is None
        assert not users.check_basic_auth(header)
    # What cannot pass is refused without bcrypt.
    refused: list[str | None] = [None, "Bearer x", basic("alice", "x" * 73)]
    for bad in refused:
        assert auth.cached(bad) is False
    # The cache holds salted digests: no password, and nothing another process
    # (with its own salt) would compute.
    cached = list(auth._passed)
    assert len(cached) == 1 and b"wonderland" not in cached[0]
    other = load_web_config_from(users)
    assert other.auth._key("alice", b"wonderland") != cached[0]


def load_web_config_from(cfg: WebConfig) -> WebConfig:
    return WebConfig(users=dict(cfg.users))


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ('"a\\0b.crt"', "a file name cannot hold a NUL character"),
        ("~no-such-user-here/x.crt", "cannot expand '~no-such-user-here/x.crt'"),
    ],
    ids=["NUL", "unknown user"],
)
def test_file_names_that_cannot_be_opened_are_refused(
    pki: Pki, tmp_path: Path, name: str, problem: str
) -> None:
    err = refusal(write(tmp_path, _tls_with(pki, cert_file=name)))
    assert str(err).startswith(f"{tmp_path / 'web.yml'}:2:14: tls_server_config.cert_file: ")
    assert problem in str(err)


@pytest.mark.parametrize(
    ("key", "extra"),
    [("cert_file", {}), ("client_ca_file", {"client_auth_type": "RequireAndVerifyClientCert"})],
)
def test_a_pem_file_that_is_not_ascii_is_refused(
    pki: Pki, tmp_path: Path, key: str, extra: dict[str, str]
) -> None:
    """Fuzz finding F3: non-ASCII bytes gave a TypeError from ssl."""
    latin1 = tmp_path / "latin1.pem"
    latin1.write_bytes(b"\xff\xfe\x00-----BEGIN\n" + pki.server_pem)
    err = refusal(write(tmp_path, _tls_with(pki, **extra, **{key: str(latin1)})))
    assert f"tls_server_config.{key}: no PEM certificate in '{latin1}'" in str(err)
