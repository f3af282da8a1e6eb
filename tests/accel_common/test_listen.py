"""One listen-address grammar and one way to serve until a signal, shared by the
exporter, the controller and the placement extender: the port is bound first, a
busy port is one ListenError, SIGINT/SIGTERM set the stop event only while the
listener is open."""

from __future__ import annotations

import asyncio
import os
import signal
import socket

import aiohttp
import pytest
from aiohttp import web

from accel_common.listen import Listener, ListenError, split_listen_address


@pytest.mark.parametrize(
    ("address", "parsed"),
    [
        (":9835", (None, 9835)),
        ("0.0.0.0:9835", ("0.0.0.0", 9835)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("localhost:65535", ("localhost", 65535)),
        ("[::1]:9835", ("::1", 9835)),
        ("[::]:8888", ("::", 8888)),
    ],
)
def test_listen_addresses(address: str, parsed: tuple[str | None, int]) -> None:
    assert split_listen_address(address) == parsed


@pytest.mark.parametrize("address", ["localhost", "9835", ":99999", ":-1", "host:", "host:http"])
def test_bad_listen_addresses(address: str) -> None:
    with pytest.raises(ValueError, match=r"invalid listen address .* \(use HOST:PORT or :PORT\)"):
        split_listen_address(address)


def _app() -> web.Application:
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="hello\n")

    app = web.Application()
    app.router.add_get("/", hello)
    return app


async def test_serves_until_stop_then_closes() -> None:
    stop = asyncio.Event()
    listener = await Listener.start(_app(), "127.0.0.1", 0, stop=stop)
    async with listener:
        port = listener.bound_port
        assert port != 0
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/") as r:
            assert await r.text() == "hello\n"
        stop.set()
        await asyncio.wait_for(listener.wait(), 1)
    with socket.socket() as probe:  # closed: nothing answers on the port any more
        assert probe.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_a_stop_signal_sets_the_event_and_closing_hands_the_signal_back(
    sig: signal.Signals,
) -> None:
    async with await Listener.start(_app(), "127.0.0.1", 0) as listener:
        os.kill(os.getpid(), sig)
        await asyncio.wait_for(listener.wait(), 5)
        assert listener.stop.is_set()
    # Closed, the loop's handler is gone: the signal no longer reaches this listener.
    assert not asyncio.get_running_loop().remove_signal_handler(sig)


async def test_a_busy_port_is_one_listen_error() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ListenError, match=rf"cannot listen on 127\.0\.0\.1:{port}: .*in use"):
            await Listener.start(_app(), "127.0.0.1", port)
