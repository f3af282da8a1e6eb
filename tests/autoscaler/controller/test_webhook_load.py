"""The controller's webhook under load, as a process against the fake API server:
1,100 connections that send half a request and stall (which used to exhaust a
default 1,024-descriptor limit and keep Alertmanager out), and 4 MiB Alertmanager
bodies one after another with leader election on (which used to hold the event
loop long enough for the Lease to lapse, so that the leader stepped down and
dropped every alert it held)."""

from __future__ import annotations

import itertools
import json
import os
import resource
import selectors
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from accel_common.httpbounds import ACCEPT_BURST, FD_RESERVE
from autoscaler.sources.alertmanager import MAX_BODY
from tests.support.fakes.apiserver import FakeApiServer, running_apiserver
from tests.support.kubeobjs import node, pod
from tests.support.paths import REPO
from tests.support.procs import free_port, http_get
from tests.support.waits import wait

# Slow (controller processes, real timeouts): `make test-fast` leaves it out.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

INTERVAL = 2.0
RULES = f"""\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  evaluationInterval: {INTERVAL:g}s
  rules:
    - name: node-broken
      alertname: NodeBroken
      target: node
      action: {{type: cordon}}
      cooldown: 1h
"""
# A container's usual descriptor limit, soft and hard: the flood must fit under it.
FD_LIMIT = 1024


@contextmanager
def controller(
    tmp: Path, api: FakeApiServer, port: int, *extra: str, pod_name: str = ""
) -> Iterator[subprocess.Popen[bytes]]:
    """``accel-autoscaler run`` with ``FD_LIMIT`` descriptors at most, until its
    /healthz answers; stopped on exit. Its log is ``tmp/controller.log``."""
    rules = tmp / "rules.yaml"
    rules.write_text(RULES)
    args = [
        "--rules",
        str(rules),
        "--source",
        "scrape",
        "--targets",
        f"n1=http://127.0.0.1:{free_port()}/metrics",
        "--kubeconfig",
        str(api.write_kubeconfig(tmp / "kubeconfig")),
        "--web.listen-address",
        f"127.0.0.1:{port}",
        *extra,
    ]
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "POD_NAMESPACE": "accel-fleet" if pod_name else "",
        "POD_NAME": pod_name,
    }

    def limit_fds() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))

    with (tmp / "controller.log").open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "autoscaler.cli", "run", *args],
            cwd=REPO,
            stdout=out,
            stderr=out,
            env=env,
            preexec_fn=limit_fds,
        )
        try:
            wait(lambda: healthy(port) or proc.poll() is not None, 30, "the controller's /healthz")
            assert proc.poll() is None, (tmp / "controller.log").read_text()
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def healthy(port: int) -> bool:
    try:
        http_get(f"http://127.0.0.1:{port}/healthz", timeout=1.0)
    except OSError:
        return False
    return True


def post(port: int, body: bytes, timeout: float = 10.0) -> int:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/v1/alerts",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def alerts_body(*alerts: dict[str, Any]) -> bytes:
    return json.dumps({"version": "4", "status": "firing", "alerts": list(alerts)}).encode()


def alert(name: str, node_name: str, **extra: Any) -> dict[str, Any]:
    return {
        "status": "firing",
        "labels": {"alertname": name, "node": node_name},
        "startsAt": "2026-12-01T10:00:00Z",
        **extra,
    }


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class FdWatch:
    """Samples a process's open descriptors every 20 ms in a thread; ``peak``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, open_fds(self.pid))

    def __enter__(self) -> FdWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


class Closings:
    """Watches sockets in a thread from the moment it starts, and notes when the
    server closes each one (EOF or a reset), measured from that socket's connect."""

    def __init__(self, sockets: list[tuple[float, socket.socket]]) -> None:
        self.after: list[float] = []
        self.early: list[bytes] = []  # anything but EOF or a 4xx, which none should get
        self._selector = selectors.DefaultSelector()  # epoll: descriptors past 1,024
        for t, s in sockets:
            self._selector.register(s, selectors.EVENT_READ, t)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while self._selector.get_map():
            for key, _ in self._selector.select(0.1):
                conn = key.fileobj
                assert isinstance(conn, socket.socket)
                try:
                    data = conn.recv(4096)
                except ConnectionError:
                    data = b""
                if data and not data.startswith(b"HTTP/1.1 4"):
                    self.early.append(data[:80])
                self.after.append(time.monotonic() - key.data)
                self._selector.unregister(conn)

    def wait(self, until: float) -> int:
        """Waits until every socket is closed or the monotonic time ``until``;
        returns how many are still open."""
        self._thread.join(max(0.0, until - time.monotonic()))
        return len(self._selector.get_map())


