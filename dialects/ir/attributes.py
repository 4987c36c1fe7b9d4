"""IR attributes, printed in MLIR's syntax. Every attribute exposes `.value`,
the plain Python (or numpy) value a pass would want."""
from __future__ import annotations

import math
import struct

import numpy as np

from .types import FloatType, TensorType, Type, f32, f64, i64, to_numpy_dtype


def _quote(s: str) -> str:
    out = []
    for ch in s:
        o = ord(ch)
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\{o:02X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def quote(s: str) -> str:
    """MLIR string literal; non-printable bytes are written as \\XX escapes."""
    if s.isprintable() and '"' not in s and "\\" not in s:
        return '"' + s + '"'
    return _quote(s)


_SHORT = {"f32": np.float32, "f16": np.float16}


def format_float(v: float, t: Type) -> str:
    """Shortest text that reads back to the same value; non-finite values are
    written as their bit pattern, as MLIR does."""
    if math.isfinite(v):
        # Shortest text for the value's own precision (f32 0.1 is "0.1").
        dt = _SHORT.get(str(t))
        r = str(dt(v)) if dt is not None else repr(float(v))
        return r if ("." in r or "e" in r or "n" in r) else r + ".0"
    if t == f64:
        return "0x%016X" % struct.unpack("<Q", struct.pack("<d", v))[0]
    dt = to_numpy_dtype(t) if isinstance(t, FloatType) else np.dtype(np.float32)
    bits = np.array([v], dtype=dt).view(f"u{dt.itemsize}")[0]
    return "0x%0*X" % (dt.itemsize * 2, int(bits))


class Attribute:
    __slots__ = ()

    def __repr__(self):
        return str(self)

    def __eq__(self, other):
        return type(self) is type(other) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())


class UnitAttr(Attribute):
    __slots__ = ()
    value = True

    def _key(self):
        return ()

    def __str__(self):
        return "unit"


class BoolAttr(Attribute):
    __slots__ = ("value",)

    def __init__(self, value: bool):
        self.value = bool(value)

    def _key(self):
        return self.value

    def __str__(self):
        return "true" if self.value else "false"


class IntegerAttr(Attribute):
    __slots__ = ("value", "type")

    def __init__(self, value: int, type: Type = i64):
        self.value, self.type = int(value), type

    def _key(self):
        return (self.value, self.type)

    def __str__(self):
        return f"{self.value} : {self.type}"


class FloatAttr(Attribute):
    __slots__ = ("value", "type")

    def __init__(self, value: float, type: Type = f32):
        # Hold the value at the type's own precision so text round-trips exactly.
        dt = _SHORT.get(str(type))
        self.value = float(dt(value)) if dt is not None else float(value)
        self.type = type

    def _key(self):
        # NaN != NaN would break CSE of identical ops; compare bit patterns.
        return (struct.pack("<d", self.value), self.type)

    def __str__(self):
        return f"{format_float(self.value, self.type)} : {self.type}"


class StringAttr(Attribute):
    __slots__ = ("value",)

    def __init__(self, value: str):
        self.value = value

    def _key(self):
        return self.value

    def __str__(self):
        return quote(self.value)


class TypeAttr(Attribute):
    __slots__ = ("value",)

    def __init__(self, value: Type):
        self.value = value

    def _key(self):
        return self.value

    def __str__(self):
        return str(self.value)


class SymbolRefAttr(Attribute):
    __slots__ = ("value",)

    def __init__(self, value: str):
        self.value = value

    def _key(self):
        return self.value

    def __str__(self):
        return "@" + (self.value if _is_bare(self.value) else quote(self.value))


class ArrayAttr(Attribute):
    __slots__ = ("elements",)

    def __init__(self, elements):
        self.elements = tuple(elements)

    @property
    def value(self):
        return [e.value for e in self.elements]

    def _key(self):
        return self.elements

    def __iter__(self):
        return iter(self.elements)

    def __len__(self):
        return len(self.elements)

    def __str__(self):
        return "[" + ", ".join(str(e) for e in self.elements) + "]"


class DenseArrayAttr(Attribute):
    """`array<i64: 1, 2, 3>`: a flat list of scalars, cheaper than ArrayAttr."""
    __slots__ = ("value", "type")

    def __init__(self, values, type: Type = i64):
        conv = float if isinstance(type, FloatType) else int
        self.value, self.type = [conv(v) for v in values], type

    def _key(self):
        return (tuple(struct.pack("<d", v) if isinstance(v, float) else v for v in self.value), self.type)

    def __str__(self):
        if not self.value:
            return f"array<{self.type}>"
        if isinstance(self.type, FloatType):
            body = ", ".join(format_float(v, self.type) for v in self.value)
        else:
            body = ", ".join(str(v) for v in self.value)
        return f"array<{self.type}: {body}>"


