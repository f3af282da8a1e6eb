"""Hostile inputs, built from valid ones: the strategies every fuzz target draws from.

Random bytes rarely get past a parser's first check, so most cases here start from a
valid document (a committed rule file, scenario, test file, sim script or web
config, read as a tree), change one to three places in it, and write it back as
YAML: a value of the wrong type in any field, a key dropped or added, a list grown,
or a value replaced by raw YAML text that no dumper would write (a 5,000-digit
integer, nesting thousands deep, an alias bomb, a ``!!python`` tag, a duration of
``1e400s``, a PromQL expression that overflows the parser library). The text is then
sometimes damaged as bytes (non-UTF-8, NUL and control characters, truncation).
``raw_bytes`` covers what structure cannot: input that is not YAML at all.

The raw replacements are spliced in after dumping: a placeholder that YAML writes
as a plain scalar takes the place of the value, then the placeholder is replaced by
the text. Every raw text is one line (flow style), so it fits wherever a value goes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

_DEEP = 5000


def _alias_bomb(levels: int = 9, width: int = 10) -> str:
    """``[&a0 [x,...], &a1 [*a0,...], ...]``: width**levels nodes once expanded."""
    parts = ["&a0 [" + ",".join(["lol"] * width) + "]"]
    for i in range(1, levels):
        parts.append(f"&a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]")
    return "[" + ",".join(parts) + "]"


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


# YAML text for one value, each a way an input broke a reader (issue 15's list)
# or a corner of YAML that a reader may not expect.
HOSTILE_YAML: tuple[str, ...] = (
    "9" * 5000,
    "-" + "9" * 5000,
    "0x" + "f" * 5000,
    "9" * 400,
    "1" + "0" * 30,
    "1e400",
    "-1e400",
    ".nan",
    ".inf",
    "-.inf",
    "1e400s",
    "1e400",
    "100000d",
    "99999999999999999999999h",
    "-5m",
    "0s",
    "1h",
    "0+1x100000000",
    "1x100000000",
    _quoted("0+1x100000000"),
    _quoted("1+1x" + "9" * 400),
    "!!python/object/apply:os.system ['true']",
    "!!python/name:os.system",
    "!!python/tuple [1, 2]",
    "!custom 1",
    "!!binary AAAA",
    "!!timestamp 2001-12-14t21:59:43.10-05:00",
    "2001-12-14",
    "!!set {a, b}",
    "!!omap [a: 1]",
    "!!float x",
    "!!int x",
    "!!bool x",
    "!!timestamp x",
    "!!timestamp 2001-13-45",
    "[" * _DEEP + "]" * _DEEP,
    "{a: " * 2000 + "1" + "}" * 2000,
    _alias_bomb(),
    _alias_bomb(levels=6, width=20),
    '"\\x00\\x1b\\x7f\\u2028"',
    '"a\\r\\nSet-Cookie: x=y"',
    '"\\ud800"',
    "~",
    "[]",
    "{}",
    "''",
    "-1",
    "0",
    "1.5",
    "yes",
    "0o777",
    "1_000",
    "nvidia:99999999999999",
    "*undefined_anchor",
    "&anchor_one [1, 2]",
    "*anchor_one",
    _quoted("(" * 12000 + "x" + ")" * 12000),
    _quoted(" + ".join(["x"] * 8000)),
    _quoted(" + ".join(["up"] * 1500)),
    _quoted("sum(" * 3000 + "x" + ")" * 3000),
    _quoted("-" * 20000 + "1"),
    _quoted("x{" + ",".join(f'l{i}="v"' for i in range(3000)) + "}"),
    _quoted("rate(x[100000000d])"),
    _quoted("x offset 1e400s"),
    _quoted("x" * 200_000),
)

_MARK = "zzrawzz"

# Python values of every type, for "the wrong type in this field".
_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["", " ", "\r\n", "\x00", "é", "15s", "node", "nvidia0", "x" * 300]),
)
wrong_values = st.recursive(
    _leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.text(max_size=8), children, max_size=4),
    ),
    max_leaves=8,
)


def tree_paths(tree: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a tree of dicts and lists, as the keys and indexes leading to it."""
    out = [prefix]
    if isinstance(tree, dict):
        for k, v in tree.items():
            out.extend(tree_paths(v, (*prefix, k)))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            out.extend(tree_paths(v, (*prefix, i)))
    return out


