"""canonicalize: op fold hooks plus a few simplifying patterns, applied to a
fixpoint by the greedy rewriter."""
from __future__ import annotations

from ..builtin import sync_function_types
from ..ir import attributes as A
from ..ir.passes import Pass
from ..ir.rewriter import RewritePattern, apply_patterns_greedily
from ..ir.types import TensorType
from .constants import make_constant
from .qdq import QuantizeDequantizePair


class TransposeOfTranspose(RewritePattern):
    op_name = "onnx.Transpose"

    def match_and_rewrite(self, op, rw):
        src = op.operands[0]
        inner = getattr(src, "op", None)
        if inner is None or inner.name != "onnx.Transpose":
            return False
        p1, p2 = inner.get_attr("perm"), op.get_attr("perm")
        if p1 is None or p2 is None:
            return False
        perm = [p1[i] for i in p2]
        new = rw.create_before(op, "onnx.Transpose", [inner.operands[0]], [op.results[0].type],
                               {"perm": A.DenseArrayAttr(perm)})
        rw.replace_op(op, new.results)
        return True


class ReshapeOfReshape(RewritePattern):
    """Reshape(Reshape(x, s1), s2) == Reshape(x, s2) when s2 has no 0 (copy) dims."""
    op_name = "onnx.Reshape"

    def match_and_rewrite(self, op, rw):
        inner = getattr(op.operands[0], "op", None)
        if inner is None or inner.name != "onnx.Reshape" or len(op.operands) < 2:
            return False
        from .constants import constant_value
        shape = constant_value(op.operands[1])
        if shape is None or (shape == 0).any():
            return False
        rw.modified(op)
        op.set_operand(0, inner.operands[0])
        return True


class CastOfCast(RewritePattern):
    """Cast(Cast(x: T) -> U) -> T collapses when U can hold every T exactly."""
    op_name = "onnx.Cast"
    _WIDENS = {("f16", "f32"), ("f16", "f64"), ("f32", "f64"), ("bf16", "f32"), ("bf16", "f64"),
               ("i8", "i16"), ("i8", "i32"), ("i8", "i64"), ("i16", "i32"), ("i16", "i64"), ("i32", "i64")}

    def match_and_rewrite(self, op, rw):
        inner = getattr(op.operands[0], "op", None)
        if inner is None or inner.name != "onnx.Cast":
            return False
        x = inner.operands[0]
        if not isinstance(x.type, TensorType) or x.type != op.results[0].type:
            return False
        if (str(x.type.element), str(inner.results[0].type.element)) not in self._WIDENS:
            return False
        rw.replace_op(op, [x])
        return True


def _refines(t, u):
    """Whether tensor type t is u with more known (rank, dims), never less."""
    if not (isinstance(t, TensorType) and isinstance(u, TensorType)) or t.element != u.element:
        return False
    if u.shape is None:
        return True
    if t.shape is None or len(t.shape) != len(u.shape):
        return False
    return all(b is None or a == b for a, b in zip(t.shape, u.shape))


class IfOfConstant(RewritePattern):
    """If(constant cond) -> the taken branch's ops, inlined. Function bodies
    (expanded ops) branch on facts shape inference already knows, such as a
    rank; left in, their results' shapes stay unknown."""
    op_name = "onnx.If"

    def match_and_rewrite(self, op, rw):
        from .constants import constant_value
        cond = constant_value(op.operands[0])
        if cond is None or cond.size != 1 or len(op.regions) != 2:
            return False
        # the importer orders subgraph regions by attribute name: else_branch, then_branch
        region = op.regions[1 if bool(cond.reshape(-1)[0]) else 0]
        if len(region.blocks) != 1 or region.blocks[0].args:
            return False
        block = region.blocks[0]
        term = block.last
        if term is None or term.name != "onnx.Yield" or len(term.operands) != len(op.results):
            return False
        results = list(term.operands)
        for v, r in zip(results, op.results):
            if v.type != r.type and not _refines(r.type, v.type) and not _refines(v.type, r.type):
                return False
        for v, r in zip(results, op.results):
            if v.type != r.type and _refines(r.type, v.type):
                v.type = r.type  # the If's inferred type holds for the branch it takes
        for inner in list(block.ops):
            if inner is term:
                break
            block.remove(inner)
            rw.insert_before(op, inner)
        rw.replace_op(op, results)
        return True


PATTERNS = [TransposeOfTranspose(), ReshapeOfReshape(), CastOfCast(), IfOfConstant(), QuantizeDequantizePair()]


def materialize(module):
    def make(rw, op, attr, type):
        if isinstance(attr, (A.DenseElementsAttr, A.DenseResourceAttr)) and attr.value is not None:
            c = make_constant(module, attr.value, type.element, loc=op.loc)
            rw.insert_before(op, c)
            return c.results[0]
        return None
    return make


class CanonicalizePass(Pass):
    name = "canonicalize"
    summary = "fold ops and apply simplifying patterns to a fixpoint"

    def run(self, module, ctx):
        apply_patterns_greedily(ctx, module, PATTERNS, materialize=materialize(module))
        sync_function_types(module)
