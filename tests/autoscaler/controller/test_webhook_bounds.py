"""The Alertmanager webhook against bodies built to break it: nested JSON that
Python's parser cannot recurse through, bodies past the size limit (with and
without a Content-Length), text that is not UTF-8, numbers past 64 bits, and a
flood of unique alerts. Each gets a 400 or 413 that says why, never a 500, and
the server keeps answering; the flood is held to ``--alerts.limit``."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from autoscaler.controller import Controller
from autoscaler.engine.state import DECISION_LOG_SIZE
from autoscaler.ruleset.watch import RuleWatcher
from autoscaler.server import make_app
from autoscaler.sources.alertmanager import (
    APPLY_SLICE,
    MAX_BODY,
    SLICE_SECONDS,
    AlertReceiver,
    BodyError,
    PayloadError,
    decode,
    decode_in_slices,
    load,
)
from tests.autoscaler.controller.hostile_rules import good
from tests.support.procs import free_port
from tests.support.sources import HealthySource

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def webhook(tmp_path: Path) -> AsyncIterator[tuple[str, Controller]]:
    rules = tmp_path / "rules.yaml"
    rules.write_text(good())
    c = Controller(
        RuleWatcher([str(rules)], source="prometheus"), HealthySource(), AlertReceiver(limit=2_000)
    )
    runner = web.AppRunner(make_app(c))
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}", c
    finally:
        await runner.cleanup()


def _chunks(data: bytes, size: int = 64 * 1024) -> Iterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


async def _gen(data: bytes) -> AsyncIterator[bytes]:
    for chunk in _chunks(data):
        yield chunk


@pytest.mark.parametrize(
    ("raw", "status", "message"),
    [
        (b"[" * 100_000, 400, "malformed JSON: nested deeper than 64"),
        (b'{"a":' * 70 + b"1" + b"}" * 70, 400, "nested 70 deep"),
        (b"[" * 100_000 + b"]" * 100_000, 400, "nested deeper than 64"),
        (b'{"version": "4", "alerts": "\xff"}', 400, "not UTF-8"),
        (b'{"version": ' + b"4" * 5_000 + b"}", 400, "out of range"),
        (b'{"version": NaN}', 400, "NaN is not JSON"),
        (b"x" * (MAX_BODY + 1), 413, f"body larger than {MAX_BODY} bytes"),
    ],
    ids=["100k-open", "70-objects", "100k-closed", "not-utf8", "5000-digits", "nan", "too-big"],
)
async def test_a_hostile_body_gets_a_clear_4xx_never_a_500(
    webhook: tuple[str, Controller],
    caplog: pytest.LogCaptureFixture,
    raw: bytes,
    status: int,
    message: str,
) -> None:
    url, c = webhook
    async with aiohttp.ClientSession() as s:
        with caplog.at_level(logging.ERROR):
            async with s.post(url + "/api/v1/alerts", data=raw) as r:
                assert r.status == status
                assert message in (await r.json())["error"]
            # Without a Content-Length (chunked): the same answer.
            async with s.post(url + "/api/v1/alerts", data=_gen(raw)) as r:
                assert r.status == status
                assert message in (await r.json())["error"]
        async with s.get(url + "/healthz") as r:
            assert r.status == 200
    assert not [r for r in caplog.records if r.exc_info], "no traceback is logged"
    assert c.alerts.firing == {}


async def test_a_large_valid_body_in_many_chunks_is_read_whole(
    webhook: tuple[str, Controller],
) -> None:
    url, c = webhook
    alerts = [
        {
            "status": "firing",
            "labels": {"alertname": "GPUFault", "node": f"node-{i}", "pad": "p" * 200},
            "startsAt": "2026-12-01T10:00:00Z",
        }
        for i in range(1_500)
    ]
    raw = json.dumps({"version": "4", "status": "firing", "alerts": alerts}).encode()
    assert 256 * 1024 < len(raw) <= MAX_BODY
    async with aiohttp.ClientSession() as s, s.post(url + "/api/v1/alerts", data=_gen(raw)) as r:
        assert r.status == 200, await r.text()
        assert (await r.json())["firing"] == 1_500
    assert len(c.alerts.firing) == 1_500


async def test_a_flood_of_unique_alerts_over_http_holds_at_most_the_limit(
    webhook: tuple[str, Controller],
) -> None:
    # 200 posts of 1,000 are tests/autoscaler/sources/test_alertmanager_bounds.py's,
    # with memory measured; here 20 over HTTP, and what /metrics says.
    url, c = webhook

    def post(n: int) -> dict[str, Any]:
        return {
            "version": "4",
            "status": "firing",
            "alerts": [
                {
                    "status": "firing",
                    "labels": {"alertname": "GPUFault", "node": f"node-{n}-{i}"},
                    "startsAt": "2026-12-01T10:00:00Z",
                    "fingerprint": f"{n:08x}{i:08x}",
                }
                for i in range(1_000)
            ],
        }

    async with aiohttp.ClientSession() as s:
        for n in range(20):
            async with s.post(url + "/api/v1/alerts", json=post(n)) as r:
                assert r.status == 200
            await c.cycle()  # the rule acts on what is held: its bookkeeping too is bounded
        async with s.get(url + "/metrics") as r:
            text = await r.text()
    assert len(c.alerts.firing) == 2_000
    assert len(c.state.incidents) <= 2_000
    assert len(c.state.last_acted) <= 2_000
    assert len(c.state.decisions) <= DECISION_LOG_SIZE
    assert "accel_autoscaler_alerts_firing 2000" in text
    assert 'accel_autoscaler_alerts_dropped_total{reason="limit"} 18000' in text


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
async def test_a_body_that_does_not_decode_gets_a_400(
    webhook: tuple[str, Controller], encoding: str
) -> None:
    url, c = webhook
    headers = {"Content-Encoding": encoding, "Content-Type": "application/json"}
    async with aiohttp.ClientSession() as s:
        async with s.post(url + "/api/v1/alerts", data=b"not compressed", headers=headers) as r:
            assert r.status == 400
            assert f"Can not decode content-encoding: {encoding}" in (await r.json())["error"]
        async with s.get(url + "/healthz") as r:
            assert r.status == 200
    assert c.alerts.firing == {}


# -- decoding in slices ------------------------------------------------------------------

_ALERT = (
    '{"status": "firing", "labels": {"alertname": "GPUFault", "node": "n1"}, '
    '"startsAt": "2026-12-01T10:00:00Z"}'
)


# The bodies up to here are laid out as v4 payloads: read in slices.
_SLICED = 13


_BODIES = [
    # Read in slices:
    '{"version": "4", "alerts": [' + _ALERT + "]}",
    ' \n{ "alerts" : [ ' + _ALERT + " , " + _ALERT + ' ] ,\t"version":"4" }\r\n',
    '{"version": "4", "alerts": []}',
    '{"version": "4", "alerts": [' + _ALERT + '], "alerts": []}',
    '{"version": "4", "alerts": "no", "alerts": [' + _ALERT + "]}",
    '{"version": "4", "alerts": [' + _ALERT.replace("n1", "\\u00e9\\ud83d\\ude00") + "]}",
    '{"version": "4", "groupLabels": {"a": [1, 2.5, true, null]}, "alerts": [' + _ALERT + "]}",
    # Refused by the checks, with the one-piece reader's words:
    '{"version": "3", "alerts": [' + _ALERT + "]}",
    '{"alerts": [' + _ALERT + "]}",
    '{"version": "4", "alerts": [' + _ALERT + ", 7]}",
    '{"version": "4", "alerts": [' + _ALERT + "], " + '"alerts": {}}',
    '{"version": "4", "alerts": [{"status": "gone"}], "version": "5"}',
    '{"version": "4", "alerts": [' + _ALERT.replace("n1", "\\ud800") + "]}",
    # Not laid out as a payload, or not JSON: read in one piece.
    "[" + _ALERT + "]",
    '{"version": "4", "alerts": [' + _ALERT + ",]}",
    '{"version": "4", "alerts": [' + _ALERT + "]} trailing",
    '{"version": "4", "alerts": [' + _ALERT + "]",
    '{"version": "4", "alerts": [{"x": NaN}]}',
    '{"version": "4", "alerts": [' + "[" * 63 + "]" * 63 + "]}",
    '{"version": "4", "alerts": [' + "[" * 100_000 + "]}",
    '{"version": "4", "x": ' + "[" * 64 + "]" * 64 + ', "alerts": []}',
    '{"version": "4", "n": ' + "9" * 30 + ', "alerts": []}',
    '{"version": 4, 5: "x"}',
    "",
]


@pytest.mark.parametrize("index", range(len(_BODIES)))
async def test_decoding_in_slices_agrees_with_the_one_piece_reader(index: int) -> None:
    data = _BODIES[index].encode("utf-8", "surrogatepass")
    in_one_piece: list[bytes] = []

    async def one_piece_in_a_thread(raw: bytes) -> Any:
        in_one_piece.append(raw)
        return await asyncio.to_thread(load, raw)

    try:
        expected: Any = decode(data)
    except PayloadError as e:
        expected = (type(e), str(e))
    try:
        got: Any = await decode_in_slices(data, one_piece=one_piece_in_a_thread)
    except PayloadError as e:
        got = (type(e), str(e))
    assert got == expected
    assert (not in_one_piece) is (index < _SLICED), "read the other way than expected"


async def test_a_body_that_is_not_utf8_or_too_large_agrees_too() -> None:
    for data, limit in ((b'{"version": "4", "alerts": ["\xff"]}', MAX_BODY), (b"{}" * 10, 5)):
        with pytest.raises(BodyError) as one:
            decode(data, limit)
        with pytest.raises(BodyError) as sliced:
            await decode_in_slices(data, limit)
        assert str(sliced.value) == str(one.value)


def _big_body(fingerprints: bool) -> bytes:
    def alert(i: int) -> dict[str, Any]:
        a: dict[str, Any] = {
            "status": "firing",
            "labels": {"alertname": "Bulk", "node": f"node-{i}", "device": f"gpu{i % 8}"},
            "annotations": {"summary": "a GPU fell off the bus " * 4},
            "startsAt": "2026-12-01T10:00:00Z",
        }
        if fingerprints:
            a["fingerprint"] = f"{i:016x}"
        return a

    return json.dumps({"version": "4", "alerts": [alert(i) for i in range(14_000)]}).encode()


@pytest.mark.parametrize("fingerprints", [True, False])
async def test_a_4_mib_body_is_decoded_with_the_loop_turning_throughout(
    fingerprints: bool,
) -> None:
    """The loop gets a turn at least every slice (5 ms of work): a 4 MiB body,
    a few hundred milliseconds of work in all, gives it dozens, where decoding in
    one piece gives it none."""
    raw = _big_body(fingerprints)
    assert 3 * 2**20 < len(raw) <= MAX_BODY
    turns = 0
    done = False

    async def count() -> None:
        nonlocal turns
        while not done:
            await asyncio.sleep(0)
            turns += 1

    counter = asyncio.create_task(count())
    await asyncio.sleep(0)
    started = time.thread_time()
    notices = await decode_in_slices(raw)
    worked = time.thread_time() - started
    done = True
    await counter
    assert notices == decode(raw) and len(notices) == 14_000
    # About one turn per slice of the loop thread's work (the garbage collector's
    # passes, which no slicing can split, make some slices longer); decoding in
    # one piece gives one turn.
    assert turns >= max(10, worked / (4 * SLICE_SECONDS)), (turns, worked)

    receiver = AlertReceiver(limit=20_000)
    turns, done = 0, False
    counter = asyncio.create_task(count())
    await asyncio.sleep(0)
    done_ = await receiver.apply_in_slices(notices, time.time())
    done = True
    await counter
    assert done_.firing == 14_000 and len(receiver.firing) == 14_000
    assert turns >= 14_000 // APPLY_SLICE - 1
