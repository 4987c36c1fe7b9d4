"""ONNX types <-> IR types. Sequences, optionals and maps become
`!onnx.Seq<T>`, `!onnx.Opt<T>`, `!onnx.Map<K, V>`."""
from __future__ import annotations

import onnx

from ..ir.types import (DialectType, NONE, SCALARS, TensorType, Type,
                        parse_element_name)

# TensorProto.DataType name -> IR element type name
_DTYPE_TO_ELEMENT = {
    "FLOAT": "f32", "UINT8": "ui8", "INT8": "i8", "UINT16": "ui16", "INT16": "i16", "INT32": "i32",
    "INT64": "i64", "STRING": "!onnx.String", "BOOL": "i1", "FLOAT16": "f16", "DOUBLE": "f64",
    "UINT32": "ui32", "UINT64": "ui64", "COMPLEX64": "complex<f32>", "COMPLEX128": "complex<f64>",
    "BFLOAT16": "bf16", "FLOAT8E4M3FN": "f8E4M3FN", "FLOAT8E4M3FNUZ": "f8E4M3FNUZ",
    "FLOAT8E5M2": "f8E5M2", "FLOAT8E5M2FNUZ": "f8E5M2FNUZ", "UINT4": "ui4", "INT4": "i4",
    "FLOAT4E2M1": "f4E2M1FN", "FLOAT8E8M0": "f8E8M0FNU", "UINT2": "ui2", "INT2": "i2",
    "FLOAT6E2M3": "f6E2M3FN", "FLOAT6E3M2": "f6E3M2FN",
}
_DTYPE_NUM = {k: v for k, v in onnx.TensorProto.DataType.items()}
ELEMENT_OF_DTYPE = {_DTYPE_NUM[k]: parse_element_name(v) for k, v in _DTYPE_TO_ELEMENT.items()
                    if k in _DTYPE_NUM}
DTYPE_OF_ELEMENT = {str(v): k for k, v in ELEMENT_OF_DTYPE.items()}

# Schema type strings ("float", "int64", ...) -> element type
_SCHEMA_NAMES = {
    "float": "f32", "double": "f64", "float16": "f16", "bfloat16": "bf16", "bool": "i1",
    "string": "!onnx.String", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "ui8", "uint16": "ui16", "uint32": "ui32", "uint64": "ui64",
    "complex64": "complex<f32>", "complex128": "complex<f64>", "float8e4m3fn": "f8E4M3FN",
    "float8e4m3fnuz": "f8E4M3FNUZ", "float8e5m2": "f8E5M2", "float8e5m2fnuz": "f8E5M2FNUZ",
    "float8e8m0": "f8E8M0FNU", "float4e2m1": "f4E2M1FN", "int4": "i4", "uint4": "ui4",
    "int2": "i2", "uint2": "ui2", "float6e2m3": "f6E2M3FN", "float6e3m2": "f6E3M2FN",
}
_ELEMENT_TO_SCHEMA = {v: k for k, v in _SCHEMA_NAMES.items()}


def element_from_dtype(dtype: int) -> Type:
    try:
        return ELEMENT_OF_DTYPE[dtype]
    except KeyError:
        raise ValueError(f"unsupported ONNX data type {dtype}") from None


def dtype_from_element(el: Type) -> int:
    try:
        return DTYPE_OF_ELEMENT[str(el)]
    except KeyError:
        raise ValueError(f"element type {el} has no ONNX data type") from None


def ir_type(tp: onnx.TypeProto) -> Type:
    """TypeProto -> IR type; unknown dims become `?`, unknown rank unranked."""
    kind = tp.WhichOneof("value")
    if kind == "tensor_type" or kind == "sparse_tensor_type":
        tt = getattr(tp, kind)
        el = element_from_dtype(tt.elem_type) if tt.elem_type else SCALARS["f32"]
        if not tt.HasField("shape"):
            return TensorType(None, el)
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        return TensorType(dims, el)
    if kind == "sequence_type":
        et = tp.sequence_type.elem_type
        return DialectType("onnx.Seq", (ir_type(et),) if et.WhichOneof("value") else ())
    if kind == "optional_type":
        et = tp.optional_type.elem_type
        return DialectType("onnx.Opt", (ir_type(et),) if et.WhichOneof("value") else ())
    if kind == "map_type":
        mt = tp.map_type
        return DialectType("onnx.Map", (element_from_dtype(mt.key_type), ir_type(mt.value_type)))
    return NONE


def onnx_type(t: Type) -> onnx.TypeProto:
    tp = onnx.TypeProto()
    if isinstance(t, TensorType):
        tp.tensor_type.elem_type = dtype_from_element(t.element)
        if t.shape is not None:
            shape = tp.tensor_type.shape
            shape.SetInParent()
            for d in t.shape:
                dim = shape.dim.add()
                if d is not None:
                    dim.dim_value = d
        return tp
    if isinstance(t, DialectType):
        if t.name == "onnx.Seq":
            tp.sequence_type.SetInParent()
            if t.params:
                tp.sequence_type.elem_type.CopyFrom(onnx_type(t.params[0]))
            return tp
        if t.name == "onnx.Opt":
            tp.optional_type.SetInParent()
            if t.params:
                tp.optional_type.elem_type.CopyFrom(onnx_type(t.params[0]))
            return tp
        if t.name == "onnx.Map":
            tp.map_type.key_type = dtype_from_element(t.params[0])
            tp.map_type.value_type.CopyFrom(onnx_type(t.params[1]))
            return tp
    raise ValueError(f"type {t} has no ONNX counterpart")


def schema_type_string(t: Type) -> str:
    """IR type -> the schema's spelling ('tensor(float)', 'seq(tensor(int64))')."""
    if isinstance(t, TensorType):
        return f"tensor({_ELEMENT_TO_SCHEMA.get(str(t.element), str(t.element))})"
    if isinstance(t, DialectType):
        if t.name == "onnx.Seq":
            return f"seq({schema_type_string(t.params[0])})" if t.params else "seq"
        if t.name == "onnx.Opt":
            return f"optional({schema_type_string(t.params[0])})" if t.params else "optional"
        if t.name == "onnx.Map":
            # the schemas spell a map's tensor value by its element alone
            # (ZipMap: 'seq(map(int64, float))')
            k = _ELEMENT_TO_SCHEMA.get(str(t.params[0]), str(t.params[0]))
            v = t.params[1]
            vs = _ELEMENT_TO_SCHEMA.get(str(v.element), str(v.element)) if isinstance(v, TensorType) \
                else schema_type_string(v)
            return f"map({k}, {vs})"
    return str(t)


