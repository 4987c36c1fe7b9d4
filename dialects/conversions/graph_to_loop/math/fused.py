"""graph.fused groups: the whole group is ONE loop nest over the shape its
results share; each external input is loaded once per iteration (or
hoisted), each result stored once, and the ops in between are scalar code
from the elementwise emitters."""
from __future__ import annotations

from ....ir.types import NONE
from .elementwise import EMITTERS, elementwise_nest, emit
from ..registry import lowering


@lowering("graph.fused")
def lower_fused(cx, op):
    body = op.regions[0].blocks[0]
    shapes = {r.type.shape for r in op.results}
    if len(shapes) != 1:
        cx.fail(op, f"graph.fused results have different shapes {sorted(shapes)}")
    for inner in body.ops:
        if inner.name not in ("graph.yield", "onnx.NoValue") and inner.name not in EMITTERS:
            cx.fail(inner, f"{inner.name} cannot be lowered inside a graph.fused group")
    ins = [None if v.type is NONE else cx.buf(v) for v in op.operands]
    outs = [cx.out(r) for r in op.results]

    def compute(vals):
        env = {a: x for a, x in zip(body.args, vals)}
        for inner in body.ops:
            if inner.name == "graph.yield":
                return [env[v] for v in inner.operands]
            if inner.name == "onnx.NoValue":
                env[inner.results[0]] = None
                continue
            saved, cx.L.loc = cx.L.loc, inner.loc
            env[inner.results[0]] = emit(cx, inner, [env[v] for v in inner.operands])
            cx.L.loc = saved
        raise AssertionError("unreachable: verified groups end in graph.yield")

    elementwise_nest(cx, op.results[0].type.shape, ins, outs, compute)
