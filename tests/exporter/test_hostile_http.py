"""The exporter's HTTP server against clients that misbehave on purpose: thousands
of idle and slow-header connections, a flood of wrong passwords, malformed
``Accept-Encoding`` and request lines, and paths it reserves. Each was a way to
stall scrapes or get a traceback (issue 15, "Exporter HTTP"); each answer here is a
bounded, documented one. The server runs in-process on 127.0.0.1 with short limits
so that every timeout is observed within seconds."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import resource
import secrets
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import bcrypt
import pytest

from accel_common.httpbounds import FD_RESERVE
from accel_common.listen import Listener
from exporter import backends
from exporter.backends.base import BackendOptions
from exporter.basicauth import BasicAuth
from exporter.poller import Poller
from exporter.server import (
    LIMITS,
    AuthPool,
    ExporterServer,
    Limits,
    accepts_gzip,
    check_telemetry_path,
    fd_headroom_limits,
)
from exporter.webconfig import WebConfig, load_web_config
from tests.support.waits import until

HEADERS = {"X-Frame-Options": "deny", "X-Content-Type-Options": "nosniff"}


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@contextlib.asynccontextmanager
async def serving(
    web_config: WebConfig | None = None, limits: Limits = LIMITS, path: str = "/metrics"
) -> AsyncIterator[tuple[int, ExporterServer]]:
    """An exporter of two simulated GPUs on 127.0.0.1; yields (port, server)."""
    options = BackendOptions(sim_devices=(("nvidia", 2),))
    poller = Poller([backends.create("sim", options)], interval=60.0, timeout=5.0)
    await poller.poll_once()
    server = ExporterServer(poller, path, web_config, limits)
    listener = await Listener.start(server, "127.0.0.1", 0)
    try:
        yield listener.bound_port, server
    finally:
        await listener.close()
        await poller.stop()


def auth_config(tmp_path: Path, cost: int = 4) -> WebConfig:
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=cost)).decode()
    path = tmp_path / "web.yml"
    path.write_text(
        f"basic_auth_users:\n  prometheus: '{hashed}'\n"
        "http_server_config:\n  headers:\n" + "".join(f"    {k}: {v}\n" for k, v in HEADERS.items())
    )
    return load_web_config(path)


async def raw_exchange(port: int, data: bytes, timeout: float = 5.0) -> tuple[int, dict[str, str]]:
    """Sends raw bytes, reads the answer to EOF: (status, headers)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), timeout)
    finally:
        writer.close()
    head = answer.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in head[1:] if ": " in line)
    return int(head[0].split()[1]), headers


def saturated(server: ExporterServer) -> bool:
    """Whether the auth pool has refused a check: the guesses fill its queue."""
    return server.auth_pool is not None and server.auth_pool.refused > 0


async def closed_within(reader: asyncio.StreamReader, timeout: float) -> bool:
    """Whether the server closes this connection within ``timeout``."""
    try:
        while await asyncio.wait_for(reader.read(4096), timeout):
            pass
    except TimeoutError:
        return False
    except ConnectionError:
        pass
    return True


# -- Accept-Encoding -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "gzip"),
    [
        ("gzip", True),
        ("gzip, deflate, br", True),
        ("GZIP;Q=0.5", True),
        ("gzip;q=0", False),
        ("gzip;q=0.000", False),
        ("gzip; q=1.000", True),
        ("deflate, *", True),
        ("*;q=0", False),
        ("gzip;q=0, *", False),  # gzip named: its own weight decides
        ("identity", False),
        ("", False),
        # Malformed elements are ignored, never an error.
        ("gzip;q=x", False),
        ("gzip;q=", False),
        ("gzip;q=1.5", False),
        ("gzip;q=-1", False),
        ("gzip;q=nan", False),
        ("gzip;q=1e400", False),
        ("gzip;q=x, *", True),
        (";;,,;q", False),
        ("gzip;foo=bar", True),
        ("gzip" + ";q=0.5" * 1000, True),
    ],
)
def test_accept_encoding_is_parsed_leniently(header: str, gzip: bool) -> None:
    assert accepts_gzip(header) is gzip


