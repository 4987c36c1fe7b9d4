"""Per-op fold hooks for canonicalize: return, for each result, an existing
Value or an Attribute to materialize as a constant; None when nothing folds."""
from __future__ import annotations


def _identity(op):
    return [op.operands[0]]


def _cast(op):
    src = op.operands[0].type
    dst = op.results[0].type
    if src == dst and getattr(src, "element", None) is not None:
        return [op.operands[0]]
    return None


def _same_type_noop(op):
    if op.operands[0].type == op.results[0].type and getattr(op.results[0].type, "has_static_shape", False):
        return [op.operands[0]]
    return None


def _transpose(op):
    perm = op.get_attr("perm")
    if perm is not None and list(perm) == sorted(perm):
        return [op.operands[0]]
    return None


FOLDERS = {
    "Identity": _identity,
    "Cast": _cast,
    "Reshape": _same_type_noop,
    "Expand": _same_type_noop,
    "Flatten": _same_type_noop,
    "Squeeze": _same_type_noop,
    "Unsqueeze": _same_type_noop,
    "Transpose": _transpose,
}
