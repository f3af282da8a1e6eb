"""Where rule results come from: Prometheus's HTTP API, exporters scraped directly
(evaluated by the built-in evaluator), and Alertmanager's webhook.

Every source answers a query with a ``QueryResult``; a failure, a timeout or an
empty answer is ``Unknown``, never an empty vector that a caller could read as 0.
"""