async def test_a_malformed_accept_encoding_gets_plain_text(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with serving() as (port, _), aiohttp.ClientSession(auto_decompress=False) as s:
        for value in ("gzip;q=x", "gzip;q=1e400", "gzip;q=", "gzip ;q=\t, br;q=", ";"):
            async with s.get(
                f"http://127.0.0.1:{port}/metrics", headers={"Accept-Encoding": value}
            ) as resp:
                assert resp.status == 200
                assert "Content-Encoding" not in resp.headers
                assert b"accel_up{" in await resp.read()
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


# -- headers on every answer -----------------------------------------------------------


async def test_configured_headers_on_every_response(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    cfg = auth_config(tmp_path)
    good = {"Authorization": basic("prometheus", "s3cret")}
    async with serving(cfg) as (port, _), aiohttp.ClientSession() as s:
        url = f"http://127.0.0.1:{port}"
        answers = []
        for method, path, headers in [
            ("GET", "/metrics", good),
            ("HEAD", "/metrics", good),
            ("GET", "/healthz", good),
            ("GET", "/", good),
            ("GET", "/metrics", {}),
            ("GET", "/nope", {}),
            ("GET", "/metrics", {"Authorization": basic("prometheus", "wrong")}),
            ("GET", "/nope", good),
            ("POST", "/metrics", good),
        ]:
            async with s.request(method, url + path, headers=headers) as resp:
                answers.append((method, path, resp.status, dict(resp.headers)))
        assert [a[2] for a in answers] == [200, 200, 200, 200, 401, 401, 401, 404, 405]
        for method, path, _, got in answers:
            for name, value in HEADERS.items():
                assert got.get(name) == value, (method, path, got)

        # What the HTTP parser refuses before any handler runs carries them too.
        for data in (
            b"NOT AN HTTP REQUEST\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 10_000 + b"\r\n\r\n",
            b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\n"
            + b"".join(b"X%d: y\r\n" % i for i in range(100))
            + b"\r\n",
        ):
            status, got = await raw_exchange(port, data)
            assert 400 <= status < 500, status
            for name, value in HEADERS.items():
                assert got.get(name) == value, (data[:30], got)
    # A client's malformed request is not the exporter's error: no traceback, no
    # line at INFO (aiohttp would log each at ERROR), so none can flood the log.
    http = [r for r in caplog.records if r.name.startswith(("accel_exporter.http", "aiohttp"))]
    assert not [r for r in http if r.exc_info or r.levelno >= logging.INFO]


async def test_a_malformed_request_is_one_debug_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with serving() as (port, _):
        status, _ = await raw_exchange(port, b"GET /%s\xff HTTP/1.1\r\n\r\n")
    assert status == 400
    lines = [r for r in caplog.records if r.name == "accel_exporter.http"]
    assert len(lines) == 1 and lines[0].levelno == logging.DEBUG and not lines[0].exc_info
    assert "Invalid char in url path" in lines[0].getMessage()
    assert "/%s" in lines[0].getMessage()  # the client's text is not a format string


async def test_head_sends_no_body() -> None:
    async with serving() as (port, _):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(), 5)
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and body == b""


# -- reserved paths --------------------------------------------------------------------


def test_reserved_and_malformed_telemetry_paths() -> None:
    assert check_telemetry_path("/metrics") is None
    assert check_telemetry_path("/") is None  # metrics on the landing page's place
    assert check_telemetry_path("/x/y-z_1.prom") is None
    for path, why in [
        ("/healthz", "served by the exporter itself"),
        ("metrics", "must start with '/'"),
        ("/metrics?x=1", "not a plain URL path"),
        ("/metrics#top", "not a plain URL path"),
        ("/a b", "not a plain URL path"),
        ("/a\r\nb", "not a plain URL path"),
        ("/caf\u00e9", "not a plain URL path"),
    ]:
        problem = check_telemetry_path(path)
        assert problem is not None and why in problem, (path, problem)


async def test_the_server_refuses_a_reserved_path_itself() -> None:
    poller = Poller([], interval=60.0, timeout=5.0)
    with pytest.raises(ValueError, match="/healthz is served by the exporter itself"):
        ExporterServer(poller, "/healthz", None)


async def test_metrics_on_the_root_path() -> None:
    async with serving(path="/") as (port, _), aiohttp.ClientSession() as s:
        async with s.get(f"http://127.0.0.1:{port}/") as resp:
            assert b"accel_up{" in await resp.read()
        async with s.get(f"http://127.0.0.1:{port}/healthz") as resp:
            assert resp.status == 200


# -- connections -----------------------------------------------------------------------


def _connections_we_can_open(wanted: int) -> int:
    """``wanted``, or fewer where this process's descriptor limit (two per
    connection here: both ends are in this process) would not allow it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2 * wanted + 256 and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 2 * wanted + 256), hard))
        soft = min(hard, 2 * wanted + 256)
    return min(wanted, (soft - 256) // 2)


async def test_idle_and_slow_header_connections_are_closed_and_scrapes_go_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """3,000 connections, half silent and half stuck in their headers (some
    trickling a byte at a time): a scrape still answers at once, and every one of
    them is closed within the header timeout, measured from its connect."""
    count = _connections_we_can_open(3000)
    limits = Limits(header_timeout=3.0, idle_timeout=30.0, max_connections=10_000)
    async with serving(limits=limits) as (port, server):
        opened: list[tuple[float, asyncio.StreamReader, asyncio.StreamWriter]] = []
        for i in range(count):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            if i % 2:
                writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            opened.append((time.monotonic(), reader, writer))

        async def trickle(writer: asyncio.StreamWriter) -> None:
            # A byte every 0.2 s for 10 s: past the header deadline and its margin
            # below, so a deadline that each byte put off would be seen missed.
            with contextlib.suppress(ConnectionError, RuntimeError):
                for _ in range(50):
                    writer.write(b"a")
                    await writer.drain()
                    await asyncio.sleep(0.2)

        trickles = [asyncio.create_task(trickle(w)) for _, _, w in opened[1::2][:100]]
        try:
            async with (
                aiohttp.ClientSession() as s,
                s.get(f"http://127.0.0.1:{port}/metrics") as resp,
            ):
                assert resp.status == 200
                assert b"accel_up{" in await resp.read()
            # At once: answered while header deadlines of the stuck connections, all
            # opened before the scrape, are still pending (a server that made the
            # scrape wait for them would have closed them all first).
            assert server._header_timers, "the scrape waited for the stuck connections"

            async def closed_in_time(t: float, reader: asyncio.StreamReader) -> bool:
                # 5 s of margin: closing 3,000 connections on a machine full of
                # test workers takes a while; still well before the trickle ends.
                left = t + limits.header_timeout + 5.0 - time.monotonic()
                return await closed_within(reader, max(left, 0.1))

            closed = await asyncio.gather(*(closed_in_time(t, r) for t, r, _ in opened))
            assert all(closed), f"{closed.count(False)} of {count} still open"
            await until(
                lambda: len(server._open) == 0 and not server._header_timers,
                what="every connection forgotten",
            )
            assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
        finally:
            for task in trickles:
                task.cancel()
            for _, _, writer in opened:
                writer.close()


async def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() -> None:
    # The idle timeout is 2 s past the pause between requests and 2.5 s past the
    # header timeout, so neither margin is one that a busy machine eats.
    limits = Limits(header_timeout=0.5, idle_timeout=3.0)
    async with serving(limits=limits) as (port, _):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            # Longer than the header timeout between requests is fine: it only
            # bounds the first request's headers.
            for pause in (1.0, 0.0):
                writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                head = await asyncio.wait_for(reader.readuntil(b"sim: up\n"), 5)
                answered = time.monotonic()
                assert head.startswith(b"HTTP/1.1 200")
                await asyncio.sleep(pause)
            assert await closed_within(reader, 10.0)
            # Closed by the idle timeout, counted from the last answer: not by the
            # header timeout (0.5 s), and not left open.
            assert 1.5 < time.monotonic() - answered < 5.0
        finally:
            writer.close()


async def test_past_the_cap_the_oldest_idle_connections_make_room() -> None:
    limits = Limits(header_timeout=30.0, max_connections=50)
    async with serving(limits=limits) as (port, server):
        opened = []
        for _ in range(200):
            opened.append(await asyncio.open_connection("127.0.0.1", port))
            await asyncio.sleep(0)
        try:
            await until(lambda: len(server._open) <= 50, what="the cap held")
            oldest = await asyncio.gather(*(closed_within(r, 2.0) for r, _ in opened[:150]))
            assert all(oldest)
            # The newest are kept: idle, but younger.
            assert not await closed_within(opened[-1][0], 0.2)
            assert len(server._open) == 50  # so the 50 newest are open
            # A scrape at the cap gets in by closing the oldest idle connection, not
            # by waiting for a header timeout (30 s) to free a place. The client's
            # timeout is only a generous bound that fails such a wait.
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10.0)) as s,
                s.get(f"http://127.0.0.1:{port}/metrics") as resp,
            ):
                assert resp.status == 200
            assert await closed_within(opened[150][0], 5.0), "the oldest kept made room"
            assert len(server._open) <= 50
        finally:
            for _, writer in opened:
                writer.close()


def test_the_connection_cap_leaves_descriptors_to_spare() -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    cap = fd_headroom_limits(Limits(max_connections=10**9)).max_connections
    assert cap == max(16, soft - FD_RESERVE)
    assert fd_headroom_limits(Limits(max_connections=10)).max_connections == 10


# -- basic auth under a guessing flood -------------------------------------------------


async def test_valid_scrapes_do_not_wait_on_bcrypt_during_a_guessing_flood(
    tmp_path: Path,
) -> None:
    """60 clients guess passwords as fast as they are answered while a valid client
    scrapes: its scrapes never queue behind bcrypt (60 guesses at cost 8 would be
    over a second of bcrypt), the guesses are bounded by the auth pool's queue, and
    bcrypt runs at the lowest CPU priority."""
    cfg = auth_config(tmp_path, cost=8)
    limits = Limits(auth_queue=4, auth_wait=1.0, refusal_delay=0.05)
    good = {"Authorization": basic("prometheus", "s3cret")}
    async with serving(cfg, limits) as (port, server):
        url = f"http://127.0.0.1:{port}/metrics"
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as s:
            async with s.get(url, headers=good) as resp:  # the one bcrypt it pays
                assert resp.status == 200
            assert server.auth_pool is not None
            pool = CheckOrder(server.auth_pool)
            pool.watch = good["Authorization"]
            stop = asyncio.Event()
            statuses: list[int] = []

            async def guess() -> None:
                while not stop.is_set():
                    wrong = {"Authorization": basic("prometheus", secrets.token_hex(8))}
                    async with s.get(url, headers=wrong) as r:
                        statuses.append(r.status)

            attackers = [asyncio.create_task(guess()) for _ in range(60)]
            await until(lambda: saturated(server), what="the guesses filling the auth queue")
            scrapes = 0
            end = time.monotonic() + 2.0  # how long the flood lasts, not a bound
            while time.monotonic() < end:
                async with s.get(url, headers=good) as resp:
                    assert resp.status == 200
                    await resp.read()
                scrapes += 1
                await asyncio.sleep(0.01)
            stop.set()
            await asyncio.gather(*attackers)
        assert set(statuses) == {401} and len(statuses) > 60
        assert server.auth_pool is not None and server.auth_pool.refused > 0
        # Never queued behind bcrypt, proved by count rather than by latency (which
        # a busy machine stretches): not one of the valid scrapes made during the
        # flood reached the auth pool; the cache answered each on the event loop.
        assert scrapes > 0
        assert pool.arrived is None, f"a valid scrape waited in the auth pool: {pool.arrived}"
        assert good["Authorization"] not in pool.started
        workers = [t for t in threading.enumerate() if t.name.startswith("accel-auth")]
        assert workers
        for t in workers:
            assert t.native_id is not None
            assert os.getpriority(os.PRIO_PROCESS, t.native_id) == 19


async def test_a_new_valid_credential_gets_in_when_the_pool_is_free(tmp_path: Path) -> None:
    cfg = auth_config(tmp_path)
    async with serving(cfg) as (port, server), aiohttp.ClientSession() as s:
        url = f"http://127.0.0.1:{port}/metrics"
        async with s.get(url, headers={"Authorization": basic("mallory", "s3cret")}) as r:
            assert r.status == 401  # an unknown user, compared against the decoy
        async with s.get(url, headers={"Authorization": basic("prometheus", "s3cret")}) as r:
            assert r.status == 200
        assert server.auth_pool is not None and server.auth_pool.refused == 0


async def test_when_every_connection_is_busy_the_newcomer_is_closed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    limits = Limits(header_timeout=30.0, max_connections=2)
    async with serving(limits=limits) as (port, server):
        first = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
        await until(lambda: len(server._open) == 2, what="both connections accepted")
        # As if both had a request in flight (a scrape being written, an auth check).
        server._busy.update(server._open)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            assert await closed_within(reader, 2.0)
            for r, _ in first:
                assert not await closed_within(r, 0.1)
        finally:
            writer.close()
            for _, w in first:
                w.close()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


class SlowAuth(BasicAuth):
    """bcrypt's cost without bcrypt: every check takes ``seconds`` in its thread."""

    def __init__(self, seconds: float) -> None:
        super().__init__({"u": b"x"})
        self.seconds = seconds
        self.checked: list[str | None] = []

    def check(self, authorization: str | None) -> bool:
        time.sleep(self.seconds)
        self.checked.append(authorization)
        return authorization == "good"


async def test_the_auth_pool_takes_turns_within_its_bounds() -> None:
    auth = SlowAuth(0.2)
    pool = AuthPool(auth, Limits(auth_workers=1, auth_queue=2, auth_wait=1.0, refusal_delay=0.01))
    try:
        # One runs, two wait their turn, the line is full for the last two.
        results = await asyncio.gather(*(pool.check(h) for h in ["a", "good", "b", "c", "d"]))
        assert results == [False, True, False, False, False]
        assert auth.checked == ["a", "good", "b"] and pool.refused == 2
        assert pool._running == 0 and not pool.waiting
    finally:
        pool.close()


class GatedAuth(BasicAuth):
    """A check that ends only when the test opens its gate (``release``): which
    checks started, and when each ends, is the test's to say, not the clock's."""

    def __init__(self) -> None:
        super().__init__({"u": b"x"})
        self.started: list[str | None] = []
        self._gates: dict[int, threading.Event] = {}
        self._lock = threading.Lock()

    def _gate(self, index: int) -> threading.Event:
        with self._lock:
            return self._gates.setdefault(index, threading.Event())

    def release(self, index: int) -> None:
        """Lets the ``index``-th check (0-based, in the order they start) end."""
        self._gate(index).set()

    def release_all(self) -> None:
        with self._lock:
            gates = [*self._gates.values()]
        for gate in gates:
            gate.set()

    def check(self, authorization: str | None) -> bool:
        with self._lock:
            index = len(self.started)
            self.started.append(authorization)
        # The bound only ends a broken run; the test opens every gate it waits on.
        self._gate(index).wait(30.0)
        return authorization == "good"


async def test_the_auth_pool_refuses_after_the_wait() -> None:
    auth = GatedAuth()
    wait = 2.0
    pool = AuthPool(auth, Limits(auth_workers=1, auth_queue=8, auth_wait=wait))
    try:
        t0 = time.monotonic()
        checks = [asyncio.create_task(pool.check("good")) for _ in range(3)]
        await until(
            lambda: len(auth.started) == 1 and pool.waiting == 2,
            what="one check running and two waiting",
        )
        # The first ends: the second gets its turn, well within its wait.
        auth.release(0)
        await until(lambda: len(auth.started) == 2, what="the second check started")
        # The third's turn would come only when the second's check ends, which is
        # held: it is refused when its wait runs out, with no worker free and
        # without waiting for one (the bound here only fails a pool that never gives up).
        assert await asyncio.wait_for(checks[2], wait + 10.0) is False
        assert pool.refused == 1
        assert auth.started == ["good", "good"], "the refused check never ran"
        assert time.monotonic() - t0 >= wait - 0.01, "refused before its wait ran out"
        auth.release(1)
        assert [await checks[0], await checks[1]] == [True, True]
        # Nothing is left running or waiting.
        await until(lambda: pool._running == 0 and not pool.waiting, what="the pool idle")
    finally:
        auth.release_all()
        pool.close()


async def test_a_request_that_goes_away_gives_its_turn_back() -> None:
    auth = SlowAuth(0.2)
    pool = AuthPool(auth, Limits(auth_workers=1, auth_queue=8, auth_wait=5.0))
    try:
        first = asyncio.create_task(pool.check("a"))
        gone = asyncio.create_task(pool.check("b"))
        await until(lambda: pool.waiting == 1, what="the second request queued")
        gone.cancel()
        assert await first is False
        with pytest.raises(asyncio.CancelledError):
            await gone
        assert await pool.check("good") is True
        assert auth.checked == ["a", "good"]
        assert pool._running == 0 and not pool.waiting
    finally:
        pool.close()


async def test_a_new_valid_credential_gets_its_turn_during_a_flood(tmp_path: Path) -> None:
    """The cache is empty after a restart: a valid client waits for bcrypt behind
    at most one guess of the flooding host (another address of the loopback
    network), well within a scrape timeout.

    At bcrypt's least cost: the order is the point, and the pool's thread runs at
    the lowest priority, so on a busy machine a costlier check can outlast the 5 s
    a check may wait and the test would measure the machine, not the pool."""
    cfg = auth_config(tmp_path, cost=4)
    async with serving(cfg) as (port, server):
        assert server.auth_pool is not None
        # Which credentials bcrypt checked, in order: the turn is proved by count,
        # not by a time that a busy machine stretches.
        checked = CheckOrder(server.auth_pool)
        url = f"http://127.0.0.1:{port}/metrics"
        flood = aiohttp.TCPConnector(limit=0, local_addr=("127.0.0.2", 0))
        async with aiohttp.ClientSession(connector=flood) as attack, aiohttp.ClientSession() as s:
            stop = asyncio.Event()

            async def guess() -> None:
                while not stop.is_set():
                    wrong = {"Authorization": basic("prometheus", secrets.token_hex(8))}
                    async with attack.get(url, headers=wrong) as r:
                        assert r.status == 401

            attackers = [asyncio.create_task(guess()) for _ in range(60)]
            await until(lambda: saturated(server), what="the guesses filling the auth queue")
            t0 = time.monotonic()
            good = {"Authorization": basic("prometheus", "s3cret")}
            checked.watch = good["Authorization"]
            async with s.get(url, headers=good) as resp:
                assert resp.status == 200
            waited = time.monotonic() - t0
            stop.set()
            await asyncio.gather(*attackers)
        # Behind at most the guess whose check was running when it arrived: no
        # guess that arrived with or after it started first, however many wait.
        arrived = checked.arrived
        assert arrived is not None
        mine = checked.started.index(good["Authorization"])
        assert mine - arrived <= 1, checked.started[arrived : mine + 1]
        # Two bcrypt checks at cost 8 are milliseconds; the bound is a scrape
        # timeout, which only a stalled machine could reach.
        assert waited < 10.0, waited
        assert server.auth_pool.refused > 0


class CheckOrder:
    """Wraps a server's auth pool and its BasicAuth: records each credential as its
    bcrypt check starts, and how many had started when the ``watch`` credential
    reached the pool."""

    def __init__(self, pool: AuthPool) -> None:
        self._auth = pool._auth
        self._pool_check = pool.check
        self.started: list[str | None] = []
        self.watch: str | None = None
        self.arrived: int | None = None
        pool._auth = self  # type: ignore[assignment]
        pool.check = self._arrive  # type: ignore[method-assign]

    async def _arrive(self, authorization: str | None, address: str = "") -> bool:
        if authorization is not None and authorization == self.watch:
            self.arrived = len(self.started)
        return await self._pool_check(authorization, address)

    def check(self, authorization: str | None) -> bool:
        self.started.append(authorization)
        return bool(self._auth.check(authorization))


class PassingAuth(SlowAuth):
    """Every credential passes: no client goes on the pool's record of failures."""

    def check(self, authorization: str | None) -> bool:
        super().check(authorization)
        return True


async def test_the_auth_pool_serves_addresses_in_rotation() -> None:
    auth = PassingAuth(0.05)
    limits = Limits(auth_queue=64, auth_queue_per_address=3, auth_wait=5.0, refusal_delay=0.01)
    pool = AuthPool(auth, limits)
    try:
        busy = [asyncio.create_task(pool.check(f"a{i}", "10.0.0.1")) for i in range(6)]
        await asyncio.sleep(0.01)
        late = asyncio.create_task(pool.check("b0", "10.0.0.2"))
        assert await late is True
        assert await asyncio.gather(*busy) == [True] * 4 + [False] * 2
        # a0 was running, a1-a3 waited (a4, a5 over the per-address bound); the
        # other address came next but one. (A client whose check fails goes
        # behind the others altogether: tests/exporter/test_auth_flood.py.)
        assert auth.checked == ["a0", "a1", "b0", "a2", "a3"]
        assert pool.refused == 2
        assert pool._running == 0 and pool.waiting == 0 and not pool._fresh and not pool._suspect
    finally:
        pool.close()
