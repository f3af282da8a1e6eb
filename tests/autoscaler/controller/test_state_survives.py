"""State that survives: the controller as real processes against the fake API
server. The circuit breaker's count and its open state outlive ``kill -9`` and a
leader handover (issue 14: a storm with ``maxUnhealthyNodes: 3`` once cordoned 9
nodes over two restarts), and a drain found in flight after a restart whose rule
was deleted meanwhile ends where it stands."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from accel_common.names import REMEDIATION_ANNOTATION, STATE_DATA_KEY
from autoscaler.actions.context import ActionContext
from autoscaler.actions.ops.ownership import iso
from autoscaler.controller import Controller, StateRecord
from autoscaler.engine.state import EngineState
from autoscaler.kube.client import ClientKube
from autoscaler.ruleset.watch import RuleWatcher
from autoscaler.sources.alertmanager import AlertReceiver
from autoscaler.wiring import wire
from tests.autoscaler.controller.test_controller_kube import remediation
from tests.support.fakes.apiserver import FakeApiServer, running_apiserver
from tests.support.kubeobjs import evictions, node, pdb, pod
from tests.support.procs import autoscaler, free_port, http_get
from tests.support.sources import HealthySource
from tests.support.waits import wait

# Slow (controller processes killed and restarted against the fake API server):
# `make test-fast` leaves it out.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

NAMESPACE = "accel-fleet"
RECORD = "accel-autoscaler-state"

STORM_RULES = """\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  evaluationInterval: 1s
  limits: {maxUnhealthyNodes: 3, breakerReset: manual}
  rules:
    - name: node-broken
      alertname: NodeBroken
      target: node
      action: {type: cordon}
      cooldown: 1h
"""

DRAIN_RULES = """\
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

# The same file after a person deleted the drain rule (another rule stays).
WITHOUT_DRAIN_RULES = """\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  evaluationInterval: 1s
  rules:
    - name: node-hot
      alertname: NodeHot
      target: node
      action: {type: cordon}
      cooldown: 1h
"""

NODES = [f"n{i}" for i in range(10)]

LEASE = [
    "--leader-elect.namespace",
    NAMESPACE,
    "--leader-elect.lease-duration",
    "2s",
    "--leader-elect.renew-deadline",
    "1500ms",
    "--leader-elect.retry-period",
    "250ms",
]


@contextmanager
def controller(
    tmp: Path,
    api: FakeApiServer,
    port: int,
    rules: str,
    *extra: str,
    log: str = "controller.log",
) -> Iterator[subprocess.Popen[bytes]]:
    path = tmp / "rules.yaml"
    path.write_text(rules)
    args = [
        "--rules",
        str(path),
        "--source",
        "scrape",
        "--targets",
        f"n0=http://127.0.0.1:{free_port()}/metrics",
        "--kubeconfig",
        str(api.write_kubeconfig(tmp / "kubeconfig")),
        "--eviction.retry-interval",
        "200ms",
        *extra,
    ]
    env = {"PYTHONUNBUFFERED": "1", "POD_NAMESPACE": "", "POD_NAME": ""}
    with (tmp / log).open("ab") as out, autoscaler(args, port, out, env) as running:
        yield running.proc


