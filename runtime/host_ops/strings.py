"""String ops on numpy object arrays of str (see __init__.py for why they run
in Python). RegexFullMatch uses RE2 (the google-re2 package), the syntax the
onnx spec names: Python's `re` reads some patterns differently (possessive
and backreference forms RE2 rejects, `\\Z`, `$` before a final newline)."""
from __future__ import annotations

import operator

import numpy as np

from . import as_strings, kernel

_concat = np.frompyfunc(operator.add, 2, 1)
_equal = np.frompyfunc(operator.eq, 2, 1)


@kernel("onnx.StringConcat")
def string_concat(node, inputs):
    x, y = (as_strings(node, v) for v in inputs)
    try:
        out = _concat(x, y)
    except ValueError as e:
        raise node.error(f"shapes {list(x.shape)} and {list(y.shape)} do not broadcast ({e})") from None
    return [np.asarray(out, dtype=object)]


@kernel("string:onnx.Equal")  # Equal on numbers is compiled: only string operands come here
def equal(node, inputs):
    x, y = (as_strings(node, v) for v in inputs)
    try:
        return [np.asarray(_equal(x, y), dtype=bool)]
    except ValueError as e:
        raise node.error(f"shapes {list(x.shape)} and {list(y.shape)} do not broadcast ({e})") from None


@kernel("onnx.StringSplit")
def string_split(node, inputs):
    x = as_strings(node, inputs[0])
    sep = node.get("delimiter") or None  # "" or absent: runs of whitespace, as str.split()
    maxsplit = node.get("maxsplit")
    maxsplit = -1 if maxsplit is None else int(maxsplit)
    parts = [s.split(sep, maxsplit) for s in x.reshape(-1)]
    counts = np.array([len(p) for p in parts], np.int64).reshape(x.shape)
    width = int(counts.max(initial=0))
    y = np.full((len(parts), width), "", dtype=object)
    for i, p in enumerate(parts):
        y[i, :len(p)] = p
    return [y.reshape(*x.shape, width), counts]


@kernel("onnx.StringNormalizer")
def string_normalizer(node, inputs):
    x = as_strings(node, inputs[0])
    if not (x.ndim == 1 or (x.ndim == 2 and x.shape[0] == 1)):
        raise node.error(f"input has shape {list(x.shape)}, expected [C] or [1, C]")
    action = node.get("case_change_action", "NONE")
    change = {"NONE": lambda s: s, "LOWER": str.lower, "UPPER": str.upper}.get(action)
    if change is None:
        raise node.error(f"case_change_action '{action}' is not one of NONE, LOWER, UPPER")
    sensitive = bool(node.get("is_case_sensitive", 0))
    stop = set(node.get("stopwords", []))
    if not sensitive:
        stop = {s.lower() for s in stop}
    kept = [change(s) for s in x.reshape(-1) if (s if sensitive else s.lower()) not in stop]
    if not kept:  # the spec: an all-stopword input gives one empty string
        kept = [""]
    out = np.array(kept, dtype=object)
    return [out.reshape(1, -1) if x.ndim == 2 else out]


@kernel("onnx.RegexFullMatch")
def regex_full_match(node, inputs):
    try:
        import re2
    except ImportError:
        raise node.error("RE2 patterns need the google-re2 package, a dependency of tcc (pip install google-re2)") from None
    x = as_strings(node, inputs[0])
    pattern = node.require("pattern")
    try:
        rx = re2.compile(pattern)
    except re2.error as e:
        raise node.error(f"pattern {pattern!r} is not valid RE2 ({e})") from None
    out = np.fromiter((rx.fullmatch(s) is not None for s in x.reshape(-1)), bool, x.size)
    return [out.reshape(x.shape)]
