"""Where rule results come from: Prometheus's HTTP API, exporters scraped directly
(evaluated by the built-in evaluator), and Alertmanager's webhook.

Every source answers a query with a ``QueryResult``; a failure or a timeout is
``Unknown``, never an empty vector that a caller could read as 0. Before the rules
run, each cycle, the source proves it has data at all (the Prometheus health query,
at least one scraped target); while it cannot, every rule is ``Unknown``.

What a source reads from outside is bounded (body sizes, samples per target, lines
and labels, JSON depth), and a bad answer costs only what it belongs to: one
target's scrape, or one rule's result.
"""
