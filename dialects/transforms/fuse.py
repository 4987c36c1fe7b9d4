"""The `fuse` pass: groups chains of elementwise onnx ops whose results share
one shape into `graph.fused` ops, each lowered later as ONE loop nest (inputs
read once, results written once, no intermediate buffers).

Greedy, in program order: an elementwise op joins the groups of its
elementwise producers of the same shape, as long as the group stays within
`max-ops` and no path leaves the group and comes back into it (which would
make the graph cyclic). Inputs may broadcast into the group's shape."""
from __future__ import annotations

from ..ir.core import Block, Operation, Region
from ..ir.passes import Pass
from ..ir.types import NONE, TensorType
from .ordering import topological_sort

# Ops whose every operand is data (broadcast into the result) and whose
# lowering is a scalar emitter.
ELEMENTWISE = frozenset("onnx." + n for n in (
    "Add Sub Mul Div Mod Pow Relu Sigmoid Tanh Exp Log Sqrt Neg Abs Erf Reciprocal Floor Ceil Round Sign "
    "Sin Cos Tan Asin Acos Atan Sinh Cosh Asinh Acosh Atanh Softplus Softsign Elu Selu Celu LeakyRelu "
    "ThresholdedRelu HardSigmoid HardSwish Gelu Mish Shrink PRelu Clip Where Cast "
    "Min Max Sum Mean Equal Less Greater LessOrEqual GreaterOrEqual And Or Xor Not IsNaN IsInf "
    "BitwiseAnd BitwiseOr BitwiseXor BitwiseNot BitShift").split())


def _fusable(op):
    if op.name not in ELEMENTWISE or len(op.results) != 1 or op.regions:
        return False
    t = op.results[0].type
    return isinstance(t, TensorType) and t.has_static_shape


class FusePass(Pass):
    name = "fuse"
    summary = "groups elementwise chains into graph.fused ops (one loop nest each)"
    options = {"max-ops": (int, 32, "most onnx ops in one group", 1)}

    def run(self, module, ctx):
        for func in module.functions():
            for block in func.regions[0].blocks:
                _fuse_block(block, self.max_ops)


def _fuse_block(block, max_ops):
    ops = list(block.ops)
    pos = {op: i for i, op in enumerate(ops)}
    group = {}  # op -> list of ops (shared list per group)

    def producer(v):
        return getattr(v, "op", None)

    def cyclic(members):
        """Does some path leave `members` and re-enter it?"""
        lo = min(pos[m] for m in members)
        seen = set()
        stack = [p for m in members for v in m.operands
                 if (p := producer(v)) is not None and p not in members and p in pos]
        while stack:
            x = stack.pop()
            if x in seen or pos[x] < lo:
                continue
            seen.add(x)
            for v in x.operands:
                p = producer(v)
                if p is None or p not in pos:
                    continue
                if p in members:
                    return True
                stack.append(p)
        return False

    for op in ops:
        if not _fusable(op):
            continue
        shape = op.results[0].type.shape
        merged = {op}
        cands = []
        for v in op.operands:
            p = producer(v)
            g = group.get(p)
            if g is not None and p.results[0].type.shape == shape and not any(g is c for c in cands):
                cands.append(g)
        for g in sorted(cands, key=len):
            trial = merged | set(g)
            if len(trial) <= max_ops and not cyclic(trial):
                merged = trial
        members = sorted(merged, key=pos.__getitem__)
        for m in members:
            group[m] = members

    done = set()
    for op in ops:
        g = group.get(op)
        if g is None or id(g) in done:
            continue
        done.add(id(g))
        if len(g) >= 2:
            _outline(block, g)
    topological_sort(block)


def _outline(block, members):
    mset = set(members)
    inputs, outputs = [], []
    for m in members:
        for v in m.operands:
            p = getattr(v, "op", None)
            if p not in mset and v.type is not NONE and v not in inputs:
                inputs.append(v)
        r = m.results[0]
        if any(u not in mset for u, _ in r.uses):
            outputs.append(r)
    body = Block([v.type for v in inputs])
    vmap = dict(zip(inputs, body.args))
    for m in members:
        operands = []
        for v in m.operands:
            if v.type is NONE and v not in vmap:
                vmap[v] = body.append(Operation("onnx.NoValue", [], [NONE], dict(getattr(v, "op").attributes)
                                                if getattr(v, "op", None) is not None else None)).results[0]
            operands.append(vmap[v])
        c = body.append(Operation(m.name, operands, [r.type for r in m.results], dict(m.attributes), [], m.loc))
        vmap[m.results[0]] = c.results[0]
    body.append(Operation("graph.yield", [vmap[r] for r in outputs], [], None, (), members[-1].loc))
    fused = Operation("graph.fused", inputs, [r.type for r in outputs], None, [Region([body])], members[-1].loc)
    block.insert_after(members[-1], fused)
    for r, nr in zip(outputs, fused.results):
        r.replace_all_uses_with(nr)
    for m in reversed(members):
        m.erase()
