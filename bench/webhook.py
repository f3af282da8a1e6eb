"""How long a 4 MiB Alertmanager body holds the controller's event loop, taken in one
piece (as the webhook did) and in slices (as it does now).

What is measured
----------------
A body just under the webhook's limit (``MAX_BODY``, 4 MiB): about 11,000 firing
alerts as Alertmanager sends them, with fingerprints, or 12,000 without (then the
receiver computes each fingerprint, FNV-1a in Python). Each way takes it
``--rounds`` times, into a receiver that already holds the alerts of the round
before (as a webhook that Alertmanager keeps re-sending to does):

* **one piece**: ``decode`` then ``apply``, both on the loop, which is what the
  webhook handler did before it sliced the work;
* **in slices**: ``decode_in_slices`` then ``apply_in_slices``, what it does now.

Beside them a probe task wakes as often as the loop lets it and records the gaps
between its turns. The figure is the longest gap, twice: in wall-clock time, and
in the CPU time the loop's thread spent in it (``time.thread_time``). The second
is the stall the work itself causes; the first adds whatever else this machine was
running at the moment (its two cores are shared), so it is the noisier one. The
peer is the old way: nobody else's webhook is run here.

    .venv/bin/python bench/webhook.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from autoscaler.sources.alertmanager import (  # noqa: E402
    MAX_BODY,
    AlertReceiver,
    decode,
    decode_in_slices,
)


def body(fingerprints: bool, limit: int = MAX_BODY) -> bytes:
    """A v4 body of as many alerts as fit in ``limit`` bytes."""

    def alert(i: int) -> dict[str, Any]:
        a: dict[str, Any] = {
            "status": "firing",
            "labels": {
                "alertname": "GPUFault",
                "node": f"node-{i}",
                "device": f"gpu{i % 8}",
                "severity": "critical",
                "instance": f"10.0.{i // 256 % 256}.{i % 256}:9835",
            },
            "annotations": {"summary": "GPU fell off the bus " * 4},
            "startsAt": "2026-12-01T10:00:00Z",
            "endsAt": "0001-01-01T00:00:00Z",
        }
        if fingerprints:
            a["fingerprint"] = f"{i:016x}"
        return a

    def wrap(n: int) -> bytes:
        alerts = [alert(i) for i in range(n)]
        return json.dumps({"version": "4", "status": "firing", "alerts": alerts}).encode()

    each = len(wrap(100)) / 100
    n = int(limit / each)
    while len(raw := wrap(n)) > limit:
        n -= max(1, (len(raw) - limit) // int(each) + 1)
    return raw


async def stalls(work: Callable[[], Awaitable[None]]) -> tuple[float, float]:
    """The longest gap between the probe's turns while ``work`` runs: wall, CPU."""
    wall: list[float] = []
    cpu: list[float] = []
    done = False

    async def probe() -> None:
        last_wall, last_cpu = time.perf_counter(), time.thread_time()
        while not done:
            await asyncio.sleep(0)
            now_wall, now_cpu = time.perf_counter(), time.thread_time()
            wall.append(now_wall - last_wall)
            cpu.append(now_cpu - last_cpu)
            last_wall, last_cpu = now_wall, now_cpu

    task = asyncio.create_task(probe())
    await asyncio.sleep(0)
    await work()
    done = True
    await task
    return max(wall), max(cpu)


async def run(raw: bytes, rounds: int) -> dict[str, list[tuple[float, float]]]:
    found: dict[str, list[tuple[float, float]]] = {"one piece": [], "in slices": []}
    receivers = {way: AlertReceiver(limit=100_000) for way in found}
    for _ in range(rounds):

        async def whole() -> None:
            receivers["one piece"].apply(decode(raw), time.time())

        async def sliced() -> None:
            notices = await decode_in_slices(raw)
            await receivers["in slices"].apply_in_slices(notices, time.time())

        found["one piece"].append(await stalls(whole))
        found["in slices"].append(await stalls(sliced))
    return found


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    logging.disable(logging.INFO)  # "alert firing" lines: not what is measured
    print(f"{'body':<34} {'way':<10} {'max stall, wall':>16} {'max stall, CPU':>16}")
    for fingerprints in (True, False):
        raw = body(fingerprints)
        alerts = raw.count(b'"alertname"')
        kind = "" if fingerprints else ", no fp"
        what = f"{len(raw) / 2**20:.2f} MiB, {alerts} alerts{kind}"
        for way, runs in asyncio.run(run(raw, args.rounds)).items():
            wall = statistics.median(w for w, _ in runs)
            cpu = statistics.median(c for _, c in runs)
            print(f"{what:<34} {way:<10} {wall * 1e3:>13.0f} ms {cpu * 1e3:>13.0f} ms")
    print(f"(medians of {args.rounds} rounds)")


if __name__ == "__main__":
    main()
