"""Restoring def-before-use order in a block after outlining or grouping."""
from __future__ import annotations

from ..ir.core import free_values
from ..ir.errors import PassError


def topological_sort(block):
    """Stable topological order of a block's ops (the terminator stays last).
    Raises PassError when the ops' uses form a cycle (no order exists)."""
    ops = list(block.ops)
    term = ops.pop() if ops and ops[-1].name in ("func.return", "onnx.Yield") else None
    pos = {op: i for i, op in enumerate(ops)}
    placed, order = set(), []
    open_ = set()  # ops whose operands are being placed: the current path

    def visit(op):
        if op in placed:
            return
        stack = [(op, False)]
        while stack:
            cur, ready = stack.pop()
            if cur in placed:
                continue
            if ready:
                open_.discard(cur)
                placed.add(cur)
                order.append(cur)
                continue
            if cur in open_:
                where = cur.loc.describe() if cur.loc is not None else "unknown location"
                raise PassError(f"'{cur.name}' ({where}) depends on its own result: the block's ops form a cycle")
            open_.add(cur)
            stack.append((cur, True))
            # an op with regions (Scan, Loop, If bodies) also depends on the
            # outer values its bodies capture: sorting by operands alone put
            # a Scan before the graph.fused op making a value its body reads
            # (LinearAttention's expansion under --maccel=cpu: "operand #1
            # does not dominate this use" after fuse)
            deps = [getattr(v, "op", None) for v in (free_values(cur) if cur.regions else cur.operands)]
            for d in sorted({d for d in deps if d is not None and d in pos and d not in placed},
                            key=pos.get, reverse=True):
                stack.append((d, False))

    for op in ops:
        visit(op)
    if order == ops:
        return
    for op in ops:
        block.remove(op)
    anchor = term
    for op in order:
        if anchor is not None:
            block.insert_before(anchor, op)
        else:
            block.append(op)
