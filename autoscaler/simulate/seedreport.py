"""What ``simulate --seeds`` and ``simulate --compare`` print and write: each
summary figure's mean with its 95% interval over the seeds (rules beside
baseline), or two arms' means and their paired difference, and the combined
JSON documents (every run's ``summary.json`` plus the aggregate).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autoscaler.simulate.seeds import Arm, Done
from autoscaler.simulate.stats import (
    CONFIDENCE,
    Interval,
    across,
    figures,
    names_of,
    paired,
    t_quantile,
)

MODES = ("rules", "baseline")


def method(n: int) -> str:
    """The interval's method, said once above a table."""
    if n < 2:
        return "one seed: no interval (use --seeds 2 or more)"
    t = t_quantile(0.5 + CONFIDENCE / 2.0, n - 1)
    return (
        f"{CONFIDENCE:.0%} intervals: Student t on the per-seed values, "
        f"mean ± t(0.975, {n - 1}) = {t:.3f} x s / sqrt({n})"
    )


def seed_text(seeds: Sequence[int]) -> str:
    if len(seeds) > 1 and list(seeds) == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"seeds {seeds[0]}..{seeds[-1]} ({len(seeds)})"
    return f"seeds {', '.join(map(str, seeds))}"


def num(v: float, sign: bool = False) -> str:
    """A figure for the table: four significant digits, thousands apart."""
    s = "+" if sign else ""
    if abs(v) >= 1e4:
        return f"{v:{s},.0f}"
    return f"{v:{s},.4g}"


def _pm(i: Interval | None, runs: int) -> str:
    if i is None:
        return "-"  # no run had anything to measure for it
    text = num(i.mean) if i.half is None else f"{num(i.mean)} ± {num(i.half)}"
    return text if i.n == runs else f"{text} (n={i.n})"


def _columns(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]
    lines = []
    for r in [header, *rows]:
        cells = [f"{r[0]:<{widths[0]}}"] + [
            f"{v:>{w}}" for v, w in zip(r[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _sections(done: Sequence[Done], mode: str) -> list[dict[str, float]]:
    return [figures(d.doc[mode]) for d in done if mode in d.doc]


def aggregate(done: Sequence[Done]) -> dict[str, dict[str, Interval]]:
    """Each mode's figures across the seeds (the figures of both modes: a count
    that only one mode had is 0 in the other)."""
    sections = {m: runs for m in MODES if (runs := _sections(done, m))}
    names = names_of([run for runs in sections.values() for run in runs])
    return {m: across(runs, names) for m, runs in sections.items()}


def seeds_table(done: Sequence[Done]) -> str:
    """Rules beside baseline, each figure as mean ± half-width."""
    agg = aggregate(done)
    modes = [m for m in MODES if m in agg]
    names: dict[str, None] = {}
    for m in modes:
        names.update(dict.fromkeys(agg[m]))
    rows = [[name, *(_pm(agg[m].get(name), len(done)) for m in modes)] for name in names]
    return _columns(["", *modes], rows)


def seeds_doc(scenario: str, seeds: Sequence[int], done: Sequence[Done]) -> dict[str, Any]:
    """``seeds.json``: every run's summary and each figure's interval."""
    return {
        "scenario": scenario,
        "seeds": list(seeds),
        "interval": method(len(seeds)),
        "runs": [d.doc for d in done],
        "aggregate": {
            m: {k: i.as_json() for k, i in figs.items()} for m, figs in aggregate(done).items()
        },
    }


def _diff(i: Interval) -> str:
    if i.half is None:
        return num(i.mean, sign=True)
    mark = " *" if i.significant else ""
    low, high = num(i.mean - i.half, sign=True), num(i.mean + i.half, sign=True)
    return f"{num(i.mean, sign=True)} [{low}, {high}]{mark}"


def comparison(
    arms: Sequence[tuple[Arm, list[Done]]],
) -> tuple[dict[str, Interval], dict[str, Interval], dict[str, Interval]]:
    """A's and B's figures across the seeds (their rules runs), and ``B - A``
    paired by seed."""
    (_, a), (_, b) = arms
    fa, fb = _sections(a, "rules"), _sections(b, "rules")
    names = names_of([*fa, *fb])
    return across(fa, names), across(fb, names), paired(fa, fb)


def compare_table(arms: Sequence[tuple[Arm, list[Done]]]) -> str:
    """A's mean, B's mean, and ``B - A`` with its interval, ``*`` where the
    interval excludes 0."""
    (arm_a, done_a), (arm_b, _) = arms
    mean_a, mean_b, diff = comparison(arms)
    n = len(done_a)
    rows = [
        [
            name,
            _pm(mean_a.get(name), n),
            _pm(mean_b.get(name), n),
            _diff(d) if d.n == n else f"{_diff(d)} (n={d.n})",
        ]
        for name, d in diff.items()
    ]
    header = ["", f"A: {arm_a.label}", f"B: {arm_b.label}", "B - A [95% interval]"]
    return _columns(header, rows)


def compare_doc(
    scenario: str, seeds: Sequence[int], arms: Sequence[tuple[Arm, list[Done]]]
) -> dict[str, Any]:
    """``compare.json``: both arms' runs, their means and the paired differences."""
    mean_a, mean_b, diff = comparison(arms)
    (arm_a, done_a), (arm_b, done_b) = arms
    return {
        "scenario": scenario,
        "seeds": list(seeds),
        "interval": method(len(seeds)),
        "a": {"label": arm_a.label, "runs": [d.doc for d in done_a]},
        "b": {"label": arm_b.label, "runs": [d.doc for d in done_b]},
        "mean_a": {k: i.as_json() for k, i in mean_a.items()},
        "mean_b": {k: i.as_json() for k, i in mean_b.items()},
        "difference": {k: {**i.as_json(), "significant": i.significant} for k, i in diff.items()},
    }


__all__ = [
    "aggregate",
    "compare_doc",
    "compare_table",
    "comparison",
    "method",
    "num",
    "seed_text",
    "seeds_doc",
    "seeds_table",
]
