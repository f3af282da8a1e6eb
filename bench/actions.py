"""How quickly the controller turns decisions into API calls, on a 1,000-node fake.

What is measured
----------------
The fake API server (tests/support/fakes/apiserver.py, real HTTP on 127.0.0.1) holds
1,000 nodes with 8 GPUs and two device-using pods each (one owned by a Job, one
bare). The production executor (autoscaler/executor.py) with the real
``kubernetes`` client (``ClientKube``) is handed decisions the way the
controller hands them over after an evaluation: a batch of ``--batch`` decisions
at once, for distinct nodes, cycling through the actions ``cordon``, ``taint``,
``drain`` and ``migrate_jobs``.

* **decision → first API call**: from ``Executor.submit`` to the action's first
  call on the ``Kube`` wrapper, per decision. This is what the controller adds
  before the cluster hears of a decision: task start-up and queueing behind the
  other decisions of the batch.
* **per action**: from submit to the action's end (every API call it makes: the
  node read, the conditional patch, the pod list, evictions, a bare pod's
  replacement, the Events), per action type.

Both are printed as p50 and p99 over all decisions, with the number of API
requests the server saw per action. There is no peer process here: no other
controller runs against this fake. The server and the controller share this
machine's two cores, so the figures include the fake's own work.

    .venv/bin/python bench/actions.py [--nodes 1000] [--batch 50] [--rounds 8]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from autoscaler.actions import ACTIONS  # noqa: E402
from autoscaler.actions.context import ActionContext  # noqa: E402
from autoscaler.decision import Decision  # noqa: E402
from autoscaler.executor import Executor  # noqa: E402
from tests.support.fakes.apiserver import running_apiserver  # noqa: E402
from tests.support.kubeobjs import client, node, pod  # noqa: E402

KINDS = ("cordon", "taint", "drain", "migrate_jobs")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def decision(action: str, name: str, i: int) -> Decision:
    params, problems = ACTIONS[action].validate({})
    assert not problems
    return Decision(
        rule=f"bench-{action}",
        kind="act",
        action=action,
        params=params,
        target={"node": name},
        sample_labels=(),
        sample_value=1.0,
        at=float(i),
    )


async def measure(kube: object, nodes: int, batch: int, rounds: int) -> dict[str, list[float]]:
    ex = Executor(ActionContext(kube=kube, retry_interval=0.05))  # type: ignore[arg-type]
    i = 0
    for _ in range(rounds):
        for _ in range(batch):
            ex.submit(decision(KINDS[i % len(KINDS)], f"n{i % nodes:04d}", i))
            i += 1
        await ex.wait(timeout=300)
    per_action: dict[str, list[float]] = {k: list(v) for k, v in ex.duration_seconds.items()}
    per_action["first_call"] = list(ex.first_call_seconds)
    failed = [r for r in ex.history if r.outcome.status == "failed"]
    if failed:
        raise SystemExit(f"{len(failed)} actions failed, e.g. {failed[0].outcome.message}")
    return per_action


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--batch", type=int, default=50, help="decisions submitted at once")
    p.add_argument("--rounds", type=int, default=8)
    args = p.parse_args()
    with running_apiserver() as api, tempfile.TemporaryDirectory() as tmp:
        for n in range(args.nodes):
            name = f"n{n:04d}"
            api.add(node(name))
            api.add(pod(f"job-{name}", name, owner="Job"))
            api.add(pod(f"bare-{name}", name, owner=None))
        kube = client(api, Path(tmp))
        t0 = time.perf_counter()
        asyncio.run(kube.list_nodes())
        list_ms = (time.perf_counter() - t0) * 1e3
        before = len(api.requests)
        start = time.perf_counter()
        figures = asyncio.run(measure(kube, args.nodes, args.batch, args.rounds))
        wall = time.perf_counter() - start
        requests = len(api.requests) - before
    total = args.batch * args.rounds
    print(
        f"fake API server: {args.nodes} nodes, {2 * args.nodes} pods; list nodes {list_ms:.1f} ms"
    )
    print(f"{total} decisions in batches of {args.batch}: {wall:.2f} s, {requests} API requests")
    print(f"{'measure':<28}{'n':>6}{'p50 ms':>10}{'p99 ms':>10}")
    for name in ("first_call", *KINDS):
        values = figures.get(name, [])
        if values:
            label = "decision -> first API call" if name == "first_call" else f"action {name}"
            print(
                f"{label:<28}{len(values):>6}{pct(values, 50) * 1e3:>10.1f}"
                f"{pct(values, 99) * 1e3:>10.1f}"
            )
    every = [v for k in KINDS for v in figures.get(k, [])]
    print(f"median per action, all kinds: {statistics.median(every) * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
