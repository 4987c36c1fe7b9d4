"""IR types, printed in MLIR's syntax. Types are immutable and compare by value;
`parse_type` and the printers cache by text, so building 50k ops stays cheap."""
from __future__ import annotations

import numpy as np

try:
    import ml_dtypes
except ImportError:  # pragma: no cover - ml_dtypes is a declared dependency
    ml_dtypes = None


class Type:
    __slots__ = ("_key", "_str")

    def __eq__(self, other):
        return isinstance(other, Type) and self._key == other._key

    def __hash__(self):
        return hash(self._key)

    def __repr__(self):
        return str(self)

    def __str__(self):
        return self._str


class IntegerType(Type):
    """Signless (`i32`), unsigned (`ui8`) or signed (`si8`) integers."""
    __slots__ = ("width", "signedness")

    def __init__(self, width: int, signedness: str = ""):
        self.width, self.signedness = width, signedness
        self._key = ("int", width, signedness)
        self._str = f"{signedness}i{width}"

    @property
    def is_unsigned(self):
        return self.signedness == "u"


class FloatType(Type):
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name
        self._key = ("float", name)
        self._str = name


class IndexType(Type):
    __slots__ = ()

    def __init__(self):
        self._key = ("index",)
        self._str = "index"


class NoneType(Type):
    __slots__ = ()

    def __init__(self):
        self._key = ("none",)
        self._str = "none"


class ComplexType(Type):
    __slots__ = ("element",)

    def __init__(self, element: Type):
        self.element = element
        self._key = ("complex", element._key)
        self._str = f"complex<{element}>"


class DialectType(Type):
    """`!dialect.name` or `!dialect.name<T, ...>`: opaque to the core,
    e.g. `!onnx.String`, `!onnx.Seq<tensor<*xf32>>`, `!onnx.Opt<...>`."""
    __slots__ = ("name", "params")

    def __init__(self, name: str, params: tuple = ()):
        self.name, self.params = name, tuple(params)
        self._key = ("dialect", name, tuple(p._key if isinstance(p, Type) else p for p in self.params))
        inner = f"<{', '.join(str(p) for p in self.params)}>" if self.params else ""
        self._str = f"!{name}{inner}"


def _shape_str(shape):
    return "".join(("?" if d is None else str(d)) + "x" for d in shape)


class ShapedType(Type):
    """Base of tensor and memref: `shape` is a tuple with None for dynamic
    dims, or None when unranked."""
    __slots__ = ("shape", "element")
    keyword = ""

    def __init__(self, shape, element: Type):
        self.shape = None if shape is None else tuple(None if (d is None or d < 0) else int(d) for d in shape)
        self.element = element
        self._key = (self.keyword, self.shape, element._key)
        dims = "*x" if self.shape is None else _shape_str(self.shape)
        self._str = f"{self.keyword}<{dims}{element}>"

    @property
    def rank(self):
        return None if self.shape is None else len(self.shape)

    @property
    def has_static_shape(self):
        return self.shape is not None and None not in self.shape

    @property
    def num_elements(self):
        if not self.has_static_shape:
            return None
        n = 1
        for d in self.shape:
            n *= d
        return n


class TensorType(ShapedType):
    __slots__ = ()
    keyword = "tensor"


class MemRefType(ShapedType):
    """A buffer: what bufferization turns tensors into."""
    __slots__ = ()
    keyword = "memref"


class FunctionType(Type):
    __slots__ = ("inputs", "results")

    def __init__(self, inputs, results):
        self.inputs, self.results = tuple(inputs), tuple(results)
        self._key = ("fn", tuple(t._key for t in self.inputs), tuple(t._key for t in self.results))
        ins = ", ".join(str(t) for t in self.inputs)
        if len(self.results) == 1 and not isinstance(self.results[0], FunctionType):
            outs = str(self.results[0])
        else:
            outs = "(" + ", ".join(str(t) for t in self.results) + ")"
        self._str = f"({ins}) -> {outs}"


# Singletons for the scalar types, looked up by their printed name.
INDEX = IndexType()
NONE = NoneType()
FLOAT_NAMES = ("f16", "bf16", "f32", "f64", "f8E4M3FN", "f8E4M3FNUZ", "f8E5M2", "f8E5M2FNUZ",
               "f8E8M0FNU", "f4E2M1FN", "f6E2M3FN", "f6E3M2FN", "tf32")
SCALARS = {"index": INDEX, "none": NONE}
for _n in FLOAT_NAMES:
    SCALARS[_n] = FloatType(_n)
for _w in (1, 2, 4, 8, 16, 32, 64):
    for _s in ("", "u", "s"):
        SCALARS[f"{_s}i{_w}"] = IntegerType(_w, _s)
STRING = DialectType("onnx.String")

f16, bf16, f32, f64 = (SCALARS[n] for n in ("f16", "bf16", "f32", "f64"))
i1, i8, i16, i32, i64 = (SCALARS[f"i{w}"] for w in (1, 8, 16, 32, 64))
ui8, ui16, ui32, ui64 = (SCALARS[f"ui{w}"] for w in (8, 16, 32, 64))


def is_float(t: Type) -> bool:
    return isinstance(t, FloatType)


def is_integer(t: Type) -> bool:
    return isinstance(t, IntegerType)


# ---- numpy interop -------------------------------------------------------------

def _numpy_table():
    table = {
        "i1": np.bool_, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
        "ui8": np.uint8, "ui16": np.uint16, "ui32": np.uint32, "ui64": np.uint64,
        "si8": np.int8, "si16": np.int16, "si32": np.int32, "si64": np.int64,
        "f16": np.float16, "f32": np.float32, "f64": np.float64,
        "complex<f32>": np.complex64, "complex<f64>": np.complex128,
        "!onnx.String": np.object_,
    }
    if ml_dtypes is not None:
        extra = {"bf16": "bfloat16", "f8E4M3FN": "float8_e4m3fn", "f8E4M3FNUZ": "float8_e4m3fnuz",
                 "f8E5M2": "float8_e5m2", "f8E5M2FNUZ": "float8_e5m2fnuz",
                 "f8E8M0FNU": "float8_e8m0fnu", "f4E2M1FN": "float4_e2m1fn",
                 "f6E2M3FN": "float6_e2m3fn", "f6E3M2FN": "float6_e3m2fn",
                 "i4": "int4", "ui4": "uint4", "i2": "int2", "ui2": "uint2"}
        for k, v in extra.items():
            if hasattr(ml_dtypes, v):
                table[k] = getattr(ml_dtypes, v)
    return {k: np.dtype(v) for k, v in table.items()}


_TO_NUMPY = _numpy_table()
_FROM_NUMPY = {}
for _k, _v in _TO_NUMPY.items():
    if not _k.startswith("si"):
        _FROM_NUMPY.setdefault(_v, _k)


def to_numpy_dtype(element: Type) -> np.dtype:
    try:
        return _TO_NUMPY[str(element)]
    except KeyError:
        raise TypeError(f"element type {element} has no numpy dtype") from None


def from_numpy_dtype(dtype) -> Type:
    dtype = np.dtype(dtype)
    if dtype.kind in ("U", "S", "O"):
        return STRING
    try:
        name = _FROM_NUMPY[dtype]
    except KeyError:
        raise TypeError(f"numpy dtype {dtype} has no IR element type") from None
    return parse_element_name(name)


def parse_element_name(name: str) -> Type:
    if name in SCALARS:
        return SCALARS[name]
    if name == "!onnx.String":
        return STRING
    if name.startswith("complex<"):
        return ComplexType(SCALARS[name[8:-1]])
    raise TypeError(f"unknown element type '{name}'")