def test_1100_slow_header_connections_neither_exhaust_descriptors_nor_delay_an_alert(
    tmp_path: Path,
) -> None:
    header_timeout = 5.0
    with running_apiserver() as api:
        api.add(node("n1"))
        port = free_port()
        with controller(
            tmp_path, api, port, "--no-leader-elect", "--web.header-timeout", f"{header_timeout:g}s"
        ) as proc:
            baseline = open_fds(proc.pid)
            # The cap the controller takes from its descriptor limit.
            cap = FD_LIMIT - FD_RESERVE
            sockets: list[tuple[float, socket.socket]] = []
            try:
                with FdWatch(proc.pid) as fds:
                    opening = time.monotonic()
                    for _ in range(1100):
                        s = socket.create_connection(("127.0.0.1", port), timeout=5)
                        s.sendall(b"POST /api/v1/alerts HTTP/1.1\r\nHost: x\r\nContent-Len")
                        sockets.append((time.monotonic(), s))
                    closings = Closings(sockets)
                    fired = time.monotonic()
                    opened = fired - opening
                    assert post(port, alerts_body(alert("NodeBroken", "n1"))) == 200
                    answered = time.monotonic() - fired

                    def cordoned() -> bool:
                        n1 = api.get("nodes", None, "n1")
                        return bool(n1 and n1["spec"].get("unschedulable"))

                    wait(cordoned, INTERVAL + 5, "n1 cordoned")
                    acted = time.monotonic() - fired
                    left = closings.wait(fired + header_timeout + 2.0)
                after = open_fds(proc.pid)
            finally:
                for _, s in sockets:
                    s.close()
        log = (tmp_path / "controller.log").read_text()
    print(
        f"\n1,100 slow-header sockets (opened in {opened:.1f} s): alert answered in "
        f"{answered * 1e3:.0f} ms, acted on "
        f"after {acted:.2f} s (interval {INTERVAL:g} s); controller fds {baseline} before, "
        f"peak {fds.peak}, {after} after; slow sockets closed after "
        f"{min(closings.after):.2f}-{max(closings.after):.2f} s, "
        f"{sum(1 for t in closings.after if t < header_timeout - 0.5)} early by the cap "
        f"(header timeout {header_timeout:g} s)"
    )
    assert left == 0, f"{left} of 1,100 still open {header_timeout + 2:g} s after the last"
    assert not closings.early, closings.early[:3]
    assert max(closings.after) <= header_timeout + 1.0
    assert answered < 1.0
    assert acted <= INTERVAL + 1.0
    # Over the cap by at most the accept bursts in flight before the oldest it
    # closed are gone, and the API client's pooled connections: under the limit.
    assert fds.peak <= baseline + cap + 3 * ACCEPT_BURST + 16 < FD_LIMIT
    assert after <= baseline + 8
    assert "Too many open files" not in log


def bulk_body(limit: int = MAX_BODY) -> tuple[bytes, int]:
    """A body of Alertmanager alerts with fingerprints, as large as fits in
    ``limit`` bytes (no rule names them: they are only held)."""

    def body(n: int) -> bytes:
        return alerts_body(
            *(
                alert(
                    "BulkNoise",
                    f"node-{i}",
                    fingerprint=f"{i:016x}",
                    annotations={"summary": "a GPU fell off the bus " * 4},
                    endsAt="0001-01-01T00:00:00Z",
                )
                for i in range(n)
            )
        )

    each = len(body(100)) / 100
    n = int(limit / each)
    while len(raw := body(n)) > limit:
        n -= (len(raw) - limit) // int(each) + 1
    return raw, n


