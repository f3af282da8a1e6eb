"""The controller as a process against the fake API server: a drain survives
``kill -9`` and a restart without evicting anything twice, and of two replicas
exactly one acts, the other taking over when it stops."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from accel_common.names import LEADER_LABEL
from autoscaler.actions.ops.ownership import ANNOTATION
from tests.support.fakes.apiserver import FakeApiServer, running_apiserver
from tests.support.kubeobjs import evictions, node, pdb, pod
from tests.support.procs import autoscaler, free_port, http_get, wait_cycles
from tests.support.waits import wait

# Slow (controller processes killed and restarted against the fake API server):
# `make test-fast` leaves it out.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

RULES = """\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  evaluationInterval: 1s
  rules:
    - name: node-broken
      alertname: NodeBroken
      target: node
      action: {type: drain, drainTimeout: 10m}
      cooldown: 1h
"""


@contextmanager
def controller(
    tmp: Path,
    api: FakeApiServer,
    port: int,
    *extra: str,
    log: str = "controller.log",
    pod_name: str = "",
) -> Iterator[subprocess.Popen[bytes]]:
    rules = tmp / "rules.yaml"
    rules.write_text(RULES)
    kubeconfig = api.write_kubeconfig(tmp / "kubeconfig")
    args = [
        "--rules",
        str(rules),
        "--source",
        "scrape",
        "--targets",
        f"n1=http://127.0.0.1:{free_port()}/metrics",
        "--kubeconfig",
        str(kubeconfig),
        "--eviction.retry-interval",
        "200ms",
        *extra,
    ]
    env = {
        "PYTHONUNBUFFERED": "1",
        "POD_NAMESPACE": "accel-fleet" if pod_name else "",
        "POD_NAME": pod_name,
    }
    with (tmp / log).open("ab") as out, autoscaler(args, port, out, env) as running:
        yield running.proc


def fire(port: int, node_name: str) -> int:
    import urllib.error
    import urllib.request

    body = json.dumps(
        {
            "version": "4",
            "status": "firing",
            "alerts": [
                {
                    "status": "firing",
                    "labels": {"alertname": "NodeBroken", "node": node_name},
                    "startsAt": "2026-11-29T10:00:00Z",
                }
            ],
        }
    ).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/v1/alerts",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def remediation(api: FakeApiServer, name: str) -> dict[str, Any]:
    n = api.get("nodes", None, name)
    assert n is not None
    raw = (n["metadata"].get("annotations") or {}).get(ANNOTATION)
    return dict(json.loads(raw)) if raw else {}


def test_a_drain_killed_midway_resumes_after_a_restart_and_evicts_nothing_twice(
    tmp_path: Path,
) -> None:
    with running_apiserver() as api:
        api.add(node("n1"))
        api.add(node("n2"))
        api.add(pod("train-0", "n1"))
        api.add(pod("guarded", "n1", owner="ReplicaSet", labels={"app": "g"}))
        api.add(pdb("g", {"app": "g"}, min_available=1))
        port = free_port()
        with controller(tmp_path, api, port, "--no-leader-elect") as proc:
            assert fire(port, "n1") == 200
            wait(lambda: api.get("pods", "ml", "train-0") is None, what="first eviction")
            wait(
                lambda: any(
                    r.status == 429 for r in api.requests_for("POST", r"/guarded/eviction$")
                ),
                what="the PDB refusing",
            )
            started = remediation(api, "n1")["node-broken"]["started"]
            assert remediation(api, "n1")["node-broken"]["phase"] == "draining"
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)

        # While it is down, the budget comes to allow the eviction.
        api.add(pod("guarded-2", "n2", owner="ReplicaSet", labels={"app": "g"}))
        with controller(tmp_path, api, free_port(), "--no-leader-elect"):
            wait(lambda: api.get("pods", "ml", "guarded") is None, what="the resumed drain")
            wait(
                lambda: remediation(api, "n1")["node-broken"]["phase"] == "drained",
                what="phase drained",
            )
        entry = remediation(api, "n1")["node-broken"]
        assert entry["started"] == started  # the deadline did not move
        assert evictions(api, "train-0") == 1
        assert evictions(api, "guarded") == 1
        assert "resuming draining" in (tmp_path / "controller.log").read_text()


def _leader(port: int) -> float | None:
    try:
        text = http_get(f"http://127.0.0.1:{port}/metrics", timeout=2).decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("accel_autoscaler_leader "):
            return float(line.split()[1])
    return None


def test_two_replicas_one_acts_and_the_other_takes_over(tmp_path: Path) -> None:
    lease = [
        "--leader-elect.lease-duration",
        "2s",
        "--leader-elect.renew-deadline",
        "1500ms",
        "--leader-elect.retry-period",
        "250ms",
    ]
    with running_apiserver() as api:
        api.add(node("n1"))
        api.add(node("n2"))
        api.add(pod("a-0", "n1"))
        api.add(pod("b-0", "n2"))
        for name in ("ctl-a", "ctl-b"):
            api.add(pod(name, "n2", owner="ReplicaSet", gpus=0, namespace="accel-fleet"))
        pa, pb = free_port(), free_port()
        ida = ["--leader-elect.identity", "a"]
        idb = ["--leader-elect.identity", "b"]
        with (
            controller(tmp_path, api, pa, *lease, *ida, log="a.log", pod_name="ctl-a") as a,
            controller(tmp_path, api, pb, *lease, *idb, log="b.log", pod_name="ctl-b") as b,
        ):
            procs = {pa: a, pb: b}
            pods = {pa: "ctl-a", pb: "ctl-b"}
            wait(lambda: {_leader(pa), _leader(pb)} == {0.0, 1.0}, what="one leader")
            leader, standby = (pa, pb) if _leader(pa) == 1.0 else (pb, pa)

            def labelled(port: int) -> bool:
                p = api.get("pods", "accel-fleet", pods[port])
                assert p is not None
                return (p["metadata"].get("labels") or {}).get(LEADER_LABEL) == "true"

            wait(lambda: labelled(leader), what="the leader's pod label")
            assert not labelled(standby)
            # The standby refuses the webhook (Alertmanager retries); the leader acts.
            assert fire(standby, "n1") == 503
            assert fire(leader, "n1") == 200
            wait(lambda: api.get("pods", "ml", "a-0") is None, what="the leader's drain")
            wait_cycles(f"http://127.0.0.1:{leader}", 2)  # two more cycles: nothing more
            assert evictions(api, "a-0") == 1
            assert len(api.requests_for("PATCH", r"/nodes/n1$")) <= 4

            # Stop the leader: the other takes over within the lease duration.
            procs[leader].send_signal(signal.SIGKILL)
            stopped = time.monotonic()
            wait(lambda: _leader(standby) == 1.0, timeout=10, what="takeover")
            took = time.monotonic() - stopped
            assert took <= 2.0 + 1.0, f"takeover took {took:.2f}s with a 2s lease"
            wait(lambda: labelled(standby), what="the new leader's pod label")
            assert fire(standby, "n2") == 200
            wait(lambda: api.get("pods", "ml", "b-0") is None, what="the new leader's drain")
