"""`graph.fused`: a group of onnx ops to be lowered as ONE loop nest.

    %r:n = "graph.fused"(%external_inputs...) ({
    ^bb0(%a0, ...):            // one argument per operand, same types
      ... onnx ops ...
      "graph.yield"(%values...) // one per result, same types
    }) : (...) -> (...)

The region is isolated from above: everything it reads comes in through its
block arguments, so a group can be moved, printed and lowered on its own."""
from __future__ import annotations

from ..ir.errors import VerifyError
from ..ir.opdef import Dialect, ISOLATED, OpDef, OperandDef, PURE, TERMINATOR


def _verify_fused(op, ctx):
    blocks = op.regions[0].blocks
    if len(blocks) != 1:
        raise VerifyError("body must be one block", op)
    body = blocks[0]
    if [a.type for a in body.args] != [v.type for v in op.operands]:
        raise VerifyError("block arguments must match the operands' types", op)
    term = body.last
    if term is None or term.name != "graph.yield":
        raise VerifyError("body must end with graph.yield", op)
    if [v.type for v in term.operands] != [r.type for r in op.results]:
        raise VerifyError("graph.yield values must match the results' types", op)


OPS = [
    OpDef("graph.fused", [OperandDef("inputs", "variadic")], [OperandDef("outputs", "variadic")],
          traits=frozenset({PURE, ISOLATED}), num_regions=1, verifier=_verify_fused,
          summary="a group of onnx ops lowered as one loop nest"),
    OpDef("graph.yield", [OperandDef("values", "variadic")], traits=frozenset({TERMINATOR, PURE}),
          summary="ends a graph.fused body"),
]



def dialect():
    return Dialect("graph", OPS, "groups of onnx ops (fusion)")