def _get(tree: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        tree = tree[p]
    return tree


def copy_tree(tree: Any) -> Any:
    """A copy of a tree of dicts and lists, the leaves shared."""
    if isinstance(tree, dict):
        return {k: copy_tree(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [copy_tree(v) for v in tree]
    return tree


@st.composite
def mutated_tree(draw: st.DrawFn, seeds: list[Any]) -> tuple[Any, list[str]]:
    """A seed tree with one to three places changed; and the raw texts to splice."""
    tree = copy_tree(draw(st.sampled_from(seeds)))
    raws: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        paths = tree_paths(tree)
        path = draw(st.sampled_from(paths))
        how = draw(st.sampled_from(["raw", "raw", "wrong", "drop", "add", "grow"]))
        if how == "raw" or how == "wrong":
            if how == "raw":
                new: Any = f"{_MARK}{len(raws)}"
                raws.append(draw(st.sampled_from(HOSTILE_YAML)))
            else:
                new = draw(wrong_values)
            if not path:
                tree = new
            else:
                _get(tree, path[:-1])[path[-1]] = new
        elif how == "drop" and path:
            parent = _get(tree, path[:-1])
            del parent[path[-1]]
        elif how == "add":
            target = _get(tree, path)
            if isinstance(target, dict):
                target[draw(st.sampled_from(["extra", "name", "spec", "at", "<<"]))] = draw(
                    wrong_values
                )
            elif isinstance(target, list):
                target.append(draw(wrong_values))
        elif how == "grow":
            target = _get(tree, path)
            if isinstance(target, list) and target:
                target.extend([copy_tree(target[-1])] * draw(st.sampled_from([2, 10, 200])))
    return tree, raws


def dump(tree: Any, raws: list[str]) -> str:
    text = yaml.safe_dump(tree, sort_keys=False, allow_unicode=True, width=10**9)
    # Longest index first, so that zzrawzz1 does not eat the start of zzrawzz12.
    for i in reversed(range(len(raws))):
        text = text.replace(f"{_MARK}{i}", raws[i])
    return text


@st.composite
def damaged(draw: st.DrawFn, text: str) -> bytes:
    """``text`` as UTF-8, sometimes damaged as bytes."""
    data = text.encode("utf-8", "surrogatepass")
    how = draw(st.sampled_from(["none", "none", "none", "insert", "truncate", "bom", "tabs"]))
    if how == "insert" and data:
        at = draw(st.integers(0, len(data)))
        junk = draw(st.sampled_from([b"\xff\xfe", b"\x00", b"\xc3", b"\x1b[31m", b"\r", b"\t"]))
        data = data[:at] + junk + data[at:]
    elif how == "truncate" and data:
        data = data[: draw(st.integers(0, len(data)))]
    elif how == "bom":
        data = b"\xef\xbb\xbf" + data
    elif how == "tabs":
        data = data.replace(b"  ", b"\t", 1)
    return data


@st.composite
def yaml_documents(draw: st.DrawFn, seeds: list[Any]) -> bytes:
    """A mutated seed document as the bytes of a file."""
    tree, raws = draw(mutated_tree(seeds))
    return draw(damaged(dump(tree, raws)))


raw_bytes = st.binary(max_size=2048)


def files_or_bytes(seeds: list[Any]) -> st.SearchStrategy[bytes]:
    """Mostly structured documents, one case in eight plain bytes."""
    return st.one_of(
        *[yaml_documents(seeds)] * 7,
        raw_bytes,
    )


def load_seeds(*paths: Path) -> list[Any]:
    """The documents mutations start from; a fixture that is broken YAML on purpose
    is left out (its bytes are no tree to mutate)."""
    out: list[Any] = []
    for p in paths:
        try:
            out.extend(d for d in yaml.safe_load_all(p.read_text()) if d is not None)
        except yaml.YAMLError:
            continue
    return out


__all__ = [
    "HOSTILE_YAML",
    "damaged",
    "dump",
    "files_or_bytes",
    "load_seeds",
    "mutated_tree",
    "raw_bytes",
    "wrong_values",
    "yaml_documents",
]
