"""Benchmarks that print our figures beside a peer's, from one run."""
