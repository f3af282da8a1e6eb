"""Leaf helpers both entry points share (durations, log format). DESIGN.md lets the
autoscaler import only the exporter's metric catalogue, so what both need and
neither owns lives here, with no dependency on either."""
