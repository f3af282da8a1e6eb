"""The prometheus source's transport: auth headers, a CA file, bounded retries on
429/5xx, and every failure ending as Unknown. A small aiohttp server stands in for
Prometheus's HTTP API here; the real Prometheus is in test_autoscaler_run.py."""

from __future__ import annotations

import base64
import ssl
from pathlib import Path

from aiohttp import web

from autoscaler.sources.prometheus import PrometheusConfig, PrometheusSource
from autoscaler.types import Unknown, Vector
from tests.support.pki import Pki
from tests.support.procs import free_port

VECTOR = {
    "status": "success",
    "data": {
        "resultType": "vector",
        "result": [{"metric": {"node": "n1", "device": "nvidia0"}, "value": [1700000000.5, "1"]}],
    },
}


class FakeApi:
    def __init__(self, fail_first: int = 0, status: int = 503) -> None:
        self.fail_first = fail_first
        self.status = status
        self.calls: list[dict[str, str]] = []

    async def query(self, request: web.Request) -> web.StreamResponse:
        self.calls.append({"auth": request.headers.get("Authorization", ""), **dict(request.query)})
        if len(self.calls) <= self.fail_first:
            return web.Response(status=self.status, text="overloaded")
        if request.query.get("query") == "bad(":
            return web.json_response(
                {"status": "error", "errorType": "bad_data", "error": "parse error"}, status=400
            )
        return web.json_response(VECTOR)


async def serve(
    api: FakeApi, ssl_context: ssl.SSLContext | None = None
) -> tuple[web.AppRunner, int]:
    app = web.Application()
    app.router.add_get("/api/v1/query", api.query)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=ssl_context).start()
    return runner, port


async def test_bearer_token_and_retry_on_503(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("abc123\n")
    api = FakeApi(fail_first=2)
    runner, port = await serve(api)
    source = PrometheusSource(
        PrometheusConfig(url=f"http://127.0.0.1:{port}", bearer_token_file=token, attempts=3)
    )
    try:
        result = await source.query("accel_up", 1700000000.5)
        assert isinstance(result, Vector)
        assert result.samples[0].get("device") == "nvidia0"
        assert len(api.calls) == 3
        assert all(c["auth"] == "Bearer abc123" for c in api.calls)
        assert api.calls[0]["time"] == "1700000000.500"
    finally:
        await source.close()
        await runner.cleanup()


async def test_retries_are_bounded_and_end_unknown(tmp_path: Path) -> None:
    api = FakeApi(fail_first=100, status=429)
    runner, port = await serve(api)
    source = PrometheusSource(PrometheusConfig(url=f"http://127.0.0.1:{port}", attempts=3))
    try:
        result = await source.query("accel_up", 1.0)
        assert isinstance(result, Unknown) and "HTTP 429" in result.reason
        assert len(api.calls) == 3
        assert await source.refresh(1.0) is False
    finally:
        await source.close()
        await runner.cleanup()


async def test_a_rejected_query_is_unknown_and_not_retried() -> None:
    api = FakeApi()
    runner, port = await serve(api)
    source = PrometheusSource(PrometheusConfig(url=f"http://127.0.0.1:{port}"))
    try:
        result = await source.query("bad(", 1.0)
        assert isinstance(result, Unknown) and "bad_data" in result.reason
        assert len(api.calls) == 1
    finally:
        await source.close()
        await runner.cleanup()


async def test_basic_auth_over_tls_with_a_ca_file(tmp_path: Path, pki: Pki) -> None:
    creds = tmp_path / "basic"
    creds.write_text("accel:pa55\n")
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(pki.dir / "server.crt", pki.dir / "server.key")
    api = FakeApi()
    runner, port = await serve(api, server_ctx)
    source = PrometheusSource(
        PrometheusConfig(
            url=f"https://localhost:{port}",
            basic_auth_file=creds,
            ca_file=pki.dir / "server.crt",
        )
    )
    try:
        assert await source.refresh(1.0) is True
        expected = "Basic " + base64.b64encode(b"accel:pa55").decode()
        assert api.calls[0]["auth"] == expected
        assert api.calls[0]["query"] == "count(accel_up)"
    finally:
        await source.close()
        await runner.cleanup()
