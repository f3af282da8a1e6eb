"""Secret files refused when empty, and passwords masked in every URL of a message:
the one reader and the one redaction that the controller's API, its sources and its
flags share."""

from __future__ import annotations

from pathlib import Path

import pytest

from accel_common.secrets import SecretError, read_basic_auth, read_token, redact


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("http://user:pw@host:9090", "http://user:***@host:9090"),
        ("https://alice:p%40ss@prom.example/api", "https://alice:***@prom.example/api"),
        ("http://TOKEN@host/metrics", "http://***@host/metrics"),
        ("http://user:pa@ss@host/x", "http://user:***@host/x"),  # the last @ ends it
        ("http://user:@host", "http://user:***@host"),
        ("http://host:9090/api/v1/query", "http://host:9090/api/v1/query"),
        ("no url at all, mail bob@example.com", "no url at all, mail bob@example.com"),
        ("http://host/path?who=bob@example", "http://host/path?who=bob@example"),
        (
            "HTTP 503 from http://a:b@h1/x; URL('https://c:d@h2') failed",
            "HTTP 503 from http://a:***@h1/x; URL('https://c:***@h2') failed",
        ),
        (
            "n1=http://a:b@10.0.0.1:9835/metrics,n2=http://10.0.0.2:9835/metrics",
            "n1=http://a:***@10.0.0.1:9835/metrics,n2=http://10.0.0.2:9835/metrics",
        ),
    ],
)
def test_redact(text: str, redacted: str) -> None:
    assert redact(text) == redacted


@pytest.mark.parametrize(
    ("content", "token"),
    [("t0ken", b"t0ken"), ("t0ken\n", b"t0ken"), ("  t0ken \r\n", b"t0ken")],
)
def test_read_token(tmp_path: Path, content: str, token: bytes) -> None:
    path = tmp_path / "token"
    path.write_text(content)
    assert read_token(path) == token


@pytest.mark.parametrize("content", ["", "\n", " \t\r\n\n", "two words", "a\nb"])
def test_read_token_refuses(tmp_path: Path, content: str) -> None:
    path = tmp_path / "token"
    path.write_text(content)
    with pytest.raises(SecretError, match=str(path)):
        read_token(path)


def test_read_token_names_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SecretError, match="cannot read"):
        read_token(tmp_path / "absent")


@pytest.mark.parametrize(
    ("content", "pair"),
    [
        ("alice:pw\n", (b"alice", b"pw")),
        ("alice:pw:with:colons", (b"alice", b"pw:with:colons")),
        ("alice:pass word", (b"alice", b"pass word")),
    ],
)
def test_read_basic_auth(tmp_path: Path, content: str, pair: tuple[bytes, bytes]) -> None:
    path = tmp_path / "basic"
    path.write_text(content)
    assert read_basic_auth(path) == pair


@pytest.mark.parametrize(
    "content", ["", "\n", "alice", "alice:", ":pw", " : ", "alice: \n", "a:b\nc:d"]
)
def test_read_basic_auth_refuses(tmp_path: Path, content: str) -> None:
    path = tmp_path / "basic"
    path.write_text(content)
    with pytest.raises(SecretError, match=str(path)):
        read_basic_auth(path)
