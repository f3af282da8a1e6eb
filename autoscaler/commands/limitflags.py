"""Flags that bound work: the positive-count type and the ``--max-...`` families of
``test`` and ``simulate``. Apart from ``flags.py`` because that module reaches the
Kubernetes client, and the commands that only read files should not pay for it.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping


def count(text: str) -> int:
    """A positive whole number (a limit): ASCII digits only, at most 15 of them, so
    that no spelling Python's int() also takes (``1_000``, other scripts' digits)
    and no absurd size gets through."""
    digits = text.strip()
    if not digits.isascii() or not digits.isdigit() or len(digits) > 15:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}")
    value = int(digits)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def add_limit_arguments(
    p: argparse.ArgumentParser,
    flags: Mapping[str, str],
    defaults: object,
    what: Mapping[str, str],
) -> None:
    """One ``--max-...`` flag per work limit: ``flags`` maps a limit's field name to
    its flag, ``defaults`` holds each field's default, ``what`` says what it counts.
    The value lands in ``args.max_<field>``."""
    for limit, flag in flags.items():
        p.add_argument(
            flag,
            dest=f"max_{limit}",
            type=count,
            default=getattr(defaults, limit),
            metavar="N",
            help=f"the most {what[limit]} (default %(default)s)",
        )


__all__ = ["add_limit_arguments", "count"]
