"""The Grafana dashboards in dashboards/.

The committed JSON is what ``dashboards/generate.py`` writes, and every PromQL
expression of every panel runs against a real Prometheus (Debian's) that scrapes a
simulated fleet with every vendor, partitions, pods and faults, and the autoscaler
running in dry-run with ``--source scrape``. Template variables take real values
from their own ``label_values(...)`` queries, Grafana's interval variables are
replaced, and each query must parse and return data: a panel that would show "No
data" on a fleet that has what it charts fails, named by dashboard and panel.

The chargeback dashboard has a custom variable, the billing policy: every panel is
run under each of its values. ``node-a`` runs the sim with ``--sim-claims
--sim-sharing`` (pods on ResourceClaims, MPS, time-slicing, an idle GPU, per-pod use
from the sim's processes), ``node-b`` without per-pod use, and a third node,
``node-c``, is the real exporter code (NVIDIA backend on the fake NVML, processes
mapped to pods through a ``/proc`` and kubelet log tree) with two pods time-slicing a
GPU, so every path of every policy has data.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import importlib.util
import json
import re
import threading
import time
import urllib.error
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from accel_common.names import GANG_LABEL
from autoscaler.actions.ops.ownership import ANNOTATION, Entry, iso
from dashboards import chargeback
from exporter.backends.base import BackendOptions
from exporter.backends.nvidia import NvidiaBackend
from exporter.model import PodAssignment
from exporter.poller import Poller
from tests.exporter.test_pod_usage import UID_A, UID_B, Assignments, PodTree, cid
from tests.support.fakes.apiserver import running_apiserver
from tests.support.fakes.nvml import GIB, FakeNVML
from tests.support.fakes.nvml_procs import FakeProcess
from tests.support.paths import REPO
from tests.support.procs import _run_prometheus, autoscaler, exporter, free_port, http_get

# Slow (a simulated fleet, Prometheus and the controller answer every panel):
# `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

DASHBOARDS = REPO / "dashboards"
REQUIRED_VARIABLES = ("cluster", "node", "vendor", "namespace")

# Grafana's own variables, as Grafana would set them for this Prometheus (1 s
# scrapes): $__rate_interval is max($__interval + scrape interval, 4 × scrape interval).
BUILTINS = {
    "__rate_interval": "4s",
    "__interval": "1s",
    "__interval_ms": "1000",
    "__range": "1m",
}

FAULTS = """\
events:
  - {at: 6s, device: nvidia1, fault: 79, lost: true}
  - {at: 6s, device: amd1, ecc: {uncorrected: 3}}
  - {at: 6s, device: amd0, fault: ras_uncorrectable}
  - {at: 6s, device: oneapi0, fault: ras_fatal}
"""

# Rules the dry-run controller evaluates every second: the fatal fault and the ECC
# burst give decisions, the lost device stays pending (its `for` is long).
RULES = """\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  evaluationInterval: 1s
  limits: {maxUnhealthyNodes: 10}
  rules:
    - name: fatal-device-fault
      expr: increase(accel_fault_events_total{severity="fatal"}[1m]) > 0
      target: device
      action: {type: migrate_jobs}
      cooldown: 30m
    - name: uncorrected-ecc-burst
      expr: increase(accel_ecc_errors_total{type="uncorrected"}[1m]) >= 3
      target: device
      action: {type: migrate_jobs, deviceOnly: true}
      cooldown: 1h
    - name: device-lost
      expr: accel_up == 0
      for: 1h
      target: device
      action: {type: cordon}
