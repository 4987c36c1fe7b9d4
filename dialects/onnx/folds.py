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


def _static_shape(v):
    t = v.type
    return t.shape if getattr(t, "has_static_shape", False) else None


def _shape(op):
    """Shape of a statically shaped tensor is a constant."""
    import numpy as np
    from ..ir.attributes import DenseElementsAttr
    shape = _static_shape(op.operands[0])
    if shape is None:
        return None
    rank = len(shape)
    start, end = op.get_attr("start", 0), op.get_attr("end", rank)
    start = max(0, min(rank, start + rank if start < 0 else start))
    end = max(0, min(rank, end + rank if end < 0 else end))
    dims = np.array(shape[start:end], dtype=np.int64)
    if op.results[0].type.shape not in (None, dims.shape) and op.results[0].type.shape != (None,):
        return None
    from ..ir.types import TensorType, i64
    return [DenseElementsAttr(dims, TensorType(dims.shape, i64))]


def _size(op):
    import numpy as np
    from ..ir.attributes import DenseElementsAttr
    from ..ir.types import TensorType, i64
    shape = _static_shape(op.operands[0])
    if shape is None:
        return None
    return [DenseElementsAttr(np.array(int(np.prod(shape)), np.int64), TensorType((), i64))]


FOLDERS = {
    "Shape": _shape,
    "Size": _size,
    "Identity": _identity,
    "Cast": _cast,
    "Reshape": _same_type_noop,
    "Expand": _same_type_noop,
    "Flatten": _same_type_noop,
    "Squeeze": _same_type_noop,
    "Unsqueeze": _same_type_noop,
    "Transpose": _transpose,
}