def _is_bare(key: str) -> bool:
    return bool(key) and (key[0].isalpha() or key[0] == "_") and all(
        c.isalnum() or c in "_.$-" for c in key)


class DictAttr(Attribute):
    __slots__ = ("value",)

    def __init__(self, value: dict):
        self.value = dict(value)

    def _key(self):
        return tuple(sorted(self.value.items()))

    def __str__(self):
        return format_attr_dict(self.value)


def format_attr_dict(d: dict) -> str:
    parts = []
    for k in sorted(d):
        v = d[k]
        key = k if _is_bare(k) else quote(k)
        parts.append(key if isinstance(v, UnitAttr) else f"{key} = {v}")
    return "{" + ", ".join(parts) + "}"


# ---- tensors of data -------------------------------------------------------

def _is_nice_element(t: Type) -> bool:
    return str(t) in ("i1", "i8", "i16", "i32", "i64", "ui8", "ui16", "ui32", "ui64",
                      "f16", "f32", "f64", "!onnx.String")


class DenseElementsAttr(Attribute):
    """A small constant tensor held inline. Large ones live in the module's
    resource table instead (DenseResourceAttr)."""
    __slots__ = ("array", "type")

    def __init__(self, array, type: TensorType):
        arr = np.asarray(array)
        if arr.dtype != object:
            arr = np.asarray(arr, dtype=to_numpy_dtype(type.element), order="C").reshape(type.shape)
        else:
            arr = arr.reshape(type.shape)
        self.array, self.type = arr, type

    @property
    def value(self):
        return self.array

    def _key(self):
        if self.array.dtype == object:
            return (tuple(self.array.ravel().tolist()), self.type)
        return (self.array.tobytes(), self.type)

    def __str__(self):
        return f"dense<{self.body()}> : {self.type}"

    def body(self) -> str:
        a, el = self.array, self.type.element
        if a.dtype == object:
            items = [quote(x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x)) for x in a.ravel()]
            return _nest(items, a.shape)
        if not _is_nice_element(el) or (a.dtype.kind == "f" and not np.isfinite(a).all()):
            # Hex form: raw little-endian bytes, like MLIR's dense<"0x...">.
            return '"0x' + a.tobytes().hex().upper() + '"'
        if a.size > 0 and (a == a.flat[0]).all() and a.size > 1:
            return _scalar_text(a.flat[0], el)
        items = [_scalar_text(x, el) for x in a.ravel().tolist()]
        return _nest(items, a.shape)


def _scalar_text(x, el):
    if str(el) == "i1":
        return "true" if x else "false"
    if isinstance(el, FloatType):
        return format_float(float(x), el)
    return str(int(x))


def _nest(items, shape):
    if len(shape) == 0:
        return items[0]
    if len(shape) == 1:
        return "[" + ", ".join(items) + "]"
    step = len(items) // shape[0] if shape[0] else 0
    return "[" + ", ".join(_nest(items[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])) + "]"


class DenseResourceAttr(Attribute):
    """`dense_resource<name> : tensor<...>`: a constant whose bytes live in the
    module's resource table (written beside the IR, never inline)."""
    __slots__ = ("name", "type", "table")

    def __init__(self, name: str, type: TensorType, table=None):
        self.name, self.type, self.table = name, type, table

    @property
    def value(self):
        if self.table is None or not self.table.has(self.name):
            return None
        return self.table.get(self.name)

    def _key(self):
        return (self.name, self.type)

    def __str__(self):
        name = self.name if _is_bare(self.name) else quote(self.name)
        return f"dense_resource<{name}> : {self.type}"


def elements_value(attr):
    """The numpy value of a dense or resource constant; None if unavailable."""
    if isinstance(attr, (DenseElementsAttr, DenseResourceAttr)):
        return attr.value
    return None


def attr_from_python(v):
    """Convenience for passes: plain Python to an attribute."""
    if isinstance(v, Attribute):
        return v
    if isinstance(v, bool):
        return BoolAttr(v)
    if isinstance(v, int):
        return IntegerAttr(v, i64)
    if isinstance(v, float):
        return FloatAttr(v, f32)
    if isinstance(v, str):
        return StringAttr(v)
    if isinstance(v, Type):
        return TypeAttr(v)
    if isinstance(v, dict):
        return DictAttr({k: attr_from_python(x) for k, x in v.items()})
    if isinstance(v, (list, tuple)):
        if v and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            return DenseArrayAttr(v, i64)
        return ArrayAttr([attr_from_python(x) for x in v])
    raise TypeError(f"cannot make an attribute of {type(v).__name__}")


__all__ = [n for n in dir() if n.endswith("Attr") or n in ("Attribute", "quote", "format_float",
                                                           "format_attr_dict", "elements_value",
                                                           "attr_from_python")]
