"""Restoring def-before-use order in a block after outlining or grouping."""
from __future__ import annotations


def topological_sort(block):
    """Stable topological order of a block's ops (the terminator stays last)."""
    ops = list(block.ops)
    term = ops.pop() if ops and ops[-1].name in ("func.return", "onnx.Yield") else None
    pos = {op: i for i, op in enumerate(ops)}
    placed, order = set(), []

    def visit(op):
        if op in placed:
            return
        stack = [(op, False)]
        while stack:
            cur, ready = stack.pop()
            if cur in placed:
                continue
            if ready:
                placed.add(cur)
                order.append(cur)
                continue
            stack.append((cur, True))
            deps = [getattr(v, "op", None) for v in cur.operands]
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