"""

# Each simulated node: its exporter's flags. node-a carries the faults, the
# partitions and the pods; node-b is a second, healthy node.
NODES = {
    "node-a": [
        "--sim-devices",
        "nvidia:8,amd:4,oneapi:2",
        "--sim-partitions",
        "--sim-pods",
        "6",
        "--sim-claims",
        "--sim-sharing",
        "--sim-seed",
        "1",
    ],
    "node-b": ["--sim-devices", "nvidia:4,amd:2,oneapi:1", "--sim-pods", "3", "--sim-seed", "2"],
}


# node-c: what its two time-slicing pods use of nvidia1 (the fake's figures).
MEASURED_NODE = "node-c"
MEASURED_SHARES = {"train-a": 0.5, "infer-b": 0.2}


def measured_exposition(tmp: Path) -> bytes:
    """node-c's exposition, rendered once by the real poller: an NVIDIA node whose
    GPU 1 is time-sliced by two pods at different loads, with the pods' processes in
    a /proc and kubelet log tree."""
    tree = PodTree(tmp)
    tree.pod("ml", "train-a", UID_A, {"trainer": cid(0xA)})
    tree.pod("ml", "infer-b", UID_B, {"server": cid(0xB)})
    tree.systemd(1001, UID_A, cid(0xA))
    tree.systemd(2002, UID_B, cid(0xB))
    fake = FakeNVML.pcie_node()
    gpu = fake.gpus[1]
    gpu.utilization_gpu = 70
    fake.run_processes(
        1,
        FakeProcess(1001, 6 * GIB, sm_util=MEASURED_SHARES["train-a"] * 100),
        FakeProcess(2002, 2 * GIB, sm_util=MEASURED_SHARES["infer-b"] * 100),
    )
    pods = [
        PodAssignment("ml", "train-a", "trainer", "nvidia.com/gpu", f"{gpu.uuid}::0"),
        PodAssignment("ml", "infer-b", "server", "nvidia.com/gpu", f"{gpu.uuid}::1"),
    ]
    poller = Poller(
        [NvidiaBackend(BackendOptions(), nvml=fake), Assignments(pods)],
        interval=10,
        timeout=5,
        procmap=tree.procmap(),
    )

    async def once() -> bytes:
        try:
            return (await poller.poll_once()).text
        finally:
            await poller.stop()

    return asyncio.run(once())


@contextlib.contextmanager
def serving(body: bytes, port: int) -> Iterator[None]:
    """Serves ``body`` as /metrics on 127.0.0.1:``port`` until the block ends."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the test's output is for failures

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dashboards_generate", DASHBOARDS / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def committed() -> dict[str, dict[str, Any]]:
    boards: dict[str, dict[str, Any]] = {}
    for path in sorted(DASHBOARDS.glob("*.json")):
        boards[path.name] = json.loads(path.read_text())
    return boards


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel that queries, including those nested in collapsed rows."""
    for p in board["panels"]:
        if p["type"] == "row":
            yield from panels({"panels": p.get("panels", [])})
        else:
            yield p


# --- the JSON itself ----------------------------------------------------------------


def test_committed_json_is_what_the_generator_writes() -> None:
    built: dict[str, str] = load_generator().build()
    on_disk = {p.name: p.read_text() for p in sorted(DASHBOARDS.glob("*.json"))}
    assert sorted(on_disk) == sorted(built), (
        f"dashboards/ holds {sorted(on_disk)} but the generator writes {sorted(built)}; "
        "run `python dashboards/generate.py` and commit the JSON"
    )
    stale = [name for name, text in built.items() if on_disk[name] != text]
    assert not stale, (
        f"{', '.join(stale)} differ from dashboards/generate.py's output; "
        "run `python dashboards/generate.py` and commit the JSON"
    )


def test_generator_check_mode_reports_stale_json(tmp_path: Path) -> None:
    gen = load_generator()
    assert gen.main(["--check"]) == 0
    gen.__dict__["HERE"] = tmp_path  # an empty directory: every dashboard is missing
    assert gen.main(["--check"]) == 1


@pytest.mark.parametrize("name", sorted(committed()))
def test_dashboard_shape(name: str) -> None:
    board = committed()[name]
    title = board["title"]
    assert board["schemaVersion"] >= 39, f"{name}: schemaVersion {board['schemaVersion']}"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    datasources = [v for v in variables.values() if v["type"] == "datasource"]
    assert [(d["name"], d["query"]) for d in datasources] == [("datasource", "prometheus")]
    for var in REQUIRED_VARIABLES:
        assert var in variables, f"{title}: no template variable {var}"
        assert variables[var]["type"] == "query"
        assert variables[var]["definition"].startswith("label_values(")
        assert variables[var]["datasource"]["uid"] == "${datasource}"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), f"{title}: duplicate panel ids"
    for p in panels(board):
        where = f"{title} / {p['title']}"
        assert p.get("description"), f"{where}: no description"
        assert p["datasource"]["uid"] == "${datasource}", where
        assert p["targets"], f"{where}: no query"
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}", where
            assert t["expr"].strip(), f"{where}: empty expression"


def test_the_four_dashboards_exist() -> None:
    titles = {b["title"] for b in committed().values()}
    for want in ("Fleet overview", "Node detail", "Remediation", "Chargeback"):
        assert any(want in t for t in titles), f"no {want} dashboard among {sorted(titles)}"


# --- every query against a real Prometheus ------------------------------------------


def node_object(name: str) -> dict[str, Any]:
    """A Node named like its exporter target. node-b carries a finished remediation
    of this controller (a cordon by device-lost), as a replica before a restart
    would have left it: the controller reads it back for
    accel_autoscaler_nodes_under_remediation."""
    meta: dict[str, Any] = {"name": name, "labels": {"kubernetes.io/hostname": name}}
    spec: dict[str, Any] = {}
    if name == "node-b":
        entry = Entry(
            action="cordon",
            phase="cordoned",
            started=iso(time.time() - 600),
            controller="accel-autoscaler",
            target={"node": name, "device": "amd0"},
            cordoned=True,
        )
        meta["annotations"] = {ANNOTATION: json.dumps({"device-lost": entry.as_json()})}
        spec["unschedulable"] = True
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": spec}


def gang_pod(name: str, node: str) -> dict[str, Any]:
    """A running member of gang "sim-gang", named like a pod of the sim exporter's
    --sim-pods on that node, so the Gangs panels join it to its devices."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "sim", "labels": {GANG_LABEL: "sim-gang"}},
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "main",
                    "image": "train:1",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
        "status": {"phase": "Running", "startTime": iso(time.time() - 3600)},
    }


