"""Making and reading onnx.Constant ops: small values inline, large ones in
the module's resource table."""
from __future__ import annotations

import numpy as np

from ..ir import attributes as A
from ..ir.core import Operation
from ..ir.types import TensorType, from_numpy_dtype

INLINE_LIMIT = 16


def constant_value(value):
    """The numpy value of `value` if an onnx.Constant with available data
    produces it, else None."""
    op = getattr(value, "op", None)
    if op is None or op.name != "onnx.Constant":
        return None
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints", "value_string",
                "value_strings"):
        a = op.attributes.get(key)
        if a is None:
            continue
        if key == "value":
            return A.elements_value(a)
        v = a.value
        if key in ("value_float", "value_floats"):
            return np.asarray(v, dtype=np.float32)
        if key in ("value_int", "value_ints"):
            return np.asarray(v, dtype=np.int64)
        return np.asarray(v, dtype=object)
    return None


def make_constant(module, array: np.ndarray, element=None, name_hint="folded", loc=None) -> Operation:
    array = np.asarray(array)
    el = element if element is not None else from_numpy_dtype(array.dtype)
    t = TensorType(array.shape, el)
    if array.size <= INLINE_LIMIT or array.dtype == object:
        attr = A.DenseElementsAttr(array, t)
    else:
        name = module.resources.add(name_hint, np.ascontiguousarray(array))
        attr = A.DenseResourceAttr(name, t, module.resources)
    kw = {"loc": loc} if loc is not None else {}
    return Operation("onnx.Constant", [], [t], {"value": attr}, **kw)
