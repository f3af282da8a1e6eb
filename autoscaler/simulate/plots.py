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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoscaler.simulate.accounting import LOSS_CAUSES
from autoscaler.simulate.results import LOSS_KEYS, RunResult
from autoscaler.simulate.scenario import Scenario


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


__all__ = ["write_plots"]
