"""The scrape source's limits (issue 15, "Controller data paths"): a target that
never stops sending is cut at the body size limit, a gzip bomb at the same limit
uncompressed, a target with too many samples is refused whole, and bad lines and
bytes fail only their target, with the reason. Each test serves its targets from
an in-process aiohttp server on 127.0.0.1 and bounds its own time and memory."""

from __future__ import annotations

import asyncio
import gzip
import time
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web

from autoscaler.cli import build_parser
from autoscaler.commands.flags import source_options
from autoscaler.promql.textformat import MAX_LABELS, MAX_LINE_LENGTH
from autoscaler.sources.build import build_source
from autoscaler.sources.scrape import (
    DEFAULT_BODY_SIZE_LIMIT,
    DEFAULT_SAMPLE_LIMIT,
    ScrapeLimits,
    ScrapeSource,
    count_samples,
)
from autoscaler.types import Vector
from tests.support.procs import free_port

MiB = 1024 * 1024
GOOD = '# TYPE accel_up gauge\naccel_up{device="nvidia0"} 1\naccel_up{device="nvidia1"} 1\n'
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Targets:
    """Routes ``/NAME`` to a handler, and counts the bytes each endless one sent."""

    def __init__(self) -> None:
        self.sent: dict[str, int] = {}
        self.stopped: dict[str, bool] = {}

    def static(self, text: str | bytes, **headers: str) -> Handler:
        async def handler(request: web.Request) -> web.StreamResponse:
            body = text.encode() if isinstance(text, str) else text
            return web.Response(body=body, headers=headers)

        return handler

    def endless(self, name: str, line: bytes, *, max_bytes: int) -> Handler:
        """Streams ``line`` over and over until the client goes away (or, as a
        safety net for a broken test, ``max_bytes`` have gone)."""

        async def handler(request: web.Request) -> web.StreamResponse:
            resp = web.StreamResponse()
            await resp.prepare(request)
            block = line * max(1, (64 * 1024) // len(line))
            self.sent[name] = 0
            self.stopped[name] = False
            try:
                while self.sent[name] < max_bytes:
                    await resp.write(block)
                    self.sent[name] += len(block)
            except (ConnectionResetError, ConnectionError, RuntimeError):
                self.stopped[name] = True
            return resp

        return handler


async def serve(routes: dict[str, Handler]) -> tuple[web.AppRunner, str]:
    app = web.Application()
    for name, handler in routes.items():
        app.router.add_get(f"/{name}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


@pytest.fixture
async def targets() -> AsyncIterator[Targets]:
    yield Targets()


async def scrape_once(
    base: str, names: list[str], limits: ScrapeLimits, timeout: float = 20.0
) -> ScrapeSource:
    source = ScrapeSource({n: f"{base}/{n}" for n in names}, timeout=timeout, limits=limits)
    try:
        await asyncio.wait_for(source.refresh(1000.0), timeout + 5)
    finally:
        await source.close()
    return source


async def test_an_endless_target_is_cut_at_the_body_size_limit(targets: Targets) -> None:
    runner, base = await serve(
        {
            "endless": targets.endless("endless", b'accel_up{device="x"} 1\n', max_bytes=512 * MiB),
            "good": targets.static(GOOD),
        }
    )
    tracemalloc.start()
    try:
        start = time.monotonic()
        source = await scrape_once(base, ["endless", "good"], ScrapeLimits(body_size=1 * MiB))
        elapsed = time.monotonic() - start
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        await runner.cleanup()
    assert source.target_up == {"endless": False, "good": True}
    reason = source.target_error["endless"]
    assert f"body larger than {MiB} bytes" in reason and "--scrape.body-size-limit" in reason
    # The read stopped at the limit: the server saw the client go, far below its cap.
    assert targets.stopped["endless"] and targets.sent["endless"] < 64 * MiB
    assert peak < 16 * MiB, f"{peak / MiB:.1f} MiB for a 1 MiB limit"
    assert elapsed < 15
    # Nothing of the endless body was stored; the good target's series are there.
    result = await source.query("accel_up", 1000.0)
    assert isinstance(result, Vector)
    assert {s.get("node") for s in result.samples} == {"good"}


async def test_the_default_limit_stops_an_endless_target_at_64_mib(targets: Targets) -> None:
    """The issue's case: one endless target once peaked at 4.97 GB."""
    runner, base = await serve(
        {"endless": targets.endless("endless", b"# " + b"x" * 1000 + b"\n", max_bytes=1024 * MiB)}
    )
    tracemalloc.start()
    try:
        source = await scrape_once(base, ["endless"], ScrapeLimits(), timeout=60.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        await runner.cleanup()
    assert 64 * MiB == DEFAULT_BODY_SIZE_LIMIT
    assert source.target_up == {"endless": False}
    assert "body larger than 67108864 bytes" in source.target_error["endless"]
    assert targets.sent["endless"] < 256 * MiB
    assert peak < 3 * DEFAULT_BODY_SIZE_LIMIT, f"{peak / MiB:.0f} MiB"


async def test_a_gzip_bomb_is_cut_at_the_limit_uncompressed(targets: Targets) -> None:
    # 128 MiB of comment lines compress to well under 1 MiB.
    z = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = (b"# " + b"0" * 1021 + b"\n") * 1024
    bomb = b"".join(z.compress(block) for _ in range(128)) + z.flush()
    assert len(bomb) < MiB
    runner, base = await serve(
        {
            "bomb": targets.static(bomb, **{"Content-Encoding": "gzip"}),
            "zipped": targets.static(
                zlib.compress(GOOD.encode()), **{"Content-Encoding": "deflate"}
            ),
            "broken": targets.static(
                gzip.compress(GOOD.encode())[:-12], **{"Content-Encoding": "gzip"}
            ),
            "brotli": targets.static(b"xx", **{"Content-Encoding": "br"}),
        }
    )
    tracemalloc.start()
    try:
        source = await scrape_once(
            base, ["bomb", "zipped", "broken", "brotli"], ScrapeLimits(body_size=4 * MiB)
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        await runner.cleanup()
    assert source.target_up == {"bomb": False, "zipped": True, "broken": False, "brotli": False}
    assert "body larger than" in source.target_error["bomb"]
    assert "the compressed body ends before its end marker" in source.target_error["broken"]
    assert "unsupported Content-Encoding 'br'" in source.target_error["brotli"]
    assert peak < 24 * MiB, f"{peak / MiB:.1f} MiB for a 4 MiB limit"


async def test_a_target_with_too_many_samples_is_refused_whole(targets: Targets) -> None:
    many = "".join(f'accel_up{{device="d{i}"}} 1\n' for i in range(1001))
    exact = "# HELP accel_up Up.\n\n" + "".join(
        f'accel_up{{device="d{i}"}} 1\n' for i in range(1000)
    )
    runner, base = await serve(
        {"many": targets.static(many), "exact": targets.static(exact), "good": targets.static(GOOD)}
    )
    try:
        source = await scrape_once(base, ["many", "exact", "good"], ScrapeLimits(samples=1000))
    finally:
        await runner.cleanup()
    assert source.target_up == {"many": False, "exact": True, "good": True}
    assert source.target_error["many"].endswith(
        "sample_limit exceeded: 1001 samples, the limit is 1000 (raise --scrape.sample-limit)"
    )
    result = await source.query("count by (node) (accel_up)", 1000.0)
    assert isinstance(result, Vector)
    assert {s.get("node"): s.value for s in result.samples} == {"exact": 1000, "good": 2}


async def test_a_refused_scrape_makes_the_targets_old_series_stale(targets: Targets) -> None:
    state = {"body": GOOD}

    async def handler(request: web.Request) -> web.StreamResponse:
        return web.Response(text=state["body"])

    runner, base = await serve({"n1": handler})
    source = ScrapeSource({"n1": f"{base}/n1"}, timeout=5.0, limits=ScrapeLimits(samples=5))
    try:
        assert await source.refresh(1000.0)
        state["body"] = "".join(f'accel_up{{device="d{i}"}} 1\n' for i in range(6))
        assert not await source.refresh(1015.0)
        result = await source.query("accel_up", 1015.0)
    finally:
        await source.close()
        await runner.cleanup()
    assert result == Vector(())


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'accel_up{device="\xff"} 1\n', "line 1:18: byte 0xff is not UTF-8"),
        (
            ("accel_up{" + ",".join(f'l{i}="v"' for i in range(MAX_LABELS + 1)) + "} 1\n").encode(),
            f"more than {MAX_LABELS} labels",
        ),
        (b"accel_up{device=" + b'"' + b"x" * 70_000 + b'"} 1\n', "has 70000 characters"),
        (b"accel_up " + b"1" * (MAX_LINE_LENGTH + 1) + b"\n", "characters (at most"),
        (b"accel_up 1e400\n", "out of the float64 range"),
        (b"accel_up 1_0\n", "invalid sample value '1_0'"),
        (b"accel_up 1 99999999999999999999999\n", "invalid timestamp"),
    ],
)
async def test_a_bad_body_fails_only_its_target_with_the_reason(
    targets: Targets, body: bytes, reason: str
) -> None:
    runner, base = await serve({"bad": targets.static(body), "good": targets.static(GOOD)})
    try:
        source = await scrape_once(base, ["bad", "good"], ScrapeLimits())
    finally:
        await runner.cleanup()
    assert source.target_up == {"bad": False, "good": True}
    assert reason in source.target_error["bad"], source.target_error["bad"]
    assert len(source.target_error["bad"]) < 500


def test_count_samples_counts_what_the_store_would_read() -> None:
    text = '# HELP x y\n\n  \nx 1\r\nx{a="1"} 2\n  # indented comment\ny 3'
    assert count_samples(text, 2) == 3
    # Under the limit, a cheap bound (never above the limit) is enough.
    assert count_samples(text, 100) <= 100


@pytest.mark.parametrize("command", ["run", "place", "extender"])
def test_the_limits_are_flags_with_nonzero_defaults(command: str) -> None:
    parser = build_parser()
    extra = {"run": ["--rules", "rules/"], "place": ["pod.yaml"], "extender": []}[command]
    base = [command, *extra, "--source", "scrape", "--targets", "n=http://127.0.0.1:1/metrics"]
    opts = source_options(parser.parse_args(base))
    assert (opts.scrape_body_size_limit, opts.scrape_sample_limit) == (64 * MiB, 500_000)
    assert DEFAULT_SAMPLE_LIMIT == 500_000
    args = parser.parse_args(
        [*base, "--scrape.body-size-limit", "512KiB", "--scrape.sample-limit", "2000"]
    )
    source = build_source(source_options(args))
    assert isinstance(source, ScrapeSource)
    assert source.limits == ScrapeLimits(body_size=512 * 1024, samples=2000)
    for flag, value in (
        ("--scrape.body-size-limit", "0"),
        ("--scrape.body-size-limit", "lots"),
        ("--scrape.sample-limit", "-1"),
        ("--prometheus.body-size-limit", "2TiB"),
    ):
        with pytest.raises(SystemExit) as e:
            parser.parse_args([*base, flag, value])
        assert e.value.code == 2
