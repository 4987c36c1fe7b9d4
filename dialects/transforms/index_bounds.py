"""index-bounds: the range a model input's values must lie in, where they
index a tensor.

An exporter's `input_ids` reach an embedding's Gather unchanged (or through
Cast/Reshape/Unsqueeze...). onnxruntime refuses an id past the vocabulary;
the generated code clamps every data index (graph_to_loop/common.py's
`data_index`) so that it cannot read outside the table, which would give a
wrong answer without a word. This pass records, on each such argument of
@main_graph, `tcc.index_bound` = n (values must lie in [-n, n), ONNX's
negative indices included) and `tcc.index_user` (the node, for the error
message). The artifact's signature carries them, and every session kind
checks the input against them before running (runtime/signature.py).

Indices that fold to constants (a GPT-2's position ids are Range(0, seq)
once run-time specialization knows the sequence length) are checked here:
one out of range is a ShapeMismatch, which a specializing session reports
as the caller's inputs not fitting the model ("a sequence longer than the
position table"), where the clamp would have answered wrongly. Other
indices computed inside the graph (ArgMax, TopK...) are in range by
construction in every real model; for those the clamp is the guard."""
from __future__ import annotations

import numpy as np

from ..ir import attributes as A
from ..ir.passes import Pass
from .constants import constant_value
from .shape_inference import ShapeMismatch

# op -> (indices operand, data operand): the index selects along the data's `axis`
INDEXING = {"onnx.Gather": (1, 0), "onnx.GatherElements": (1, 0), "onnx.ScatterElements": (1, 0),
            "onnx.Scatter": (1, 0)}
# ops that pass an integer tensor's values through unchanged
VALUE_PRESERVING = {"onnx.Identity", "onnx.Reshape", "onnx.Flatten", "onnx.Squeeze", "onnx.Unsqueeze",
                    "onnx.Transpose", "onnx.Expand", "onnx.Tile", "onnx.Slice", "onnx.Concat"}
INT_ELEMENTS = {"i8", "i16", "i32", "i64", "ui8", "ui16", "ui32", "ui64"}


def _sources(v, block_args, seen):
    """The @main_graph arguments whose values reach `v` unchanged."""
    if v in seen:
        return []
    seen.add(v)
    if v in block_args:
        return [v]
    op = getattr(v, "op", None)
    if op is None:
        return []
    if op.name == "onnx.Cast":
        # a widening or same-width integer cast keeps the value; a narrowing
        # one may wrap an out-of-range id into range: the input is checked as
        # it arrives, so only value-keeping casts are traced
        src, dst = str(op.operands[0].type.element), str(op.results[0].type.element)
        if src in INT_ELEMENTS and dst in INT_ELEMENTS and _bits(dst) >= _bits(src) and \
                (src.startswith("ui") or not dst.startswith("ui")):
            return _sources(op.operands[0], block_args, seen)
        return []
    if op.name in VALUE_PRESERVING:
        # the first operand carries the values (Concat: every operand does)
        operands = op.operands if op.name == "onnx.Concat" else op.operands[:1]
        return [a for o in operands for a in _sources(o, block_args, seen)]
    return []


def _bits(el):
    return int(el.lstrip("ui"))


def index_bounds(func):
    """{argument index: (bound, user description)}: the tightest bound each
    integer argument must satisfy where it indexes a tensor of static size."""
    block = func.regions[0].blocks[0]
    args = {a: i for i, a in enumerate(block.args)}
    found = {}
    for op in block.ops:
        if op.name not in INDEXING:
            continue
        ii, di = INDEXING[op.name]
        data = op.operands[di]
        shape = getattr(data.type, "shape", None)
        if shape is None:
            continue
        axis = op.get_attr("axis", 0)
        if not -len(shape) <= axis < len(shape) or shape[axis] is None:
            continue
        n = int(shape[axis])
        _check_constant(op, op.operands[ii], n, axis)
        for a in _sources(op.operands[ii], args, set()):
            if str(getattr(a.type, "element", "")) not in INT_ELEMENTS:
                continue
            k = args[a]
            if k not in found or n < found[k][0]:
                found[k] = (n, f"{op.name[5:]} {op.loc.describe()}")
    return found


def _check_constant(op, ind, n, axis):
    c = constant_value(ind)
    if c is None or c.size == 0 or c.dtype.kind not in "iu" or (c.min() >= -n and c.max() < n):
        return
    bad = tuple(int(i) for i in np.argwhere((c < -n) | (c >= n))[0])
    raise ShapeMismatch(op, f"index {c[bad]} (element {list(bad)} of the indices) is out of range "
                            f"[-{n}, {n - 1}] of the data's dim {axis}")


class IndexBoundsPass(Pass):
    name = "index-bounds"
    summary = "record on @main_graph's integer arguments the range their values index (checked at run time)"

    def run(self, module, ctx):
        func = module.lookup_function("main_graph")
        if func is None or not func.regions or not func.regions[0].blocks:
            return
        block = func.regions[0].blocks[0]
        found = index_bounds(func)
        old = func.attributes.get("arg_attrs")
        attrs = [dict(d.value) for d in old.elements] if old is not None else [{} for _ in block.args]
        if len(attrs) != len(block.args):
            return
        for k, d in enumerate(attrs):
            d.pop("tcc.index_bound", None)
            d.pop("tcc.index_user", None)
            if k in found:
                d["tcc.index_bound"] = A.IntegerAttr(found[k][0])
                d["tcc.index_user"] = A.StringAttr(found[k][1])
        if old is not None or found:
            func.attributes["arg_attrs"] = A.ArrayAttr([A.DictAttr(d) for d in attrs])


def arg_index_bound(func, k):
    """(bound, user) recorded on @main_graph's argument k, or None."""
    attrs = func.attributes.get("arg_attrs")
    if attrs is None or k >= len(attrs.elements):
        return None
    d = attrs.elements[k].value
    if "tcc.index_bound" not in d:
        return None
    return int(d["tcc.index_bound"].value), str(d["tcc.index_user"].value)