def storm(port: int, nodes: Sequence[str]) -> int:
    """One Alertmanager notification with a NodeBroken alert per node."""
    body = json.dumps(
        {
            "version": "4",
            "status": "firing",
            "alerts": [
                {
                    "status": "firing",
                    "labels": {"alertname": "NodeBroken", "node": n},
                    "startsAt": "2026-11-29T10:00:00Z",
                }
                for n in nodes
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


def state(port: int) -> dict[str, Any] | None:
    try:
        doc: dict[str, Any] = json.loads(http_get(f"http://127.0.0.1:{port}/api/v1/state"))
    except OSError:
        return None
    return doc


def cycles_after(port: int, since: float, cycles: int = 3) -> None:
    """Wait until the controller has evaluated ``cycles`` times after ``since``."""

    def done() -> bool:
        doc = state(port)
        last = doc.get("lastEvaluation") if doc else None
        return last is not None and float(last) > since + cycles - 1

    wait(done, what=f"{cycles} evaluations")


def cordoned(api: FakeApiServer) -> list[str]:
    return sorted(
        n["metadata"]["name"]
        for n in api.objects("nodes")
        if (n.get("spec") or {}).get("unschedulable")
    )


def record(api: FakeApiServer) -> dict[str, Any] | None:
    cm = api.get("configmaps", NAMESPACE, RECORD)
    if cm is None:
        return None
    doc: dict[str, Any] = json.loads(cm["data"][STATE_DATA_KEY])
    return doc


def breaker_recorded(api: FakeApiServer) -> bool:
    doc = record(api)
    return doc is not None and bool(doc["breaker"]["open"])


def settle_storm(api: FakeApiServer, port: int) -> list[str]:
    """After a storm reached ``port``: three nodes cordoned, the breaker open and
    recorded, and nothing more for a few cycles. The cordoned nodes."""
    wait(lambda: len(cordoned(api)) >= 3, what="three cordons")
    wait(lambda: breaker_recorded(api), what="the open breaker in the state record")
    cycles_after(port, time.time())
    return cordoned(api)


def add_nodes(api: FakeApiServer) -> None:
    for name in NODES:
        api.add(node(name))


def test_the_breaker_holds_across_two_kill_9_restarts(tmp_path: Path) -> None:
    with running_apiserver() as api:
        add_nodes(api)
        args = ("--no-leader-elect", "--leader-elect.namespace", NAMESPACE)
        port = free_port()
        with controller(tmp_path, api, port, STORM_RULES, *args) as proc:
            assert storm(port, NODES) == 200
            first = settle_storm(api, port)
            assert len(first) == 3
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)

        for restart in (1, 2):
            port = free_port()
            with controller(tmp_path, api, port, STORM_RULES, *args) as proc:
                rest = [n for n in NODES if n not in cordoned(api)]
                assert storm(port, rest) == 200
                cycles_after(port, time.time())
                assert cordoned(api) == first, f"after restart {restart}"
                doc = state(port)
                assert doc is not None
                # breakerReset: manual: still open, with the reason it opened for.
                assert doc["breaker"]["open"] is True
                assert "would exceed maxUnhealthyNodes 3" in doc["breaker"]["reason"]
                assert {tuple(sorted(a["target"].items())) for a in doc["active"]} == {
                    (("node", n),) for n in first
                }
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
        log = (tmp_path / "controller.log").read_text()
        assert log.count("remediation state rebuilt from the cluster") == 3
        assert "3 node(s) counted by the breaker" in log
        # Exactly three cordons were ever written.
        cordons = [
            r
            for r in api.requests_for("PATCH", r"^/api/v1/nodes/n\d$")
            if (r.body.get("spec") or {}).get("unschedulable") is True
        ]
        assert len(cordons) == 3


def _leader(port: int) -> float | None:
    try:
        text = http_get(f"http://127.0.0.1:{port}/metrics", timeout=2).decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("accel_autoscaler_leader "):
            return float(line.split()[1])
    return None


def test_the_breaker_holds_across_leader_handovers(tmp_path: Path) -> None:
    with running_apiserver() as api:
        add_nodes(api)
        ports = {"a": free_port(), "b": free_port()}

        def replica(name: str) -> Any:
            return controller(
                tmp_path,
                api,
                ports[name],
                STORM_RULES,
                *LEASE,
                "--leader-elect.identity",
                name,
                log=f"{name}.log",
            )

        with replica("a") as a, replica("b") as b:
            procs = {"a": a, "b": b}
            wait(
                lambda: {_leader(ports["a"]), _leader(ports["b"])} == {0.0, 1.0},
                what="one leader",
            )
            leader = "a" if _leader(ports["a"]) == 1.0 else "b"
            standby = "b" if leader == "a" else "a"
            assert storm(ports[standby], NODES) == 503  # the standby refuses the webhook
            assert storm(ports[leader], NODES) == 200
            first = settle_storm(api, ports[leader])
            assert len(first) == 3

            # The leader dies; the standby takes over and is sent the storm again.
            procs[leader].send_signal(signal.SIGKILL)
            procs[leader].wait(10)
            wait(lambda: _leader(ports[standby]) == 1.0, timeout=10, what="takeover")
            rest = [n for n in NODES if n not in cordoned(api)]
            wait(lambda: storm(ports[standby], rest) == 200, what="the new leader's webhook")
            cycles_after(ports[standby], time.time())
            assert cordoned(api) == first
            doc = state(ports[standby])
            assert doc is not None and doc["breaker"]["open"] is True

            # The first comes back as the standby, and the lead passes back to it.
            with replica(leader) as again:
                wait(lambda: _leader(ports[leader]) == 0.0, what="the restarted standby")
                procs[standby].send_signal(signal.SIGKILL)
                procs[standby].wait(10)
                wait(lambda: _leader(ports[leader]) == 1.0, timeout=10, what="takeover back")
                rest = [n for n in NODES if n not in cordoned(api)]
                wait(lambda: storm(ports[leader], rest) == 200, what="the webhook again")
                cycles_after(ports[leader], time.time())
                assert cordoned(api) == first
                doc = state(ports[leader])
                assert doc is not None and doc["breaker"]["open"] is True
                assert again.poll() is None
        for name in ("a", "b"):
            assert (
                "remediation state rebuilt from the cluster"
                in (tmp_path / f"{name}.log").read_text()
            )


def test_a_resumed_drain_whose_rule_was_deleted_stops_where_it_stands(tmp_path: Path) -> None:
    with running_apiserver() as api:
        api.add(node("n1"))
        api.add(node("n2"))
        api.add(pod("train-0", "n1"))
        api.add(pod("guarded", "n1", owner="ReplicaSet", labels={"app": "g"}))
        api.add(pdb("g", {"app": "g"}, min_available=1))
        args = ("--no-leader-elect",)
        port = free_port()
        with controller(tmp_path, api, port, DRAIN_RULES, *args) as proc:
            assert storm(port, ["n1"]) == 200
            wait(lambda: api.get("pods", "ml", "train-0") is None, what="first eviction")
            wait(
                lambda: any(
                    r.status == 429 for r in api.requests_for("POST", r"/guarded/eviction$")
                ),
                what="the PDB refusing",
            )
            assert remediation(api, "n1")["node-broken"]["phase"] == "draining"
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)

        # While it is down, the rule is deleted and the budget comes to allow the
        # eviction: the drain must not take that chance.
        api.add(pod("guarded-2", "n2", owner="ReplicaSet", labels={"app": "g"}))
        before = len(api.requests_for("POST", r"/eviction$"))
        port = free_port()
        with controller(tmp_path, api, port, WITHOUT_DRAIN_RULES, *args):
            wait(
                lambda: remediation(api, "n1")["node-broken"]["phase"] == "drain-incomplete",
                what="the drain ended",
            )
            cycles_after(port, time.time())
        entry = remediation(api, "n1")["node-broken"]
        assert "no longer in the rule set" in entry["message"]
        assert len(api.requests_for("POST", r"/eviction$")) == before  # no new eviction
        assert api.get("pods", "ml", "guarded") is not None
        assert evictions(api, "train-0") == 1  # what was evicted stays evicted
        assert api.get("pods", "ml", "train-0") is None
        n1 = api.get("nodes", None, "n1")
        assert n1 is not None and n1["spec"]["unschedulable"] is True  # nothing undone
        log = (tmp_path / "controller.log").read_text()
        assert "rule node-broken is no longer in the rule set" in log
        assert "resuming draining" not in log
        reasons = [e["reason"] for e in api.objects("events")]
        assert "DrainAbandoned" in reasons


# -- the state record on its own, through the real client --------------------------


async def test_the_state_record_is_created_then_replaced_only_when_it_changes(
    api: FakeApiServer, kube: ClientKube
) -> None:
    record = StateRecord(kube, NAMESPACE, RECORD)
    assert await record.read() is None
    state = EngineState(breaker_open=True, breaker_opened_at=1.0, breaker_reason="storm")
    assert await record.write(state)
    assert await record.write(state)  # unchanged: nothing sent
    assert len(api.requests_for("POST", r"/configmaps$")) == 1
    assert api.requests_for("PUT", r"/configmaps/") == []
    state.last_acted[("r", (("node", "n1"),))] = 2.0
    assert await record.write(state)
    assert len(api.requests_for("PUT", rf"/configmaps/{RECORD}$")) == 1

    again = await StateRecord(kube, NAMESPACE, RECORD).read()
    assert again is not None
    assert again.breaker_open and again.breaker_reason == "storm"
    assert again.last_acted == {("r", (("node", "n1"),)): 2.0}


async def test_a_record_written_by_another_replica_is_not_overwritten_blindly(
    api: FakeApiServer, kube: ClientKube
) -> None:
    """A replica that lost the lead without noticing writes with a stale
    resourceVersion: Conflict, nothing overwritten; it reads again before the next."""
    mine = StateRecord(kube, NAMESPACE, RECORD)
    theirs = StateRecord(kube, NAMESPACE, RECORD)
    assert await mine.write(EngineState(breaker_reason="mine"))
    assert await theirs.read() is not None
    assert await theirs.write(EngineState(breaker_open=True, breaker_reason="theirs"))
    assert not await mine.write(EngineState(breaker_reason="mine again"))
    stored = await StateRecord(kube, NAMESPACE, RECORD).read()
    assert stored is not None and stored.breaker_reason == "theirs"


async def test_an_unreadable_record_is_logged_and_the_node_entries_stand_alone(
    api: FakeApiServer, kube: ClientKube, caplog: pytest.LogCaptureFixture
) -> None:
    api.add(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": RECORD, "namespace": NAMESPACE},
            "data": {STATE_DATA_KEY: "{hand-edited"},
        }
    )
    record = StateRecord(kube, NAMESPACE, RECORD)
    assert await record.read() is None
    assert "the state record cannot be read" in caplog.text
    assert await record.write(EngineState(breaker_reason="fresh"))  # replaces it
    stored = await StateRecord(kube, NAMESPACE, RECORD).read()
    assert stored is not None and stored.breaker_reason == "fresh"


