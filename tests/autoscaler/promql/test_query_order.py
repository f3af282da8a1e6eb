"""``sort``, ``sort_desc``, ``topk`` and ``bottomk`` come out in Prometheus's order,
from the evaluator and from ``accel-autoscaler query``.

Why: the command used to print every vector sorted by labels, so ``sort_desc(x)``
printed what ``sort(x)`` printed; and the evaluator broke ties by input order,
where Prometheus 2.42's ``topk`` keeps a heap whose layout decides which of two
equal samples stays and which comes first. Both are compared with Debian's
Prometheus 2.42 over the same samples: the shipped example file
(``docs/examples/samples.om``, counters mostly at 0, so ties everywhere) and a
file made here with ties and NaN in groups of up to 12.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autoscaler.commands.query import query
from autoscaler.promql.evaluator import Evaluator
from autoscaler.promql.goorder import top_one, top_rows
from autoscaler.promql.openmetrics import load
from autoscaler.promql.query import ordered
from autoscaler.promql.vectors import groups_of
from autoscaler.types import Vector
from tests.autoscaler.promql.realprom import ask, serve
from tests.support.paths import REPO

EXAMPLE = REPO / "docs" / "examples" / "samples.om"
EXAMPLE_TIMES = [1700000000 + s for s in (150, 420, 600)]
EXAMPLE_EXPRESSIONS = [
    "sort(accel_fault_events_total)",
    "sort_desc(accel_fault_events_total)",
    "sort(increase(accel_fault_events_total[5m]))",
    "sort_desc(increase(accel_fault_events_total[5m]))",
    "topk(2, accel_fault_events_total)",
    "topk(3, increase(accel_fault_events_total[10m]))",
    "bottomk(3, accel_fault_events_total)",
    "bottomk by (severity) (1, accel_fault_events_total)",
    "topk(4, accel_fault_events_total) > -1",
    "-sort_desc(accel_fault_events_total)",
]

T = 1_700_000_000
# Values with ties and NaN; each group ("g") holds up to 12 series, the most
# Go's sort.Sort orders by insertion (the order reproduced exactly).
TIES: list[int | str] = [0, 1, 0, 2, 2, "NaN", 1, 3, 0, "NaN", 2, 1]


def _ties_file() -> str:
    lines = ["# TYPE x gauge"]
    for g in range(3):
        for i, value in enumerate(TIES[: 12 - 3 * g]):
            v = value if isinstance(value, str) else (value + g) % 4
            lines.append(f'x{{g="{g}",i="{i:02d}"}} {v} {T}')
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


TIES_EXPRESSIONS = [
    *(f'topk({k}, x{{g="{g}"}})' for g in range(3) for k in (1, 2, 3, 5, 8, 12)),
    *(f'bottomk({k}, x{{g="{g}"}})' for g in range(3) for k in (1, 2, 3, 5, 8, 12)),
    *(f'{f}(x{{g="{g}"}})' for g in range(3) for f in ("sort", "sort_desc")),
    "topk by (g) (2, x)",
    "bottomk by (g) (3, x)",
]


@pytest.fixture(scope="module")
def example_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serve(EXAMPLE, tmp_path_factory.mktemp("example")) as url:
        yield url


@pytest.fixture(scope="module")
def ties(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    tmp = tmp_path_factory.mktemp("ties")
    path = tmp / "ties.om"
    path.write_text(_ties_file())
    with serve(path, tmp) as url:
        yield url, path


def _their_order(body: dict[str, Any]) -> list[dict[str, str]]:
    assert body["status"] == "success", body
    return [item["metric"] for item in body["data"]["result"]]


def _cli(expr: str, series: Path, t: float) -> list[dict[str, str]]:
    # "--" so that an expression with a leading minus is not read as a flag.
    flags = ["--series", str(series), "--time", str(t), "--", expr]
    proc = subprocess.run(
        [sys.executable, "-m", "autoscaler.cli", "query", *flags],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return [item["metric"] for item in json.loads(proc.stdout)["result"]]


@pytest.mark.parametrize("expr", EXAMPLE_EXPRESSIONS)
def test_query_prints_the_examples_in_prometheus_order(
    expr: str, example_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command's own code, in this process (``_cli`` below runs the console
    path once; a process per case would take a minute)."""
    assert ordered(expr)
    for t in EXAMPLE_TIMES:
        theirs = _their_order(ask(example_url, expr, t))
        assert len(theirs) > 1
        assert query(expr, str(EXAMPLE), str(t)) == 0
        printed = json.loads(capsys.readouterr().out)
        assert [item["metric"] for item in printed["result"]] == theirs, f"{expr} at {t}"


def test_sort_and_sort_desc_print_differently(example_url: str) -> None:
    """The reported symptom itself, through the console command, on the shipped file."""
    t = EXAMPLE_TIMES[-1]
    for expr in ("sort(accel_fault_events_total)", "sort_desc(accel_fault_events_total)"):
        assert _cli(expr, EXAMPLE, t) == _their_order(ask(example_url, expr, t))
    up = _cli("sort(accel_fault_events_total)", EXAMPLE, t)
    assert up != _cli("sort_desc(accel_fault_events_total)", EXAMPLE, t)


@pytest.mark.parametrize("expr", TIES_EXPRESSIONS)
def test_ties_and_nan_in_prometheus_order(expr: str, ties: tuple[str, Path]) -> None:
    url, path = ties
    theirs = _their_order(ask(url, expr, T))
    mine = Evaluator(load(path)).instant(expr, T)
    assert isinstance(mine, Vector)
    assert [dict(s.labels) for s in mine.samples] == theirs


def test_unordered_answers_stay_sorted_by_labels() -> None:
    """Where nothing asked for an order, the output is sorted by labels, so two
    runs (or two sources) diff cleanly."""
    assert not ordered("sum by (severity) (accel_fault_events_total)")
    assert not ordered("accel_fault_events_total > 0")
    assert not ordered("sort(x) + on() group_left y")
    metrics = _cli("accel_fault_events_total", EXAMPLE, EXAMPLE_TIMES[-1])
    assert metrics == sorted(metrics, key=lambda m: sorted(m.items()))


def test_k_of_one_takes_the_heap_walks_answer() -> None:
    """``topk``/``bottomk`` with k = 1 (the shipped stall rules) has a closed form;
    it must keep what walking 2.42's heap keeps, ties and NaN included."""
    rng = np.random.default_rng(7)
    for _ in range(2000):
        n = int(rng.integers(1, 14))
        values = rng.choice(np.array([0.0, 1.0, 2.0, 3.0, np.nan]), size=n)
        first, group = groups_of(rng.integers(0, 3, size=n).astype(np.int64))
        for bottom in (False, True):
            closed = top_one(values, group, first, bottom).tolist()
            assert closed == top_rows(values, group, 1, bottom), (values, group, bottom)
