"""A controller that dies between two API calls, for the kill -9 tests.

Several actions promise that a controller killed at any point resumes without
repeating what it did (a second drain, a second replacement pod). The tests check
that by wrapping the action's ``Kube`` in ``Cut``, which counts the calls and kills
the controller right after call ``after`` returned (or raised): its effect on the
server has happened, and the controller never learns of it. ``Killed`` is a
``BaseException``, so nothing in the action can catch it.
"""

from __future__ import annotations

from typing import Any


class Killed(BaseException):
    """The controller dies: nothing in the action may catch this."""


class Cut:
    """A ``Kube`` that counts calls and kills the controller right after call
    ``after`` returned (or raised)."""

    def __init__(self, inner: Any, after: int | None = None) -> None:
        self._inner = inner
        self.after = after
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            try:
                return await attr(*args, **kwargs)
            finally:
                if self.after is not None and len(self.calls) >= self.after:
                    raise Killed(f"killed after call {len(self.calls)} ({name})")

        return call
