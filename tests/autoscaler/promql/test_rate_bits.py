"""``rate``, ``increase``, ``delta``, ``irate`` and ``idelta`` bit for bit against a
real Prometheus 2.42, and ``histogram_quantile`` where it sits on a bucket boundary.

Why bit for bit: the differential suite (``tests/integration/test_promql_differential.py``)
compares to 1e-9, which let an evaluator that multiplied and divided in another
order than ``extrapolatedRate`` pass. The last bit matters where a quantile's rank
lands exactly on a bucket's count: one request in ten under ``le="0.1"`` at the
0.1 quantile is ``count >= rank`` in Prometheus, and a rate rounded otherwise
makes it ``count < rank`` and moves the answer into the next bucket.

The samples are made here: scrape times jittered by milliseconds (so the
extrapolation factor is not a round number), counters that grow by tenths (not
exact in binary), resets, gauges, and histograms where 1 request in 10 falls in
the first bucket. Every value must equal Prometheus's exactly (NaN equal to NaN).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

from autoscaler.promql.evaluator import Evaluator
from autoscaler.promql.openmetrics import load
from autoscaler.promql.store import SeriesStore
from autoscaler.types import Vector
from tests.autoscaler.promql.realprom import ask, serve

T0 = 1_700_000_000
SCRAPES = 50
CASES = 24


def _time(case: int, i: int) -> float:
    """Scrape ``i`` of ``case``: every 15 s plus a jitter of up to 0.999 s."""
    return T0 + i * 15 + ((i * 379 + case * 113) % 1000) / 1000


def samples() -> str:
    lines = ["# TYPE c counter"]
    for case in range(CASES):
        value = 0.0
        for i in range(SCRAPES):
            # Tenths, so that the differences are not exact; a reset every 17th
            # scrape in every third case.
            value = 0.3 if case % 3 == 0 and i % 17 == 16 else value + 0.1 * (case + 1 + i % 4)
            lines.append(f'c_total{{case="{case}"}} {value!r} {_time(case, i):.3f}')
    lines.append("# TYPE g gauge")
    for case in range(CASES):
        for i in range(SCRAPES):
            v = ((i * 7 + case * 3) % 11) / 10 - 0.35
            lines.append(f'g{{case="{case}"}} {v!r} {_time(case, i):.3f}')
    lines.append("# TYPE req histogram")
    for case in range(CASES):
        per_scrape = 1 + case % 5
        for i in range(SCRAPES):
            fast = per_scrape * i
            total = 10 * fast
            labels = f'case="{case}"'
            t = f"{_time(case, i):.3f}"
            lines.append(f'req_bucket{{{labels},le="0.1"}} {fast} {t}')
            lines.append(f'req_bucket{{{labels},le="1.0"}} {total} {t}')
            lines.append(f'req_bucket{{{labels},le="+Inf"}} {total} {t}')
            lines.append(f"req_count{{{labels}}} {total} {t}")
            lines.append(f"req_sum{{{labels}}} {total * 0.5} {t}")
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


EXPRESSIONS = [
    "rate(c_total[1m])",
    "rate(c_total[5m])",
    "rate(c_total[90s])",
    "rate(c_total[31500ms])",
    "increase(c_total[2m])",
    "increase(c_total[7m])",
    "delta(g[3m])",
    "delta(g[50s])",
    "irate(c_total[1m])",
    "idelta(g[1m])",
    "rate(req_bucket[5m])",
    "histogram_quantile(0.1, rate(req_bucket[5m]))",
    "histogram_quantile(0.1, rate(req_bucket[1m]))",
    "histogram_quantile(0.1, increase(req_bucket[3m]))",
    "histogram_quantile(0.05, rate(req_bucket[2m]))",
]
INSTANTS = [T0 + 300 + k * 37.125 for k in range(12)]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, SeriesStore]]:
    tmp = tmp_path_factory.mktemp("ratebits")
    path = tmp / "samples.om"
    path.write_text(samples())
    with serve(path, tmp) as url:
        yield url, load(path)


def _same_bits(text: str, mine: float) -> bool:
    theirs = float(text)
    if math.isnan(theirs) or math.isnan(mine):
        return math.isnan(theirs) and math.isnan(mine)
    return theirs == mine


@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_bit_identical_to_prometheus(expr: str, world: tuple[str, SeriesStore]) -> None:
    url, store = world
    evaluator = Evaluator(store)
    problems: list[str] = []
    compared = 0
    for t in INSTANTS:
        body = ask(url, expr, t, raw=True)
        assert body["status"] == "success", body
        theirs = {
            tuple(sorted(item["metric"].items())): item["value"][1]
            for item in body["data"]["result"]
        }
        mine = evaluator.instant(expr, t)
        assert isinstance(mine, Vector)
        ours = {s.labels: s.value for s in mine.samples}
        assert theirs.keys() == ours.keys(), f"t={t}: other series"
        for labels, text in theirs.items():
            compared += 1
            if not _same_bits(text, ours[labels]):
                problems.append(f"t={t} {dict(labels)}: Prometheus {text}, ours {ours[labels]!r}")
    assert compared >= len(INSTANTS) * CASES
    assert not problems, f"{expr}: {len(problems)} of {compared} differ\n" + "\n".join(
        problems[:10]
    )


def test_the_quantile_sits_on_a_bucket_boundary(world: tuple[str, SeriesStore]) -> None:
    """The data does what it is for: Prometheus answers exactly the first bucket's
    bound for some series (count == rank there), so a rate one bit off moves it."""
    url, _ = world
    on_boundary = 0
    for t in INSTANTS:
        body = ask(url, "histogram_quantile(0.1, rate(req_bucket[5m]))", t, raw=True)
        on_boundary += sum(item["value"][1] == "0.1" for item in body["data"]["result"])
    assert on_boundary > 0
