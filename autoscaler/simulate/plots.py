"""The simulation's plots: one PNG per question, rules and baseline side by side
on a shared y axis, so that the two runs can be compared at a glance.

- ``utilization.png``: share of each pool's devices held by running jobs;
- ``nodes.png``: nodes per pool (the rules can grow and shrink pools; the
  baseline's stay as they started), and the nodes a fault keeps unhealthy (with
  the replacements under way) over the whole fleet;
- ``jobs.png``: running and queued jobs;
- ``faults_actions.png``: faults and remediation actions, cumulative;
- ``loss.png``: device-hours lost by cause (work redone since the checkpoint,
  detection delay, restart overhead, waiting for capacity).

Over many seeds (``simulate --seeds``), ``spread.png`` shows the headline
figures' spread instead: every seed's value as a point and the mean with its 95%
interval as a bar, rules beside baseline; for a comparison, each seed's
difference ``B - A`` with the paired interval, against a line at 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoscaler.simulate.accounting import LOSS_CAUSES
from autoscaler.simulate.results import LOSS_KEYS, RunResult
from autoscaler.simulate.scenario import Scenario
from autoscaler.simulate.stats import figures


def write_plots(results: dict[str, RunResult], scenario: Scenario, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    page = _Page(
        plt=plt,
        results=results,
        modes=tuple(m for m in ("rules", "baseline") if m in results),
        pools=tuple(p.name for p in scenario.pools),
        scenario=scenario.name,
        out=out,
    )
    return [
        _figure(
            page,
            "utilization.png",
            "device utilization by pool",
            "devices held / devices",
            _utilization,
        ),
        _figure(page, "nodes.png", "nodes per pool", "nodes", _nodes),
        _figure(page, "jobs.png", "running and queued jobs", "jobs", _jobs),
        _figure(page, "faults_actions.png", "faults and actions (cumulative)", "count", _faults),
        _loss(page),
    ]


@dataclass(frozen=True)
class _Page:
    """What every figure shares: pyplot (imported only when plots are asked for),
    the runs side by side, the pools, and where the PNGs go."""

    plt: Any
    results: dict[str, RunResult]
    modes: tuple[str, ...]
    pools: tuple[str, ...]
    scenario: str
    out: Path


# A panel's drawing: the axes, one run, and the page (for the pools).
_Draw = Callable[[Any, RunResult, _Page], None]


def _figure(page: _Page, name: str, title: str, ylabel: str, draw: _Draw) -> Path:
    """One PNG: a panel per run on a shared y axis, one legend for both."""
    modes = page.modes
    fig, axes = page.plt.subplots(
        1, len(modes), figsize=(6 * len(modes), 3.6), sharey=True, squeeze=False
    )
    for ax, mode in zip(axes[0], modes, strict=True):
        draw(ax, page.results[mode], page)
        ax.set_title(f"{mode}" if mode == "rules" else "baseline (no remediation)")
        ax.set_xlabel("hours")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(ylabel)
    # After both runs are drawn, so that the shared axis holds both.
    _, high = axes[0][0].get_ylim()
    axes[0][0].set_ylim(0, max(high, 1))
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="upper right", fontsize="small", ncol=min(4, len(labels)))
    fig.suptitle(f"{page.scenario}: {title}", x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    path = page.out / name
    fig.savefig(path, dpi=110)
    page.plt.close(fig)
    return path


def _utilization(ax: Any, r: RunResult, page: _Page) -> None:
    for pool in page.pools:
        ax.plot(r.timeline.hours, r.timeline.utilization.get(pool, []), label=pool, lw=1.2)
    ax.set_ylim(0, 1.05)


def _nodes(ax: Any, r: RunResult, page: _Page) -> None:
    for pool in page.pools:
        ax.step(r.timeline.hours, r.timeline.nodes.get(pool, []), where="post", label=pool)
    ax.step(
        r.timeline.hours,
        r.timeline.unhealthy,
        where="post",
        label="unhealthy",
        color="C3",
        ls="--",
    )


def _jobs(ax: Any, r: RunResult, page: _Page) -> None:
    ax.plot(r.timeline.hours, r.timeline.running, label="running", lw=1.2)
    ax.plot(r.timeline.hours, r.timeline.queued, label="queued", lw=1.2)


def _faults(ax: Any, r: RunResult, page: _Page) -> None:
    ax.step(r.timeline.hours, r.timeline.faults, where="post", label="faults", color="C3")
    ax.step(r.timeline.hours, r.timeline.actions, where="post", label="actions", color="C2")


def _loss(page: _Page) -> Path:
    """Device-hours lost by cause: bars, not a timeline, so a figure of its own."""
    modes = page.modes
    fig, axes = page.plt.subplots(
        1, len(modes), figsize=(6 * len(modes), 3.6), sharey=True, squeeze=False
    )
    names = [LOSS_KEYS[c].replace("_", " ") for c in LOSS_CAUSES]
    for ax, mode in zip(axes[0], modes, strict=True):
        lost = page.results[mode].stats.lost_by_cause
        hours = [lost.get(c, 0.0) / 3600.0 for c in LOSS_CAUSES]
        ax.bar(range(len(names)), hours, color=[f"C{i}" for i in range(len(names))])
        ax.set_xticks(range(len(names)), names, rotation=15, fontsize="small")
        ax.set_title(f"{mode}" if mode == "rules" else "baseline (no remediation)")
        ax.grid(alpha=0.3, axis="y")
    axes[0][0].set_ylabel("device-hours lost")
    fig.suptitle(f"{page.scenario}: device-hours lost by cause", x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    path = page.out / "loss.png"
    fig.savefig(path, dpi=110)
    page.plt.close(fig)
    return path


# The figures ``spread.png`` shows, where the runs have them: throughput, the
# work done, goodput, queue wait and the time to remediate.
SPREAD_FIGURES = (
    "jobs_completed",
    "device_hours_useful",
    "goodput_ratio",
    "queue_wait_seconds.p50",
    "queue_wait_seconds.p95",
    "time_to_remediate_seconds.p50",
)


def _points(runs: list[dict[str, Any]], mode: str, name: str) -> list[float]:
    return [v for r in runs if mode in r and (v := figures(r[mode]).get(name)) is not None]


def _spread_series(doc: dict[str, Any], name: str) -> list[tuple[str, list[float], Any]]:
    """A panel's columns: (label, per-seed values, the interval's JSON)."""
    if "difference" in doc:
        a, b = doc["a"]["runs"], doc["b"]["runs"]
        diffs = [
            fb[name] - fa[name]
            for ra, rb in zip(a, b, strict=True)
            if name in (fa := figures(ra["rules"])) and name in (fb := figures(rb["rules"]))
        ]
        label = f"{doc['b']['label']} - {doc['a']['label']}"
        return [(label, diffs, doc["difference"].get(name))] if diffs else []
    return [
        (mode, values, doc["aggregate"].get(mode, {}).get(name))
        for mode in ("rules", "baseline")
        if (values := _points(doc["runs"], mode, name))
    ]


def write_spread(doc: dict[str, Any], scenario: str, out: Path) -> Path:
    """``spread.png`` from ``seeds.json``'s or ``compare.json``'s document."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in SPREAD_FIGURES if _spread_series(doc, n)]
    fig, axes = plt.subplots(
        1, max(1, len(names)), figsize=(2.6 * max(1, len(names)), 3.6), squeeze=False
    )
    for ax, name in zip(axes[0], names, strict=False):
        for x, (label, values, span) in enumerate(_spread_series(doc, name)):
            # The points left of the bar, spread sideways in seed order so that
            # ties show and none hides behind the mean.
            step = 0.3 / max(1, len(values) - 1)
            xs = [x - 0.4 + i * step for i in range(len(values))]
            ax.scatter(xs, values, s=10, alpha=0.6, color=f"C{x}", label=label)
            if span is not None and span.get("low") is not None:
                mean = span["mean"]
                err = [[mean - span["low"]], [span["high"] - mean]]
                ax.errorbar([x + 0.1], [mean], yerr=err, fmt="o", color="black", capsize=4)
        if "difference" in doc:
            ax.axhline(0, color="grey", lw=0.8)
        ax.set_title(name, fontsize="small")
        ax.set_xticks([])
        ax.grid(alpha=0.3, axis="y")
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="upper right", fontsize="small")
    what = "B - A per seed" if "difference" in doc else "per seed"
    fig.suptitle(
        f"{scenario}: {what}, mean and 95% interval ({len(doc['seeds'])} seeds)",
        x=0.01,
        ha="left",
    )
    fig.tight_layout(rect=(0, 0, 1, 0.88))
    path = out / "spread.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


__all__ = ["SPREAD_FIGURES", "write_plots", "write_spread"]