def kueue_objects() -> list[dict[str, Any]]:
    """Kueue's objects for the Queues dashboard: two ClusterQueues in a cohort
    (team-a may borrow 8), a Workload admitted in team-a that borrows, and one
    pending in team-b (the Workloads as Kueue would have left them)."""
    api = "kueue.x-k8s.io/v1beta1"
    gpu = "nvidia.com/gpu"

    def queue(name: str, **limits: str) -> dict[str, Any]:
        resources = [{"name": gpu, "nominalQuota": "16", **limits}]
        group = {"coveredResources": [gpu], "flavors": [{"name": "h100", "resources": resources}]}
        spec = {"cohort": "research", "resourceGroups": [group]}
        return {"apiVersion": api, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}

    def workload(name: str, queue: str, pods: int, admitted_in: str = "") -> dict[str, Any]:
        template = {"spec": {"containers": [{"name": "m", "resources": {"limits": {gpu: "8"}}}]}}
        wl: dict[str, Any] = {
            "apiVersion": api,
            "kind": "Workload",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {
                "queueName": queue,
                "podSets": [{"name": "main", "count": pods, "template": template}],
            },
        }
        if admitted_in:
            flavors = [{"name": "main", "flavors": {gpu: "h100"}, "count": pods}]
            wl["status"] = {
                "conditions": [
                    {
                        "type": t,
                        "status": "True",
                        "reason": t,
                        "message": "",
                        "lastTransitionTime": iso(time.time()),
                    }
                    for t in ("QuotaReserved", "Admitted")
                ],
                "admission": {"clusterQueue": admitted_in, "podSetAssignments": flavors},
            }
        return wl

    return [
        {"apiVersion": api, "kind": "ResourceFlavor", "metadata": {"name": "h100"}, "spec": {}},
        queue("team-a", borrowingLimit="8"),
        queue("team-b"),
        *(
            {
                "apiVersion": api,
                "kind": "LocalQueue",
                "metadata": {"name": q, "namespace": "ml"},
                "spec": {"clusterQueue": f"team-{q}"},
            }
            for q in ("a", "b")
        ),
        workload("train-big", "a", 3, admitted_in="team-a"),  # 24 of 16: borrows 8
        workload("train-next", "b", 4),  # 32 of team-b's 16: pending
    ]


def autoscaler_args(tmp: Path, targets: dict[str, str], kubeconfig: Path) -> list[str]:
    """``accel-autoscaler run --dry-run --source scrape`` against the fake API server
    (dry-run: it reads the cluster, plans, and writes nothing)."""
    rules = tmp / "rules.yaml"
    rules.write_text(RULES)
    return [
        "--rules",
        str(rules),
        "--source",
        "scrape",
        "--dry-run",
        "--targets",
        ",".join(f"{node}={url}" for node, url in targets.items()),
        "--kubeconfig",
        str(kubeconfig),
        "--no-leader-elect",
        "--log.level",
        "warn",
    ]


