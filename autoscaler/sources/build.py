"""Building the source a command asked for, from typed options.

``run``, ``place`` and ``extender`` take the same source flags
(``commands/flags.py``); each turns them into ``SourceOptions`` and calls
``build_source``, so the three can never disagree on what a flag means, and no
library module has to read an argparse namespace.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from autoscaler.sources.base import Source
from autoscaler.sources.prometheus import (
    DEFAULT_BODY_SIZE_LIMIT as PROMETHEUS_BODY_LIMIT,
)
from autoscaler.sources.prometheus import (
    PrometheusConfig,
    PrometheusSource,
)
from autoscaler.sources.scrape import (
    DEFAULT_BODY_SIZE_LIMIT,
    DEFAULT_SAMPLE_LIMIT,
    ScrapeLimits,
    ScrapeSource,
    parse_targets,
)


@dataclass(frozen=True)
class SourceOptions:
    kind: str  # "prometheus" or "scrape"
    prometheus_url: str | None = None
    prometheus_timeout: float = 10.0
    prometheus_token_file: Path | None = None
    prometheus_basic_auth_file: Path | None = None
    prometheus_ca_file: Path | None = None
    prometheus_body_size_limit: int = PROMETHEUS_BODY_LIMIT
    health_query: str = "count(accel_up)"
    targets: str | None = None
    scrape_timeout: float = 10.0
    scrape_body_size_limit: int = DEFAULT_BODY_SIZE_LIMIT
    scrape_sample_limit: int = DEFAULT_SAMPLE_LIMIT


def build_source(options: SourceOptions) -> Source:
    """The source; raises ValueError naming the flag that is missing or wrong."""
    if options.kind == "prometheus":
        if not options.prometheus_url:
            raise ValueError("--source prometheus needs --prometheus.url")
        return PrometheusSource(
            PrometheusConfig(
                url=options.prometheus_url,
                timeout=options.prometheus_timeout,
                bearer_token_file=options.prometheus_token_file,
                basic_auth_file=options.prometheus_basic_auth_file,
                ca_file=options.prometheus_ca_file,
                health_query=options.health_query,
                body_size_limit=options.prometheus_body_size_limit,
            )
        )
    if options.kind != "scrape":
        raise ValueError(f"unknown source {options.kind!r} (use prometheus or scrape)")
    if not options.targets:
        raise ValueError("--source scrape needs --targets NODE=URL,...")
    return ScrapeSource(
        parse_targets(options.targets),
        timeout=options.scrape_timeout,
        limits=ScrapeLimits(
            body_size=options.scrape_body_size_limit, samples=options.scrape_sample_limit
        ),
    )
