"""JSON-shaped data as the API handles it: a fast deep copy, and RFC 7386 merge
patches. The dry-run wrapper answers a patch with what the merge would make of the
object, and the simulator's in-memory cluster applies patches for real; both use
these."""

from __future__ import annotations

from typing import Any


def copy_obj(value: Any) -> Any:
    """A deep copy of JSON-shaped data (several times faster than ``copy.deepcopy``)."""
    if isinstance(value, dict):
        return {k: copy_obj(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_obj(v) for v in value]
    return value


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: mappings merge key by key, ``null`` deletes, anything else replaces.
    ``target`` is not changed; the result shares the parts of it that the patch does
    not touch."""
    if not isinstance(patch, dict):
        return copy_obj(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


__all__ = ["copy_obj", "merge_patch"]
