"""Closed by default: ``accel-autoscaler run`` refuses an empty secret and an
unauthenticated webhook on a non-loopback address (exit status 2, before it listens),
compares credentials in constant time, and never logs a password from a URL.

Each refusal is checked on the real command in a subprocess; nothing here listens on
anything but 127.0.0.1 (a refusal exits before it binds)."""

from __future__ import annotations

import argparse
import base64
import contextlib
import http.server
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoscaler.cli import build_parser
from autoscaler.commands.run import exposure_problem, is_loopback
from tests.support.paths import REPO
from tests.support.procs import autoscaler, free_port, http_get
from tests.support.waits import wait

RULES = """\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  evaluationInterval: 1s
  rules:
    - name: device-lost
      expr: accel_up == 0
      target: device
      action: {type: cordon}
"""

PASSWORD = "hunter2-s3cret"


def rules(tmp: Path) -> Path:
    path = tmp / "rules.yaml"
    path.write_text(RULES)
    return path


def no_cluster_env(tmp: Path) -> dict[str, str]:
    """No kubeconfig anywhere: --dry-run then only records decisions."""
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env["HOME"] = str(tmp)
    return env


def run(tmp: Path, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """``accel-autoscaler run`` that is expected to refuse, and so to exit on its own."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "autoscaler.cli",
            "run",
            "--rules",
            str(rules(tmp)),
            "--source",
            "scrape",
            "--targets",
            f"node-a=http://127.0.0.1:{free_port()}/metrics",
            "--dry-run",
            *args,
        ],
        cwd=REPO,
        env=no_cluster_env(tmp),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# --- empty secrets ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "content"),
    [
        ("--api.token-file", ""),
        ("--api.token-file", "\n"),
        ("--api.basic-auth-file", ""),
    ],
    ids=["empty-token", "newline-token", "empty-basic"],
)
def test_run_refuses_an_empty_secret(tmp_path: Path, flag: str, content: str) -> None:
    secret = tmp_path / "secret"
    secret.write_text(content)
    proc = run(tmp_path, flag, str(secret), "--web.listen-address", f"127.0.0.1:{free_port()}")
    assert proc.returncode == 2, proc.stderr
    assert flag in proc.stderr and str(secret) in proc.stderr
    assert "empty" in proc.stderr


@pytest.mark.parametrize(
    ("flag", "content"),
    [
        ("--api.token-file", "  \t\n\n"),
        ("--api.basic-auth-file", "\n"),
        ("--api.basic-auth-file", "alice\n"),
        ("--api.basic-auth-file", "alice:\n"),
        ("--api.basic-auth-file", ":password\n"),
        ("--api.basic-auth-file", " : \n"),
        ("--api.basic-auth-file", "alice:pw\nbob:pw\n"),
        ("--api.token-file", "two words\n"),
        ("--prometheus.bearer-token-file", "\n"),
        ("--prometheus.basic-auth-file", "alice:\n"),
    ],
)
def test_every_secret_flag_refuses_an_unusable_file(
    tmp_path: Path, flag: str, content: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same check on every secret flag, ``run``'s own and the source's that
    ``place`` and ``extender`` share, as argparse sees them (exit 2, flag and file
    named)."""
    secret = tmp_path / "secret"
    secret.write_text(content)
    for command in (["run", "--rules", "r.yaml"], ["place"], ["extender"]):
        if flag.startswith("--api.") and command[0] != "run":
            continue
        with pytest.raises(SystemExit) as stopped:
            build_parser().parse_args([*command, flag, str(secret)])
        assert stopped.value.code == 2
        err = capsys.readouterr().err
        assert flag in err and str(secret) in err, err


def test_usable_secrets_pass(tmp_path: Path) -> None:
    token, basic = tmp_path / "token", tmp_path / "basic"
    token.write_text("t0ken\n")
    basic.write_text("alice:pass word:with colon\n")
    args = build_parser().parse_args(
        [
            "run",
            "--rules",
            "r.yaml",
            "--api.token-file",
            str(token),
            "--api.basic-auth-file",
            str(basic),
        ]
    )
    assert (args.token_file, args.basic_auth_file) == (token, basic)


# --- no auth on a non-loopback address ----------------------------------------------


@pytest.mark.parametrize("address", ["0.0.0.0:{port}", ":{port}"])
def test_run_refuses_no_auth_on_a_non_loopback_address(tmp_path: Path, address: str) -> None:
    listen = address.format(port=free_port())
    proc = run(tmp_path, "--web.listen-address", listen)
    assert proc.returncode == 2, proc.stderr
    message = proc.stderr
    for what in (
        "--api.token-file",
        "--api.basic-auth-file",
        "127.0.0.1",
        "--api.allow-unauthenticated",
    ):
        assert what in message, message
    assert "listening on" not in message


def test_the_default_address_is_not_loopback(tmp_path: Path) -> None:
    proc = run(tmp_path)
    assert proc.returncode == 2
    assert ":9836" in proc.stderr and "--api.allow-unauthenticated" in proc.stderr


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.3.2.1", True),
        ("::1", True),
        ("localhost", True),
        ("LocalHost", True),
        (None, False),  # :PORT, every interface
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.5", False),
        ("192.168.1.1", False),
        ("accel-autoscaler.example", False),
        ("128.0.0.1", False),
    ],
)
def test_loopback_is_127_8_and_ipv6_1_and_localhost(host: str | None, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def namespace(**kw: object) -> argparse.Namespace:
    base: dict[str, object] = dict(
        token_file=None,
        basic_auth_file=None,
        listen_address=":9836",
        allow_unauthenticated=False,
    )
    return argparse.Namespace(**{**base, **kw})


def test_the_exposure_rule() -> None:
    assert exposure_problem(namespace()) is not None
    assert exposure_problem(namespace(listen_address="0.0.0.0:9836")) is not None
    assert exposure_problem(namespace(listen_address="[::]:9836")) is not None
    assert exposure_problem(namespace(listen_address="10.0.0.5:9836")) is not None
    assert exposure_problem(namespace(listen_address="127.0.0.1:9836")) is None
    assert exposure_problem(namespace(listen_address="[::1]:9836")) is None
    assert exposure_problem(namespace(allow_unauthenticated=True)) is None
    assert exposure_problem(namespace(token_file=Path("t"))) is None
    assert exposure_problem(namespace(basic_auth_file=Path("b"))) is None


def test_allow_unauthenticated_starts_and_warns(tmp_path: Path) -> None:
    """Started on 127.0.0.1 (tests bind nothing else): the flag is the operator's
    "I know", and it is said again at every start."""
    log = tmp_path / "run.log"
    args = ["--rules", str(rules(tmp_path)), "--source", "scrape", "--dry-run"]
    args += ["--targets", f"node-a=http://127.0.0.1:{free_port()}/metrics"]
    with (
        log.open("wb") as out,
        autoscaler(
            [*args, "--api.allow-unauthenticated"], output=out, env=no_cluster_env(tmp_path)
        ),
    ):
        pass
    text = log.read_text()
    assert "level=warn" in text and "--api.allow-unauthenticated" in text, text


# --- with auth: a wrong credential is 401 everywhere -------------------------------


def post(url: str, headers: dict[str, str]) -> int:
    body = b'{"version": "4", "status": "firing", "alerts": []}'
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def basic(user: str, password: str) -> dict[str, str]:
    pair = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {pair}"}


def test_with_auth_a_wrong_credential_gets_401(tmp_path: Path) -> None:
    token, pair = tmp_path / "token", tmp_path / "basic"
    token.write_text("right-t0ken\n")
    pair.write_text("alice:right-pw\n")
    args = ["--rules", str(rules(tmp_path)), "--source", "scrape", "--dry-run"]
    args += ["--targets", f"node-a=http://127.0.0.1:{free_port()}/metrics"]
    args += ["--api.token-file", str(token), "--api.basic-auth-file", str(pair)]
    wrong = [
        {},
        {"Authorization": "Bearer "},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer wrong-t0ken"},
        {"Authorization": "Bearer right-t0ke"},
        {"Authorization": "Bearer right-t0ken-and-more"},
        basic("alice", "wrong"),
        basic("mallory", "right-pw"),
        basic("alice", ""),
        basic("", ""),
        {"Authorization": "Basic not-base64!"},
        {"Authorization": "Digest right-t0ken"},
    ]
    with autoscaler(args, env=no_cluster_env(tmp_path)) as running:
        for path in ("/api/v1/alerts", "/api/v1/breaker/reset"):
            for headers in wrong:
                assert post(running.url + path, headers) == 401, (path, headers)
            assert post(running.url + path, {"Authorization": "Bearer right-t0ken"}) == 200
            assert post(running.url + path, basic("alice", "right-pw")) == 200


# --- credentials in URLs are never logged -------------------------------------------


@contextlib.contextmanager
def answering_503() -> Iterator[tuple[str, list[str]]]:
    """A server on 127.0.0.1 that answers every GET with 503, so the sources log the
    URL they asked; yields its host:port and the Authorization headers it got."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization", ""))
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def wait_for(log: Path, text: str, timeout: float = 20.0) -> str:
    """The log's content once it holds ``text``; the failure shows what it held."""

    def logged() -> str:
        content = log.read_text(errors="replace")
        return content if text in content else ""  # "": not yet

    try:
        return wait(logged, timeout, what=f"{text!r} logged", every=0.1)
    except AssertionError as e:
        raise AssertionError(f"{e}:\n{log.read_text(errors='replace')}") from None


@pytest.mark.parametrize("where", ["unreachable", "answering 503"])
def test_prometheus_url_credentials_are_redacted(tmp_path: Path, where: str) -> None:
    log = tmp_path / "run.log"
    with answering_503() as (address, seen):
        host = address if where == "answering 503" else f"127.0.0.1:{free_port()}"
        url = f"http://alice:{PASSWORD}@{host}"
        args = ["--rules", str(rules(tmp_path)), "--source", "prometheus", "--dry-run"]
        args += ["--prometheus.url", url, "--prometheus.timeout", "1s"]
        with log.open("wb") as out, autoscaler(args, output=out, env=no_cluster_env(tmp_path)) as r:
            text = wait_for(log, "source prometheus is down")
            state = http_get(r.url + "/api/v1/state").decode()
            decisions = http_get(r.url + "/api/v1/decisions").decode()
        text = log.read_text()
    assert PASSWORD not in text + state + decisions
    assert f"http://alice:***@{host}" in text  # the start log says where it reads
    if where == "answering 503":
        assert f"HTTP 503 from http://alice:***@{host}" in text
        # Redacted in what is written, still sent to Prometheus.
        assert seen and all(h.startswith("Basic ") for h in seen)


def test_target_url_credentials_are_redacted(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    with answering_503() as (address, _):
        dead = f"127.0.0.1:{free_port()}"
        targets = (
            f"node-a=http://alice:{PASSWORD}@{address}/metrics,"
            f"node-b=http://alice:{PASSWORD}@{dead}/metrics"
        )
        args = ["--rules", str(rules(tmp_path)), "--source", "scrape", "--dry-run"]
        args += ["--targets", targets, "--scrape.timeout", "1s"]
        with log.open("wb") as out, autoscaler(args, output=out, env=no_cluster_env(tmp_path)):
            wait_for(log, "scrape of node-a")
            wait_for(log, "scrape of node-b")
        text = log.read_text()
    assert PASSWORD not in text
    assert f"http://alice:***@{address}/metrics" in text
    assert f"http://alice:***@{dead}/metrics" in text


def test_a_bad_target_is_refused_without_its_password(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "autoscaler.cli",
            "run",
            "--rules",
            str(rules(tmp_path)),
            "--source",
            "scrape",
            "--targets",
            f"node-a=ftp://alice:{PASSWORD}@127.0.0.1/metrics",
            "--web.listen-address",
            f"127.0.0.1:{free_port()}",
        ],
        cwd=REPO,
        env=no_cluster_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert "bad target" in proc.stderr and "alice:***@" in proc.stderr
    assert PASSWORD not in proc.stderr