def prometheus_config(exporters: dict[str, int], autoscaler_port: int) -> str:
    """Scrape every second; ``node`` and ``cluster`` as relabeling would add them."""
    jobs = [
        "global:",
        "  scrape_interval: 1s",
        "  evaluation_interval: 1s",
        "scrape_configs:",
        "  - job_name: accel-exporter",
        "    static_configs:",
    ]
    for node, port in exporters.items():
        jobs.append(
            f"      - {{targets: ['127.0.0.1:{port}'], labels: {{cluster: lab, node: {node}}}}}"
        )
    jobs += [
        "  - job_name: accel-autoscaler",
        "    static_configs:",
        f"      - {{targets: ['127.0.0.1:{autoscaler_port}'], labels: {{cluster: lab}}}}",
    ]
    return "\n".join(jobs) + "\n"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Prometheus first, then the fake API server (a Node per exporter target) and
    the controller, then the exporters: Prometheus and the controller both see every
    fault counter at 0 before the scripted faults, so increase() sees them."""
    tmp = tmp_path_factory.mktemp("fleet")
    ports = {node: free_port() for node in [*NODES, MEASURED_NODE]}
    api_port = free_port()
    config = tmp / "prometheus.yml"
    config.write_text(prometheus_config(ports, api_port))
    data = tmp / "prom-data"
    data.mkdir()
    script = tmp / "faults.yaml"
    script.write_text(FAULTS)
    targets = {node: f"http://127.0.0.1:{port}/metrics" for node, port in ports.items()}
    with contextlib.ExitStack() as stack:
        prom = stack.enter_context(_run_prometheus(tmp, config, data, free_port()))
        kube = stack.enter_context(running_apiserver())
        for node in NODES:
            kube.add(node_object(node))
        kube.add(gang_pod("train-0", "node-a"))
        for obj in kueue_objects():
            kube.add(obj)
        kubeconfig = kube.write_kubeconfig(tmp / "kubeconfig")
        stack.enter_context(autoscaler(autoscaler_args(tmp, targets, kubeconfig), api_port))
        for node, args in NODES.items():
            extra = ["--sim-script", str(script)] if node == "node-a" else []
            common = ["--backends", "sim", "--poll-interval", "500ms", "--log.level", "warn"]
            stack.enter_context(exporter([*common, *args, *extra], port=ports[node]))
        measured = measured_exposition(tmp / MEASURED_NODE)
        stack.enter_context(serving(measured, ports[MEASURED_NODE]))
        yield prom


def api(prom: str, path: str, **params: str) -> Any:
    query = urllib.parse.urlencode(params, doseq=True)
    try:
        return json.loads(http_get(f"{prom}{path}?{query}", timeout=10))
    except urllib.error.HTTPError as e:  # a 400 carries Prometheus's parse error
        return json.loads(e.read())


VARIABLE = re.compile(r"\$\{([A-Za-z_]\w*)(?::\w+)?\}|\$([A-Za-z_]\w*)")
LABEL_VALUES = re.compile(r"label_values\((.*),\s*(\w+)\)", re.DOTALL)
REGEX_SPECIAL = re.compile(r"([.+*?^$()\[\]{}|\\])")


def substitute(expr: str, values: dict[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name not in values:
            raise AssertionError(f"{expr!r} uses ${name}, which no variable defines")
        return values[name]

    return VARIABLE.sub(one, expr)


def regex_value(values: list[str]) -> str:
    """A multi-value selection as Grafana writes it into ``=~"..."``: escaped
    alternatives in parentheses (the backslash doubled for the PromQL string)."""
    escaped = [REGEX_SPECIAL.sub(r"\\\\\1", v) for v in values]
    return "(" + "|".join(escaped) + ")"


@dataclass
class Variables:
    values: dict[str, str]  # what each $name becomes in a query
    first: dict[str, str]  # one real value each, for panels repeated by a variable


def resolve_variables(prom: str, board: dict[str, Any], all_value: bool) -> Variables:
    """Runs each variable's label_values() query in order (later ones use earlier
    ones); a multi-value variable takes every value (or, with ``all_value``, what
    Grafana's "All" writes: the variable's allValue), a single one the first."""
    out = Variables(dict(BUILTINS), {})
    for var in board["templating"]["list"]:
        if var["type"] != "query":
            continue
        m = LABEL_VALUES.fullmatch(var["definition"].strip())
        assert m, f"{board['title']}: variable {var['name']}: not label_values(...)"
        selector = substitute(m.group(1), out.values)
        body = api(prom, f"/api/v1/label/{m.group(2)}/values", **{"match[]": selector})
        assert body["status"] == "success", f"{board['title']}: ${var['name']}: {body}"
        found = sorted(body["data"])
        assert found, f"{board['title']}: ${var['name']}: {var['definition']} returns nothing"
        out.first[var["name"]] = found[0]
        out.values[var["name"]] = regex_value(found) if var["multi"] else found[0]
        if all_value and var.get("includeAll"):
            out.values[var["name"]] = var["allValue"]
    return out


@dataclass
class Query:
    dashboard: str
    panel: str
    expr: str
    instant: bool

    @property
    def where(self) -> str:
        return f"{self.dashboard} / {self.panel}"


def custom_choices(board: dict[str, Any]) -> list[dict[str, str]]:
    """Every combination of the board's custom variables' options (the chargeback's
    billing policy): each panel must have data under each of them."""
    choices: list[dict[str, str]] = [{}]
    for var in board["templating"]["list"]:
        if var["type"] == "custom":
            options = [o["value"] for o in var["options"]]
            assert options == var["query"].split(","), var["name"]
            choices = [c | {var["name"]: value} for c in choices for value in options]
    return choices


def queries(prom: str, all_value: bool) -> list[Query]:
    out: list[Query] = []
    for board in committed().values():
        variables = resolve_variables(prom, board, all_value)
        for choice in custom_choices(board):
            for p in panels(board):
                values = variables.values | choice
                if p.get("repeat"):
                    values[p["repeat"]] = variables.first[p["repeat"]]
                panel = p["title"] + (" (All)" if all_value else "")
                panel += "".join(f" [{k}={v}]" for k, v in choice.items())
                for t in p["targets"]:
                    expr = substitute(t["expr"], values)
                    out.append(Query(board["title"], panel, expr, bool(t.get("instant"))))
    return out


def run(prom: str, q: Query) -> tuple[str | None, int]:
    """(error or None, number of series with samples)."""
    now = time.time()
    if q.instant:
        body = api(prom, "/api/v1/query", query=q.expr, time=f"{now:.3f}")
    else:
        body = api(
            prom,
            "/api/v1/query_range",
            query=q.expr,
            start=f"{now - 10:.3f}",
            end=f"{now:.3f}",
            step="1",
        )
    if body["status"] != "success":
        return f"{body.get('errorType')}: {body.get('error')}", 0
    result = body["data"]["result"]
    if body["data"]["resultType"] == "scalar":
        return None, 1
    return None, sum(1 for r in result if r.get("value") or r.get("values"))


def empty_panels(prom: str, qs: list[Query]) -> tuple[list[str], list[str]]:
    """(queries that failed to run, queries with no data), each named."""
    errors, empty = [], []
    for q in qs:
        error, series = run(prom, q)
        if error:
            errors.append(f"{q.where}: {error}\n    {q.expr}")
        elif not series:
            empty.append(f"{q.where}: no data\n    {q.expr}")
    return errors, empty


# A subquery with a fixed step, `[$__range:1m]`, is evaluated only at multiples of
# that step: until one such instant with data has passed, the panel is empty.
_FIXED_STEP = re.compile(r"\[[^\]:]+:(\d+)([smh])\]")
_SECONDS = {"s": 1, "m": 60, "h": 3600}


def longest_fixed_step(qs: list[Query]) -> int:
    """The longest fixed subquery step among the queries, in seconds (0 if none)."""
    steps = (int(n) * _SECONDS[u] for q in qs for n, u in _FIXED_STEP.findall(q.expr))
    return max(steps, default=0)


def test_longest_fixed_step_reads_the_subquery_step() -> None:
    q = Query("b", "p", "sum_over_time((x)[1m:1m]) + sum_over_time(y[$__range:2m])", True)
    assert longest_fixed_step([q]) == 120
    assert longest_fixed_step([Query("b", "p", "rate(x[5m])", False)]) == 0


def test_every_panel_query_returns_data(fleet: str) -> None:
    # Variables and rate() need a few scrapes, and the faults come 6 s after the
    # exporters start: wait, bounded, until every panel has data. A panel sampled
    # once a minute may also wait for the next whole minute after its data begins.
    started = time.monotonic()
    deadline = started + 60
    while True:
        try:
            # Every value of each variable selected, then "All" (allValue .*).
            qs = queries(fleet, all_value=False) + queries(fleet, all_value=True)
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
            continue
        deadline = max(deadline, started + 60 + longest_fixed_step(qs))
        errors, empty = empty_panels(fleet, qs)
        assert not errors, "queries Prometheus refused:\n" + "\n".join(errors)
        if not empty:
            break
        assert time.monotonic() < deadline, (
            f"{len(empty)} of {len(qs)} panel queries return no data:\n" + "\n".join(empty)
        )
        time.sleep(1)
    boards = committed().values()
    n_panels = sum(1 for b in boards for _ in panels(b))
    print(f"\n{n_panels} panels, {len(qs)} queries (two selections), every one with data")
    assert len(qs) >= 2 * n_panels


# What node-c's two pods are billed under each policy: their use; their use plus
# half of what neither used (1 - 0.7); or half the GPU each.
POLICY_SHARES = {
    "measured": MEASURED_SHARES,
    "measured-with-idle-split": {"train-a": 0.65, "infer-b": 0.35},
    "held": {"train-a": 0.5, "infer-b": 0.5},
}


def billed(prom: str, policy: str) -> list[tuple[dict[str, str], float]]:
    """The chargeback's billed shares under ``policy``, once every node has some."""
    values = dict(BUILTINS) | {
        "cluster": ".*",
        "node": ".*",
        "vendor": ".*",
        "namespace": ".*",
        "policy": policy,
    }
    expr = substitute(chargeback.BILLED, values)
    deadline = time.monotonic() + 30
    while True:
        body = api(prom, "/api/v1/query", query=expr)
        assert body["status"] == "success", body
        rows = [(r["metric"], float(r["value"][1])) for r in body["data"]["result"]]
        if {m.get("node") for m, _ in rows} >= {*NODES, MEASURED_NODE}:
            return rows
        assert time.monotonic() < deadline, f"{policy}: billed shares: {rows}"
        time.sleep(1)


