"""Sequence and optional values at run time.

In the IR a sequence is `!onnx.Seq<tensor<...>>` and an optional
`!onnx.Opt<T>`; at run time a sequence is a Python list of numpy arrays (its
length and each element's shape known only then: elements may differ in
shape, even in rank) and an optional is None or its value. The ops that take
or make them run as host steps (runtime/staged.py); everything between them
is compiled natively per shape, as for any dynamic model.

This module is what the signature, the input checks and the specialization
key need to know about them: a spec's `container` ("seq", "opt", outermost
first) names the wrapping around its tensor `shape`/`element`. A map
(`!onnx.Map<K, V>`, what ai.onnx.ml's ZipMap makes: a dict at run time) is
the kind "map:K", K its key's element type."""
from __future__ import annotations

import numpy as np

from tcc.dialects.ir.types import DialectType, TensorType, parse_element_name

SEQ, OPT, MAP = "onnx.Seq", "onnx.Opt", "onnx.Map"
_KIND = {SEQ: "seq", OPT: "opt", MAP: "map"}


def valid_kind(k) -> bool:
    return k in ("seq", "opt") or (k.startswith("map:") and len(k) > 4)


def is_container(t) -> bool:
    """A sequence or optional type, or a type holding one (Opt<Seq<...>>)."""
    return isinstance(t, DialectType) and t.name in _KIND


def unwrap(t):
    """IR type -> (container kinds outermost first, innermost tensor type or
    None when the IR does not say)."""
    kinds = []
    while is_container(t):
        if t.name == MAP:
            kinds.append(f"map:{t.params[0]}")
            t = t.params[1] if len(t.params) > 1 else None
        else:
            kinds.append(_KIND[t.name])
            t = t.params[0] if t.params else None
    return tuple(kinds), (t if isinstance(t, TensorType) else None)


def wrap(kinds, tensor):
    for k in reversed(kinds):
        if k.startswith("map:"):
            tensor = DialectType(MAP, (parse_element_name(k[4:]), tensor))
        else:
            tensor = DialectType(SEQ if k == "seq" else OPT, (tensor,) if tensor is not None else ())
    return tensor


def describe(kinds, shape, dtype):
    """How an error spells a spec: 'sequence of float32[?, 3]'."""
    dims = "[*]" if shape is None else str(["?" if d < 0 else d for d in shape]).replace("'", "")
    words = {"seq": "sequence of ", "opt": "optional "}
    return "".join(words.get(k, f"map from {k[4:]} to ") for k in kinds) + f"{dtype}{dims}"


def check(name, kinds, shape, dtype, value, host_array=np.asarray):
    """The caller's `value` for an input of this container spec, as lists of
    host arrays and None; a mismatch is one line naming the input, the
    element and what was expected."""
    dtype = np.dtype(dtype)
    want = describe(kinds, shape, dtype)

    def walk(v, depth, where):
        if depth == len(kinds):
            a = np.asarray(host_array(v))
            if a.dtype != dtype:
                raise ValueError(f"{where} has dtype {a.dtype}, expected {dtype}")
            if shape is not None and (a.ndim != len(shape) or
                                      any(d >= 0 and d != s for d, s in zip(shape, a.shape))):
                want_dims = ", ".join("?" if d < 0 else str(d) for d in shape)
                raise ValueError(f"{where} has shape {list(a.shape)}, expected [{want_dims}]")
            return a
        if kinds[depth] == "opt":
            return None if v is None else walk(v, depth + 1, where)
        if kinds[depth].startswith("map:"):
            if not isinstance(v, dict):
                raise ValueError(f"{where} is a map: expected a dict, got {type(v).__name__}")
            return {k: walk(e, depth + 1, f"{where}[{k!r}]") for k, e in v.items()}
        if not isinstance(v, (list, tuple)):
            got = "None" if v is None else type(v).__name__
            raise ValueError(f"{where} is a sequence: expected a list of tensors, got {got}")
        return [walk(e, depth + 1, f"{where} element #{i}") for i, e in enumerate(v)]
    try:
        return walk(value, 0, f"input '{name}'")
    except ValueError as e:
        raise ValueError(f"{e} (input '{name}' is a {want})") from None


def key(value) -> str:
    """What a specialization depends on: the structure, and every element's
    dtype and shape (not the values)."""
    if value is None:
        return "None"
    if isinstance(value, list):
        return "[" + ",".join(key(e) for e in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k!r}:{key(e)}" for k, e in value.items()) + "}"
    return f"{value.dtype}{list(value.shape)}"


def _join(shapes):
    """The tensor shape that fits every element: equal dims kept, others
    dynamic; None (unranked) when the ranks differ."""
    ranks = {len(s) for s in shapes}
    if len(ranks) != 1:
        return None
    return tuple(d if all(s[i] == d for s in shapes) else None for i, d in enumerate(shapes[0]))


def concrete_type(declared, value):
    """The IR type of `value` (lists and None, as check() returns them) for
    an argument declared `declared`: element shapes from the value where it
    has elements, the declaration where it has none (an empty sequence, an
    empty optional)."""
    kinds, tensor = unwrap(declared)
    leaves = []

    def collect(v, depth):
        if depth == len(kinds):
            leaves.append(v.shape)
        elif v is not None:
            for e in (v if kinds[depth] == "seq" else v.values() if isinstance(v, dict) else [v]):
                collect(e, depth + 1)
    collect(value, 0)
    if not leaves or tensor is None:
        return declared
    return wrap(kinds, TensorType(_join(leaves), tensor.element))