SENDER = """
import sys, threading, urllib.request
url, path, rounds, parallel = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
data = open(path, "rb").read()
failed = []
def send():
    for _ in range(rounds):
        req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            if r.status != 200:
                failed.append(r.status)
threads = [threading.Thread(target=send) for _ in range(parallel)]
for t in threads: t.start()
for t in threads: t.join()
sys.exit(1 if failed else 0)
"""


def metric(port: int, name: str) -> float | None:
    text = http_get(f"http://127.0.0.1:{port}/metrics", timeout=5).decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def test_4_mib_bodies_one_after_another_never_cost_the_leader_its_lease(
    tmp_path: Path,
) -> None:
    renew_deadline = 1.5
    lease = [
        "--leader-elect.lease-duration",
        "2s",
        "--leader-elect.renew-deadline",
        f"{renew_deadline * 1000:.0f}ms",
        "--leader-elect.retry-period",
        "250ms",
        "--leader-elect.identity",
        "a",
        "--alerts.limit",
        "20000",
    ]
    raw, count = bulk_body()
    assert MAX_BODY - 8 * 1024 < len(raw) <= MAX_BODY
    (tmp_path / "bulk.json").write_bytes(raw)
    with running_apiserver() as api:
        api.add(node("n1"))
        api.add(pod("ctl-a", "n1", owner="ReplicaSet", gpus=0, namespace="accel-fleet"))
        port = free_port()
        with controller(tmp_path, api, port, *lease, pod_name="ctl-a") as proc:
            wait(lambda: metric(port, "accel_autoscaler_leader") == 1.0, 20, "leadership")
            before = api.get("leases", "accel-fleet", "accel-autoscaler")
            assert before is not None and before["spec"]["holderIdentity"] == "a"
            assert post(port, alerts_body(alert("HeldAlert", "n1"))) == 200
            started = time.time()
            sender = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    SENDER,
                    f"http://127.0.0.1:{port}/api/v1/alerts",
                    str(tmp_path / "bulk.json"),
                    "4",
                    "3",
                ],
                timeout=150,
                capture_output=True,
                text=True,
            )
            ended = time.time()
            assert sender.returncode == 0, sender.stderr[-2000:]
            assert proc.poll() is None
            firing = metric(port, "accel_autoscaler_alerts_firing")
            leader = metric(port, "accel_autoscaler_leader")
            standby = metric(port, 'accel_autoscaler_alerts_dropped_total{reason="standby"}')
            after = api.get("leases", "accel-fleet", "accel-autoscaler")
            log = (tmp_path / "controller.log").read_text()  # before its own stop steps down
    renewals = [
        r
        for r in api.requests_for("PUT", "/leases/accel-autoscaler$")
        if r.status == 200 and started - 1.0 <= r.time <= ended
    ]
    gaps = [b.time - a.time for a, b in itertools.pairwise(renewals)]
    print(
        f"\n12 bodies of {len(raw) / 2**20:.2f} MiB ({count} alerts each) in "
        f"{ended - started:.1f} s: {len(renewals)} renewals, gaps median "
        f"{statistics.median(gaps) * 1e3:.0f} ms, max {max(gaps) * 1e3:.0f} ms "
        f"(renew deadline {renew_deadline * 1e3:.0f} ms)"
    )
    assert after is not None
    assert {r.body["spec"]["holderIdentity"] for r in renewals} == {"a"}
    assert after["spec"]["holderIdentity"] == "a"
    assert after["spec"]["leaseTransitions"] == before["spec"]["leaseTransitions"]
    assert after["spec"]["renewTime"] > before["spec"]["renewTime"]
    assert max(gaps) < renew_deadline
    assert leader == 1.0 and standby == 0.0
    assert firing == count + 1  # the bulk alerts and the one held before them
    for stepped_down in ("lost the lease", "standing down", "stood down"):
        assert stepped_down not in log
