"""Correct scrapes of a basic-auth exporter with and without a password-guessing
flood, side by side from one run.

What is measured: the latency (p50, p99, max) of ``GET /metrics`` with the right
password, from sending the request to having read the whole gzip body, first with
no other client, then while ``--attackers`` clients (60 by default) each send
requests with a fresh wrong password as fast as they are answered. The peer of
the attacked figure is the same exporter unattacked; the acceptance line is the
issue's: p99 under attack within 2x of p99 without. It also times one request
with a valid credential the exporter has not seen yet (as after a restart), sent
during the attack: it must wait its turn for bcrypt, not be locked out.

How:

* **One exporter** (``python -m exporter.cli``, sim backend) with a web config
  whose one user has a bcrypt hash of cost 10, what ``htpasswd -nBC 10`` writes.
* **The attackers run in their own process** (this module with ``--attack``), so
  that their client work does not run on the measuring client's event loop, and
  connect from 127.0.0.2, as another host would (with ``--attack-addresses N``,
  from 127.0.0.2 onwards, N hosts sharing the clients in turn: the flood from many
  addresses that used to fill the auth queue, issue 27); they are paused (SIGSTOP) for
  the no-attack rounds and resumed (SIGCONT) for the attack rounds. Every guess
  is a new random password, so no cache can help: each one is either checked
  with bcrypt in its turn or refused by the full auth queue.
* **Interleaved rounds**, the order alternating, with a ramp after resuming the
  attackers and a pause after stopping them (for the bcrypt queue to drain), so
  that a noisy neighbour on a shared machine hits both sides alike.
* **The measuring client** is one aiohttp session, one keep-alive connection, one
  scrape in flight (Prometheus's habit), ``Accept-Encoding: gzip``.

Every process this starts is stopped on exit, on Ctrl-C and on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import ipaddress
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import bcrypt

from bench.scrape import (
    REPO,
    BenchError,
    Server,
    _free_port,
    _on_sigterm,
    machine,
    percentile,
    start_server,
)

USER = "prometheus"
LATE_USER = "late"  # a second user, first seen during an attack round
# The attackers' first address: another host, as far as the exporter can tell (Linux
# routes all of 127.0.0.0/8 to the loopback device); more go on from it.
ATTACK_FROM = "127.0.0.2"
MAX_ATTACK_ADDRESSES = 250  # 127.0.0.2 .. 127.0.0.251
COST = 10  # htpasswd -nBC 10, the hint the web config's errors give
DEVICES = "nvidia:8"
READY_TIMEOUT = 15.0
REQUEST_TIMEOUT = 30.0
RAMP = 0.5  # seconds of attack before a round's scrapes are timed
DRAIN = 1.0  # seconds after pausing the attackers, for queued bcrypt checks to finish
ACCEPTANCE_RATIO = 2.0


def attack_addresses(n: int) -> list[str]:
    first = ipaddress.IPv4Address(ATTACK_FROM)
    return [str(first + i) for i in range(n)]


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# -- the attackers' process ----------------------------------------------------------


def ready_marker(report: Path) -> Path:
    return report.with_name(report.name + ".ready")


async def attack(url: str, clients: int, report: Path, addresses: int = 1) -> None:
    """``clients`` loops of wrong-password requests, each on its own connection,
    from ``addresses`` source addresses in turn, until SIGTERM; then writes the
    count of answers by status to ``report``. The ready marker appears once the
    first guess has been answered."""
    statuses: dict[int, int] = {}
    errors = 0
    marker = ready_marker(report)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
    sessions = [
        aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, local_addr=(address, 0)), timeout=timeout
        )
        for address in attack_addresses(addresses)
    ]
    try:

        async def client(session: aiohttp.ClientSession) -> None:
            nonlocal errors
            while not stop.is_set():
                wrong = {"Authorization": basic(USER, secrets.token_hex(12))}
                try:
                    async with session.get(url, headers=wrong) as resp:
                        await resp.read()
                        statuses[resp.status] = statuses.get(resp.status, 0) + 1
                    if not marker.exists():
                        marker.touch()
                except (aiohttp.ClientError, TimeoutError):
                    errors += 1
                    await asyncio.sleep(0.05)

        tasks = [asyncio.create_task(client(sessions[i % len(sessions)])) for i in range(clients)]
        await stop.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        for session in sessions:
            await session.close()
    report.write_text(json.dumps({"statuses": statuses, "errors": errors}))


# -- the measuring side ----------------------------------------------------------------


async def scrape_batch(
    session: aiohttp.ClientSession, url: str, headers: dict[str, str], n: int
) -> list[float]:
    latencies = []
    for _ in range(n):
        start = time.perf_counter()
        try:
            async with session.get(url, headers=headers) as resp:
                await resp.read()
        except (aiohttp.ClientError, TimeoutError) as e:
            raise BenchError(f"a correct scrape failed: {e!r}") from e
        took = time.perf_counter() - start
        if resp.status != 200:
            raise BenchError(f"a correct scrape was answered {resp.status}")
        latencies.append(took)
    return latencies


async def wait_ready(server: Server, headers: dict[str, str]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    last = "no answer yet"
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if server.proc.poll() is not None:
                raise BenchError(
                    f"the exporter exited with status {server.proc.returncode}; its log:\n"
                    f"{server.log_tail()}"
                )
            try:
                async with session.get(server.url, headers=headers) as resp:
                    body = await resp.read()
                    if resp.status == 200 and b'accel_exporter_backend_up{backend="sim"} 1' in body:
                        return
                    last = f"answered {resp.status}"
            except (aiohttp.ClientError, OSError) as e:
                last = str(e)
            await asyncio.sleep(0.1)
    raise BenchError(
        f"the exporter was not ready within {READY_TIMEOUT:g} s ({last}); its log:\n"
        f"{server.log_tail()}"
    )


def auth_headers(args: argparse.Namespace) -> dict[str, str]:
    return {"Authorization": basic(USER, args.password), "Accept-Encoding": "gzip"}


def wait_attacking(attackers: Server, report: Path) -> None:
    """Until the attackers' first guess was answered: a round must not start
    before the attack it measures has."""
    deadline = time.monotonic() + READY_TIMEOUT
    while not ready_marker(report).exists():
        if attackers.proc.poll() is not None or time.monotonic() > deadline:
            raise BenchError(
                f"the attackers did not start within {READY_TIMEOUT:g} s; their log:\n"
                f"{attackers.log_tail()}"
            )
        time.sleep(0.05)


async def measure(
    server: Server, attackers: subprocess.Popen[bytes], args: argparse.Namespace
) -> tuple[dict[str, list[float]], float, tuple[int, float]]:
    """The latencies of each side, how long the attackers ran, and how a valid
    credential that is not cached yet fared during the attack: (status, seconds)."""
    headers = auth_headers(args)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
    out: dict[str, list[float]] = {"none": [], "attack": []}
    attacking = 0.0
    async with aiohttp.ClientSession(timeout=timeout, auto_decompress=False) as session:
        # Warm-up: the connection, the exporter's caches, and the one bcrypt check
        # the right password pays before it is cached.
        await scrape_batch(session, server.url, headers, max(20, args.scrapes // 20))
        per_round = [
            args.scrapes // args.rounds + (1 if i < args.scrapes % args.rounds else 0)
            for i in range(args.rounds)
        ]
        for i, n in enumerate(per_round):
            order = ("none", "attack") if i % 2 == 0 else ("attack", "none")
            for side in order:
                if side == "attack":
                    attackers.send_signal(signal.SIGCONT)
                    resumed = time.monotonic()
                    await asyncio.sleep(RAMP)
                out[side] += await scrape_batch(session, server.url, headers, n)
                if side == "attack":
                    attackers.send_signal(signal.SIGSTOP)
                    attacking += time.monotonic() - resumed
                    await asyncio.sleep(DRAIN)
        # A credential the exporter has not seen (as after a restart or a password
        # change): it waits its turn for bcrypt behind the guesses.
        attackers.send_signal(signal.SIGCONT)
        await asyncio.sleep(RAMP)
        late = {"Authorization": basic(LATE_USER, args.late_password)}
        start = time.perf_counter()
        async with session.get(server.url, headers=late) as resp:
            await resp.read()
        new_credential = (resp.status, time.perf_counter() - start)
        attackers.send_signal(signal.SIGSTOP)
    return out, attacking, new_credential


def summarize(
    latencies: dict[str, list[float]], guesses: dict[str, Any], args: argparse.Namespace
) -> dict[str, Any]:
    def side(values: list[float]) -> dict[str, Any]:
        return {
            "scrapes": len(values),
            "p50_seconds": percentile(values, 50),
            "p99_seconds": percentile(values, 99),
            "max_seconds": max(values),
            "mean_seconds": statistics.fmean(values),
        }

    none, attacked = side(latencies["none"]), side(latencies["attack"])
    ratio = {k: attacked[f"{k}_seconds"] / none[f"{k}_seconds"] for k in ("p50", "p99", "max")}
    return {
        "machine": machine(),
        "settings": {
            "scrapes": args.scrapes,
            "rounds": args.rounds,
            "attackers": args.attackers,
            "attack_addresses": args.attack_addresses,
            "bcrypt_cost": args.cost,
            "devices": DEVICES,
        },
        "no_attack": none,
        "attack": attacked,
        "ratio": ratio,
        "guesses": guesses,
        "acceptance": {"max_p99_ratio": ACCEPTANCE_RATIO, "met": ratio["p99"] <= ACCEPTANCE_RATIO},
    }


def render_table(r: dict[str, Any]) -> str:
    m, s, a, b, q = r["machine"], r["settings"], r["no_attack"], r["attack"], r["ratio"]
    ms = 1000.0
    rows = [
        ("correct scrapes", str(a["scrapes"]), str(b["scrapes"]), ""),
        ("latency p50 (ms)", f"{a['p50_seconds'] * ms:.3f}", f"{b['p50_seconds'] * ms:.3f}",
         f"{q['p50']:.3g}"),
        ("latency p99 (ms)", f"{a['p99_seconds'] * ms:.3f}", f"{b['p99_seconds'] * ms:.3f}",
         f"{q['p99']:.3g}"),
        ("latency max (ms)", f"{a['max_seconds'] * ms:.3f}", f"{b['max_seconds'] * ms:.3f}",
         f"{q['max']:.3g}"),
    ]  # fmt: skip
    header = ("", "no attack", f"{s['attackers']} attackers", "attack/none")
    w0 = max(len(x[0]) for x in [*rows, header])
    g, nc = r["guesses"], r["new_credential"]
    answered = sum(g["statuses"].values())
    verdict = "met" if r["acceptance"]["met"] else "NOT met"
    lines = [
        f"accel-exporter with basic auth (bcrypt cost {s['bcrypt_cost']}, sim {s['devices']}): "
        f"correct scrapes alone and while {s['attackers']} clients guess passwords"
        f" from {s['attack_addresses']} address(es)",
        f"machine: {m['nproc']} CPUs, {m['cpu_model']}, Python {m['python']}, {m['platform']}",
        f"client:  aiohttp {m['aiohttp']}, one keep-alive connection, Accept-Encoding: gzip, "
        f"{s['scrapes']} scrapes each side in {s['rounds']} interleaved rounds",
        "",
        f"{header[0]:<{w0}}  {header[1]:>12}  {header[2]:>14}  {header[3]:>11}",
    ]
    lines += [f"{n:<{w0}}  {x:>12}  {y:>14}  {z:>11}" for n, x, y, z in rows]
    lines += [
        "",
        f"wrong-password requests answered: {answered} "
        f"({', '.join(f'{k}: {v}' for k, v in sorted(g['statuses'].items()))}), "
        f"{g['per_second']:.0f}/s while attacking; client errors {g['errors']}",
        f"a valid credential first seen during the attack: answered {nc['status']} "
        f"after {nc['seconds'] * ms:.0f} ms "
        + (
            "(its turn for bcrypt behind the guesses)"
            if nc["status"] == 200
            else "(LOCKED OUT: the flood kept it from its turn for bcrypt)"
        ),
        f"acceptance (p99 under attack within {ACCEPTANCE_RATIO:g}x of p99 without): "
        f"{verdict}, {q['p99']:.2f}x",
    ]
    return "\n".join(lines)


def bench(args: argparse.Namespace) -> dict[str, Any]:
    args.password = secrets.token_urlsafe(16)
    args.late_password = secrets.token_urlsafe(16)
    hashed = bcrypt.hashpw(args.password.encode(), bcrypt.gensalt(rounds=args.cost)).decode()
    late = bcrypt.hashpw(args.late_password.encode(), bcrypt.gensalt(rounds=args.cost)).decode()
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="accel-bench-")))
        config = workdir / "web.yml"
        config.write_text(f"basic_auth_users:\n  {USER}: '{hashed}'\n  {LATE_USER}: '{late}'\n")
        port = _free_port()
        server = start_server(
            "accel-exporter",
            [
                sys.executable, "-m", "exporter.cli",
                "--backends", "sim",
                "--sim-devices", DEVICES,
                "--web.listen-address", f"127.0.0.1:{port}",
                "--web.config.file", str(config),
                "--poll-interval", "5s",
                "--log.level", "warn",
            ],
            port, workdir, stack,
        )  # fmt: skip
        # Ready, with the scraping credential cached, as in steady state, before
        # any attack.
        asyncio.run(wait_ready(server, auth_headers(args)))
        report = workdir / "attack.json"
        attackers = start_server(
            "attackers",
            [
                sys.executable, "-m", "bench.auth",
                "--attack", server.url,
                "--attackers", str(args.attackers),
                "--attack-addresses", str(args.attack_addresses),
                "--report", str(report),
            ],
            port, workdir, stack,
        )  # fmt: skip
        # A stopped process acts on SIGTERM only once resumed: resume it on the way out.
        stack.callback(lambda: attackers.proc.send_signal(signal.SIGCONT))
        wait_attacking(attackers, report)
        # Paused until the first attack round, and the bcrypt queue drained.
        attackers.proc.send_signal(signal.SIGSTOP)
        time.sleep(DRAIN)
        print(
            f"measuring: {args.scrapes} correct scrapes each side, {args.attackers} attackers, "
            f"{args.rounds} interleaved rounds...",
            flush=True,
        )
        latencies, attack_seconds, late_answer = asyncio.run(measure(server, attackers.proc, args))
        attackers.proc.send_signal(signal.SIGCONT)
        attackers.stop()
        if server.proc.poll() is not None:
            raise BenchError(f"the exporter exited during the run; its log:\n{server.log_tail()}")
        try:
            guesses = json.loads(report.read_text())
        except (OSError, ValueError) as e:
            raise BenchError(
                f"the attackers wrote no report ({e}); their log:\n{attackers.log_tail()}"
            ) from e
        guesses["statuses"] = {int(k): v for k, v in guesses["statuses"].items()}
        guesses["per_second"] = sum(guesses["statuses"].values()) / max(attack_seconds, 1e-9)
        result = summarize(latencies, guesses, args)
        result["new_credential"] = {"status": late_answer[0], "seconds": late_answer[1]}
        return result


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.auth",
        description=(
            "Correct scrapes of a basic-auth exporter (bcrypt cost 10) alone and while "
            "clients guess passwords, in interleaved rounds of one run: p50/p99/max "
            "latency of both sides and the ratio attack/none."
        ),
        epilog="The exporter and the attackers bind or connect to 127.0.0.1 only and "
        "are stopped on exit. See the module docstring for the method.",
    )
    p.add_argument(
        "--scrapes",
        type=int,
        default=2000,
        metavar="N",
        help="correct scrapes timed on each side (default %(default)s)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=10,
        metavar="N",
        help="interleaved rounds (default %(default)s)",
    )
    p.add_argument(
        "--attackers",
        type=int,
        default=60,
        metavar="N",
        help="clients guessing passwords during attack rounds (default %(default)s)",
    )
    p.add_argument(
        "--attack-addresses",
        type=int,
        default=1,
        metavar="N",
        help="source addresses the attackers share, from 127.0.0.2 (default %(default)s)",
    )
    p.add_argument(
        "--cost",
        type=int,
        default=COST,
        metavar="N",
        help="bcrypt cost of the user's hash (default %(default)s)",
    )
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the results as JSON")
    p.add_argument(
        "--check", action="store_true", help="exit 1 when the acceptance ratio is not met"
    )
    p.add_argument("--attack", metavar="URL", help=argparse.SUPPRESS)
    p.add_argument("--report", type=Path, help=argparse.SUPPRESS)
    return p  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.attack:
        asyncio.run(attack(args.attack, args.attackers, args.report, args.attack_addresses))
        return 0
    if args.scrapes < args.rounds or args.rounds < 1:
        parser.error("--rounds must be at least 1 and --scrapes at least --rounds")
    if args.attackers < 1 or not 4 <= args.cost <= 31:
        parser.error("--attackers must be at least 1 and --cost between 4 and 31")
    if not 1 <= args.attack_addresses <= min(args.attackers, MAX_ATTACK_ADDRESSES):
        parser.error(
            f"--attack-addresses must be between 1 and --attackers ({args.attackers}), "
            f"at most {MAX_ATTACK_ADDRESSES}"
        )
    os.chdir(REPO)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        result = bench(args)
    except BenchError as e:
        print(f"bench/auth.py: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench/auth.py: interrupted; processes stopped", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    print()
    print(render_table(result))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"\nresults written to {args.json}")
    return 1 if args.check and not result["acceptance"]["met"] else 0


if __name__ == "__main__":
    sys.exit(main())
