"""Analyses of loop nests that code generators share: which buffer a view
reads, whether a loop's iterations touch disjoint memory (`parallel_safe`),
how far a nest of such loops collapses into one parallel range (`collapse`)."""
from __future__ import annotations

from tcc.dialects.ir.core import BlockArgument
from tcc.dialects.ir.types import FloatType


def root_buffer(v):
    """The buffer a memref value is a view of (loop.view chains)."""
    while getattr(v, "op", None) is not None and v.op.name == "loop.view":
        v = v.op.operands[0]
    return v


def walk_ops(block):
    for op in block.ops:
        yield op
        for r in op.regions:
            for b in r.blocks:
                yield from walk_ops(b)


def defined_inside(v, block):
    """Is `v` defined inside `block` (at any depth)?"""
    b = v.block if isinstance(v, BlockArgument) else (v.op.parent if v.op is not None else None)
    while b is not None:
        if b is block:
            return True
        po = b.parent_op
        b = po.parent if po is not None else None
    return False


def const_int(v):
    op = getattr(v, "op", None)
    if op is not None and op.name == "arith.constant" and not isinstance(v.type, FloatType):
        return int(op.get_attr("value"))
    return None


def parallel_safe(loop):
    """Do different iterations of `loop` touch disjoint memory?"""
    body = loop.regions[0].blocks[0]
    iv = body.args[0]
    accesses = {}
    written = set()
    for op in walk_ops(body):
        if op.name in ("loop.copy", "loop.call"):
            return False
        if op.name in ("loop.load", "loop.store"):
            buf = op.operands[0] if op.name == "loop.load" else op.operands[1]
            idx = list(op.operands[1:] if op.name == "loop.load" else op.operands[2:])
            root = root_buffer(buf)
            if defined_inside(root, body):
                continue  # private to the iteration
            accesses.setdefault(root, []).append((buf.type.shape, idx))
            if op.name == "loop.store":
                written.add(root)
    for root in written:
        sig = None
        for shape, idx in accesses[root]:
            pos = [k for k, x in enumerate(idx) if x is iv]
            if len(pos) != 1:
                return False
            p = pos[0]
            prefix = []
            for x in idx[:p]:
                c = const_int(x)
                if c is not None:
                    prefix.append(("c", c))
                elif isinstance(x, BlockArgument) and not defined_inside(x, body):
                    prefix.append(("v", id(x)))
                else:
                    return False
            s = (p, tuple(shape[:p + 1]), tuple(prefix))
            if sig is None:
                sig = s
            elif s != sig:
                return False
    return True


def sinkable(op, nest_written):
    if op.name == "loop.load":
        return root_buffer(op.operands[0]) not in nest_written
    return (op.name.startswith("arith.") or op.name.startswith("math.")) and not op.regions


def loop_bounds(loop):
    lb, ub = const_int(loop.operands[0]), const_int(loop.operands[1])
    if lb is None or ub is None:
        return None
    step = loop.get_attr("step", 1)
    return lb, ub, step, max(0, -(-(ub - lb) // step))


def collapse(nest):
    """(collapsed loops with bounds, sunk ops, the innermost body's ops)."""
    written = {root_buffer(op.operands[1]) for op in walk_ops(nest.regions[0].blocks[0]) if op.name == "loop.store"}
    loops, sunk = [], []
    cur = nest
    while True:
        b = loop_bounds(cur)
        if b is None or not parallel_safe(cur):
            break
        loops.append((cur, b))
        body = [o for o in cur.regions[0].blocks[0].ops if o.name != "loop.yield"]
        inner = [o for o in body if o.name == "loop.for"]
        if len(inner) == 1 and body[-1] is inner[0] and all(sinkable(o, written) for o in body[:-1]):
            if loop_bounds(inner[0]) is None or not parallel_safe(inner[0]):
                break
            sunk.extend(body[:-1])
            cur = inner[0]
            continue
        break
    if not loops:
        return [], [], [nest]
    last = loops[-1][0]
    return loops, sunk, [o for o in last.regions[0].blocks[0].ops if o.name != "loop.yield"]
