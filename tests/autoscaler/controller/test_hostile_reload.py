"""A running controller that no rule file can crash, freeze or put to sleep.

One ``accel-autoscaler run`` process is fed, by hot reload, every rule file of
issue 15 that once killed it (PromQL that overflowed the native parser's stack),
froze it (an alias bomb read on the event loop), was reported as a success
(RecursionError, a 5,000-digit integer) or stopped evaluation for good (an
interval of ``1e400s``). For each: the process stays up, ``/healthz`` answers
200 all along, ``reload_success`` is 0, the last good rules still act on a
webhook alert, and a later good file loads. An hour-long interval, fixed and
SIGHUP'd (or just fixed), runs a cycle within seconds.

The process is the real thing over HTTP on 127.0.0.1: ``--source scrape`` with
a target nobody serves and ``--dry-run`` with no Kubernetes API, so the only
rule that can act is the alert rule, and its decisions are recorded.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.autoscaler.controller.hostile_rules import HOSTILE, good
from tests.support.exposition import value
from tests.support.procs import Running, autoscaler, free_port, http_get
from tests.support.waits import wait

# A controller process for the module; each case is bounded by the timeout.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


@dataclass
class Controller:
    running: Running
    rules: Path

    @property
    def url(self) -> str:
        return self.running.url

    def alive(self) -> None:
        code = self.running.proc.poll()
        assert code is None, f"the controller exited with {code}"

    def write(self, text: str, *, hup: bool = True) -> None:
        """Replaces the rule file at once (a reader never sees half of it), and
        sends SIGHUP unless told not to."""
        tmp = self.rules.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.rules)
        if hup:
            self.running.proc.send_signal(signal.SIGHUP)

    def healthz(self) -> None:
        """/healthz answers 200, whatever is being reloaded. The timeout is a generous
        bound, not a measure of speed (a busy machine stretches a loopback answer):
        a process that hangs or dies on a hostile file fails here. That a load,
        however slow, never holds the event loop is proved by the order of events
        in test_reload_guard (each of these files now loads in milliseconds)."""
        assert http_get(self.url + "/healthz", timeout=5.0) == b"ok\n"

    def metric(self, name: str) -> float | None:
        return value(http_get(self.url + "/metrics", timeout=2.0).decode(), name)

    def rules_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(http_get(self.url + "/api/v1/rules", timeout=2.0))
        return doc

    def wait(self, cond: Any, what: str, timeout: float = 20.0) -> None:
        """Polls ``cond`` until true, checking at every turn that the process is up
        and /healthz answers."""

        def checked() -> object:
            self.alive()
            self.healthz()
            return cond()

        wait(checked, timeout, what=what, every=0.1)

    def fire(self, node: str) -> None:
        body = {
            "version": "4",
            "status": "firing",
            "alerts": [
                {
                    "status": "firing",
                    "labels": {"alertname": "GPUFault", "node": node},
                    "startsAt": "2026-12-01T10:00:00Z",
                }
            ],
        }
        req = urllib.request.Request(
            self.url + "/api/v1/alerts",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=5) as r:
            assert json.loads(r.read())["firing"] == 1

    def decided(self, node: str) -> bool:
        doc = json.loads(http_get(self.url + "/api/v1/decisions", timeout=2.0))
        return any(
            d["rule"] == "gpu-fault-alert" and d["target"] == {"node": node}
            for d in doc["decisions"]
        )

    def reloaded(self, ok: bool) -> bool:
        return self.metric("accel_autoscaler_rules_reload_success") == (1 if ok else 0)


@pytest.fixture(scope="module")
def controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Controller]:
    tmp = tmp_path_factory.mktemp("hostile")
    rules = tmp / "rules.yaml"
    rules.write_text(good())
    args = [
        "--rules",
        str(rules),
        "--source",
        "scrape",
        "--targets",
        f"node-a=http://127.0.0.1:{free_port()}/metrics",
        "--dry-run",
    ]
    with (tmp / "controller.log").open("ab") as log, autoscaler(args, output=log) as running:
        yield Controller(running, rules)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_rule_file_is_refused_and_the_last_good_rules_act(
    controller: Controller, case: str
) -> None:
    c = controller
    c.wait(lambda: c.reloaded(True), "a good start")
    c.write(HOSTILE[case])
    c.wait(lambda: c.reloaded(False), "reload_success 0")
    doc = c.rules_json()
    assert doc["reloadSuccess"] is False
    assert doc["problems"], "a failed reload says why"
    assert all(str(c.rules) in p for p in doc["problems"]), doc["problems"]
    # The last good rules are in force, at their interval, and act.
    assert [r["name"] for r in doc["rules"]] == ["gpu-fault-alert"]
    assert doc["evaluationInterval"] == 1.0
    node = f"node-{case}"
    c.fire(node)
    c.wait(lambda: c.decided(node), f"a decision for {node} by the last good rules")
    # The same hostile file again: still refused, still up.
    c.running.proc.send_signal(signal.SIGHUP)
    time.sleep(1.0)  # no counter says a reload ran: a second for it to run
    c.wait(lambda: c.reloaded(False), "reload_success 0 after a second SIGHUP")
    # A later good file loads, without a SIGHUP: the watcher looks at the files.
    c.write(good(description=f"after {case}"), hup=False)
    c.wait(lambda: c.reloaded(True), "the good file loaded")
    assert c.rules_json()["rules"][0]["description"] == f"after {case}"


def _next_cycle(c: Controller) -> None:
    """Waits for a cycle after this moment."""
    before = c.metric("accel_autoscaler_last_evaluation_timestamp_seconds") or 0.0
    c.wait(
        lambda: (c.metric("accel_autoscaler_last_evaluation_timestamp_seconds") or 0.0) > before,
        "an evaluation cycle",
    )


@pytest.mark.parametrize("hup", [True, False], ids=["sighup", "file-change"])
def test_an_hour_long_interval_fixed_runs_a_cycle_within_seconds(
    controller: Controller, hup: bool
) -> None:
    c = controller
    c.write(good(interval="1h"))
    c.wait(lambda: c.rules_json()["evaluationInterval"] == 3600.0, "the 1h interval in force")
    c.wait(lambda: c.reloaded(True), "reload_success 1")
    # The reload itself woke one cycle; after it the loop sleeps for the hour.
    time.sleep(1.5)
    node = f"node-hour-{'hup' if hup else 'change'}"
    c.fire(node)
    time.sleep(2.0)
    assert not c.decided(node), "no cycle should run inside the hour"
    started = time.monotonic()
    c.write(good(interval="1s"), hup=hup)
    c.wait(lambda: c.decided(node), "a cycle after the fix", timeout=10.0)
    assert time.monotonic() - started < 10.0
    assert c.rules_json()["evaluationInterval"] == 1.0
    _next_cycle(c)  # and the new interval goes on
    _next_cycle(c)


def test_a_sighup_storm_during_a_reload_leaves_the_controller_serving(
    controller: Controller,
) -> None:
    c = controller
    c.write(HOSTILE["promql-sum-1500"], hup=False)
    for _ in range(20):
        c.running.proc.send_signal(signal.SIGHUP)
        c.healthz()
    c.wait(lambda: c.reloaded(False), "reload_success 0")
    c.write(good(description="after the storm"))
    c.wait(lambda: c.reloaded(True), "the good file loaded")
    c.alive()


def test_webhook_answers_400_to_deep_json_in_the_running_controller(
    controller: Controller,
) -> None:
    c = controller
    req = urllib.request.Request(
        c.url + "/api/v1/alerts",
        data=b"[" * 100_000,
        headers={"Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=5)
    assert e.value.code == 400
    assert "nested" in json.loads(e.value.read())["error"]
    c.alive()
    c.healthz()
