"""Analyses of loop nests that code generators share: which buffer a view
reads, whether a loop's iterations touch disjoint memory (`parallel_safe`),
how far a nest of such loops collapses into one parallel range (`collapse`),
which buffers a kernel body reads and writes, which accesses vectorize."""
from __future__ import annotations

from tcc.dialects.ir.core import BlockArgument
from tcc.dialects.ir.types import FloatType, MemRefType


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


def walk_nested(op):
    """Every op nested in `op`'s regions, at any depth."""
    for r in op.regions:
        for b in r.blocks:
            yield from walk_ops(b)


def nested_in(op, ops):
    """Is `op` nested (at any depth) in one of `ops`?"""
    b = op.parent
    while b is not None:
        po = b.parent_op
        if po is None:
            return False
        if any(po is o for o in ops):
            return True
        b = po.parent
    return False


def written_buffers(ops):
    """The root buffers `ops` (and everything nested in them) store or copy into."""
    roots = set()
    for top in ops:
        for op in [top] + list(walk_nested(top)):
            if op.name in ("loop.store", "loop.copy"):
                roots.add(root_buffer(op.operands[1]))
    return roots


def free_buffers(ops):
    """Memref values `ops` use that are defined outside them, in order of first
    use, including those read by outside scalar code they use (which a kernel
    recomputes)."""
    inner = set()
    seen, out = set(), []
    for top in ops:
        for op in [top] + list(walk_nested(top)):
            inner.update(op.results)
            for reg in op.regions:
                for b in reg.blocks:
                    inner.update(b.args)

    def visit(v, depth=0):
        if v in inner or v in seen:
            return
        if isinstance(v.type, MemRefType):
            seen.add(v)
            out.append(v)
            return
        d = getattr(v, "op", None)
        if d is not None and d.name != "arith.constant" and depth < 64:
            seen.add(v)
            for x in d.operands:
                visit(x, depth + 1)
    for top in ops:
        for op in [top] + list(walk_nested(top)):
            for v in op.operands:
                visit(v)
    return out


def vector_accesses(loops, body, sunk, lanes):
    """For the innermost of `collapse`'s loops, run `lanes` iterations at a
    time: ({load op: None}, {store op: None}), the f32 accesses indexed by its
    variable in their last, unit-stride dim over the whole extent; None when
    the loop does not start at 0 with step 1 over a multiple of `lanes`, the
    variable is used as data, a store does not use it, or a loaded buffer is
    also stored (its vector load could read a lane another lane writes)."""
    if not loops:
        return None
    loop, (lb, ub, step, ext) = loops[-1]
    if lb != 0 or step != 1 or ext % lanes or ext == 0:
        return None
    iv = loop.regions[0].blocks[0].args[0]
    loads, stores = {}, {}
    stored = set()
    for op in body:
        if op.regions or op.name in ("loop.alloc", "loop.copy", "loop.view", "loop.call"):
            return None
    for op in list(sunk) + list(body):
        if op.name not in ("loop.load", "loop.store"):
            if any(v is iv for v in op.operands):
                return None  # the index is used as data
            continue
        buf = op.operands[0] if op.name == "loop.load" else op.operands[1]
        idx = list(op.operands[1:] if op.name == "loop.load" else op.operands[2:])
        uses_iv = [k for k, x in enumerate(idx) if x is iv]
        if not uses_iv:
            if op.name == "loop.store":
                return None
            continue
        t = buf.type
        if uses_iv != [len(idx) - 1] or t.shape[-1] != ext or str(t.element) != "f32":
            return None
        (stores if op.name == "loop.store" else loads)[op] = None
        if op.name == "loop.store":
            stored.add(root_buffer(buf))
    for op in loads:
        if root_buffer(op.operands[0]) in stored:
            return None
    if not stores:
        return None
    return loads, stores