@pytest.mark.parametrize("policy", list(POLICY_SHARES))
def test_chargeback_bills_by_each_policy(fleet: str, policy: str) -> None:
    """The billed share under each policy, through the query the panels use: node-c's
    time-sliced GPU (the real NVIDIA backend) bills its pods as the policy says; on
    the sim nodes (node-a with ResourceClaims, MPS, time-slicing and an idle pod,
    node-b without per-pod use) held and measured-with-idle-split bill each device
    in full, and measured no more than the device did."""
    assert chargeback.DEFAULT_POLICY == "measured-with-idle-split"
    rows = billed(fleet, policy)
    measured = {m["pod"]: v for m, v in rows if m.get("node") == MEASURED_NODE}
    assert measured == pytest.approx(POLICY_SHARES[policy], abs=0.05)
    by_device: dict[tuple[str, str], float] = {}
    for m, v in rows:
        if m.get("node") in NODES:
            assert 0 <= v <= 1, (policy, m, v)
            key = (m["node"], m["uuid"])
            by_device[key] = by_device.get(key, 0.0) + v
    assert by_device
    if policy == "measured":
        assert all(v <= 1 + 1e-6 for v in by_device.values())
        assert any(v < 0.999 for v in by_device.values()), "idle time billed under measured"
    else:
        assert all(v == pytest.approx(1.0) for v in by_device.values()), by_device
    # node-a's sharing: the MPS pods (one shared claim) and the idle notebook.
    pods = {m["pod"]: v for m, v in rows if m.get("node") == "node-a"}
    assert {"infer-0", "infer-1", "infer-2", "notebook-0"} <= pods.keys()
    # The idle notebook: its 2% under measured, the whole GPU under the others.
    want = 0.02 if policy == "measured" else 1.0
    assert pods["notebook-0"] == pytest.approx(want, abs=1e-3), policy
    every = {**BUILTINS, "cluster": ".*", "node": ".*", "vendor": ".*"}
    for name in ("MEASURED_DEVICES", "HEAD_COUNT_DEVICES"):
        expr = substitute(getattr(chargeback, name), every)
        body = api(fleet, "/api/v1/query", query=expr)
        assert body["status"] == "success" and body["data"]["result"], (name, body)
        assert float(body["data"]["result"][0]["value"][1]) >= 1, name
    print(f"\n{policy}: node-c {measured}, {len(by_device)} sim devices billed")