# -- the controller in process: no evaluation before the rebuild ---------------------


def in_process(tmp: Path, kube: ClientKube) -> Controller:
    rules = tmp / "rules.yaml"
    rules.write_text(STORM_RULES)
    ctx = ActionContext(kube=kube, controller="accel-autoscaler", replica="test")
    watcher = RuleWatcher([str(rules)], source="prometheus")
    source = HealthySource()
    return Controller(
        watcher,
        source,
        AlertReceiver(),
        wiring=wire(source, lambda: watcher.current, ctx),
        record=StateRecord(kube, NAMESPACE, RECORD),
    )


def alert_storm(c: Controller, nodes: Sequence[str]) -> None:
    c.alerts.ingest(
        {
            "version": "4",
            "status": "firing",
            "alerts": [
                {
                    "status": "firing",
                    "labels": {"alertname": "NodeBroken", "node": n},
                    "startsAt": "2026-11-29T10:00:00Z",
                }
                for n in nodes
            ],
        },
        time.time(),
    )


async def test_no_evaluation_until_the_state_is_rebuilt_from_the_cluster(
    api: FakeApiServer, kube: ClientKube, tmp_path: Path
) -> None:
    """An API server that cannot be read is no reason to act from memory: the storm
    waits until the nodes could be read, and then acts within the limit."""
    add_nodes(api)
    for name in NODES[:3]:  # a storm cordoned these before the restart
        api.add(
            {
                **node(name),
                "metadata": {
                    "name": name,
                    "annotations": {
                        REMEDIATION_ANNOTATION: json.dumps(
                            {
                                "node-broken": {
                                    "action": "cordon",
                                    "phase": "cordoned",
                                    # Within the rule's cooldown: a rule without
                                    # recover remediates until its cooldown ends.
                                    "started": iso(time.time() - 60),
                                    "controller": "accel-autoscaler",
                                    "target": {"node": name},
                                }
                            }
                        )
                    },
                },
            }
        )
    c = in_process(tmp_path, kube)
    alert_storm(c, NODES)
    api.faults.fail(1000, status=503, method="GET", path_regex=r"^/api/v1/nodes$")
    for _ in range(3):
        assert await c.cycle() == []
    assert c.stats.unrestored == 3 and c.stats.cycles == 0
    api.faults.clear()
    assert await c.cycle() == []  # rebuilt: three under remediation, the breaker opens
    assert c.state.breaker_open
    assert sorted(dict(t)["node"] for _, t in c.state.active) == NODES[:3]
    assert c.executor is not None
    await c.executor.wait(5)
    assert cordoned(api) == []  # the fake's nodes were added uncordoned: nothing new
    doc = record(api)
    assert doc is not None and doc["breaker"]["open"] is True


async def test_a_record_written_by_another_leader_makes_this_one_rebuild(
    api: FakeApiServer, kube: ClientKube, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    add_nodes(api)
    c = in_process(tmp_path, kube)
    alert_storm(c, NODES)
    assert len(await c.cycle()) == 3
    assert c.executor is not None
    await c.executor.wait(5)
    assert breaker_recorded(api)
    # Meanwhile a person reset the breaker through another replica that led for a
    # while; this one did not notice and changes its state.
    other = StateRecord(kube, NAMESPACE, RECORD)
    await other.read()
    assert await other.write(EngineState(breaker_reason="reset elsewhere"))
    c.state.last_acted[("node-broken", (("node", "n9"),))] = time.time()
    caplog.clear()
    caplog.set_level(logging.INFO, logger="accel_autoscaler")
    await c.cycle()
    assert c.stats.state_record_errors == 1
    assert "remediation state rebuilt from the cluster" in caplog.text
    assert not c.state.breaker_open  # the record's word, the other replica's reset
    stored = record(api)
    assert stored is not None and stored["breaker"]["reason"] == "reset elsewhere"
    await c.cycle()  # the storm is still firing: the fourth node opens it again
    assert c.state.breaker_open and breaker_recorded(api)
    assert len(cordoned(api)) == 3
